"""Comparing runs: kept-set overlaps, whether a phrase survived, and per-run timings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from ..phrases import phrase_spans
from ..trace import Trace
from .data import plot_label, survived
from .layout import legible


def jaccard_matrix(traces: Sequence[Trace]) -> np.ndarray:
    """|A ∩ B| / |A ∪ B| of the kept sets at the final refresh, for every pair of runs."""
    sets = [set(trace.final_kept) for trace in traces]
    out = np.ones((len(sets), len(sets)), dtype=np.float64)
    for i, a in enumerate(sets):
        for j, b in enumerate(sets):
            union = a | b
            out[i, j] = len(a & b) / len(union) if union else 1.0
    return out


def overlap_heatmap(traces: Sequence[Trace], labels: Sequence[str]) -> go.Figure:
    """The Jaccard matrix as an annotated heatmap."""
    matrix = jaccard_matrix(traces)
    names = [plot_label(label) for label in labels]
    fig = go.Figure(
        go.Heatmap(
            z=matrix,
            x=names,
            y=names,
            zmin=0.0,
            zmax=1.0,
            colorscale="Blues",
            text=np.round(matrix, 2),
            texttemplate="%{text}",
            hovertemplate="%{y} vs %{x}: Jaccard %{z:.3f}<extra></extra>",
            colorbar=dict(title="Jaccard"),
        )
    )
    return legible(
        fig,
        title=dict(text="Kept-set overlap at the final refresh", x=0.0),
        height=140 + 60 * len(labels),
        yaxis=dict(autorange="reversed"),
    )


@dataclass
class PhraseSurvival:
    """Where a phrase occurs in the prompt and how much of its best-kept occurrence survived."""

    phrase: str
    occurrences: int
    tokens: list[int]  # timesteps of the best-kept occurrence
    kept: list[int]  # those of them still cached at the end

    @property
    def status(self) -> str:
        if not self.occurrences:
            return "absent"
        if len(self.kept) == len(self.tokens):
            return "kept"
        return "partly kept" if self.kept else "evicted"


def phrase_survival(trace: Trace, phrase: str) -> PhraseSurvival:
    """Find ``phrase`` (case-insensitive, :func:`ccviz.phrases.phrase_spans`) in the prompt's text and check
    which of its tokens survived."""
    prompt = [tok for tok in trace.tokens if tok.source == "prompt"]
    alive = survived(trace)
    best: tuple[list[int], list[int]] = ([], [])
    count = 0
    for first, last in phrase_spans([tok.text for tok in prompt], phrase.strip()):
        count += 1
        span = [prompt[i].t for i in range(first, last + 1)]
        kept = [t for t in span if alive[t]]
        if not best[0] or len(kept) / len(span) > len(best[1]) / len(best[0]):
            best = (span, kept)
    return PhraseSurvival(phrase=phrase.strip(), occurrences=count, tokens=best[0], kept=best[1])


def run_summary(trace: Trace) -> dict[str, object]:
    """One row of facts about a run, for tables: sizes, refresh count and times."""
    t, run = trace.timings, trace.run_config
    refreshes = len(trace.cycles)
    refresh_seconds = float(t.get("refresh_seconds", 0.0))
    return {
        "policy": run.describe(),
        "status": trace.status,
        "prompt tokens": trace.prompt_length,
        "generated": len(trace.tokens) - trace.prompt_length,
        "refreshes": refreshes,
        "final cache": len(trace.final_kept),
        "peak cache": trace.peak_cache_length,
        "allocation": run.allocation,
        "peak K/V (MiB)": round(trace.peak_cache_bytes / 2**20, 2)
        if trace.peak_cache_bytes
        else None,  # 0: a version-1 trace
        "refresh total (s)": round(refresh_seconds, 3),
        "per refresh (ms)": round(1000 * refresh_seconds / refreshes, 2) if refreshes else None,
        "prefill (s)": round(float(t.get("prefill_seconds", 0.0)), 3),
        "decode (s)": round(float(t.get("decode_seconds", 0.0)), 3),
        "total (s)": round(float(t.get("total_seconds", 0.0)), 3),
    }
