"""Helpers of the AppTest tests: the document they run on, settling a session's jobs, filling the document box,
the Run page's quick settings, and a new session opened on a link. The ``app`` fixture (a fresh session on the tiny
model) is in conftest.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from ccviz import Trace
from ccviz.figures import (
    COLOURINGS,
    comparison_heatmaps,
    cycle_context_html,
    highlight_html,
    overlap_heatmap,
    per_layer,
    phrase_survival,
    recorded_values,
    retention_heatmap,
    run_summary,
    sentence_html,
    signals,
    survival_html,
)
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


def plotly_text(fig) -> str:
    """A figure's JSON with its strings as Plotly reads them (``to_json`` writes "<" as an escape)."""
    return json.dumps(json.loads(fig.to_json()), ensure_ascii=False)


def every_view(trace: Trace) -> list[str]:
    """What the pages draw for a trace (the views' own conditions), as the strings sent to the browser."""
    out: list[str] = []
    recorded = signals(trace)
    if trace.cycles:
        for colour in COLOURINGS if per_layer(trace)[0] is not None else [c for c in COLOURINGS if c != "layers"]:
            for signal in recorded if colour == "score" else [None]:
                out.append(plotly_text(retention_heatmap(trace, colour, signal)))
        out.append(plotly_text(comparison_heatmaps([trace, trace], ["<b>a</b>", "b\x1b"])))
        out += [cycle_context_html(trace, i) for i in range(len(trace.cycles))]
    out.append(plotly_text(overlap_heatmap([trace, trace], ["<i>a</i>", "b"])))
    values = recorded_values(trace)
    out += [highlight_html(trace, v, name) for name, v in values.items()]
    out += [survival_html(trace), sentence_html(trace)] + [sentence_html(trace, v, name) for name, v in values.items()]
    run_summary(trace)  # a table: shown as text by st.dataframe
    if trace.tokens:
        phrase_survival(trace, trace.tokens[0].text)
    return out
