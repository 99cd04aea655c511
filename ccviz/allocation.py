"""How a refresh splits the budget over layers and KV heads, and what each of them keeps.

``uniform`` (the paper's Algorithm 3): every layer and head keeps the same J entries; the session's
one gather does it and nothing here runs. ``pyramid`` (PyramidKV): every layer keeps the ``recent``
entries plus its own share of the J - R scored places, the shares falling linearly from the first
layer to the last (the last gets (J - R) / beta) with the same total L x J. ``adaptive`` (Ada-KV):
every layer keeps J entries per KV head on average: each head its ``recent`` ones, and the
(J - R) x kv_heads other places go to the best (head, entry) pairs across the layer's heads.

A policy with per-head scores (``Policy.head_scores``: TOVA, SnapKV, H2O) ranks each layer's
entries by that layer's own attention (averaged over its KV heads under ``pyramid``); any other
policy gives one score per entry, which every layer ranks its own entries by.
"""

from __future__ import annotations

import torch

from .choices import Allocation
from .errors import CcvizError
from .policies import Policy, select_survivors


def check_allocation(allocation: Allocation, policy: Policy) -> None:
    """Refuse, in one line, an allocation the policy cannot serve."""
    if allocation == "adaptive" and not policy.head_scores:
        what = "one surprise per token" if policy.counter_causal else "one score per token"
        raise CcvizError(
            f"allocation 'adaptive' needs per-head scores, and {policy.name!r} gives {what}: "
            "use 'uniform' or 'pyramid', or an attention policy (tova, snapkv, h2o)"
        )


def pyramid_budgets(cache_size: int, recent: int, num_layers: int, beta: float) -> list[int]:
    """Scored places of each layer beyond the ``recent`` ones: a linear ramp from the first layer to the
    last, whose last layer gets (J - R) / beta and whose sum is exactly L (J - R) (beta = 1: uniform).

    Whole numbers: each layer gets the floor of its share, and the remainder goes one place each to the
    layers with the largest fractions (the earlier layer on a tie).
    """
    scored = cache_size - recent
    low = scored / beta
    ramp = torch.linspace(2 * scored - low, low, num_layers, dtype=torch.float64) if num_layers > 1 else torch.tensor([float(scored)], dtype=torch.float64)
    budgets = ramp.floor().long()
    remainder = num_layers * scored - int(budgets.sum())
    order = torch.argsort(-(ramp - budgets), stable=True)
    budgets[order[:remainder]] += 1
    return budgets.tolist()


def layer_scores(score: torch.Tensor, layer: int) -> torch.Tensor:
    """One layer's score per candidate: its own heads' mean, or the policy's shared per-token score."""
    return score if score.dim() == 1 else score[:, layer].mean(dim=-1)


def pyramid_keep(score: torch.Tensor, held: torch.Tensor, budgets: list[int], recent: int) -> list[torch.Tensor]:
    """Per layer, the candidates it keeps (ascending): its last ``recent`` and its ``budgets[l]`` best.

    ``score`` ``[candidates]`` or ``[candidates, layers, kv_heads]``; ``held`` bool ``[layers, candidates]``.
    """
    kept = []
    for layer, budget in enumerate(budgets):
        rows = held[layer].nonzero()[:, 0]
        kept.append(rows[select_survivors(layer_scores(score, layer)[rows], budget + recent, recent)])
    return kept


def adaptive_keep(score: torch.Tensor, visible: torch.Tensor, cache_size: int, recent: int) -> list[torch.Tensor]:
    """Per layer, bool ``[kv_heads, candidates]``: the (head, entry) pairs it keeps.

    Each head keeps its ``recent`` newest visible candidates, and the (J - R) x kv_heads other places go
    to the best-scored visible (head, entry) pairs of the layer, ties to the more recent entry (then the
    lower head). ``score`` ``[candidates, layers, kv_heads]``; ``visible`` bool ``[layers, kv_heads,
    candidates]``: which candidates each head still sees.
    """
    kept = []
    for layer in range(visible.shape[0]):
        seen = visible[layer]  # [heads, n]
        heads = seen.shape[0]
        newest = seen.flip(-1).cumsum(-1).flip(-1)  # how many visible candidates from here on, per head
        keep = seen & (newest <= recent)
        pairs = score[:, layer].T.masked_fill(~seen | keep, float("-inf"))  # the ranked pairs: not recent
        places = min((cache_size - recent) * heads, int((seen & ~keep).sum()))
        # Stable sort of each head's entries reversed: among equal scores the later entry comes first.
        order = torch.argsort(pairs.flip(-1).reshape(-1), descending=True, stable=True)[:places]
        chosen = torch.zeros(heads * seen.shape[1], dtype=torch.bool)
        chosen[order] = True
        kept.append(keep | chosen.view(heads, -1).flip(-1))
    return kept
