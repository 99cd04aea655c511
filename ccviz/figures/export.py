"""Figures that leave the app: a white background, a file name that says what they show, one HTML report.

The app draws every chart with :func:`slide_ready` applied, so what a user sees is what the toolbar's
camera saves (PNG or SVG, :data:`IMAGE_FORMATS`). :func:`report_html` writes one self-contained page
of a run or a comparison (plotly.js inline, no network): the settings (under each run's title,
:meth:`ccviz.RunConfig.title`; the exact spelling in the table), every figure given, with
buttons for PNG and SVG on each, and the token views; it opens from disk in any browser, years later.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from ..trace import Trace
from ..version import __version__
from .compare import run_summary

IMAGE_FORMATS = ("png", "svg")
BACKGROUND = "white"
TEXT_COLOUR = "#262730"
IMAGE_SCALE = 2  # PNGs at twice the screen size: sharp on a projector

_REPORT_STYLE = """
body{font-family:ui-sans-serif,system-ui,sans-serif;margin:2rem auto;max-width:1200px;color:#262730;background:#fff}
h1{font-size:1.6rem} h2{font-size:1.2rem;margin-top:2rem} table{border-collapse:collapse;font-size:.9rem}
td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left;vertical-align:top} th{background:#f6f6f6}
.figure{margin:1rem 0} .note{color:#666;font-size:.85rem}
"""
# Each chart gets the camera (PNG) and one more button that saves the same chart as SVG.
_SVG_BUTTON = (
    "\nfunction ccvizButtons(name){return {displaylogo:false,showSendToCloud:false,"
    f"toImageButtonOptions:{{format:'png',filename:name,scale:{IMAGE_SCALE:d}}},\n"
    " modeBarButtonsToAdd:[{name:'Download plot as an SVG',icon:Plotly.Icons.disk,\n"
    "  click:function(gd){Plotly.downloadImage(gd,{format:'svg',filename:name});}}]};}\n"
)


def slide_ready(fig: go.Figure) -> go.Figure:
    """White paper and dark text whatever the app's theme, so a saved image drops onto a slide as is."""
    return fig.update_layout(paper_bgcolor=BACKGROUND, font=dict(color=TEXT_COLOUR))


def file_stem(trace: Trace, what: str = "") -> str:
    """``ccviz-retention-counter_causal_fast-J128``: what (if given), policy and budget, safe as a file name."""
    parts = ("ccviz", what, str(trace.config.get("policy", "run")), f"J{trace.config.get('cache_size', '')}")
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(part for part in parts if part))


def image_options(stem: str, image_format: str = "png") -> dict:
    """Plotly's ``toImageButtonOptions`` for the toolbar's camera."""
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"image format must be one of {', '.join(IMAGE_FORMATS)}, got {image_format!r}")
    return {"format": image_format, "filename": stem, "scale": IMAGE_SCALE}


def _settings_table(trace: Trace) -> str:
    rows = {
        **{k: v for k, v in trace.config.items() if k != "policy_options"},
        **{f"option {k}": v for k, v in (trace.config.get("policy_options") or {}).items()},
        **{f"result: {k}": v for k, v in run_summary(trace).items()},
        "status": trace.status,
        "stop reason": trace.stop_reason or "n/a",
    }
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows.items())
    return f"<table>{cells}</table>"


def report_html(
    runs: Trace | Mapping[str, Trace], figures: Mapping[str, go.Figure], views: Mapping[str, str], title: str
) -> str:
    """One self-contained HTML page: ``title``, the settings of each run (one trace, or label -> trace
    for a comparison), ``figures`` (heading -> figure), ``views`` (heading -> an HTML fragment of
    :mod:`.tokens`, already escaped), then each run's generated text."""
    runs = {"": runs} if isinstance(runs, Trace) else dict(runs)
    trace = next(iter(runs.values()))  # names the figure files
    settings, outputs = [], []
    for label, run in runs.items():
        suffix = f": {html.escape(label)}" if label else ""
        named = f": {html.escape(label or run.run_config.title())}"  # one run: its title names it
        settings += [f"<h2>Settings{named}</h2>", _settings_table(run)]
        outputs += [
            f"<h2>Generated text{suffix}</h2>",
            f"<pre style='white-space:pre-wrap'>{html.escape(run.output_text or '(nothing was generated)')}</pre>",
        ]
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p class='note'>Written by ccviz {html.escape(__version__)} from the runs' traces. Every chart has a "
        "PNG (camera) and an SVG (disk) button in its toolbar.</p>",
        *settings,
    ]
    for i, (heading, fig) in enumerate(figures.items()):
        stem = f"{file_stem(trace, re.sub(r'[^a-z0-9]+', '-', heading.lower()).strip('-'))}"
        div = f"ccviz-figure-{i}"
        spec = pio.to_json(slide_ready(go.Figure(fig)), validate=False).replace(
            "</", "<\\/"
        )  # token text cannot end the script
        parts += [
            f"<h2>{html.escape(heading)}</h2>",
            f"<div class='figure' id='{div}'></div>",
            f"<script>(function(){{var f={spec};"
            f"Plotly.newPlot('{div}',f.data,f.layout,ccvizButtons({json.dumps(stem)}));}})();</script>",
        ]
    for heading, fragment in views.items():
        parts += [f"<h2>{html.escape(heading)}</h2>", fragment]
    parts += outputs
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_REPORT_STYLE}</style><script>{get_plotlyjs()}</script><script>{_SVG_BUTTON}</script></head>"
        f"<body>{''.join(parts)}</body></html>"
    )
