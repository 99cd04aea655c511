"""Helpers of the AppTest tests: the document they run on, settling a session's jobs, filling the document box,
the Run page's quick settings, and a new session opened on a link. The ``app`` fixture (a fresh session on the tiny
model) is in conftest.py."""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from ccviz.worker.jobs import Job

ROOT = Path(__file__).resolve().parents[1]
DOC = (
    "The lighthouse on Gull Rock was built in 1852. Its keeper, Ada Brenn, logged the weather every four hours. "
    "The lens came from Paris. Supplies arrived by boat when the sea allowed. Who kept the light?"
)


def settle(at: AppTest, timeout: float = 120) -> AppTest:
    """Rerun until no job of the session is running (a browser's polling fragment does this)."""
    deadline = time.monotonic() + timeout
    while any(isinstance(v, Job) and v.running for v in at.session_state.values()):
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.05)
    return at.run()


def charts(at: AppTest):
    return at.get("plotly_chart")


def set_document(at: AppTest, text: str) -> None:
    at.text_area(key="doc.text").set_value(text)


def configure_run(at: AppTest, policy: str, max_new_tokens: int) -> None:
    """The Run page on DOC with J=16, h=4: a few refreshes in a second or two."""
    set_document(at, DOC)
    at.selectbox(key="run.policy").set_value(policy)
    at.number_input(key="run.J").set_value(16)
    at.number_input(key="run.h").set_value(4)
    at.number_input(key="run.max_new").set_value(max_new_tokens)


def fresh_session(monkeypatch, params: dict) -> AppTest:
    """A new browser session (a reload, or a colleague opening a link) with ``params`` as its query string."""
    monkeypatch.setenv("CCVIZ_MODEL", "tiny-random")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    for key, value in params.items():
        at.query_params[key] = value
    return at.run()
