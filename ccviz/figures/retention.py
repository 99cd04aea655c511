"""The retention heatmap (the paper's Figure 4): one row per refresh, one column per surviving slot.

Cells carry compact NumPy data (sent to the browser as base64 typed arrays): ``z`` for the colour and
a 3-D float32 ``customdata`` (timestep, score) for the hover; only the token text travels as strings,
truncated. Very long runs show every k-th refresh so the figure stays under ``MAX_CELLS`` (about
2 MB of JSON), which keeps a 2,000-token document responsive in the browser.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import plotly.colors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..errors import CcvizError
from ..fields import is_number
from ..trace import Trace
from .data import cycle_scores, frozen_count, plot_label, question_fate, robust_range, signals
from .layout import legible, wrapped
from .png import png_bytes

Colouring = Literal["timestep", "score", "source", "layers"]
COLOURINGS: tuple[str, ...] = get_args(Colouring)
MAX_CELLS = 60_000
EMPTY_RGB = (244, 244, 244)  # the figures' plot background: an empty slot
HOVER_CHARS = 14
TIMESTEP_SCALE = "RdBu_r"  # diverging: blue = early, red = late
SCORE_SCALE = "Viridis"
LAYERS_SCALE = "Cividis"  # how many layers hold a token: dark = one, yellow = every layer
QUESTION_LABEL = "question (kept)"  # a question asked apart that the run kept out of eviction
# The "source" colouring's bands, by code; the last only when a kept question is shown
SOURCE_LABELS = ("frozen", "prompt", "generated", QUESTION_LABEL)
SOURCE_COLOURS = ("#9e9e9e", "#4c78a8", "#e45756", "#54a24b")
QUESTION_CODE = SOURCE_LABELS.index(QUESTION_LABEL)
HOVER = "refresh %{y}<br>slot %{x}: t = %{customdata[0]}  %{text}<br>score %{customdata[1]:.4g}<extra></extra>"


@dataclass
class RetentionGrid:
    """The heatmap's data: ``timesteps[r, c]`` is the token in slot c after refresh ``rows[r]`` (-1: empty)."""

    rows: list[int]
    timesteps: np.ndarray  # int32 [rows, cols]
    z: np.ndarray  # float32 [rows, cols], NaN for empty slots
    customdata: np.ndarray  # float32 [rows, cols, 2]: timestep, score
    text: list[list[str]]
    signal: str | None
    stride: int
    layers: int | None = None  # the layers a per-layer trace records (None: one set for all)
    kept_question: bool = False  # the run kept a question apart (its cells: "question (kept)")


def per_layer(trace: Trace) -> tuple[int | None, int | None]:
    """The layers and KV heads a trace records separately (allocation pyramid / adaptive), else None."""
    last = trace.cycles[-1] if trace.cycles else None
    return (None, None) if last is None else (last.num_layers, last.num_heads)


def _check_view(trace: Trace, colour: Colouring, layer: int | None, head: int | None) -> int | None:
    layers, heads = per_layer(trace)
    if colour == "layers" and layers is None:
        raise CcvizError(
            "this run kept one set for every layer (allocation uniform): colour by timestep, score or source"
        )
    if layer is not None and layers is not None and not 0 <= layer < layers:
        raise CcvizError(f"layer must be 0 to {layers - 1}, got {layer}")
    if head is not None and (heads is None or layer is None or not 0 <= head < heads):
        raise CcvizError(
            "a head is chosen within a layer of an adaptive run"
            if heads is None or layer is None
            else f"head must be 0 to {heads - 1}, got {head}"
        )
    return layers


