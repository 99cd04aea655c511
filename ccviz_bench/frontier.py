"""Which policy to use at which cost: retention answers against a refresh's cost, and the Pareto frontier.

A point is one policy at one budget: the share of the retention cases it answers (under the model's
question protocol) and what one refresh costs in multiples of one plain forward over the same cache (the
efficiency task, at n = 1024 entries, the same whatever the protocol). A point is on the frontier when no
other point at its budget answers at least as many for no more cost, better in one of the two.
"""

from __future__ import annotations

import pandas as pd

from .plots import PALETTE, line_chart

COST = "refresh_ratio_n1024"  # efficiency summary column: a refresh at n = 1024, in multiples of one forward
LOG_TICKS = [10.0**k for k in range(-6, 2)]
COLOURS = (*PALETTE, "#aec7e8", "#ff9896", "#98df8a", "#ffbb78", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d")


def frontier_points(rates: pd.DataFrame, efficiency: pd.DataFrame | None) -> pd.DataFrame:
    """``rates`` (``spec``, ``budget``, ``answered``, ``cases``: answers per spec under one protocol) joined with
    each spec's refresh cost ``cost``, with ``frontier`` (bool) per budget; specs without a cost are left out."""
    columns = ["spec", "budget", "answered", "cases", "cost", "frontier"]
    if efficiency is None or efficiency.empty or COST not in efficiency:
        return pd.DataFrame(columns=columns)
    costs = efficiency.set_index("policy")[COST].dropna()
    points = rates[rates.spec.isin(costs.index)].assign(cost=lambda f: f.spec.map(costs).astype(float))
    if points.empty:
        return pd.DataFrame(columns=columns)
    frontier = pd.concat([on_frontier(group) for _, group in points.groupby("budget", sort=False)])
    return points.assign(frontier=frontier.reindex(points.index))[columns].reset_index(drop=True)


def on_frontier(points: pd.DataFrame) -> pd.Series:
    """Whether each point (``answered``, ``cost``) is undominated among ``points``: no other answers at least as
    many at no more cost, better in one of the two."""
    answered, cost = points.answered.to_numpy(float), points.cost.to_numpy(float)
    at_least = (answered[None, :] >= answered[:, None]) & (cost[None, :] <= cost[:, None])
    better = (answered[None, :] > answered[:, None]) | (cost[None, :] < cost[:, None])
    return pd.Series(~(at_least & better).any(axis=1), index=points.index)


def frontier_chart(points: pd.DataFrame, names: dict[str, str], title: str) -> list[str]:
    """One SVG per budget: each spec a point (named by ``names``), the frontier a line through its points."""
    colours = {names[spec]: COLOURS[i % len(COLOURS)] for i, spec in enumerate(dict.fromkeys(points.spec))}
    charts = []
    for budget, cells in points.groupby("budget", sort=True):
        series = {names[s]: [(c, 100 * a)] for s, c, a in zip(cells.spec, cells.cost.clip(lower=1e-6), cells.answered)}
        line = cells[cells.frontier].sort_values("cost")
        series["Pareto frontier"] = [(c, 100 * a) for c, a in zip(line.cost.clip(lower=1e-6), line.answered)]
        charts.append(
            line_chart(
                series,
                title=f"{title}, J = {100 * budget:g}%",
                x_label="one refresh, in forwards over the cache (log)",
                y_label="cases answered (%)",
                log_x=True,
                x_ticks=LOG_TICKS,
                y_range=(0, 100),
                colours={**colours, "Pareto frontier": "#000000"},
            )
        )
    return charts
