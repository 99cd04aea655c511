"""Needle maps: the needle task's per-cell summary in, Plotly heatmaps out (no Streamlit, no model).

Depth runs down the y axis (0% at the top: the needle first in the document), context length across
the x axis, as in the field's standard picture. Each cell is coloured by its rate and labelled
with its counts; the hover adds the Wilson 95% interval and the other measure. A difference map
colours one policy's rate minus another's (or the full cache's) on a diverging scale around zero.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ccviz.engine.budget import budget_text
from ccviz.figures.layout import LEGEND_BELOW, legible, spec_lines, wrapped

from .figures import RATES
from .specs import FULL, evicting

MAP_SCALE = [[0.0, "#c92a2a"], [0.5, "#fcc419"], [1.0, "#2b8a3e"]]  # lost, half, kept
DIFFERENCE_SCALE = "RdBu"
CEILING = dict(dash="dot", color="#495057")  # the full cache's rate: the line each panel marks
BUDGET_COLOURS = ("#4c6ef5", "#f76707", "#2b8a3e", "#ae3ec9")  # one per budget, the same in every task's panel


def _depth(value: float) -> str:
    return f"{float(value):.0%}"


def map_cells(summary: pd.DataFrame, policy: str, budget: float | None = None) -> pd.DataFrame:
    """One policy's cells at one budget (the full cache has one budget of its own)."""
    rows = summary[summary["policy"] == policy]
    if budget is not None and policy != FULL:
        rows = rows[rows["budget"] == budget]
    return rows.sort_values(["depth", "length"])


def _grid(cells: pd.DataFrame, column: str) -> pd.DataFrame:
    """``column`` per depth (rows) x length (columns); a cell not measured yet is NaN (blank in a label)."""
    table = cells.pivot(index="depth", columns="length", values=column)
    return table.sort_index().reindex(sorted(table.columns), axis=1)


def _labels(grid: pd.DataFrame) -> list:
    """Cell labels with the cells not measured yet left blank (a partial run)."""
    return grid.astype(object).where(grid.notna(), "").to_numpy().tolist()


def _axes(fig: go.Figure, title: str) -> go.Figure:
    return legible(
        fig,
        title=dict(text=title, x=0.0),
        height=440,
        xaxis=dict(title="context length (tokens)", type="category"),
        yaxis=dict(title="needle depth", type="category", autorange="reversed"),
    )


def _stack(*grids: pd.DataFrame) -> list:
    """Grids of the same shape as one [depths][lengths][k] list: what a hover reads as customdata[i]."""
    return np.stack([np.array(_labels(grid), dtype=object) for grid in grids], axis=-1).tolist()


def _counts(cells: pd.DataFrame, measure: str) -> pd.Series:
    hits = "survived" if measure == "survival" else "answered"
    return cells[hits].astype(int).astype(str) + "/" + cells["n"].astype(int).astype(str)


def needle_map_figure(
    summary: pd.DataFrame, policy: str, budget: float | None = None, measure: str = "survival"
) -> go.Figure:
    """``policy``'s ``measure`` (survival or accuracy) per depth x length at ``budget``."""
    cells = map_cells(summary, policy, budget).assign(
        counts=lambda f: _counts(f, measure),
        other=lambda f: _counts(f, "accuracy" if measure == "survival" else "survival"),
        interval=lambda f: [f"{lo:.0%}–{hi:.0%}" for lo, hi in zip(f[f"{measure}_low"], f[f"{measure}_high"])],
    )
    values, labels = _grid(cells, measure), _grid(cells, "counts")
    hover = _grid(cells, "interval"), _grid(cells, "other"), _grid(cells, "cache_size_mean")
    other = "answered" if measure == "survival" else "survived"
    fig = go.Figure(
        go.Heatmap(
            z=values.to_numpy().tolist(),
            x=[str(int(c)) for c in values.columns],
            y=[_depth(d) for d in values.index],
            zmin=0,
            zmax=1,
            colorscale=MAP_SCALE,
            hoverongaps=False,
            colorbar=dict(title=measure, tickformat=".0%"),
            text=_labels(labels),
            texttemplate="%{text}",
            customdata=_stack(*hover),
            hovertemplate=(
                f"<b>{policy}</b><br>length %{{x}} tokens, depth %{{y}}<br>{RATES[measure][1]}: %{{text}} "
                f"(%{{z:.0%}}, 95% %{{customdata[0]}})<br>{other}: %{{customdata[1]}}"
                "<br>J = %{customdata[2]:.0f}<extra></extra>"
            ),
        )
    )
    at = "" if policy == FULL or budget is None else f" at J = {_budget(budget)}"
    return _axes(fig, wrapped(f"{RATES[measure][0]}: {policy}{at}", 40))  # long specs wrap, never run off


