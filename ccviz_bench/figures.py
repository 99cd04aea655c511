"""Benchmark figures: the harness's result frames in, Plotly figures out (no Streamlit, no model).

Every builder plots the frame's own numbers, one line per policy in the order the policies were
measured. The full cache is measured once per case or segment, not per budget, so it is drawn as a
dashed reference line instead of a point at each budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.colors
import plotly.graph_objects as go

from ccviz.figures.layout import legible, spec_lines

from .specs import FULL, evicting


def full_value(frame: pd.DataFrame, column: str) -> float | None:
    """The full cache's ``column`` (its first row), or None when it was not measured."""
    if "policy" not in frame or column not in frame:
        return None
    values = pd.to_numeric(frame.loc[frame["policy"] == FULL, column], errors="coerce").dropna()
    return float(values.iloc[0]) if len(values) else None


def _policy_lines(
    frame: pd.DataFrame, x: str, y: str, custom: Sequence[str], hover: str, error: tuple[str, str] | None = None
) -> go.Figure:
    """One line per policy of ``y`` against ``x`` (rows without ``y`` are left out, not drawn as zero).

    ``error`` names the low and high columns of an asymmetric interval around ``y``.
    """
    fig = go.Figure()
    for policy, group in evicting(frame).groupby("policy", sort=False):
        group = group.dropna(subset=[y]).sort_values(x)
        if group.empty:
            continue
        bars = None
        if error is not None:
            low, high = error
            bars = dict(
                type="data",
                symmetric=False,
                array=(group[high] - group[y]).tolist(),
                arrayminus=(group[y] - group[low]).tolist(),
                thickness=1,
            )
        fig.add_trace(
            go.Scatter(
                x=group[x].tolist(),
                y=group[y].tolist(),
                name=spec_lines(str(policy)),
                meta=str(policy),  # the spec itself: the name has line breaks
                mode="lines+markers",
                error_y=bars,
                customdata=group[list(custom)].to_numpy().tolist(),
                hovertemplate=f"<b>{policy}</b><br>{hover}<extra></extra>",
            )
        )
    return fig


def _reference_line(fig: go.Figure, value: float | None, text: str) -> None:
    if value is not None:
        fig.add_hline(
            y=value, line_dash="dash", line_color="grey", annotation_text=text, annotation_position="top left"
        )


HEIGHT = 420  # pixels, unless the legend needs more
LEGEND_LINE = 21  # pixels a legend line takes (entries of two lines or more take one each)
LEGEND_CHROME = 150  # pixels of title, legend title and x axis around the legend's lines
MANY_COLOURS = plotly.colors.qualitative.Dark24  # past Plotly's ten default colours, two policies would share one


def _layout(fig: go.Figure, title: str, x_title: str, y_title: str, **axes: dict) -> go.Figure:
    """The common layout, the figure growing taller when its legend (one entry per policy, long specs
    on several lines) would not fit beside the plot: a scrolled legend hides policies."""
    lines = sum(str(trace.name).count("<br>") + 1 for trace in fig.data if trace.showlegend is not False)
    return legible(
        fig,
        title=dict(text=title, x=0.0),
        xaxis=dict(title=x_title, **axes.get("xaxis", {})),
        yaxis=dict(title=y_title, **axes.get("yaxis", {})),
        height=max(HEIGHT, LEGEND_CHROME + LEGEND_LINE * lines),
        colorway=MANY_COLOURS if len(fig.data) > len(plotly.colors.qualitative.Plotly) else None,
        legend=dict(title="policy"),
    )


RATES = {
    "survival": ("Fact survival", "fact fully cached when the question is read"),
    "accuracy": ("Answer accuracy", "answered correctly"),
}


