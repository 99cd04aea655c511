"""The cache's size against tokens processed: why a long document must evict.

Read from the refresh records alone (each refresh's step and what it kept): between two refreshes the
cache grows by one entry per token processed; a refresh cuts it back to what it kept. A run that never
evicts (the full cache) climbs with every token, n in all; a run under a budget climbs by h and drops
back to J (plus the frozen prefix and a kept question) at every refresh.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ..trace import Trace
from .data import plot_label
from .layout import LEGEND_BELOW, legible

COLOURS = ("#4c78a8", "#e45756", "#54a24b", "#b279a2")


def cache_sizes(trace: Trace) -> tuple[list[int], list[int]]:
    """(tokens processed, entries cached) at every change of slope: just before and just after each refresh,
    from 0 tokens to the run's last."""
    xs, ys, step, size = [0], [0], 0, 0
    for cycle in trace.cycles:
        xs += [cycle.step, cycle.step]
        ys += [size + cycle.step - step, len(cycle.kept)]
        step, size = cycle.step, len(cycle.kept)
    end = len(trace.tokens)
    return xs + [end], ys + [size + end - step]


def cache_growth(runs: Sequence[tuple[str, Trace]], budget: int | None = None, frozen: int = 0) -> go.Figure:
    """One line per (label, trace): its cache's size against the tokens it processed; ``budget``: J, as a dashed
    line above the ``frozen`` prefix (never evicted, so a refresh cuts the cache back to J + frozen)."""
    fig = go.Figure()
    for (label, trace), colour in zip(runs, COLOURS * len(runs)):
        xs, ys = cache_sizes(trace)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                name=plot_label(label),
                mode="lines",
                line=dict(color=colour, width=2.5),
                hovertemplate="%{x} tokens processed: %{y} entries cached<extra>" + plot_label(label) + "</extra>",
            )
        )
    if budget is not None:
        fig.add_hline(
            y=budget + frozen,
            line=dict(color="#555", dash="dash", width=1),
            annotation_text=f"J = {budget}" + (f" + {frozen} frozen" if frozen else ""),
            annotation_position="top left",
        )
    return legible(
        fig,
        title=dict(text="The cache's size against tokens processed", x=0.0),
        height=380,
        xaxis=dict(title="tokens processed (document, question, answer)", rangemode="tozero"),
        yaxis=dict(title="entries in the cache", rangemode="tozero"),
        legend=LEGEND_BELOW,
    )
