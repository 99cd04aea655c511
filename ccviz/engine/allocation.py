"""How a refresh splits the budget over layers and KV heads (what each of them then keeps is decided
in :mod:`ccviz.engine.survivors`, with every other keep rule).

``uniform`` (the paper's Algorithm 3): every layer and head keeps the same J entries; one gather
does it and nothing here runs. ``pyramid`` (PyramidKV): every layer keeps the ``recent``
entries plus its own share of the J - R scored places, the shares falling linearly from the first
layer to the last (the last gets (J - R) / beta) with the same total L x J. ``adaptive`` (Ada-KV):
every layer keeps J entries per KV head on average: each head its ``recent`` ones, and the
(J - R) x kv_heads other places go to the best (head, entry) pairs across the layer's heads.

A policy with per-head scores (``Policy.head_scores``: TOVA, SnapKV, H2O) ranks each layer's
entries by that layer's own attention (averaged over its KV heads under ``pyramid``); any other
policy gives one score per entry, which every layer ranks its own entries by.
"""

from __future__ import annotations

from typing import Protocol

import torch

from ..choices import Allocation
from ..errors import CcvizError
from ..policies.counter_causal import SurpriseScorer


class Scorer(Protocol):
    """What the allocation asks of a policy (:class:`ccviz.Policy` is one): whether it scores per head."""

    @property
    def name(self) -> str: ...
    @property
    def head_scores(self) -> bool: ...


def check_allocation(allocation: Allocation, policy: Scorer) -> None:
    """Refuse, in one line, an allocation the policy cannot serve."""
    if allocation == "adaptive" and not policy.head_scores:
        what = "one surprise per token" if isinstance(policy, SurpriseScorer) else "one score per token"
        raise CcvizError(
            f"allocation 'adaptive' needs per-head scores, and {policy.name!r} gives {what}: "
            "use 'uniform' or 'pyramid', or a policy that scores per head "
            "(tova, snapkv, h2o, kvzip, expected_attention, keydiff)"
        )


def pyramid_budgets(cache_size: int, recent: int, num_layers: int, beta: float) -> list[int]:
    """Scored places of each layer beyond the ``recent`` ones: a linear ramp from the first layer to the
    last, whose last layer gets (J - R) / beta and whose sum is exactly L (J - R) (beta = 1: uniform).

    Whole numbers: each layer gets the floor of its share, and the remainder goes one place each to the
    layers with the largest fractions (the earlier layer on a tie).
    """
    scored = cache_size - recent
    low = scored / beta
    if num_layers > 1:
        ramp = torch.linspace(2 * scored - low, low, num_layers, dtype=torch.float64)
    else:
        ramp = torch.tensor([float(scored)], dtype=torch.float64)
    budgets = ramp.floor().long()
    remainder = num_layers * scored - int(budgets.sum())
    order = torch.argsort(-(ramp - budgets), stable=True)
    budgets[order[:remainder]] += 1
    return budgets.tolist()
