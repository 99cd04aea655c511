from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..cache import CacheState, Candidates
from ..capture import AttentionNeed, Capture
from ..fields import whole
from .base import Policy
from .extras import grown


@dataclass
class SnapKV(Policy):
    """SnapKV in a refresh cycle: last-layer attention from the newest ``window`` queries, pooled.

    The attention rows of the newest queries are kept per entry (a [cache, window] table in
    ``state.extras``, gathered at every refresh), summed over the window, averaged over heads, then
    1-D average-pooled over neighbouring entries (``kernel``, zero padding counted, as in SnapKV).
    Under a per-layer allocation every layer and KV head keeps its own table (``[entries, layers,
    kv_heads, window]``); an entry a layer no longer holds counts as zero attention in its neighbours' pool.
    """

    name = "snapkv"
    title = "SnapKV"
    summary = "SnapKV: last-layer attention from the newest w queries, average-pooled"
    signal = "snapkv"
    attention = AttentionNeed(layers="last", queries="all")

    window: int = whole("window", 1, default=32)
    kernel: int = whole("kernel", 1, default=5, odd=True)
    head_scores = True

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        weights = capture.stacked(model, self.attention) if capture.per_head else capture.weights(model, self.attention)
        rows = weights[..., -self.window :, :]  # [(layers, kv_heads,) k, n], newest queries last
        table = grown(state, self.signal, rows, *rows.shape[:-2], self.window)
        state.extras[self.signal] = torch.cat([table[..., rows.shape[-2] :], rows.movedim(-1, 0)], dim=-1)

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        # The pool reads each candidate's neighbours, frozen entries included: the whole cache's table.
        received = candidates.cache.extras[self.signal].sum(dim=-1)  # [entries] or [entries, layers, kv_heads]
        channels = received.reshape(received.shape[0], -1).T[:, None]  # [channels, 1, n]
        pooled = F.avg_pool1d(channels, self.kernel, stride=1, padding=self.kernel // 2)[:, 0]
        return candidates.take(pooled.T.reshape(received.shape))
