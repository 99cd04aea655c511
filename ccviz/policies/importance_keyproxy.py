from dataclasses import dataclass

import torch

from ..cache import Candidates
from .base import Policy


@dataclass
class ImportanceKeyProxy(Policy):
    """The reference code's "importance": key-to-key similarity, not attention (for comparing figures).

    The newest candidate's last-layer *key* stands in for a query: each candidate scores the dot
    product of its key with it (keys divided by their largest absolute value), averaged over KV heads,
    with no softmax and no query projection. ``tova`` is the real last-layer attention.
    """

    name = "importance_keyproxy"
    title = "Importance (key proxy)"
    summary = "reference code's importance proxy: last-layer key-to-key similarity with the newest key"
    signal = "key_similarity"

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        keys = candidates.keys(-1)[0].float()  # [kv_heads, candidates, d]
        if keys.shape[1] == 0:
            return keys.new_zeros(0)
        keys = keys / keys.abs().max().clamp(min=1e-6)
        return (keys @ keys[:, -1:].transpose(-1, -2))[..., 0].mean(dim=0)
