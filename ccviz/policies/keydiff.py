from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..cache import Candidates
from .base import Policy
from .layerwise import layer_rows, on_candidates


@dataclass
class KeyDiff(Policy):
    """KeyDiff (Park et al. 2025, arXiv 2504.15364), as kvpress's KeyDiffPress scores it: keys only.

    Why: keys that point where most keys point add little that the rest do not; distinctive keys are
    kept. No query, no attention: it needs nothing but the cache and costs O(n d) per layer.
    Per layer l and KV head: the anchor is the mean of the unit-normalised cached keys ``[kv_heads,
    rows, d]`` (every row the head sees, the frozen prefix included; the keys as cached, after RoPE), and
    each entry scores minus the cosine of its key with that anchor. kvpress ranks each layer's heads
    separately; one decision for every layer and head (allocation ``uniform``) takes each candidate's
    mean over layers and KV heads, and under a per-layer allocation the scores are ``[candidates,
    layers, kv_heads]``. (The paper compresses block by block while prefilling; this is kvpress's
    single-shot score, applied to the cache at each refresh.)
    """

    name = "keydiff"
    title = "KeyDiff"
    summary = "KeyDiff: keys least like the mean key (negative cosine), every layer and head"
    signal = "key_diversity"
    head_scores = True

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        views = layer_rows(candidates.cache)
        scores = []
        for view in views:
            unit = F.normalize(view.keys, dim=-1)  # [kv_heads, rows, d]
            seen = view.seen[..., None].to(unit.dtype)
            anchor = (unit * seen).sum(dim=1, keepdim=True) / seen.sum(dim=1, keepdim=True).clamp(min=1)
            scores.append(-F.cosine_similarity(view.keys, anchor, dim=-1))
        return on_candidates(candidates, views, scores, "mean")
