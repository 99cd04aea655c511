"""Dependency-free SVG line charts of the benchmark summaries, for docs/notebook/readings.md#reading-the-results
(the app draws its own).

One chart per question: survival and accuracy vs budget, perplexity vs budget, refresh cost vs n,
and one needle map per policy (survival per depth x context length).
Plain SVG text, so the figures are reproducible byte for byte and need no plotting library.
"""

from __future__ import annotations

import math
from html import escape
from pathlib import Path

import pandas as pd

from ccviz.engine.budget import budget_text

from .registry import all_tasks
from .specs import FULL, evicting, split_protocol

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 720, 360, 60, 220, 30, 45
CHAR_WIDTH = 7  # pixels a character of the 12 px sans-serif legend takes at most (about): long names widen the chart


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    step = 10 ** math.floor(math.log10((high - low) / count))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if (high - low) / (step * m) <= count)
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def line_chart(
    series: dict[str, list[tuple[float, float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    log_x: bool = False,
    x_ticks: list[float] | None = None,
    y_range: tuple[float, float] | None = None,
    colours: dict[str, str] | None = None,
) -> str:
    """An SVG line chart: one polyline with markers per named series, legend on the right.

    ``x_ticks``: where the x axis is labelled, widened to the ticks around the data (default: at every x);
    ``y_range`` defaults to 0 .. the largest value (or the data's range if it goes below 0);
    ``colours`` keeps a series' colour the same across charts."""
    points = [p for values in series.values() for p in values if not math.isnan(p[1])]
    if x_ticks:
        data = [x for x, _ in points]
        below, above = [t for t in x_ticks if t <= min(data)], [t for t in x_ticks if t >= max(data)]
        x_ticks = [t for t in x_ticks if max(below, default=min(data)) <= t <= min(above, default=max(data))]
        points_for_range = [(t, 0.0) for t in x_ticks] + points
    else:
        points_for_range = points
    xs = [math.log2(x) if log_x else x for x, _ in points_for_range]
    x_low, x_high = min(xs), max(xs)
    y_low, y_high = y_range or (min(0.0, *(y for _, y in points)), max(y for _, y in points))
    if x_high == x_low:
        x_low, x_high = x_low - 1, x_high + 1
    if y_high == y_low:
        y_low, y_high = y_low - 1, y_high + 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    width = max(WIDTH, LEFT + plot_w + 30 + CHAR_WIDTH * max(map(len, series), default=0) + 10)  # the legend fits

    def sx(x: float) -> float:
        return LEFT + ((math.log2(x) if log_x else x) - x_low) / (x_high - x_low) * plot_w

    def sy(y: float) -> float:
        return TOP + (1 - (y - y_low) / (y_high - y_low)) * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="black"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>',
    ]
    for y in _ticks(y_low, y_high):
        out.append(f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + plot_w}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
    for x in x_ticks or sorted({x for x, _ in points}):
        out.append(f'<text x="{sx(x):.1f}" y="{TOP + plot_h + 19}" text-anchor="middle">{x:g}</text>')  # below y's 0
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text transform="translate(14 {TOP + plot_h / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
    )
    for i, (name, values) in enumerate(series.items()):
        colour = (colours or {}).get(name, PALETTE[i % len(PALETTE)])
        shown = [(x, y) for x, y in sorted(values) if not math.isnan(y)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in shown)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}"/>' for x, y in shown)
        legend_y = TOP + 14 + 16 * i
        out.append(f'<rect x="{LEFT + plot_w + 12}" y="{legend_y - 9}" width="12" height="3" fill="{colour}"/>')
        out.append(f'<text x="{LEFT + plot_w + 30}" y="{legend_y - 3}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def heatmap_chart(cells: pd.DataFrame, *, title: str, value: str = "survival", hits: str = "survived") -> str:
    """An SVG needle map: depth down (0% on top), context length across, each cell shaded from red (0) to
    green (1) by ``value`` and labelled with ``hits``/n; an unmeasured cell is left white."""
    lengths, depths = sorted(cells["length"].unique()), sorted(cells["depth"].unique())
    size, left, top = 64, 70, 40
    width = max(left + size * len(lengths) + 20, left + 8 * len(title))  # a partial map still shows its title
    height = top + size * len(depths) + 50
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    at = cells.set_index(["depth", "length"])
    for i, depth in enumerate(depths):
        y = top + i * size
        out.append(f'<text x="{left - 6}" y="{y + size / 2 + 4:.0f}" text-anchor="end">{float(depth):.0%}</text>')
        for j, length in enumerate(lengths):
            x = left + j * size
            if (depth, length) not in at.index:
                out.append(f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="white" stroke="#ccc"/>')
                continue
            cell = at.loc[(depth, length)]
            rate = float(cell[value])
            red, green = round(201 + (43 - 201) * rate), round(42 + (138 - 42) * rate)
            out.append(
                f'<rect x="{x}" y="{y}" width="{size}" height="{size}" fill="rgb({red},{green},62)" stroke="white"/>'
            )
            out.append(
                f'<text x="{x + size / 2}" y="{y + size / 2 + 4:.0f}" text-anchor="middle" fill="white">'
                f"{int(cell[hits])}/{int(cell['n'])}</text>"
            )
    for j, length in enumerate(lengths):
        out.append(
            f'<text x="{left + j * size + size / 2}" y="{top + size * len(depths) + 16}" '
            f'text-anchor="middle">{int(length)}</text>'
        )
    out.append(
        f'<text x="{left + size * len(lengths) / 2}" y="{height - 10}" '
        'text-anchor="middle">context length (tokens)</text>'
    )
    out.append(
        f'<text transform="translate(14 {top + size * len(depths) / 2}) rotate(-90)" '
        'text-anchor="middle">needle depth</text>'
    )
    out.append("</svg>")
    return "\n".join(out)


def _by_policy(summary: pd.DataFrame, x: str, y: str, scale: float = 1.0) -> dict[str, list[tuple[float, float]]]:
    return {
        policy: [(float(a), float(b) * scale) for a, b in zip(group[x], group[y])]
        for policy, group in summary.groupby("policy", sort=False)
    }


def retention_charts(retention: pd.DataFrame, style: dict) -> dict[str, str]:
    measured = evicting(retention).assign(budget=lambda f: 100 * f.budget)
    charts = {}
    for measure, label in (("survival", "fact survival (%)"), ("accuracy", "answer accuracy (%)")):
        if measured[measure].isna().all():  # a survival-only run (accuracy_cases=0): nothing to draw
            continue
        charts[f"{measure}.svg"] = line_chart(
            _by_policy(measured, "budget", measure, 100),
            title=f"Rare-fact retention: {label.split(' (')[0]}",
            x_label="budget J (% of the document)",
            y_label=label,
            y_range=(0, 100),
            **style,
        )
    return charts


def perplexity_charts(perplexity: pd.DataFrame, style: dict) -> dict[str, str]:
    return {
        "perplexity.svg": line_chart(
            _by_policy(evicting(perplexity), "budget", "delta_nll"),
            log_x=True,
            **style,
            title="Long-text perplexity: NLL gap to the full cache",
            x_label="budget J (tokens)",
            y_label="nats per token",
        )
    }


def refresh_charts(refresh: pd.DataFrame, style: dict) -> dict[str, str]:
    return {
        "refresh.svg": line_chart(
            _by_policy(refresh, "n", "ratio"),
            log_x=True,
            **style,
            title="Refresh cost / one forward over n tokens",
            x_label="cached tokens n",
            y_label="ratio",
        )
    }


def needle_charts(summary: pd.DataFrame, style: dict) -> dict[str, str]:
    """One map per policy and budget (the full cache at its own)."""
    charts = {}
    for (policy, budget), cells in summary.groupby(["policy", "budget"], sort=False):
        at = "" if policy == FULL else budget_text(budget, " at J = {:.0%}", " at J = {:d}")
        suffix = "" if policy == FULL or summary["budget"].nunique() <= 2 else f"-{budget:g}"
        charts[f"needle-{policy.replace(':', '-').replace('=', '-').replace(',', '-')}{suffix}.svg"] = heatmap_chart(
            cells, title=f"Needle survival: {policy}{at}"
        )
    return charts


def colours(sources: list[list[str]]) -> dict[str, str]:
    """A colour per label of the charts' ``sources`` (the labels of each, in order): a spec keeps one across
    every chart under either question protocol (a task without a question names none), unless one source
    measured it under both: then the paper's protocol has a colour of its own."""
    twinned = set()
    for labels in sources:
        bases = {split_protocol(label)[0] for label in labels if split_protocol(label)[1]}
        twinned |= {label for label in labels if not split_protocol(label)[1] and split_protocol(label)[0] in bases}
    keys = {label: label if label in twinned else split_protocol(label)[0] for labels in sources for label in labels}
    order = list(dict.fromkeys(keys.values()))
    return {label: PALETTE[order.index(key) % len(PALETTE)] for label, key in keys.items()}


def write_plots(results: dict, directory: Path) -> list[Path]:
    """Write every chart the available summaries allow (each task's :attr:`.registry.BenchTask.charts`);
    return the files written. A policy keeps one colour across every chart (:func:`colours`)."""
    sources = [entry.charts for entry in all_tasks() if entry.charts is not None]
    frames = {c.source: results.get(c.source) for c in sources}
    frames = {name: frame for name, frame in frames.items() if frame is not None and not frame.empty}
    labels = [list(dict.fromkeys(label for label in frame["policy"] if label != FULL)) for frame in frames.values()]
    style = {"colours": colours(labels)}
    written = []
    for charts in sources:
        if charts.source not in frames:
            continue
        for name, svg in charts.draw(frames[charts.source], style).items():
            path = Path(directory) / name
            path.write_text(svg + "\n", encoding="utf-8")
            written.append(path)
    return written
