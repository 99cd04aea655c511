from dataclasses import dataclass

import torch

from ..cache import CacheState
from .base import Policy


@dataclass
class Sliding(Policy):
    """Keep the J most recent entries (plus the frozen prefix): score = original position."""

    name = "sliding"
    summary = "sliding window: keeps the most recent J tokens"
    signal = "recency"

    def score_candidates(self, model: torch.nn.Module, state: CacheState) -> torch.Tensor:
        return state.pos[state.frozen :].to(torch.float32)