def _row_stride(n_rows: int, n_cols: int, max_cells: int) -> int:
    return max(1, -(-n_rows * n_cols // max_cells))


def retention_grid(
    trace: Trace,
    colour: Colouring = "timestep",
    signal: str | None = None,
    max_cells: int = MAX_CELLS,
    layer: int | None = None,
    head: int | None = None,
) -> RetentionGrid:
    """Build the cell matrices; ``signal`` (default: the first recorded) is shown in the hover and by
    the "score" colouring. Of a per-layer trace, ``layer`` (and ``head``) shows what that layer (KV head)
    held; None shows what any layer held, and colouring "layers" how many layers held each token."""
    if colour not in COLOURINGS:
        raise CcvizError(f"unknown colouring {colour!r}: use one of {', '.join(COLOURINGS)}")
    layers = _check_view(trace, colour, layer, head)
    recorded = signals(trace)
    if signal is None:
        signal = recorded[0] if recorded else None
    elif signal not in recorded:
        raise CcvizError(f"this trace has no signal {signal!r}: it records {', '.join(recorded) or 'none'}")
    if colour == "score" and signal is None:
        raise CcvizError("this policy records no scores: colour by timestep or by source instead")
    kept_sets = [cycle.kept_by(layer, head) for cycle in trace.cycles]
    n_cols = max((len(kept) for kept in kept_sets), default=0)
    stride = _row_stride(len(trace.cycles), n_cols, max_cells)
    rows = list(range(0, len(trace.cycles), stride))
    if trace.cycles and rows[-1] != len(trace.cycles) - 1:
        rows.append(len(trace.cycles) - 1)
    frozen, question = frozen_count(trace), trace.kept_question
    source_code = np.array([1 if tok.source == "prompt" else 2 for tok in trace.tokens], dtype=np.float32)
    source_code[:frozen] = 0
    source_code[question.start : question.stop] = QUESTION_CODE
    timesteps = np.full((len(rows), n_cols), -1, dtype=np.int32)
    custom = np.full((len(rows), n_cols, 2), np.nan, dtype=np.float32)
    text = [[""] * n_cols for _ in rows]
    held_by = np.zeros((len(rows), n_cols), dtype=np.float32)
    for r, index in enumerate(rows):
        kept = kept_sets[index]
        if colour == "layers":  # each shown entry's count, from the counts over the cycle's whole kept set
            cycle = trace.cycles[index]
            held_by[r, : len(kept)] = np.asarray(cycle.layer_counts())[np.searchsorted(cycle.kept, kept)]
        timesteps[r, : len(kept)] = kept
        custom[r, : len(kept), 0] = kept
        if signal is not None:
            custom[r, : len(kept), 1] = cycle_scores(trace, index, signal, kept)
        text[r][: len(kept)] = [_hover_text(trace, t, question) for t in kept]
    filled = timesteps >= 0
    z = np.full(timesteps.shape, np.nan, dtype=np.float32)
    if colour == "timestep":
        z[filled] = timesteps[filled]
    elif colour == "source":
        z[filled] = source_code[timesteps[filled]]
    elif colour == "layers":
        z[filled] = held_by[filled]
    else:
        scores = custom[:, :, 1]
        finite = scores[np.isfinite(scores)]
        z = np.where(np.isfinite(scores), scores, np.nan).astype(np.float32)
        if finite.size:  # +inf (no visible future: always kept) shows at the top of the scale, -inf at the bottom
            z[np.isposinf(scores)] = finite.max()
            z[np.isneginf(scores)] = finite.min()
    return RetentionGrid(
        rows=rows,
        timesteps=timesteps,
        z=z,
        customdata=custom,
        text=text,
        signal=signal,
        stride=stride,
        layers=layers,
        kept_question=bool(question),
    )


def _hover_text(trace: Trace, t: int, question: range) -> str:
    """A cell's token in quotes, and what keeps it when that is the question kept apart."""
    quoted = f"“{plot_label(trace.tokens[t].text, HOVER_CHARS)}”"
    return f"{quoted}  {QUESTION_LABEL}" if t in question else quoted


def _bands(colours: Sequence[str]) -> list[list]:
    """A colour scale of one flat band per code 0, 1, ... (for z from -0.5 to len(colours) - 0.5)."""
    n = len(colours)
    return [[edge / n, colour] for code, colour in enumerate(colours) for edge in (code, code + 1)]


def _heatmap_trace(grid: RetentionGrid) -> go.Heatmap:
    return go.Heatmap(
        z=grid.z,
        x=np.arange(grid.z.shape[1], dtype=np.int32),
        y=np.asarray(grid.rows, dtype=np.int32),
        customdata=grid.customdata,
        text=grid.text,
        hovertemplate=HOVER,
        hoverongaps=False,
        coloraxis="coloraxis",
    )


def _colour_axis(
    colour: Colouring, grid: RetentionGrid, zrange: tuple[float, float] | None, kept_question: bool | None = None
) -> dict:
    """The colour axis of ``grid``; ``kept_question`` (default: the grid's) adds the source band of a kept question."""
    if colour == "timestep":
        lo, hi = zrange if zrange is not None else (0.0, float(max(grid.timesteps.max(initial=0), 1)))
        return dict(colorscale=TIMESTEP_SCALE, cmin=lo, cmax=hi, cmid=(lo + hi) / 2, colorbar=dict(title="timestep"))
    if colour == "source":
        shown = grid.kept_question if kept_question is None else kept_question
        codes = len(SOURCE_LABELS) if shown else QUESTION_CODE  # the question's band only when there is one
        return dict(
            colorscale=_bands(SOURCE_COLOURS[:codes]),
            cmin=-0.5,
            cmax=codes - 0.5,
            colorbar=dict(title="source", tickvals=list(range(codes)), ticktext=list(SOURCE_LABELS[:codes])),
        )
    if colour == "layers":
        return dict(
            colorscale=LAYERS_SCALE, cmin=1, cmax=max(grid.layers or 1, 2), colorbar=dict(title="layers holding it")
        )
    lo, hi = zrange if zrange is not None else robust_range(grid.z)
    return dict(colorscale=SCORE_SCALE, cmin=lo, cmax=hi, colorbar=dict(title=plot_label(grid.signal or "score")))


def _height(n_rows: int) -> int:
    return int(min(900, max(320, 120 + 12 * n_rows)))


def _subtitle(trace: Trace, grid: RetentionGrid, layer: int | None = None, head: int | None = None) -> str:
    c = trace.config
    parts = [
        f"J={c.get('cache_size')}",
        f"h={c.get('chunk_size')}",
        f"frozen={c.get('frozen')}",
        f"{len(trace.cycles)} refreshes",
    ]
    fate = question_fate(trace)
    if fate is not None:
        parts.insert(3, f"question {fate}")
    if grid.layers is not None:
        allocation = c.get("allocation", "?") + (
            f" (beta {c['pyramid_beta']:g})"
            if c.get("allocation") == "pyramid" and is_number(c.get("pyramid_beta"))
            else ""
        )
        where = (
            "what any layer holds"
            if layer is None
            else f"layer {layer}" + ("" if head is None else f", KV head {head}")
        )
        parts += [allocation, where]
    if grid.stride > 1:
        parts.append(f"every {grid.stride}th refresh shown")
    return plot_label("  ·  ".join(parts))


def retention_heatmap(
    trace: Trace,
    colour: Colouring = "timestep",
    signal: str | None = None,
    zrange: tuple[float, float] | None = None,
    max_cells: int = MAX_CELLS,
    layer: int | None = None,
    head: int | None = None,
) -> go.Figure:
    """The retention figure of one run; ``zrange`` fixes the colour scale (to compare runs); ``layer`` /
    ``head``: one layer's (KV head's) cache of a per-layer run (see :func:`retention_grid`)."""
    grid = retention_grid(trace, colour, signal, max_cells, layer, head)
    fig = go.Figure(_heatmap_trace(grid))
    return legible(
        fig,
        coloraxis=_colour_axis(colour, grid, zrange),
        title=dict(
            text=f"{plot_label(trace.config.get('policy', '?'))}<br><sup>{_subtitle(trace, grid, layer, head)}</sup>",
            x=0.0,
        ),
        height=_height(len(grid.rows)),
        xaxis=dict(title="cache slot (position order)", showgrid=False, zeroline=False),
        yaxis=dict(title="refresh", autorange="reversed", showgrid=False, zeroline=False),
        plot_bgcolor="#f4f4f4",
    )


def scale_colours(
    z: np.ndarray, colorscale, cmin: float, cmax: float, empty: tuple[int, int, int] = EMPTY_RGB
) -> np.ndarray:
    """Cells ``z`` as Plotly colours them on ``colorscale`` from ``cmin`` to ``cmax`` (linear in RGB
    between stops), uint8 ``[rows, cols, 3]``; NaN cells get ``empty``."""
    scale = plotly.colors.get_colorscale(colorscale) if isinstance(colorscale, str) else colorscale
    stops = np.array([float(stop) for stop, _ in scale])
    colours = np.array(
        [plotly.colors.unlabel_rgb(plotly.colors.convert_colors_to_same_type(c, "rgb")[0][0]) for _, c in scale],
        dtype=np.float64,
    )
    span = cmax - cmin if cmax > cmin else 1.0
    where = np.clip((np.nan_to_num(z, nan=cmin) - cmin) / span, 0, 1)
    rgb = np.stack([np.interp(where, stops, colours[:, channel]) for channel in range(3)], axis=-1)
    rgb = np.rint(rgb).astype(np.uint8)
    rgb[np.isnan(z)] = empty
    return rgb


def retention_image_html(trace: Trace, colour: Colouring = "timestep", max_cells: int = MAX_CELLS) -> str:
    """The retention heatmap as a picture (one pixel per cell, scaled up sharp by the browser) with its
    title and scale: the same grid and colours as :func:`retention_heatmap`, at a fraction of its cost
    to draw, for a figure redrawn every second while a run goes on."""
    grid = retention_grid(trace, colour, max_cells=max_cells)
    axis = _colour_axis(colour, grid, None)
    image = base64.b64encode(png_bytes(scale_colours(grid.z, axis["colorscale"], axis["cmin"], axis["cmax"]))).decode(
        "ascii"
    )
    height = _height(len(grid.rows)) - 120
    scale = {
        "timestep": (
            f"colour = original timestep, blue = early (t={axis['cmin']:.0f}) to red = late (t={axis['cmax']:.0f})"
        ),
        "source": "grey = frozen, blue = prompt, red = generated"
        + (f", green = {QUESTION_LABEL}" if grid.kept_question else ""),
        "layers": f"colour = layers holding the token, 1 (dark) to {axis['cmax']} (yellow)",
        "score": f"colour = {grid.signal}, {axis['cmin']:.3g} (dark) to {axis['cmax']:.3g} (yellow)",
    }[colour]
    return (
        f"<div style='font-family:ui-sans-serif,system-ui,sans-serif;color:#262730'>"
        f"<div style='font-weight:600'>{html.escape(plot_label(trace.config.get('policy', '?')))} · live</div>"
        f"<div style='font-size:0.8rem;color:#555'>{html.escape(_subtitle(trace, grid))}</div>"
        f"<img alt='retention so far: {len(trace.cycles)} refreshes' src='data:image/png;base64,{image}' "
        f"style='width:100%;height:{height}px;image-rendering:pixelated;margin:0.4rem 0;border:1px solid #e3e3e3'>"
        f"<div style='font-size:0.8rem;color:#555'>One row per refresh (top: the first), one column per cache slot in "
        f"position order; {html.escape(scale)}. The interactive figure replaces it when the run ends.</div></div>"
    )


def comparison_heatmaps(
    traces: Sequence[Trace],
    labels: Sequence[str],
    colour: Colouring = "timestep",
    max_cells: int = MAX_CELLS,
    layer: int | None = None,
) -> go.Figure:
    """Side-by-side retention figures on one shared colour scale (timestep or source); ``layer``: that
    layer's cache in each per-layer run (a uniform run's one set is every layer's)."""
    if colour in ("score", "layers"):
        what = "scores of different policies are" if colour == "score" else "layer counts of different allocations are"
        raise CcvizError(f"{what} not comparable: compare by timestep or by source")
    if len(traces) != len(labels) or not traces:
        raise CcvizError("give one label per trace, and at least one trace")
    grids = [
        retention_grid(
            trace,
            colour,
            max_cells=max(1, max_cells // len(traces)),
            layer=None if per_layer(trace)[0] is None else layer,
        )
        for trace in traces
    ]
    top = float(max(max(int(g.timesteps.max(initial=0)), 1) for g in grids))
    titles = [wrapped(plot_label(label), max(12, 60 // len(traces))) for label in labels]  # apart on a narrow page
    fig = make_subplots(rows=1, cols=len(traces), subplot_titles=titles, horizontal_spacing=0.03)
    fig.update_annotations(font_size=13)
    for i, grid in enumerate(grids, start=1):
        fig.add_trace(_heatmap_trace(grid), row=1, col=i)
        fig.update_yaxes(autorange="reversed", showgrid=False, zeroline=False, row=1, col=i, showticklabels=i == 1)
        fig.update_xaxes(showgrid=False, zeroline=False, title_text="slot", row=1, col=i)
    fig.update_yaxes(title_text="refresh", row=1, col=1)
    kept_question = any(grid.kept_question for grid in grids)
    return legible(
        fig,
        coloraxis=_colour_axis(colour, grids[0], (0.0, top) if colour == "timestep" else None, kept_question),
        height=_height(max(len(g.rows) for g in grids)),
        plot_bgcolor="#f4f4f4",
    )
