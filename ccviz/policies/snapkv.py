from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..cache import CacheState
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
    """

    name = "snapkv"
    summary = "SnapKV: last-layer attention from the newest w queries, average-pooled"
    signal = "snapkv"
    attention = AttentionNeed(layers="last", queries="all")

    window: int = whole("window", 1, default=32)
    kernel: int = whole("kernel", 1, default=5, odd=True)

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        rows = capture.weights(model, self.attention)[-self.window :]  # [k, n], newest queries last
        table = grown(state, self.signal, rows, self.window)
        state.extras[self.signal] = torch.cat([table[:, rows.shape[0] :], rows.T], dim=1)

    def score_candidates(self, model: torch.nn.Module, state: CacheState) -> torch.Tensor:
        received = state.extras[self.signal].sum(dim=1)
        pooled = F.avg_pool1d(received[None, None], self.kernel, stride=1, padding=self.kernel // 2)[0, 0]
        return pooled[state.frozen :]
