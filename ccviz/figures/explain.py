"""How an :class:`~ccviz.explain.Explanation` is drawn: the attention behind one decision, and the text it read.

Two heatmaps over the refresh's candidates (x: each entry's original timestep), one row per head
with the mean on top: what the token's reversed query reads of its future (counter-causal), and what
later entries' causal queries put on it. Then the text up to the refresh, shaded by the first.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..explain import Explanation
from ..trace import Trace
from .data import piece, plot_label
from .layout import legible
from .tokens import format_value, levels, render_spans, shade

SCALE = "Blues"


def _rows(weights: list[list[float]]) -> tuple[np.ndarray, list[str]]:
    heads = np.asarray(weights, dtype=np.float32)
    return np.vstack([heads.mean(0, keepdims=True), heads]), ["mean"] + [f"head {h}" for h in range(len(heads))]


def explanation_figure(explanation: Explanation, trace: Trace) -> go.Figure:
    """Counter-causal attention of the token over its future next to the causal attention it receives."""
    e = explanation
    x = np.asarray(e.entries, dtype=np.int32)
    labels = [plot_label(piece(trace.tokens[t].text), 14) for t in e.entries]
    me = f"t={e.position} “{plot_label(piece(e.text), 14)}”"
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=[
            f"What {me} reads of its future in the counter-causal pass (last layer)",
            f"What later entries' causal queries put on {me} (last layer)",
        ],
    )
    for r, (weights, who) in enumerate(
        ((e.counter_causal, "read by the token"), (e.causal, "put on the token")), start=1
    ):
        z, names = _rows(weights)
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x,
                y=names,
                coloraxis="coloraxis",
                customdata=np.broadcast_to(np.asarray(labels, dtype=object), z.shape),
                hovertemplate=f"%{{y}} · entry t=%{{x}} “%{{customdata}}”<br>weight {who}: %{{z:.3f}}<extra></extra>",
            ),
            row=r,
            col=1,
        )
        fig.update_yaxes(autorange="reversed", row=r, col=1)
    for r in (1, 2):
        fig.add_vline(x=e.position, line=dict(color="#e45756", width=2, dash="dot"), row=r, col=1)
    fig.update_xaxes(title_text="cache entry (original timestep)", row=2, col=1)
    return legible(
        fig,
        coloraxis=dict(colorscale=SCALE, cmin=0.0, colorbar=dict(title="weight")),
        height=int(min(900, 260 + 2 * 14 * (len(e.counter_causal) + 1))),
        title=dict(text=f"Refresh {e.refresh}: attention behind the decision on {me}", x=0.0),
    )


def explanation_html(explanation: Explanation, trace: Trace) -> str:
    """The text up to the refresh, each candidate shaded by how much the token's reversed query reads it."""
    e = explanation
    step = trace.cycles[e.refresh].step
    reads = np.full(step, np.nan)
    reads[e.entries] = np.asarray(e.counter_causal, dtype=np.float64).mean(0)
    level = levels(reads)
    styles, titles = [], []
    for tok in trace.tokens[:step]:
        style = shade(level[tok.t])
        if tok.t == e.position:
            style = "outline:2px solid #e45756;font-weight:600"
        styles.append(style)
        titles.append(f"t={tok.t} · read with weight {format_value(reads[tok.t])} (mean over heads)")
    legend = (
        f"Shade = how much t={e.position} reads each entry to be judged (mean over heads, robust range); "
        "<span style='outline:2px solid #e45756'>outlined</span> = the token explained; "
        "unshaded = not in its visible future."
    )
    return render_spans([tok.text for tok in trace.tokens[:step]], styles, titles, legend)
