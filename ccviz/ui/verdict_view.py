"""The verdict line that opens a run with an expected answer: answered or not, the full cache's answer, and
where the answer went (:func:`ccviz.explain.run_verdict` writes it; this module lays it out, with the link to
Explain a token on the refresh that evicted the answer)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import streamlit as st

from ..explain import Verdict
from ..trace import Trace
from .explain import open_explanation

_MARKDOWN = re.compile(r"([\\`*_\[\]<>$~|#])")  # characters a token's text may hold that markdown would read


def verdict_line(verdict: Verdict | None, trace: Trace, explain_key: str | None = None) -> None:
    """The verdict in one line (nothing without an expected answer). ``explain_key``: the Run page's key, whose
    Explain a token "Explain that refresh" opens on the token and refresh that evicted the answer, and whose
    sidebar can record what the answer read."""
    if verdict is None:
        return
    icon, colour = (":material/check_circle:", "green") if verdict.answered else (":material/cancel:", "red")
    detail = _MARKDOWN.sub(r"\\\1", verdict.detail)
    if explain_key is not None and verdict.fate == "kept" and not verdict.answered and trace.answer_reads is None:
        detail += " (Tick *Record what the answer read* in the sidebar and run again.)"
    line = f"{icon} :{colour}[**{verdict.head}**] {detail}"
    eviction = verdict.eviction
    if explain_key is None or eviction is None or verdict.answered or not eviction.explainable:
        st.markdown(line)
        return
    left, right = st.columns([5, 1], vertical_alignment="center")
    left.markdown(line)
    right.button(
        "Explain that refresh",
        key=f"{explain_key}.verdict.explain",
        icon=":material/help:",
        on_click=open_explanation,
        args=(explain_key, eviction.refresh, eviction.position),
        help=f"Explain a token, below: t={eviction.position} at refresh {eviction.refresh}, replayed to say why it "
        "was evicted there.",
    )


def verdict_row(verdicts: Sequence[Verdict | None], traces: Sequence[Trace], labels: Sequence[str]) -> None:
    """On Compare: each run's verdict at the head of its column (nothing when no run has an expected answer)."""
    if all(verdict is None for verdict in verdicts):
        return
    for column, verdict, trace, label in zip(st.columns(len(verdicts)), verdicts, traces, labels):
        with column:
            st.markdown(f"**{label}**")
            verdict_line(verdict, trace)