def needle_difference_figure(
    summary: pd.DataFrame,
    policy: str,
    other: str,
    budget: float | None = None,
    measure: str = "survival",
    other_budget: float | None = None,
) -> go.Figure:
    """``policy``'s rate minus ``other``'s per cell (both at ``budget`` unless ``other_budget`` is given;
    the full cache at its own): blue where ``policy`` keeps more, red where it keeps less."""
    mine = map_cells(summary, policy, budget).assign(counts=lambda f: _counts(f, measure))
    theirs = map_cells(summary, other, budget if other_budget is None else other_budget).assign(
        counts=lambda f: _counts(f, measure)
    )
    both = mine.merge(theirs, on=["length", "depth"], suffixes=("", "_other"))
    both = both.assign(delta=both[measure] - both[f"{measure}_other"])
    values = _grid(both, "delta")
    labels, theirs_labels = _grid(both, "counts"), _grid(both, "counts_other")
    fig = go.Figure(
        go.Heatmap(
            z=values.to_numpy().tolist(),
            x=[str(int(c)) for c in values.columns],
            y=[_depth(d) for d in values.index],
            zmin=-1,
            zmax=1,
            zmid=0,
            colorscale=DIFFERENCE_SCALE,
            hoverongaps=False,
            colorbar=dict(title="difference", tickformat="+.0%"),
            text=_labels(values.map(lambda v: f"{v:+.0%}", na_action="ignore")),
            texttemplate="%{text}",
            customdata=_stack(labels, theirs_labels),
            hovertemplate=(
                f"length %{{x}} tokens, depth %{{y}}<br><b>{policy}</b>: %{{customdata[0]}}<br>"
                f"<b>{other}</b>: %{{customdata[1]}}<br>difference %{{z:+.0%}}<extra></extra>"
            ),
        )
    )
    return _axes(fig, f"{RATES[measure][0]}: {policy} minus {other}")


def _budget(budget: float) -> str:
    return budget_text(budget, "{:.0%} of the document", "{:d} tokens")


SHARES = {"kept_share": ("Required tokens kept", "share of the required tokens cached")}  # means per case, not counts


SPEC_WIDTH = 40  # characters per line of a policy's label on the RULER charts' y axis


def ruler_figure(pooled: pd.DataFrame, measure: str = "survival") -> go.Figure:
    """Each RULER-style task's ``measure`` per policy: one panel per task, a horizontal bar per policy and
    budget (policies down the shared y axis, so long spec labels stay readable however many there are),
    and the full cache's rate as a dotted line.

    ``measure``: survival or accuracy (rates of cases), or kept_share, the mean share of the required
    tokens cached, which still tells policies apart on a task none keeps whole (variable tracking's chain).
    ``pooled``: rates per task x policy x budget, lengths together (``summarise_rates``)."""
    share = measure in SHARES
    title, meaning = (SHARES if share else RATES)[measure]
    value = (
        f"{meaning}, mean of %{{customdata[0]}} cases: %{{x:.0%}}"
        if share
        else f"{meaning}: %{{customdata[0]}} (%{{x:.0%}})"
    )
    measured = evicting(pooled)
    tasks = list(dict.fromkeys(measured["task"]))
    policies = list(dict.fromkeys(measured["policy"]))
    fig = make_subplots(
        rows=1, cols=max(len(tasks), 1), shared_yaxes=True, subplot_titles=tasks, horizontal_spacing=0.1
    )
    colours = {
        budget: BUDGET_COLOURS[i % len(BUDGET_COLOURS)] for i, budget in enumerate(sorted(measured["budget"].unique()))
    }
    for column, task in enumerate(tasks, start=1):
        for budget, group in measured[measured["task"] == task].groupby("budget", sort=True):
            fig.add_trace(
                go.Bar(
                    y=group["policy"].tolist(),
                    x=group[measure].tolist(),
                    orientation="h",
                    name=f"J = {_budget(budget)}",
                    legendgroup=str(budget),
                    showlegend=column == 1,
                    marker_color=colours[budget],
                    customdata=(group["n"].astype(int) if share else _counts(group, measure)).to_numpy()[:, None],
                    hovertemplate=f"{task}: %{{y}}<br>{value}<extra>J = {_budget(budget)}</extra>",
                ),
                row=1,
                col=column,
            )
        ceiling = pooled[(pooled["policy"] == FULL) & (pooled["task"] == task)]
        if not ceiling.empty:  # the full cache's rate on the same cases: what eviction can at best reach
            fig.add_vline(x=float(ceiling[measure].iloc[0]), line=CEILING, row=1, col=column)
        fig.update_xaxes(tickformat=".0%", range=[0, 1.05], row=1, col=column)
    # the legend's title names the dotted lines once (a label in each panel collided with the next panel's)
    legend = "dotted: the full cache · " * bool((pooled["policy"] == FULL).any()) + "budget"
    lines = max((spec_lines(policy, SPEC_WIDTH).count("<br>") + 1 for policy in policies), default=1)
    fig.update_yaxes(  # first measured on top; long specs broken after ':' and commas, so the panels keep their width
        categoryorder="array",
        categoryarray=policies,
        autorange="reversed",
        tickvals=policies,
        ticktext=[spec_lines(policy, SPEC_WIDTH) for policy in policies],
    )
    fig.update_annotations(font_size=13)  # the task names above the panels stay apart on a narrow page
    return legible(
        fig,
        title=dict(text=f"{title} on the RULER-style tasks", x=0.0),
        barmode="group",
        height=190 + len(policies) * max(30, 17 * lines),  # every band as tall as the longest label
        legend=dict(LEGEND_BELOW, title=legend),
    )
