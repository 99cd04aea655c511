"""What changed in the cache between a run and its what-if twin (the same run with a phrase pinned or dropped).

Both runs share J and h, so refresh k comes after the same number of tokens in each and their kept
sets compare refresh by refresh: what both kept, and what only one of them did. The phrases offered
to pin are the document's sentences, each with how much of it the run kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ..trace import Trace
from .compare import phrase_survival
from .data import plot_label
from .layout import LEGEND_BELOW, legible

MAX_SENTENCES = 200  # sentences offered in the picker


@dataclass(frozen=True)
class Sentence:
    """A sentence of the document and how much of it the run kept at the end (its best occurrence)."""

    text: str
    status: str  # "kept", "partly kept", "evicted" (:class:`ccviz.figures.PhraseSurvival`)
    kept: int
    tokens: int

    @property
    def label(self) -> str:
        return f"{self.status} ({self.kept}/{self.tokens}) · {self.text}"


def document_sentences(trace: Trace, document: str) -> list[Sentence]:
    """The document's sentences (cut after . ! ? and at line breaks) in text order, each once, with what the
    run kept of it; at most :data:`MAX_SENTENCES`. Each is a phrase the run's prompt contains."""
    found: dict[str, Sentence] = {}
    for text in re.split(r"(?<=[.!?])\s+|\n+", document):
        text = text.strip()
        if len(found) >= MAX_SENTENCES or not re.search(r"\w", text) or text in found:
            continue
        survival = phrase_survival(trace, text)
        if survival.status != "absent":
            found[text] = Sentence(text, survival.status, len(survival.kept), len(survival.tokens))
    return list(found.values())


def _common(base: Trace, other: Trace) -> list[tuple[set[int], set[int]]]:
    """The kept sets of every refresh both runs reached."""
    return [(set(a.kept), set(b.kept)) for a, b in zip(base.cycles, other.cycles)]


def cache_changes(base: Trace, other: Trace, labels: Sequence[str]) -> pd.DataFrame:
    """One row per refresh both runs reached: the entries both kept, and those only one of them kept."""
    rows = [
        {"refresh": i, "kept by both": len(a & b), f"only {labels[0]}": len(a - b), f"only {labels[1]}": len(b - a)}
        for i, (a, b) in enumerate(_common(base, other))
    ]
    return pd.DataFrame(rows, columns=["refresh", "kept by both", f"only {labels[0]}", f"only {labels[1]}"])


def changes_figure(changes: pd.DataFrame) -> go.Figure:
    """Per refresh, how many entries only one of the two runs kept (a line each)."""
    fig = go.Figure(
        [
            go.Scatter(x=changes["refresh"], y=changes[name], name=plot_label(name), mode="lines+markers")
            for name in changes.columns[2:]
        ]
    )
    return legible(
        fig,
        title=dict(text="Kept by one run and not the other, at each refresh", x=0.0),
        xaxis=dict(title="refresh"),
        yaxis=dict(title="entries", rangemode="tozero"),
        legend=LEGEND_BELOW,
        height=300,
    )


def final_differences(base: Trace, other: Trace) -> tuple[list[str], list[str]]:
    """At the last refresh both runs reached, the stretches of text (runs of consecutive timesteps) only
    ``base`` kept, and those only ``other`` kept."""
    common = _common(base, other)
    if not common:
        return [], []
    a, b = common[-1]
    return _stretches(base, sorted(a - b)), _stretches(other, sorted(b - a))


def _stretches(trace: Trace, timesteps: list[int]) -> list[str]:
    """The texts of the runs of consecutive ``timesteps`` (ascending)."""
    if not timesteps:
        return []
    steps = np.asarray(timesteps)
    cuts = np.flatnonzero(np.diff(steps) != 1) + 1
    return ["".join(trace.tokens[t].text for t in run) for run in np.split(steps, cuts)]
