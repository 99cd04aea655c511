"""Session state of the app: each page's background job, its last finished result, and the run history.

A page's job lives in ``st.session_state`` under ``job.<page>`` while it runs; once it has ended it
moves to ``done.<page>`` (the result the page shows, kept while a newer job runs) and its traces join
the session's history (the Traces page offers each for download). Results are never dropped because
the user touched a widget: the job thread keeps writing into the job object whatever the page does.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

import streamlit as st
from streamlit.runtime import Runtime
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ..errors import CcvizError
from ..trace import Trace
from ..worker import ModelInfo
from ..worker.jobs import Job, ResultStore, check_run
from ..worker.limits import abandon_seconds, max_tokens, result_cache_size
from ..worker.tasks import RunTask
from .model import app_worker
from .model_picker import runs_loaded, session_model

HISTORY_SIZE = 24
# How often a page with a running job asks for its progress. Each poll is a fragment rerun: ~10 ms of
# server time, and in the browser a redraw that cost a headless chromium on the same 2 cores 0.18-0.29
# of a core at 0.5 s (0.06-0.11 at 1.5 s), taken from the worker's torch threads. Once a second is
# often enough for a human, and bounds a room of 30 sessions to 30 reruns a second.
POLL_SECONDS = 1.0
# Until a live view has its first rows the page polls faster: the first refresh of a run comes a few
# hundred ms after the click, and a user waiting for the first picture should not wait a whole poll.
FIRST_ROWS_POLL_SECONDS = 0.25
# A queued run only updates its place and estimated wait: in a classroom most sessions wait, and each
# poll is a fragment rerun on the server and a redraw in the browser. Its start reruns the page at once.
QUEUED_POLL_SECONDS = 2.0


@st.cache_resource
def result_store() -> ResultStore:
    """Finished results of every session of this process, keyed by full configuration (bounded LRU)."""
    return ResultStore(result_cache_size())


def session_connected() -> Callable[[], bool]:
    """Whether this browser session is still connected, callable from any thread.

    Outside a Streamlit server (AppTest, scripts) there is no connection to lose: always True.
    """
    ctx = get_script_run_ctx()
    if ctx is None or not Runtime.exists():
        return lambda: True
    runtime, session_id = Runtime.instance(), ctx.session_id
    return lambda: runtime.is_active_session(session_id)


def start_job(
    page: str, tasks: list, sizes: list[int | None] | None = None, check: Callable[[object], object] | None = None
) -> Job:
    """Start the page's job (cached tasks are filled at once) and remember it in the session.

    The job stops by itself if the session's tab is closed (:attr:`Job.owner_connected`); ``sizes`` (tokens
    per task) give a queued run its estimated wait; ``check`` validates a task once its model is loaded.
    """
    job = Job(
        tasks=tasks,
        worker=app_worker(),
        store=result_store(),
        owner_connected=session_connected(),
        abandon_after=abandon_seconds(),
        sizes=sizes or [],
        check=check,
    ).start()
    st.session_state[f"job.{page}"] = job
    return job


def running_job(page: str) -> Job | None:
    """The page's job if it is still running; an ended job is moved to the page's result first."""
    job = st.session_state.get(f"job.{page}")
    if job is None:
        return None
    if job.running:
        return job
    del st.session_state[f"job.{page}"]
    st.session_state[f"done.{page}"] = job
    _remember(page, job)
    return None


def finished_job(page: str) -> Job | None:
    """The page's last ended job (what the page shows), if any."""
    return st.session_state.get(f"done.{page}")


def _remember(page: str, job: Job) -> None:
    history: OrderedDict[str, Trace] = st.session_state.setdefault("history", OrderedDict())
    stamp = time.strftime("%H:%M:%S")
    for task, result in zip(job.tasks, job.results):
        if isinstance(task, RunTask) and isinstance(result, Trace):
            number = st.session_state["history.count"] = st.session_state.get("history.count", 0) + 1
            history[f"#{number} {stamp} · {page} · {result.run_config.title()}"] = result
    while len(history) > HISTORY_SIZE:
        history.popitem(last=False)


def history() -> OrderedDict[str, Trace]:
    """Traces of this session's runs, oldest first (bounded)."""
    return st.session_state.get("history", OrderedDict())


