"""Per-token facts derived from a trace (plain lists and NumPy), shared by every figure and view.

Figures answer questions about tokens ("when was it evicted?", "what was its last score?"); these
helpers compute each answer once, from the trace alone, so an uploaded trace shows exactly what a
live run shows.
"""

from __future__ import annotations

import html

import numpy as np

from ..fields import is_whole
from ..trace import Trace

NEVER = -1  # eviction cycle of a token that was never evicted (as Trace.eviction_refreshes says)


def frozen_count(trace: Trace) -> int:
    """The run's frozen prefix length; 0 if the config lacks it (a hand-edited trace file)."""
    value = trace.config.get("frozen")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def question_fate(trace: Trace) -> str | None:
    """Of a question asked apart from the document: "kept" (out of eviction) or "evictable" (the paper's
    protocol); None when the run had none."""
    if trace.question_start is None:
        return None
    return "kept" if trace.kept_question else "evictable"


def question_words(trace: Trace) -> str | None:
    """The question asked apart, in words for a run's heading: its tokens and its fate (None without one)."""
    start = trace.question_start
    if start is None:
        return None
    prompt = trace.config.get("prompt_tokens")  # the whole prompt's length, known before a live trace has it all
    tokens = (prompt if is_whole(prompt) else trace.prompt_length) - start
    turn_end = " with the turn's end" if trace.run_config.chat else ""
    return f"question: {tokens} tokens{turn_end}, {question_fate(trace)}"


def signals(trace: Trace) -> list[str]:
    """Every score signal recorded in the trace, in order of first appearance."""
    names: dict[str, None] = {}
    for cycle in trace.cycles:
        names.update(dict.fromkeys(cycle.scores))
    return list(names)


def eviction_cycles(trace: Trace) -> np.ndarray:
    """For every token, the index of the refresh that evicted it, or ``NEVER`` (:meth:`Trace.eviction_refreshes`)."""
    return trace.eviction_refreshes()


def survived(trace: Trace) -> np.ndarray:
    """Boolean per token: still in the cache at the end of the run (never evicted)."""
    return eviction_cycles(trace) == NEVER


def latest_scores(trace: Trace, signal: str) -> np.ndarray:
    """For every token, the last value of ``signal`` it received (NaN if never scored).

    For an evicted token that is the score that evicted it; for a survivor, its score at the last
    refresh that saw it.
    """
    values = np.full(len(trace.tokens), np.nan, dtype=np.float64)
    for cycle in trace.cycles:
        scores = cycle.scores.get(signal)
        if scores is not None:
            values[np.asarray(cycle.candidates, dtype=np.int64)] = scores
    return values


def cycle_scores(trace: Trace, index: int, signal: str, timesteps: list[int]) -> np.ndarray:
    """``signal`` at refresh ``index`` for each of ``timesteps`` (NaN for entries it did not score)."""
    cycle = trace.cycles[index]
    out = np.full(len(timesteps), np.nan, dtype=np.float64)
    scores = cycle.scores.get(signal)
    if scores is None or not cycle.candidates:
        return out
    candidates = np.asarray(cycle.candidates, dtype=np.int64)
    wanted = np.asarray(timesteps, dtype=np.int64)
    where = np.clip(np.searchsorted(candidates, wanted), 0, len(candidates) - 1)
    found = candidates[where] == wanted
    out[found] = np.asarray(scores, dtype=np.float64)[where[found]]
    return out


def robust_range(values: np.ndarray, low: float = 2.0, high: float = 98.0) -> tuple[float, float]:
    """A colour range from percentiles of the finite values.

    Attention sinks and the +inf surprise of the newest entries would otherwise wash out every other
    colour.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = (float(v) for v in np.percentile(finite, [low, high]))
    if hi <= lo:
        lo, hi = float(finite.min()), float(finite.max())
    if hi <= lo:
        hi = lo + 1.0
    return lo, hi


# Control characters as their Unicode "control pictures" (U+2400 block): a token such as "\x1b" or
# "\x07" is then seen as text instead of vanishing or upsetting the page. Running text keeps its
# line breaks and tabs; one-line labels show those as symbols too.
_CONTROL_PICTURES = {code: 0x2400 + code for code in range(32)} | {0x7F: 0x2421}
TEXT_CONTROLS = {code: pic for code, pic in _CONTROL_PICTURES.items() if chr(code) not in "\n\t\r"}
LABEL_CONTROLS = _CONTROL_PICTURES | {ord("\n"): "↵", ord("\t"): "⇥"}


def visible_text(text: str) -> str:
    """Running text with its control characters (other than line breaks and tabs) made visible."""
    return text.translate(TEXT_CONTROLS)


def piece(text: str, limit: int | None = None) -> str:
    """A token's text made visible for one-line labels: every control character as a symbol, optionally truncated."""
    shown = text.translate(LABEL_CONTROLS)
    if limit is not None and len(shown) > limit:
        shown = shown[: limit - 1] + "…"
    return shown


def plot_label(value: object, limit: int | None = None) -> str:
    """Any value as plain text for Plotly, whose labels read a subset of HTML: escaped, controls visible."""
    return html.escape(piece(str(value), limit))


def per_token(values: list[float] | np.ndarray, n_tokens: int) -> np.ndarray:
    """``values`` for the first tokens of a trace (e.g. prompt-only signals), NaN for the rest."""
    out = np.full(n_tokens, np.nan, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)[:n_tokens]
    out[: values.size] = values
    return out


def recorded_values(trace: Trace, suffix: str = "") -> dict[str, np.ndarray]:
    """Every recorded signal as one value per token (its latest score), named ``signal + suffix``."""
    return {f"{name}{suffix}": latest_scores(trace, name) for name in signals(trace)}
