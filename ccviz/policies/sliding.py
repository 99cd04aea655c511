from dataclasses import dataclass

import torch

from ..cache import Candidates
from .base import Policy


@dataclass
class Sliding(Policy):
    """Keep the J most recent entries (plus the frozen prefix): score = original position."""

    name = "sliding"
    title = "Sliding window"
    summary = "sliding window: keeps the most recent J tokens"
    signal = "recency"

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        return candidates.pos.to(torch.float32)
