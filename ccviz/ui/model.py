"""The app's one model worker, started with the server's first page and shared by every session.

The model lives in the worker process (:class:`ccviz.worker.ModelWorker`), never in the server, so
nothing the server does in Python can stall a run. Every page shows the worker's state in one line, under
the session's choice of model (:mod:`.model_picker`).
"""

from __future__ import annotations

import gc
import os

import streamlit as st

from ..plugins import plugin_modules
from ..worker import ModelWorker

# The model the worker loads first: a checkpoint folder, an embedded model's name, or tiny-random.
MODEL_ENV = "CCVIZ_MODEL"


@st.cache_resource(show_spinner=False)
def shared_worker(model: str | None, plugins: tuple[str, ...]) -> ModelWorker:
    """The worker for this model and plugin list; it starts loading at once, in the background."""
    gc.collect()
    gc.freeze()  # the server's imports (torch, transformers, plotly, pandas) are never collected again
    return ModelWorker(model, plugins)


def app_worker() -> ModelWorker:
    return shared_worker(os.environ.get(MODEL_ENV) or None, plugin_modules())