def rate_figure(summary: pd.DataFrame, measure: str) -> go.Figure:
    """Survival or accuracy (``measure``) against the budget per policy, with Wilson 95% intervals as
    error bars and the full cache's rate as the reference line (the ceiling).

    ``summary`` is the retention summary: ``policy``, ``budget`` (J as a share of the document),
    ``<measure>``, ``<measure>_low``, ``<measure>_high``, ``<measure>_n``.
    """
    title, meaning = RATES[measure]
    fig = _policy_lines(
        summary,
        "budget",
        measure,
        [f"{measure}_low", f"{measure}_high", f"{measure}_n"],
        f"J = %{{x:.0%}} of the document: %{{y:.0%}} {meaning}<br>95% interval %{{customdata[0]:.0%}}"
        "-%{customdata[1]:.0%}, %{customdata[2]} cases",
        error=(f"{measure}_low", f"{measure}_high"),
    )
    ceiling = full_value(summary, measure)
    _reference_line(fig, ceiling, f"full cache {ceiling:.0%}" if ceiling is not None else "")
    budgets = sorted(evicting(summary)["budget"].unique())
    fig.update_layout(scattermode="group", scattergap=0.6)  # policies side by side at each budget: bars stay apart
    return _layout(
        fig,
        f"{title} vs budget (Wilson 95% intervals)",
        "budget J (share of the document's tokens)",
        title.lower(),
        xaxis=dict(tickformat=".0%", tickvals=budgets),
        yaxis=dict(tickformat=".0%", range=[-0.03, 1.05]),
    )


def perplexity_figure(summary: pd.DataFrame) -> go.Figure:
    """Mean next-token NLL against the budget J per policy, the full cache as the reference line.

    ``summary`` is the perplexity summary: ``policy``, ``budget`` (J in tokens), ``nll``,
    ``perplexity``, ``delta_nll``.
    """
    fig = _policy_lines(
        summary,
        "budget",
        "nll",
        ["perplexity", "delta_nll"],
        "J = %{x}: NLL %{y:.3f} nats (perplexity %{customdata[0]:.2f}), %{customdata[1]:+.3f} vs the full cache",
    )
    full = full_value(summary, "nll")
    _reference_line(fig, full, f"full cache {full:.3f}" if full is not None else "")
    budgets = sorted(evicting(summary)["budget"].unique())
    return _layout(
        fig,
        "Long-text perplexity vs budget (lower is better)",
        "budget J (tokens, h = J/4)",
        "mean NLL (nats per token)",
        xaxis=dict(type="log", tickvals=budgets),
    )


def divergence_figure(summary: pd.DataFrame) -> go.Figure:
    """Median first token where a policy's greedy output leaves the full cache's, against the budget.

    ``summary`` is the decode summary: ``policy``, ``budget``, ``first_divergence_median``,
    ``first_divergence_mean``, ``repeated_4grams``, ``prompts``.
    """
    fig = _policy_lines(
        summary,
        "budget",
        "first_divergence_median",
        ["first_divergence_mean", "repeated_4grams", "prompts"],
        "J = %{x}: first divergent token %{y:.0f} (mean %{customdata[0]:.1f}), "
        "repeated 4-grams %{customdata[1]:.0%}, %{customdata[2]} prompts",
    )
    budgets = sorted(evicting(summary)["budget"].unique())
    return _layout(
        fig,
        "Where the output leaves the full cache's (higher is better)",
        "budget J (tokens, h = J/4)",
        "first divergent token (median)",
        xaxis=dict(type="log", tickvals=budgets),
        yaxis=dict(rangemode="tozero"),
    )


def refresh_cost_figure(refresh: pd.DataFrame) -> go.Figure:
    """One refresh decision's time as a ratio to one plain forward pass over the same n tokens, per
    policy against n, on log axes (cheap policies cost 1e-5 of a forward, the full counter-causal pass
    about one), with the ratio 1 marked.

    ``refresh`` is the efficiency task's refresh rows: ``policy``, ``n``, ``ratio``,
    ``refresh_seconds``, ``forward_seconds``.
    """
    fig = _policy_lines(
        refresh,
        "n",
        "ratio",
        ["refresh_seconds", "forward_seconds"],
        "n = %{x}: %{y:.3g} x a forward (%{customdata[0]:.3g} s vs %{customdata[1]:.3g} s)",
    )
    _reference_line(fig, 1.0 if len(refresh) else None, "one plain forward")
    return _layout(
        fig,
        "Refresh cost vs cache size (lower is cheaper)",
        "n (entries cached when the refresh runs)",
        "refresh time / forward time",
        xaxis=dict(type="log", dtick=1),
        yaxis=dict(type="log", exponentformat="power"),
    )


