"""The cheap signals recorded next to a policy's own score (``record="all"``), never used to evict.

They let one cycle compare "attention" with "surprise" on exactly the same candidates: last-layer
attention from the newest query (``attention_last``), last-layer attention received from the queries
processed since the previous refresh (``attention_chunk``), and counter-causal surprise (the fast
variant in the paper's form: the raw logit per token, unsmoothed, a token-level signal like the other
two) when that policy is registered.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache import CacheState, Candidates
from ..capture import AttentionNeed, Capture
from . import POLICIES
from .base import Policy
from .extras import grown


@dataclass
class ChunkAttention(Policy):
    """Last-layer attention received from the queries processed since the previous refresh (summed).

    A running sum in ``state.extras``, O(n) memory whatever h is. The engine refreshes after every
    ``chunk_size`` processed tokens and no forward pass straddles a refresh, so a pass that starts on
    a multiple of ``chunk_size`` is the first of a new chunk: the sum restarts there.
    """

    name = "attention_chunk"
    summary = "last-layer attention received from the queries since the previous refresh"
    signal = "attention_chunk"
    attention = AttentionNeed(layers="last", queries="all")

    chunk_size: int = 1

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        rows = capture.weights(model, self.attention)
        received = rows.sum(dim=0)
        first = int(state.pos[-1]) + 1 - rows.shape[0]  # position of this pass's first token
        previous = torch.zeros_like(received) if first % self.chunk_size == 0 else grown(state, self.signal, received)
        state.extras[self.signal] = previous + received

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        return candidates.extras[self.signal]


def companions(policy: Policy, chunk_size: int) -> list[Policy]:
    """Fresh companion scorers for one run, minus any whose signal the policy already records."""
    scorers: list[Policy] = [POLICIES["tova"](), ChunkAttention(chunk_size=chunk_size)]
    if "counter_causal_fast" in POLICIES:
        scorers.append(POLICIES["counter_causal_fast"](paper=True))
    return [scorer for scorer in scorers if scorer.signal != policy.signal]
