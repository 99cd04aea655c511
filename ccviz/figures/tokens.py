"""Token-level HTML views of a trace: signal highlighting, what survives, and one refresh in context.

Each view is one self-contained HTML string (inline ``style`` and native ``title`` tooltips, no
JavaScript), so ``st.html`` can show a 2,000-token document as a single element instead of
thousands of widgets. Every token appears exactly once; all token text is HTML-escaped and its
control characters are drawn as symbols, so markup or escape codes in a document show as text.
"""

from __future__ import annotations

import html
import math
from collections.abc import Collection, Sequence

import numpy as np

from ..phrases import phrase_mask
from ..trace import Trace
from .data import NEVER, eviction_cycles, frozen_count, piece, robust_range, visible_text

CONTAINER = (
    "font-family:ui-sans-serif,system-ui,sans-serif;font-size:0.95rem;line-height:1.9;"
    "white-space:pre-wrap;word-break:break-word;padding:0.6rem 0.8rem;border:1px solid #e3e3e3;"
    "border-radius:0.5rem;max-height:36rem;overflow-y:auto"
)
HIGHLIGHT_RGB = (245, 124, 0)  # orange: more of the signal = more opaque
SURVIVOR_MARK = "border-bottom:2px solid #2b8a3e"
FROZEN = "background:#ececec;color:#666"
EVICTED = "color:#b5b5b5"
JUST_EVICTED = "background:#ffd6d6;color:#a61e1e;text-decoration:line-through"
KEPT = "background:#d9f2df"
LEGEND = "font-size:0.8rem;color:#555;margin-bottom:0.3rem"
MARKED = "outline:2px solid #7048e8;outline-offset:-1px;border-radius:2px"  # a phrase being followed (a needle)
MISSED = "outline:2px dashed #e8590c;outline-offset:-1px;border-radius:2px"  # evicted, read by the full cache
ANSWER = "background:#fff3bf;outline:2px solid #e8a100;outline-offset:-1px;border-radius:2px"  # the expected answer


def format_value(value: float) -> str:
    """A score for a tooltip: 4 significant digits, infinities spelled out."""
    if math.isnan(value):
        return "not scored"
    if math.isinf(value):
        return "+inf (no future visible)" if value > 0 else "-inf"
    return f"{value:.4g}"


def shade(level: float) -> str:
    """Background for a normalised level in [0, 1] (NaN: none)."""
    if math.isnan(level):
        return ""
    r, g, b = HIGHLIGHT_RGB
    return f"background:rgba({r},{g},{b},{0.06 + 0.8 * min(max(level, 0.0), 1.0):.2f})"


def levels(values: np.ndarray) -> np.ndarray:
    """Values scaled to [0, 1] by their robust range; +inf maps to 1, NaN stays NaN."""
    lo, hi = robust_range(values)
    with np.errstate(invalid="ignore"):
        return np.clip((values - lo) / (hi - lo), 0.0, 1.0)


def render_spans(texts: Sequence[str], styles: Sequence[str], titles: Sequence[str], legend: str = "") -> str:
    """One escaped ``<span>`` per piece of text inside a scrollable, whitespace-preserving box."""
    spans = []
    for text, style, title in zip(texts, styles, titles, strict=True):
        style_attr = f' style="{html.escape(style)}"' if style else ""
        spans.append(
            f'<span{style_attr} title="{html.escape(visible_text(title))}">{html.escape(visible_text(text))}</span>'
        )
    head = f'<div style="{LEGEND}">{legend}</div>' if legend else ""
    return f'{head}<div style="{CONTAINER}">{"".join(spans)}</div>'


def shown_range(n: int, focus: range | None) -> range:
    """The tokens a view draws of its ``n``: all, or those of ``focus`` (a passage around a fact, so it is
    on screen without scrolling a long document)."""
    return range(n) if focus is None else range(max(focus.start, 0), min(focus.stop, n))


def passage_note(shown: range, n: int) -> str:
    """The legend's words for a view cut to a passage (nothing when every token is drawn)."""
    return "" if shown == range(n) else f" Shown: tokens t={shown.start} to {shown.stop - 1} of {n}."


def _fate(trace: Trace, t: int, evicted_at: np.ndarray) -> str:
    if t < frozen_count(trace):
        return "frozen (never evicted)"
    if evicted_at[t] == NEVER:
        return "survived to the end"
    return f"evicted at refresh {evicted_at[t]}"


