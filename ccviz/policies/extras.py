"""Per-entry policy state (``state.extras``), grown as forward passes append entries."""

from __future__ import annotations

import torch

from ..cache import CacheState


def grown(state: CacheState, name: str, like: torch.Tensor, *trailing: int) -> torch.Tensor:
    """``state.extras[name]`` with zero rows appended for the entries the last pass added.

    Zero is the right start for anything accumulated from attention: no earlier query could see a
    new entry. New tensors take ``like``'s device and float32.
    """
    old = state.extras.get(name)
    if old is None:
        old = torch.zeros(0, *trailing, dtype=torch.float32, device=like.device)
    return torch.cat([old, old.new_zeros(len(state) - old.shape[0], *old.shape[1:])])
