"""What the answer read: the last layer's attention from each newest query over the cache it met.

:class:`LastLayerReads` is the one observer that takes it: at every forward pass whose newest token sits
at ``timestep`` or later, that token's attention over the cache at the last layer, per query head, with
the cache's positions (softmax over the entries cached then, the model's own queries after RoPE against
the cached keys: :mod:`ccviz.capture`). What is kept of it is a subclass's :meth:`~LastLayerReads.read`:
:class:`AnswerReader` keeps, for a run that asks (``record_reads``), the max and the mean over query heads
of each entry, compactly, for the trace (:class:`ccviz.trace.AnswerRead`); the benchmarks'
:class:`ccviz_bench.reading.ReadingProbe` keeps the per-head rows. Neither evicts, and the capture computes
each need's tensor on its own, so the run is the same with or without them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..cache import CacheState
from ..capture import AttentionNeed, Capture
from ..fields import whole
from ..policies import Policy
from ..trace import AnswerRead


@dataclass
class LastLayerReads(Policy):
    """Hands :meth:`read` every pass whose newest token is at ``timestep`` or later: that token's last-layer
    attention per query head over the cache, and the cache's positions. Never evicts."""

    evicts = False
    attention = AttentionNeed(layers="last", queries="latest", heads="each")

    timestep: int = whole("probed timestep", 0)

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        if int(state.pos[-1]) >= self.timestep:  # after the pass: the newest entry is the newest query
            self.read(capture.weights(model, self.attention)[:, -1], state.pos)

    def read(self, weights: torch.Tensor, positions: torch.Tensor) -> None:
        """One probed pass: float32 ``weights`` [query heads, cache entries] (each head's row sums to 1; 0 for
        an entry the last layer does not hold under a per-layer allocation), long ``positions`` [cache entries]."""
        raise NotImplementedError


@dataclass
class AnswerReader(LastLayerReads):
    """What each generated token read, for the trace: ``timestep`` is the last prompt token's position, whose
    pass picks the first generated token; each later pass (one per generated token fed) picks the next."""

    name = "answer_reads"
    summary = "records what each generated token read at the last layer (record_reads; never evicts)"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.steps: list[AnswerRead] = []  # one per probed pass, in order

    def read(self, weights: torch.Tensor, positions: torch.Tensor) -> None:
        rows = torch.stack([weights.amax(dim=0), weights.mean(dim=0)]).cpu().numpy()  # [2, cache entries]
        self.steps.append(AnswerRead.encode(positions.cpu().numpy(), rows[0], rows[1]))
