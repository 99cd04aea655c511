"""The one model of the app process, loaded once and shared read-only by every session."""

from __future__ import annotations

import os

import streamlit as st

from ..models import LoadedModel, load_model

MODEL_ENV = "CCVIZ_MODEL"  # a checkpoint folder, or "tiny-random" for tests


@st.cache_resource(show_spinner="Loading the model (the first start converts it once, ~20 s)...")
def shared_model(name_or_path: str | None) -> LoadedModel:
    return load_model(name_or_path)


def app_model() -> LoadedModel:
    return shared_model(os.environ.get(MODEL_ENV) or None)
