"""The sidebar's model menu, on every page: which of the server's models this session runs, and the worker's state.

The server keeps one model worker (:func:`.model.app_worker`), and so one model in memory, whatever the
sessions pick: a classroom shares one machine. A session's runs carry the name of the model it picked
(every task does, so the result store never mixes two models' results), and when such a run's turn
comes and the worker holds another model, the worker switches (:meth:`ccviz.worker.ModelWorker.turn`):
the run says so and waits while the model loads, and runs of other sessions queue behind it in order
of arrival, switching back in their own turn. The choice joins the page's link (:mod:`.links`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from ..models import TINY_MODEL
from ..worker import ModelInfo, ModelWorker, WorkerStatus
from .links import linked_index
from .model import app_worker

MODEL_KEY = "model"  # the session's choice: a name of ModelWorker.models
STATUS_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class SessionModel:
    """The session's model as its run buttons see it."""

    info: ModelInfo  # what the pages build their tasks with (``max_positions`` is None until it has loaded here)
    blocked: str | None  # why a run cannot start now (its model is loading, or failed to load), else None


def chosen_model(worker: ModelWorker | None = None) -> str:
    """The name of the model this session runs: its sidebar choice, else the model the server started with."""
    worker = worker or app_worker()
    name = st.session_state.get(MODEL_KEY)
    return name if name in worker.sources else worker.initial


def chosen_source() -> str | None:
    """What :func:`ccviz.models.load_model` (or ``load_tokenizer``) takes for the session's model."""
    worker = app_worker()
    return worker.sources[chosen_model(worker)]


def session_model() -> SessionModel:
    """The session's model, and whether a run of it can start now: while the worker holds another model, yes
    (the run switches it in its turn); while the worker loads or has failed to load this one, no."""
    worker = app_worker()
    status, name = worker.status(), chosen_model(worker)
    if worker.name != name:
        return SessionModel(ModelInfo(name), None)
    if status.ready:
        return SessionModel(status.model or ModelInfo(name), None)
    if status.state == "failed":
        return SessionModel(ModelInfo(name), status.message)
    return SessionModel(ModelInfo(name), "The model is not ready yet: see the line at the top of the sidebar.")


def runs_loaded(tasks: Sequence[object]) -> bool:
    """Whether the worker holds, ready, the model of every task (untagged tasks run on any): then they are
    validated at the click; otherwise once their model is loaded (:attr:`ccviz.worker.jobs.Job.check`)."""
    worker = app_worker()
    return worker.status().ready and all(worker.holds(task) for task in tasks)


def _label(worker: ModelWorker, name: str) -> str:
    source = worker.sources[name]
    if name == TINY_MODEL:
        return f"{name} (random weights, for tests)"
    if source is not None and source != name:
        return f"{name} ({Path(source).expanduser()})"  # a checkpoint folder: where it is
    return name


def model_picker() -> WorkerStatus:
    """The sidebar's "Model" menu, then the worker's state in one line (polled until it settles)."""
    worker = app_worker()
    with st.sidebar:
        st.selectbox(
            "Model",
            worker.models,
            index=linked_index(MODEL_KEY, worker.models, worker.initial),  # a shared link names its model
            format_func=lambda name: _label(worker, name),
            key=MODEL_KEY,
            persist_state="session",
            help="The model this session's runs use. The server holds one model at a time: a run of another "
            "model switches it when the run's turn comes (the load takes seconds), and runs of other sessions "
            "wait meanwhile, then switch back in their own turn.",
        )
    status = worker.status()
    poll = None if status.state in ("ready", "failed") else STATUS_POLL_SECONDS

    @st.fragment(run_every=poll)
    def _line() -> None:
        now, chosen = worker.status(), chosen_model(worker)
        if now.state != status.state:
            st.rerun()  # the whole page: its run buttons follow the state
        if worker.name != chosen:
            if now.state == "failed":
                st.warning(now.message, icon=":material/error:")
            took = worker.load_estimate(chosen)
            st.caption(
                f":material/swap_horiz: The worker holds {worker.name} ({now.state}). Your runs use {chosen}: "
                f"the worker switches to it when your run's turn comes (the model loads, {took})."
            )
        elif now.ready:
            st.caption(f":material/check_circle: {now.message}")
        elif now.state == "failed":
            st.error(f"{now.message} Choose another model, or fix this and restart the app.", icon=":material/error:")
        elif now.state == "restarting":
            st.warning(now.message, icon=":material/restart_alt:")
        elif worker.load_seconds or worker.name != worker.initial:  # a switch: its line says what it waits for
            st.info(now.message, icon=":material/hourglass_top:")
        else:
            st.info(
                f"{now.message} Runs can start once it is ready (the first start converts it once, ~20 s).",
                icon=":material/hourglass_top:",
            )

    with st.sidebar:
        _line()
    return status
