"""Background runs for the app (the server's side): a job per user action, results cached by task.

Streamlit reruns a page on every widget interaction and aborts whatever the script was doing, so
model work never runs in the script: a :class:`Job` hands its tasks one after another to the model
worker process (:class:`ccviz.worker.ModelWorker`) from a thread of its own, which only waits on a
pipe, and writes progress and results into itself as they arrive, while the page (which keeps the
job in ``st.session_state``) only reads it. Finished results go into a process-wide, bounded
:class:`ResultStore` keyed by the task's full configuration, so re-opening a run is instant; a task
already queued or running for another session is followed, not computed again (:mod:`.flights`).
The tasks themselves (:mod:`ccviz.worker.tasks`) are plain picklable dataclasses: they cross to the
worker and run there. No Streamlit import here: this is plain Python, tested without the app.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cachetools import LRUCache

from ..engine import GenerationFailed
from ..errors import CcvizError
from ..trace import Trace
from .client import ModelWorker, WorkerDied
from .flights import Flight, Flights, Follower
from .limits import DEFAULT_ABANDON_SECONDS, DEFAULT_RESULT_CACHE, MAX_TOKENS_ENV
from .tasks import RunTask, Task

log = logging.getLogger(__name__)


def check_run(worker: ModelWorker, task: RunTask, limit: int) -> int:
    """Validate ``task`` in the worker (the model's context, every option), then against this app's token
    limit; return the prompt's token count. Nothing runs."""
    n_prompt, max_new = worker.check(task), task.config.max_new_tokens
    if n_prompt + max_new > limit:
        raise CcvizError(
            f"the document has {n_prompt} tokens; with {max_new} new tokens that is over this app's "
            f"limit of {limit} tokens per run ({MAX_TOKENS_ENV}): shorten it or lower max new tokens"
        )
    return n_prompt


class ResultStore:
    """A thread-safe LRU of finished results, keyed by task; holds compact traces, never tensors. ``flights``
    holds the tasks still being computed, so every job of this store shares them (:mod:`.flights`)."""

    def __init__(self, max_entries: int = DEFAULT_RESULT_CACHE):
        self.max_entries = max_entries
        self._items: LRUCache[Task, Any] = LRUCache(maxsize=max_entries)  # a read or a write makes an entry the newest
        self._lock = threading.Lock()
        self.flights = Flights(self)

    def get(self, task: Task) -> Any | None:
        with self._lock:
            return self._items.get(task)

    def put(self, task: Task, result: Any) -> None:
        with self._lock:
            self._items[task] = result

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class Progress:
    task: int = 0  # index of the task running
    waiting: str = ""  # what the task waits for: "another run" (queued behind one), "the model" (loading); "" = running
    refreshes: int = 0
    processed: int = 0
    total: int = 0


@dataclass
class Job:
    """Tasks run one after another in the model worker, followed from a thread; results arrive here as they finish.

    ``results[i]`` is task i's result (a partial trace if it was cancelled or failed part-way; None
    if it produced nothing); ``errors`` holds one line per failed task. ``live`` is the running task's
    trace so far, replaced by a fresh snapshot after every refresh (so a page can draw it while the
    thread goes on), and kept when the task ends: its last state is the final trace's refreshes. A cancelled
    job stops after the running task and keeps everything done so far.

    ``owner_connected`` says whether the browser session that started the job is still there. A job
    whose owner has been gone for ``abandon_after`` seconds stops like a cancelled one (``abandoned``
    is set), so a closed tab never keeps the model busy, or other sessions queued, for a run nobody
    will see. A shorter disconnection (a network blip the session recovers from) changes nothing.

    A task another job of the same store is already computing is followed, not run again
    (:class:`~ccviz.worker.flights.Flight`): a job that stops while others follow leaves with the
    refreshes so far, and the run goes on for them. ``sizes[i]`` is task i's size in tokens (prompt +
    max new tokens, None or absent if unknown), for the queue's estimated wait. ``check`` validates a task
    once its model is loaded, before it runs (for runs whose model was not loaded at the click: see
    :func:`check_run`).
    """

    tasks: list[Any]
    worker: ModelWorker
    store: ResultStore
    owner_connected: Callable[[], bool] | None = None
    abandon_after: float = DEFAULT_ABANDON_SECONDS
    sizes: list[int | None] = field(default_factory=list)
    check: Callable[[Any], object] | None = None
    results: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)
    live: Trace | None = None
    cancelled: bool = False
    abandoned: bool = False
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _gone_since: float | None = field(default=None, repr=False)
    _flight: Flight | None = field(default=None, repr=False)  # the flight of the task running

    def __post_init__(self) -> None:
        self.results = [None] * len(self.tasks)

    def start(self) -> Job:
        """Fill cached results at once; start the thread only if something is left to compute."""
        cached = [self.store.get(task) for task in self.tasks]
        if all(result is not None for result in cached):
            self.results = cached
            return self
        self._thread = threading.Thread(target=self._work, name="ccviz-job", daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def cancel(self) -> None:
        self._stop.set()

    @property
    def cancel_requested(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends (tests and scripts); True if it has."""
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.running

    def progress_line(self) -> tuple[float, str]:
        """What the page's progress bar shows: the fraction done and one line of text."""
        p = self.progress
        task = self.tasks[min(p.task, len(self.tasks) - 1)]
        which = f"run {p.task + 1} of {len(self.tasks)} · " if len(self.tasks) > 1 else ""
        if p.waiting == "the model":  # loading, or restarting after a crash: the worker says which
            return 0.0, f"{which}{task.label}: waiting: {self.worker.status().message}"
        flight = self._flight
        if p.waiting:
            place = flight.queue_line() if flight is not None else "behind another run"
            return 0.0, f"{which}{task.label}: queued: {place}…"
        shared = f" · shared by {flight.sessions} sessions" if flight is not None and flight.sessions > 1 else ""
        if p.total:
            return min(
                p.processed / p.total, 1.0
            ), f"{which}{task.label}: {p.processed}/{p.total} tokens · {p.refreshes} refreshes{shared}"
        return 0.0, f"{which}{task.label}: computing…{shared}"

    def _report(self, refreshes: int, processed: int, total: int) -> None:
        self.progress = Progress(self.progress.task, "", refreshes, processed, total)

    def _show(self, snapshot: Trace) -> None:
        """The flight's latest snapshot of the streamed trace (never extended in place)."""
        self.live = snapshot

    def _waiting(self, reason: str) -> None:
        self.progress = Progress(self.progress.task, reason)

    def _should_stop(self) -> bool:
        """Cancelled, or abandoned by its session; polled while the task waits and after every forward pass."""
        if self._stop.is_set():
            return True
        if self.owner_connected is None or self.owner_connected():
            self._gone_since = None
            return False
        now = time.monotonic()
        self._gone_since = self._gone_since or now
        if now - self._gone_since < self.abandon_after:
            return False
        self.abandoned = True
        self._stop.set()
        log.warning("ccviz: stopping a run whose browser session has been gone for %.0f s", now - self._gone_since)
        return True

    def _work(self) -> None:
        follower = Follower(self._should_stop, self._report, self._waiting, self._show)
        for i, task in enumerate(self.tasks):
            if self._should_stop():
                self.cancelled = True
                break
            self.progress = Progress(task=i)
            self.live = None
            try:
                joined = self.store.flights.join(
                    task, self.worker, follower, self.sizes[i] if i < len(self.sizes) else None, self.check
                )
                if not isinstance(joined, Flight):  # finished meanwhile: stored
                    self.results[i] = joined
                    continue
                self._flight = joined
                result = joined.follow(follower)
            except GenerationFailed as err:
                self.results[i] = err.trace
                self.errors.append(f"{task.label}: failed part-way ({err}); the completed refreshes are kept")
                continue
            except WorkerDied as err:
                self.results[i] = err.trace
                kept = f"; its {len(err.trace.cycles)} completed refreshes are kept" if err.trace is not None else ""
                self.errors.append(f"{task.label}: {err}{kept}")
                continue
            except CcvizError as err:
                self.errors.append(f"{task.label}: {err}")
                continue
            except Exception as err:  # never let a thread die silently: the page shows the message
                self.errors.append(f"{task.label}: unexpected {type(err).__name__}: {err}")
                continue
            finally:
                self._flight = None
            self.results[i] = result
            if result is None or (isinstance(result, Trace) and result.status == "cancelled"):
                self.cancelled = True  # stopped while queued (nothing computed), or part-way
                break
