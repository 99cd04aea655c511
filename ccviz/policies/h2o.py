from dataclasses import dataclass

import torch

from ..cache import CacheState, Candidates
from ..capture import AttentionNeed, Capture
from ..fields import flag
from .base import Policy
from .extras import grown

_SEEN = "h2o_queries"  # per entry: how many queries could see it (for ``normalize``)


@dataclass
class H2O(Policy):
    """H2O heavy hitters: attention each entry received from every query since it entered the cache.

    Summed over layers, averaged over query heads, accumulated after every forward pass (so each query
    counts once, as it was processed) and carried through refreshes in ``state.extras``. Old entries
    have been seen by more queries, so the sum favours them: the self-reinforcing bias the paper is
    about. ``normalize`` divides by the number of queries that could see each entry. Under a
    per-layer allocation each layer and KV head accumulates its own, ``[entries, layers, kv_heads]``.
    """

    name = "h2o"
    title = "H2O heavy hitters"
    summary = "H2O heavy hitters: attention accumulated over every query and layer (recent J/2)"
    signal = "h2o_accumulated"
    attention = AttentionNeed(layers="all", queries="all")
    head_scores = True

    normalize: bool = flag("normalize", default=False)

    def default_recent(self, cache_size: int) -> int:
        return cache_size // 2  # as in the H2O reference code: half heavy hitters, half recent

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        weights = capture.stacked(model, self.attention)  # [L, q, n], per_head: [L, kv_heads, q, n]
        received = weights.sum(dim=-2).movedim(-1, 0) if capture.per_head else weights.sum(dim=(0, 1))
        queries = weights.shape[-2]
        seen = torch.full_like(received, float(queries))
        causal = torch.arange(queries, 0, -1, dtype=seen.dtype, device=seen.device)  # causal in the pass
        seen[-queries:] = causal.reshape(-1, *[1] * (seen.dim() - 1))
        channels = received.shape[1:]  # () or (layers, kv_heads)
        state.extras[self.signal] = grown(state, self.signal, received, *channels) + received
        state.extras[_SEEN] = grown(state, _SEEN, received, *channels) + seen

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        accumulated = candidates.extras[self.signal]
        if self.normalize:
            return accumulated / candidates.extras[_SEEN]
        return accumulated
