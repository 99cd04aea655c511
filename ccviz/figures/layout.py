"""The one layout rule every Plotly figure of ccviz follows: margins that grow to fit their labels.

Fixed pixel margins cut tick labels and put axis titles over them as soon as a label is wider than
the guess (``100%``, a long policy spec, ``10^-6``). Plotly's own template turns ``automargin`` on,
but importing Streamlit makes its ``streamlit`` template the default, which leaves it off: so every
builder asks for it here, whatever template the figure is drawn with (the app, the HTML report, a
notebook). The margins below are only minimums; Plotly widens each side to what its tick labels,
axis titles, legend, colour bar and title need at the width the figure is drawn.
"""

from __future__ import annotations

import re
import textwrap

import plotly.graph_objects as go

MARGIN = dict(l=10, r=10, t=10, b=10)  # pixels each side at least; automargin adds what the labels need
TITLE_GAP = 12  # pixels between the title and the plot (or the row of subplot titles above it)
ABOVE_PLOT = 25  # pixels a row of subplot titles takes above the plot
# A short legend below the plot, in one row, leaves the plot the figure's whole width (a long one stays at the right).
LEGEND_BELOW = dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left")


def legible(fig: go.Figure, **layout) -> go.Figure:
    """``fig`` with ``layout`` applied and every axis and the title pushing the margins to fit their labels.

    The title stands just above the plot (and above the subplot titles, when there are any), the top
    margin growing to fit it: a title of two lines (``<br><sup>``) fits as well as one."""
    above = any(a.yref == "paper" and (a.y or 0) >= 1 for a in fig.layout.annotations)  # subplot titles
    fig.update_layout(margin=dict(MARGIN, t=MARGIN["t"] + ABOVE_PLOT * above), **layout)
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    if fig.layout.title.text:
        fig.update_layout(
            title=dict(
                automargin=True,
                yref="paper",
                y=1,
                yanchor="bottom",
                xanchor="left",
                pad=dict(l=4, b=TITLE_GAP + ABOVE_PLOT * above),
            )
        )
    return fig


def wrapped(text: str, width: int) -> str:
    """``text`` broken at spaces into lines of at most ``width`` characters (a word longer stays whole),
    for a label above a panel that shares the figure's width with others."""
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)) or text


def spec_lines(spec: str, width: int = 28) -> str:
    """A policy spec as a legend label of lines at most ``width`` characters, broken after its ``:`` and
    commas (a single option longer stays whole): ``counter_causal_fast:score=contrast,smooth=9,...``
    at full length would take half a narrow chart's width for its legend."""
    lines: list[str] = []
    for piece in re.split(r"(?<=[:,])", spec):
        if lines and len(lines[-1]) + len(piece) <= width:
            lines[-1] += piece
        elif piece:
            lines.append(piece)
    return "<br>".join(lines) or spec