def highlight_html(trace: Trace, values: Sequence[float] | np.ndarray, signal: str, focus: range | None = None) -> str:
    """Every token shaded by ``values`` (one per token, NaN = not scored); survivors underlined. ``focus``: only
    that passage (the shading's range is still the whole document's)."""
    scores = np.asarray(values, dtype=np.float64)
    if scores.shape != (len(trace.tokens),):
        raise ValueError(f"need one value per token ({len(trace.tokens)}), got {scores.shape}")
    level = levels(scores)
    evicted_at = eviction_cycles(trace)
    shown = shown_range(len(trace.tokens), focus)
    tokens = trace.tokens[shown.start : shown.stop]
    styles, titles = [], []
    for tok in tokens:
        style = shade(level[tok.t])
        if evicted_at[tok.t] == NEVER:
            style = f"{style};{SURVIVOR_MARK}" if style else SURVIVOR_MARK
        styles.append(style)
        titles.append(
            f"t={tok.t} “{piece(tok.text)}” · {signal} {format_value(scores[tok.t])} · "
            f"{_fate(trace, tok.t, evicted_at)}"
        )
    legend = (
        f"Shade = {html.escape(signal)} (light = low, dark = high, robust 2–98% range); "
        "<span style='border-bottom:2px solid #2b8a3e'>underlined</span> = survived to the end. "
        "Hover a token for its value." + passage_note(shown, len(trace.tokens))
    )
    return render_spans([tok.text for tok in tokens], styles, titles, legend)


def survival_html(trace: Trace) -> str:
    """The text as the cache holds it at the end: survivors in full colour, evicted spans greyed."""
    evicted_at = eviction_cycles(trace)
    frozen = frozen_count(trace)
    styles = [FROZEN if tok.t < frozen else (EVICTED if evicted_at[tok.t] != NEVER else "") for tok in trace.tokens]
    titles = [f"t={tok.t} · {_fate(trace, tok.t, evicted_at)}" for tok in trace.tokens]
    kept = int((evicted_at == NEVER).sum())
    legend = (
        f"{kept} of {len(trace.tokens)} tokens survive. Dark = in the cache at the end, "
        f"<span style='{EVICTED}'>grey = evicted</span>, <span style='{FROZEN}'>shaded = frozen prefix</span>."
    )
    return render_spans([tok.text for tok in trace.tokens], styles, titles, legend)


def cycle_context_html(
    trace: Trace,
    index: int,
    marked: Collection[int] = (),
    missed: Collection[int] = (),
    focus: range | None = None,
    marked_as: str = "the needle",
) -> str:
    """The tokens processed up to refresh ``index``: kept, evicted by this refresh, evicted before;
    the timesteps in ``marked`` (a needle's tokens) outlined, whatever their fate, and named ``marked_as`` in the
    legend; those in ``missed`` (evicted, but the full cache's answer read them) dashed. ``focus``: only that
    passage of them."""
    cycle = trace.cycles[index]
    kept = set(cycle.kept)
    evicted_at = eviction_cycles(trace)
    frozen = frozen_count(trace)
    shown = shown_range(cycle.step, focus)
    tokens = trace.tokens[shown.start : shown.stop]
    styles, titles = [], []
    for tok in tokens:
        if tok.t < frozen:
            styles.append(FROZEN)
            titles.append(f"t={tok.t} · frozen")
        elif tok.t in kept:
            styles.append(KEPT)
            titles.append(f"t={tok.t} · kept by refresh {index}")
        elif evicted_at[tok.t] == index:
            styles.append(JUST_EVICTED)
            titles.append(f"t={tok.t} · evicted by this refresh")
        else:
            styles.append(EVICTED)
            titles.append(f"t={tok.t} · evicted earlier, at refresh {evicted_at[tok.t]}")
    marked, missed = set(marked), set(missed)
    outlines = {**dict.fromkeys(missed, MISSED), **dict.fromkeys(marked, MARKED)}  # a needle's outline wins
    styles = [f"{style};{outlines[tok.t]}" if tok.t in outlines else style for tok, style in zip(tokens, styles)]
    read = [t for t in missed if t < cycle.step]
    n_new = int((evicted_at == index).sum())
    legend = (
        f"Refresh {index} ({cycle.phase}, after {cycle.step} tokens): <span style='{KEPT}'>kept ({len(kept)})</span>, "
        f"<span style='{JUST_EVICTED}'>evicted now ({n_new})</span>, <span style='{EVICTED}'>evicted earlier</span>, "
        f"<span style='{FROZEN}'>frozen</span>"
        + (f", <span style='{MARKED}'>{html.escape(marked_as)}</span>" if marked else "")
        + (f", <span style='{MISSED}'>read by the full cache's answer</span>" if read else "")
        + "."
        + passage_note(shown, cycle.step)
    )
    return render_spans([tok.text for tok in tokens], styles, titles, legend)


def answer_html(trace: Trace, expected: str) -> str:
    """The run's generated text, each occurrence of ``expected`` in it highlighted (case ignored, as
    :func:`ccviz.phrases.phrase_spans` finds it): where the output gives the answer, at a glance."""
    generated = trace.tokens[trace.prompt_length :]
    texts = [tok.text for tok in generated]
    found = phrase_mask(texts, expected.strip())
    styles = [ANSWER if hit else "" for hit in found]
    titles = [f"t={tok.t}" + (" · the expected answer" if hit else "") for tok, hit in zip(generated, found)]
    said = "highlighted where the output gives it" if found.any() else "not in the output"
    legend = f"The generated text; the expected answer <span style='{ANSWER}'>{html.escape(expected)}</span>: {said}."
    return render_spans(texts, styles, titles, legend)
