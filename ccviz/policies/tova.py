from dataclasses import dataclass

import torch

from ..cache import CacheState, Candidates
from ..capture import AttentionNeed, Capture
from .base import Policy


@dataclass
class Tova(Policy):
    """TOVA, the paper's "Importance": the newest query's attention at the last layer, mean over heads.

    The row is re-read after every forward pass, so at a refresh it is the attention of the token
    just processed over exactly the entries being scored. Under a per-layer allocation each layer's
    and KV head's own row, ``[entries, layers, kv_heads]``.
    """

    name = "tova"
    title = "TOVA"
    summary = "TOVA / importance: last-layer attention from the newest query"
    signal = "attention_last"
    attention = AttentionNeed(layers="last", queries="latest")
    head_scores = True

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        if capture.per_head:
            state.extras[self.signal] = capture.stacked(model, self.attention)[..., -1, :].movedim(-1, 0)
        else:
            state.extras[self.signal] = capture.weights(model, self.attention)[-1]

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        return candidates.extras[self.signal]
