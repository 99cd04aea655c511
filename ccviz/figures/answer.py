"""What the answer read, as text: the document up to one generated token, each token shaded by how much that
token's pass read it at the last layer, the evicted ones struck through (they could not be read).

One self-contained HTML string in the style of :mod:`.tokens` (inline styles, native tooltips).
"""

from __future__ import annotations

import html
from typing import Literal

import numpy as np

from ..trace import AnswerReading, Trace
from .data import eviction_cycles, piece
from .tokens import MARKED, format_value, levels, render_spans, shade

Measure = Literal["max", "mean"]
MEASURES: dict[Measure, str] = {"max": "max over heads", "mean": "mean over heads"}
UNREADABLE = "color:#b5b5b5;text-decoration:line-through"


def answer_reads_html(trace: Trace, reading: AnswerReading, measure: Measure = "max") -> str:
    """The tokens up to ``reading``'s generated token (outlined): shaded by the attention its pass paid them
    (``measure``: the max or the mean over query heads; robust 2–98% range), evicted ones struck and grey."""
    values = reading.max if measure == "max" else reading.mean
    level = levels(values)
    evicted_at = eviction_cycles(trace)
    styles, titles = [], []
    for t in range(reading.token + 1):
        text = f"t={t} “{piece(trace.tokens[t].text)}”"
        if t == reading.token:
            styles.append(MARKED)
            titles.append(f"{text} · the generated token")
        elif np.isnan(values[t]):
            styles.append(UNREADABLE)
            titles.append(f"{text} · evicted at refresh {evicted_at[t]}: unreadable")
        else:
            styles.append(shade(level[t]))
            titles.append(
                f"{text} · read {format_value(reading.max[t])} (max over heads), {format_value(reading.mean[t])} (mean)"
            )
    legend = (
        f"Generated token {reading.step} (<span style='{MARKED}'>outlined</span>): shade = the attention its pass "
        f"paid each token at the last layer, {html.escape(MEASURES[measure])} (light = little, dark = much, robust "
        f"2–98% range); <span style='{UNREADABLE}'>struck</span> = evicted, unreadable. Hover a token for its values."
    )
    return render_spans([tok.text for tok in trace.tokens[: reading.token + 1]], styles, titles, legend)