def refresh_seconds_figure(refresh: pd.DataFrame, exponents: dict[str, float] | None = None) -> go.Figure:
    """One refresh decision's seconds against n on log-log axes, the plain forward's dashed for scale:
    a straight line's slope is the exponent of cost in n, which the legend gives (``exponents``: the
    efficiency summary's fitted ``refresh_exponent`` per policy)."""
    fig = _policy_lines(
        refresh, "n", "refresh_seconds", ["ratio"], "n = %{x}: %{y:.3g} s (%{customdata[0]:.3g} x a forward)"
    )
    for trace in fig.data:
        slope = (exponents or {}).get(trace.meta)
        if slope is not None and slope == slope:  # not NaN
            trace.name = f"{trace.name} · n^{slope:.2f}"
    if len(refresh):
        forward = refresh.groupby("n", as_index=False)["forward_seconds"].median().sort_values("n")
        fig.add_trace(
            go.Scatter(
                x=forward["n"].tolist(),
                y=forward["forward_seconds"].tolist(),
                name="one plain forward",
                mode="lines",
                line=dict(dash="dash", color="grey"),
                hovertemplate="n = %{x}: a forward takes %{y:.3g} s<extra></extra>",
            )
        )
    return _layout(
        fig,
        "Refresh time vs cache size, log-log (slope = exponent of n)",
        "n (entries cached when the refresh runs)",
        "seconds per refresh decision",
        xaxis=dict(type="log", dtick=1),
        yaxis=dict(type="log", exponentformat="power"),
    )


def frontier_figure(points: pd.DataFrame, names: dict[str, str], title: str) -> go.Figure:
    """Answers against one refresh's cost (:func:`.frontier.frontier_points`), a panel per budget: each policy a
    point (hover names it), the Pareto frontier a black line. The cost axis is logarithmic."""
    from plotly.subplots import make_subplots

    budgets = sorted(points.budget.unique())
    fig = make_subplots(
        rows=1, cols=len(budgets), shared_yaxes=True, subplot_titles=[f"J = {100 * b:g}%" for b in budgets]
    )
    colours = {spec: MANY_COLOURS[i % len(MANY_COLOURS)] for i, spec in enumerate(dict.fromkeys(points.spec))}
    for col, budget in enumerate(budgets, start=1):
        cells = points[points.budget == budget]
        for spec, cost, answered, cases in zip(cells.spec, cells.cost, cells.answered, cells.cases):
            fig.add_trace(
                go.Scatter(
                    x=[max(cost, 1e-6)],
                    y=[100 * answered],
                    mode="markers",
                    marker=dict(size=10, color=colours[spec]),
                    name=names[spec],
                    legendgroup=spec,
                    showlegend=col == 1,
                    hovertemplate=f"<b>{names[spec]}</b><br>answered %{{y:.0f}}% of {cases}<br>"
                    "one refresh: %{x:.3g} forwards<extra></extra>",
                ),
                row=1,
                col=col,
            )
        line = cells[cells.frontier].sort_values("cost")
        fig.add_trace(
            go.Scatter(
                x=line.cost.clip(lower=1e-6),
                y=100 * line.answered,
                mode="lines",
                line=dict(color="black", width=1.5),
                name="Pareto frontier",
                legendgroup="frontier",
                showlegend=col == 1,
                hoverinfo="skip",
            ),
            row=1,
            col=col,
        )
        middle = col == (len(budgets) + 1) // 2  # one axis title for every panel: three would overlap
        fig.update_xaxes(type="log", title="refresh cost, in forwards" if middle else None, row=1, col=col)
    fig.update_yaxes(title="cases answered (%)", range=[0, 100], row=1, col=1)
    return legible(fig, title=dict(text=title, x=0.0), height=HEIGHT + 60, legend=dict(title="policy"))
