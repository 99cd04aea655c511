"""The reading probe: how much attention one query pays to a span of the cache, per query head.

A fact can survive eviction and still go unanswered; one reason is that the model no longer reads it.
:class:`ReadingProbe` watches a run beside its policy (``generate(..., observers=[probe])``) and, at
every forward pass whose newest token sits at ``timestep`` or later (in decode: one pass per generated
token, the first at the prompt's length), records every query head's attention from that newest token
over the cache at the last layer, with the cache's positions (the engine's :class:`LastLayerReads`).
Afterwards :meth:`ReadingProbe.readings` sums it over the entries of any span and takes the max over
heads, per pass: one head that reads the fact is enough, and a mean over heads would drown it in the
heads that do other work. It never evicts and nothing of it is recorded, so the trace is the same with
or without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ccviz.engine.reads import LastLayerReads


@dataclass
class ReadingProbe(LastLayerReads):
    """Records, at every pass whose newest token is at ``timestep`` or later, the last layer's per-query-head
    attention of that token over the cache. The retention diagnosis sets ``timestep`` to the prompt's length:
    the first generated token, read at the first decode pass, and each one after it. One probe per run (it
    keeps what it saw)."""

    name = "reading_probe"
    summary = "records one query's last-layer attention per head (a diagnosis probe; never evicts)"

    def __post_init__(self) -> None:
        super().__post_init__()
        # per probed pass, in order: float32 [query heads, cache entries] (each head's row sums to 1), and
        # long [cache entries], each entry's timestep
        self.weights: list[torch.Tensor] = []
        self.positions: list[torch.Tensor] = []

    def read(self, weights: torch.Tensor, positions: torch.Tensor) -> None:
        self.weights.append(weights.cpu())
        self.positions.append(positions.cpu().clone())

    def readings(self, timesteps: Sequence[int]) -> list[float]:
        """Per probed pass: the max over query heads of the attention summed over the cached entries at
        ``timesteps`` (0.0 when none of them is cached). Empty when no pass was probed (a run that
        generated one token never runs a decode pass)."""
        wanted = torch.as_tensor(list(timesteps), dtype=torch.long)
        return [
            float(weights[:, torch.isin(positions, wanted)].sum(dim=1).max())
            for weights, positions in zip(self.weights, self.positions)
        ]
