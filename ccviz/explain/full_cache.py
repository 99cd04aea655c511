"""What the full cache's answer read that a policy evicted: the run beside the run.

A policy's wrong answer has two candidate causes: the model cannot answer this document at all, or
eviction took what it needed. The full cache's run of the same document and decoding
(:class:`ccviz.worker.tasks.FullCacheTask`, recording ``record_reads``) separates them: its answer,
and the entries its answer read most. :func:`missed_reads` lists those of them the policy evicted, which
its own answer could no longer read. Trace-only: no model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CcvizError
from ..trace import Trace

TOP_FULL_READS = 20  # the full cache's most-read prompt entries looked at


@dataclass(frozen=True)
class MissedRead:
    """A prompt token the full cache's answer read (``rank`` 1: most, by the max over its answer's tokens and
    heads of the last layer's attention, ``read``) and the policy evicted at refresh ``refresh``."""

    position: int
    text: str
    rank: int
    read: float
    refresh: int


def full_cache_reads(full: Trace) -> np.ndarray:
    """Per prompt position ``[prompt_length]``, the most any token of the full cache's answer read it (last
    layer, max over heads and over the answer's tokens); one generated token is enough to need an entry."""
    if full.answer_reads is None:
        raise CcvizError("the full cache's run has no record of what its answer read: run it with record_reads")
    n = full.prompt_length
    steps = [full.answer_reading(step).max[:n] for step in range(len(full.answer_reads))]
    return np.nanmax(np.stack(steps), axis=0) if steps else np.zeros(n)


def missed_reads(trace: Trace, full: Trace, top: int = TOP_FULL_READS) -> list[MissedRead]:
    """Of the ``top`` prompt entries the full cache's answer read most, those ``trace``'s policy evicted (best read
    first; ``refresh`` says when: in the prefill, or during the answer). Both runs must have read the same
    prompt tokens."""
    n = trace.prompt_length
    if [t.id for t in trace.tokens[:n]] != [t.id for t in full.tokens[: full.prompt_length]]:
        raise CcvizError("the full cache's run read another prompt: run it on the same document and chat setting")
    reads = full_cache_reads(full)
    most = np.argsort(-reads, kind="stable")[:top]
    evicted_at = trace.eviction_refreshes()
    return [
        MissedRead(int(t), trace.tokens[t].text, rank + 1, float(reads[t]), int(evicted_at[t]))
        for rank, t in enumerate(most)
        if evicted_at[t] >= 0
    ]