LiveView = Callable[[Job], None]
"""Draws a running job's live trace (``job.live``) inside the polling fragment: only cheap drawing,
as it runs every :data:`POLL_SECONDS`."""


def follow(job: Job, page: str, live_view: LiveView | None = None) -> None:
    """Live progress, a Cancel button and ``live_view``, polled in a fragment; the page reruns when the job ends.

    The fragment redraws only itself: the rest of the page is not rerun at a poll, so what the live
    view draws must be cheap (the Run page's is a small picture, :func:`ccviz.ui.views.live_retention`).
    """

    queued = bool(job.progress.waiting)
    awaiting_rows = live_view is not None and (job.live is None or not job.live.cycles)
    every = QUEUED_POLL_SECONDS if queued else FIRST_ROWS_POLL_SECONDS if awaiting_rows else POLL_SECONDS

    @st.fragment(run_every=every)
    def _progress() -> None:
        if (
            not job.running
            or queued != bool(job.progress.waiting)
            or (awaiting_rows and job.live is not None and job.live.cycles)
        ):
            st.rerun()  # the end, queued or started, the first rows: the page again, polling at the new pace
        fraction, text = job.progress_line()
        st.progress(fraction, text=text)
        if job.cancel_requested:
            st.caption("Cancelling after the current forward pass; everything computed so far is kept.")
        elif st.button("Cancel", key=f"cancel.{page}", icon=":material/stop_circle:"):
            job.cancel()
            st.rerun(scope="fragment")
        if live_view is not None:
            live_view(job)

    _progress()


def show_job_messages(job: Job) -> None:
    """Errors of a finished job, and a note when it was cancelled."""
    for message in job.errors:
        st.error(message)
    skipped = [task.label for task, result in zip(job.tasks, job.results) if result is None]
    if job.cancelled and skipped:
        st.warning(f"Cancelled: not computed: {', '.join(skipped)}. Everything finished before the cancel is kept.")


def run_controls(
    page: str,
    label: str,
    make_tasks: Callable[[ModelInfo], list],
    live_view: LiveView | None = None,
    start: bool = False,
) -> Job | None:
    """The page's run button, progress and messages; returns the page's last finished job.

    With a ``live_view``, a running job is drawn by it as it goes and the last finished job is not
    returned meanwhile (the live figure takes its place; the job's end brings the final one).

    ``make_tasks(model)`` builds the tasks for the session's model (:mod:`.model_picker`); every
    :class:`RunTask` is validated by the model worker (model and app token limits included) before
    anything starts, and a problem is shown as one message with nothing run; a task whose model the
    worker does not hold is validated once it has switched to it, before it runs. The button is
    disabled while the page's job runs or the session's model loads. ``start``: start as if it were clicked
    (another control asked for this result), when it could be.
    """
    job = running_job(page)
    worker = app_worker()
    model = session_model()
    blocked = job is not None or model.blocked is not None
    clicked = st.button(
        label, type="primary", disabled=blocked, key=f"btn.{page}", icon=":material/play_arrow:", help=model.blocked
    )
    if clicked or (start and not blocked):
        try:
            if model.blocked is not None:
                raise CcvizError(model.blocked)
            tasks = make_tasks(model.info)
            limit = max_tokens()

            def validate(task: object) -> int | None:
                """A run's prompt tokens, once the worker has checked it (None: not a run)."""
                return check_run(worker, task, limit) if isinstance(task, RunTask) else None

            if runs_loaded(tasks):
                sizes = [  # prompt + new tokens: what a queued run behind this one waits for
                    None if (n := validate(task)) is None else n + task.config.max_new_tokens for task in tasks
                ]
                start_job(page, tasks, sizes)
            else:  # the worker switches models first: each run is validated in its turn, on its own model
                start_job(page, tasks, check=validate)
        except CcvizError as err:
            st.error(str(err))
        else:
            st.rerun()  # draw the page again with the button disabled: it was drawn enabled before the click
    if job is not None:
        follow(job, page, live_view)
        if live_view is not None:
            return None
    done = finished_job(page)
    if done is not None:
        show_job_messages(done)
    return done
