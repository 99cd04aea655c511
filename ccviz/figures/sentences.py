"""Sentence-level view: the same signal and survival, averaged over sentences.

A fact usually spans a few tokens, so a reader asks "did this sentence survive?" rather than "did
this token?". Sentences end after a token ending in . ! ? or containing a line break.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..trace import Trace
from .data import survived
from .tokens import format_value, levels, render_spans, shade

ENDINGS = (".", "!", "?", '."', '?"', '!"', ".)")


@dataclass
class Sentence:
    start: int  # first timestep
    end: int  # one past the last timestep
    text: str
    kept: int  # tokens of the sentence that survived to the end
    mean_value: float  # mean of the finite values of its tokens (NaN if none)

    @property
    def tokens(self) -> int:
        return self.end - self.start

    @property
    def kept_fraction(self) -> float:
        return self.kept / self.tokens


def _ends_sentence(text: str) -> bool:
    return "\n" in text or text.rstrip().endswith(ENDINGS)


def split_sentences(trace: Trace, values: Sequence[float] | None = None) -> list[Sentence]:
    """Cut the token stream into sentences and summarise each (survivors, mean of ``values``)."""
    alive = survived(trace)
    vals = np.full(len(trace.tokens), np.nan) if values is None else np.asarray(values, dtype=np.float64)
    bounds, start = [], 0
    for tok in trace.tokens:
        if _ends_sentence(tok.text):
            bounds.append((start, tok.t + 1))
            start = tok.t + 1
    if start < len(trace.tokens):
        bounds.append((start, len(trace.tokens)))
    out = []
    for a, b in bounds:
        chunk = vals[a:b]
        finite = chunk[np.isfinite(chunk)]
        out.append(
            Sentence(
                start=a,
                end=b,
                text="".join(tok.text for tok in trace.tokens[a:b]),
                kept=int(alive[a:b].sum()),
                mean_value=float(finite.mean()) if finite.size else float("nan"),
            )
        )
    return out


def sentence_html(trace: Trace, values: Sequence[float] | None = None, signal: str | None = None) -> str:
    """Each sentence shaded by its mean signal (or, without one, by the share of it that survived)."""
    sentences = split_sentences(trace, values)
    by_signal = values is not None
    shown = np.array([s.mean_value if by_signal else s.kept_fraction for s in sentences], dtype=np.float64)
    level = levels(shown) if by_signal else shown
    styles = [shade(v) + (";opacity:0.45" if s.kept == 0 else "") for v, s in zip(level, sentences)]
    titles = []
    for s in sentences:
        title = f"t={s.start}–{s.end - 1} · {s.kept}/{s.tokens} tokens survived"
        if by_signal:
            title += f" · mean {signal} {format_value(s.mean_value)}"
        titles.append(title)
    what = f"mean {html.escape(str(signal))}" if by_signal else "share of tokens that survived"
    legend = (
        f"{len(sentences)} sentences. Shade = {what}; faded = no token of the sentence survived. "
        "Hover a sentence for details."
    )
    return render_spans([s.text for s in sentences], styles, titles, legend)
