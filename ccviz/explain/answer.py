"""What the answer read, from a trace that recorded it (``record_reads``): the entries one generated token
read most at the last layer, and the evicted tokens beside them, which it could no longer read.

A model that answers wrongly often reads the words around a fact that eviction took: "the locker code
is" read hard, the code itself gone. :func:`answer_summary` finds both from the trace alone (no model);
:func:`answer_text` writes them for a terminal, and the app's view lays out the same.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import AnswerReading, Trace

TOP_READS = 10  # entries listed as read most
REACH = 3  # evicted tokens up to this many positions from a most-read entry count as beside it
SHOWN = 60  # characters of an evicted span's text a terminal line shows


@dataclass(frozen=True)
class ReadEntry:
    """A cached entry the generated token read: its timestep, text and attention (max and mean over heads)."""

    position: int
    text: str
    max: float
    mean: float


@dataclass(frozen=True)
class EvictedSpan:
    """Consecutive evicted tokens ``first``..``last`` beside the read entry ``beside``; ``refresh``: the refresh
    that evicted the first of them (None only in a hand-made trace whose refreshes never did)."""

    first: int
    last: int
    text: str
    refresh: int | None
    beside: int

    @property
    def where(self) -> str:
        """``t=8``, or ``t=8-12`` for several tokens."""
        return f"t={self.first}" + (f"-{self.last}" if self.last > self.first else "")


@dataclass(frozen=True)
class AnswerSummary:
    """One generated token's reads (:class:`~ccviz.trace.AnswerReading`), what it read most, best first, and the
    evicted runs beside those, in position order."""

    reading: AnswerReading
    read_most: list[ReadEntry]
    evicted_beside: list[EvictedSpan]


def answer_summary(trace: Trace, step: int, top: int = TOP_READS, reach: int = REACH) -> AnswerSummary:
    """Generated token ``step``'s ``top`` most-read entries (by the max over heads: one head that reads a
    token is enough) and the runs of evicted tokens within ``reach`` positions of them."""
    reading = trace.answer_reading(step)
    gone = np.isnan(reading.max)
    order = np.argsort(-np.where(gone, -1.0, reading.max), kind="stable")[: min(top, int((~gone).sum()))]
    read = [ReadEntry(int(t), trace.tokens[t].text, float(reading.max[t]), float(reading.mean[t])) for t in order]
    starts = gone & ~np.r_[False, gone[:-1]]  # the first token of each run of evicted tokens
    firsts, lasts = np.flatnonzero(starts), np.flatnonzero(gone & ~np.r_[gone[1:], False])
    run = np.cumsum(starts) - 1  # per position, its run's number (where evicted)
    spans: dict[int, EvictedSpan] = {}
    evicted_at = trace.eviction_refreshes()
    for entry in read:
        near = np.arange(max(entry.position - reach, 0), min(entry.position + reach, reading.query) + 1)
        for r in np.unique(run[near[gone[near]]]):
            first, last = int(firsts[r]), int(lasts[r])
            if first not in spans:
                text = "".join(tok.text for tok in trace.tokens[first : last + 1])
                refresh = int(evicted_at[first]) if evicted_at[first] >= 0 else None
                spans[first] = EvictedSpan(first, last, text, refresh, entry.position)
    return AnswerSummary(reading, read, sorted(spans.values(), key=lambda s: s.first))


def answer_text(trace: Trace, step: int) -> str:
    """A few lines for a terminal: which token, what it read most, and what was evicted beside that."""
    summary = answer_summary(trace, step)
    reading = summary.reading
    query = "the last prompt token" if step == 0 else "the previous generated token"
    held = int((~np.isnan(reading.max)).sum())
    lines = [
        f"generated token {step}: t={reading.token} {trace.tokens[reading.token].text!r}, picked by the pass of "
        f"t={reading.query} ({query}); the cache held {held} of its {reading.query + 1} tokens, "
        f"{len(reading.evicted)} evicted",
        "read most (last layer, attention over query heads):",
    ]
    lines += [f"  t={e.position:<6} {e.text!r:<20} max {e.max:.3f}  mean {e.mean:.3f}" for e in summary.read_most]
    lines.append(f"evicted within {REACH} tokens of those (unreadable):")
    lines += [
        f"  {s.where} {_clip(s.text)!r} evicted"
        + ("" if s.refresh is None else f" at refresh {s.refresh}")
        + f", beside t={s.beside}"
        for s in summary.evicted_beside
    ] or ["  none"]
    return "\n".join(lines)


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN] + "…"
