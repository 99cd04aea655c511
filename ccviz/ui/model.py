"""The app's one model worker, started with the server's first page and shared by every session.

The model lives in the worker process (:class:`ccviz.worker.ModelWorker`), never in the server, so
nothing the server does in Python can stall a run. Every page shows the worker's state in one line.
"""

from __future__ import annotations

import gc
import os

import streamlit as st

from ..plugins import plugin_modules
from ..worker import ModelWorker, WorkerStatus

MODEL_ENV = "CCVIZ_MODEL"  # a checkpoint folder, or "tiny-random" for tests
STATUS_POLL_SECONDS = 1.0


@st.cache_resource(show_spinner=False)
def shared_worker(model: str | None, plugins: tuple[str, ...]) -> ModelWorker:
    """The worker for this model and plugin list; it starts loading at once, in the background."""
    gc.collect()
    gc.freeze()  # the server's imports (torch, transformers, plotly, pandas) are never collected again
    return ModelWorker(model, plugins)


def app_worker() -> ModelWorker:
    return shared_worker(os.environ.get(MODEL_ENV) or None, plugin_modules())


def model_status_line() -> WorkerStatus:
    """The worker's state at the top of the sidebar; polled (and the page rerun) until it is ready."""
    worker = app_worker()
    status = worker.status()
    poll = None if status.state in ("ready", "failed") else STATUS_POLL_SECONDS

    @st.fragment(run_every=poll)
    def _line() -> None:
        now = worker.status()
        if now.state != status.state:
            st.rerun()  # the whole page: its run buttons follow the state
        if now.ready:
            st.caption(f":material/check_circle: {now.message}")
        elif now.state == "failed":
            st.error(f"{now.message} Fix this, then restart the app.", icon=":material/error:")
        elif now.state == "restarting":
            st.warning(now.message, icon=":material/restart_alt:")
        else:
            st.info(
                f"{now.message} Runs can start once it is ready (the first start converts it once, ~20 s).",
                icon=":material/hourglass_top:",
            )

    with st.sidebar:
        _line()
    return status
