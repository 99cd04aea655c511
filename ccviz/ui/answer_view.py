""" "What the answer read": for a run that recorded it, one generated token (picked by a slider that shows
each token's text) and the document shaded by how much it read each token, the evicted ones struck.

The reads come from the trace (:meth:`ccviz.Trace.answer_reading`), the lists from
:func:`ccviz.explain.answer_summary` and the text from :mod:`ccviz.figures.answer`; this module lays them out.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..explain import answer_summary
from ..figures import visible_text
from ..figures.answer import MEASURES, answer_reads_html
from ..trace import Trace
from .links import linked_checkbox


def record_reads_input(page: str) -> bool:
    """The checkbox that asks a run to record what the answer read (``RunConfig.record_reads``)."""
    return linked_checkbox(
        "Record what the answer read",
        f"{page}.record_reads",
        help="Also record, for every generated token, the last layer's attention over the cache then: a view "
        "below the run shades the document by it, evicted tokens struck.",
    )


def answer_view(trace: Trace, key: str) -> None:
    """The view, when the trace recorded what the answer read (nothing otherwise)."""
    if trace.answer_reads is None:
        return
    st.subheader("What the answer read")
    steps = len(trace.answer_reads)
    if not steps:
        st.info("No token was generated, so nothing was read.")
        return
    slider, first = f"{key}.answer_step", trace.prompt_length
    st.session_state[slider] = min(st.session_state.get(slider, 0), steps - 1)  # a new run may be shorter
    step = 0
    if steps > 1:
        step = st.select_slider(
            "Generated token",
            range(steps),
            key=slider,
            format_func=lambda s: f"{s}: “{visible_text(trace.tokens[first + s].text)}”",
            help="Each generated token was picked from one forward pass: the first from the prompt's last, each "
            "later one from the pass of the token before it. That pass's last-layer attention is shown.",
        )
    measure = st.segmented_control(
        "Attention", list(MEASURES), default="max", key=f"{key}.answer_measure", required=True, format_func=MEASURES.get
    )
    summary = answer_summary(trace, step)
    st.html(answer_reads_html(trace, summary.reading, measure))
    left, right = st.columns(2)
    left.markdown("**Read most**")
    left.dataframe(
        pd.DataFrame(
            [{"t": e.position, "token": visible_text(e.text), "max": e.max, "mean": e.mean} for e in summary.read_most]
        ),
        hide_index=True,
    )
    right.markdown("**Evicted beside them (unreadable)**")
    if summary.evicted_beside:
        right.dataframe(
            pd.DataFrame(
                [
                    {"tokens": s.where, "text": visible_text(s.text), "evicted at refresh": s.refresh}
                    for s in summary.evicted_beside
                ]
            ),
            hide_index=True,
        )
    else:
        right.caption("Nothing evicted within a few tokens of what it read most.")
