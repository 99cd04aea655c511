"""The full cache beside a run: what the model says when nothing is evicted, and what its answer read that the
policy evicted ("evicted, but the full cache's answer read it").

The full-cache run is one more worker task of the page's job (:class:`ccviz.worker.tasks.FullCacheTask`),
keyed by the document, model and decoding only, so every policy and budget tried on one document reuses it
from the result store. The list comes from :func:`ccviz.explain.missed_reads`; this module lays it out.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from ..explain import MissedRead, missed_reads
from ..figures import visible_text
from ..trace import Trace
from ..worker.jobs import Job
from ..worker.tasks import FullCacheTask, RunTask
from .links import linked_checkbox
from .views import output_block


def full_cache_input(page: str) -> bool:
    """The checkbox that runs the full cache beside the page's runs."""
    return linked_checkbox(
        "Beside the full cache",
        f"{page}.full_cache",
        help="Also run the same document with the same decoding under the full cache (once per document: every "
        "policy and budget reuses it), to see what the model answers when nothing is evicted and which tokens "
        "its answer read that this policy evicted.",
    )


def with_full_cache(runs: list[RunTask], beside: bool) -> list:
    """The page's tasks: its runs, then (``beside``) the full cache's run of their document and decoding."""
    return [*runs, FullCacheTask.beside(runs[0])] if beside and runs else runs


def runs_and_full_cache(job: Job) -> tuple[list[tuple[RunTask, Trace]], Trace | None]:
    """A finished job's runs with their traces (those that have one), and the full cache's trace if it ran."""
    runs = [(task, result) for task, result in zip(job.tasks, job.results) if isinstance(task, RunTask) and result]
    full = next((r for t, r in zip(job.tasks, job.results) if isinstance(t, FullCacheTask) and r is not None), None)
    return runs, full


def missed_beside_full(trace: Trace, full: Trace | None) -> list[MissedRead]:
    """What the full cache's answer read that ``trace`` evicted ([] without a full-cache run)."""
    return [] if full is None else missed_reads(trace, full)


def full_cache_view(trace: Trace, full: Trace, missed: Sequence[MissedRead]) -> None:
    """Both answers side by side, and the entries the full cache's answer read that this run evicted."""
    st.subheader("Beside the full cache")
    left, right = st.columns(2)
    left.markdown(f"**This run** ({trace.run_config.title()})")
    with left:
        output_block(trace.output_text)
    right.markdown("**The full cache** (nothing evicted)")
    with right:
        output_block(full.output_text)
    missed_table(missed, "; dashed in the token view above")


def missed_table(missed: Sequence[MissedRead], where: str = "") -> None:
    """The list, or a line saying the policy kept everything the full answer read most."""
    if not missed:
        st.caption("This run kept every token among the ones the full cache's answer read most.")
        return
    st.markdown(f"**Evicted, but the full cache's answer read it** ({len(missed)} of its most-read tokens{where})")
    st.dataframe(
        pd.DataFrame(
            {
                "rank in the full answer's reads": [m.rank for m in missed],
                "t": [m.position for m in missed],
                "token": [visible_text(m.text) for m in missed],
                "read (last layer, max)": [round(m.read, 4) for m in missed],
                "evicted at refresh": [m.refresh for m in missed],
            }
        ),
        hide_index=True,
    )


def full_cache_compare(traces: Sequence[Trace], labels: Sequence[str], full: Trace) -> None:
    """On Compare: the full cache's answer, then per run what its answer read that the run evicted."""
    st.subheader("Beside the full cache")
    st.markdown("**The full cache's answer** (nothing evicted)")
    output_block(full.output_text)
    for column, trace, label in zip(st.columns(len(traces)), traces, labels):
        with column:
            st.markdown(f"**{label}**")
            missed_table(missed_reads(trace, full))
