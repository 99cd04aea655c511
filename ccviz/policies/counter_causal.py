"""Counter-causal surprise policies: keep the tokens that are surprising given what comes after them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ..cache import CacheState
from ..choices import SURPRISE_SCORES, SurpriseScore
from ..fields import choice, whole
from ..scoring import surprise_from_cache
from .base import Policy


def smooth_scores(scores: torch.Tensor, window: int) -> torch.Tensor:
    """Average each score with its neighbours (a centred window of ``window`` candidates).

    The review's phrase-level fix: a fact spans several tokens, so a token next to surprising ones is
    worth more. Infinite scores (entries with no future) stay infinite and are left out of their
    neighbours' averages; near the ends the window averages over what exists.
    """
    if window <= 1 or scores.numel() == 0:
        return scores
    finite = torch.isfinite(scores)
    values = torch.where(finite, scores, torch.zeros_like(scores))[None, None]
    counts = finite.to(scores.dtype)[None, None]
    kernel = torch.ones(1, 1, window, dtype=scores.dtype)
    left, right = (window - 1) // 2, window // 2
    total = torch.nn.functional.conv1d(torch.nn.functional.pad(values, (left, right)), kernel)[0, 0]
    count = torch.nn.functional.conv1d(torch.nn.functional.pad(counts, (left, right)), kernel)[0, 0]
    return torch.where(finite, total / count.clamp(min=1), scores)


@dataclass
class CounterCausal(Policy):
    """The paper's policy, all L layers: surprise of each candidate given the candidates after it.

    Options: ``score`` (logprob, the default here: minus the log-probability of the true token, which
    kept a fact stated once in significantly more retention cases than the paper's raw logit (docs/policies.md#why-the-defaults-are-what-they-are); logit: the paper's; contrast: minus the no-future logit, which
    removes the own-embedding bias of tied embeddings), ``min_gap`` (hide the nearest future entries, which
    leak the token), ``smooth`` (average over a window of that many neighbouring candidates before
    ranking; 0 or 1 = off; the recorded ``surprise`` is then the smoothed value that ranked them),
    ``recent`` (trailing entries always kept when generate's ``recent`` is not given).
    """

    name = "counter_causal"
    summary = "counter-causal surprise, all layers (the paper's method, scored by log-probability)"
    signal = "surprise"
    variant: ClassVar[str] = "full"

    score: SurpriseScore = choice("score", SURPRISE_SCORES, default="logprob")
    min_gap: int = whole("min_gap", 0, default=0)
    smooth: int = whole("smooth", 0, default=0)
    recent: int = whole("recent", 0, default=0)

    def default_recent(self, cache_size: int) -> int:
        return self.recent

    def score_candidates(self, model: torch.nn.Module, state: CacheState) -> torch.Tensor:
        # Frozen entries precede every candidate, so no candidate could see them: score the tail only.
        f = state.frozen
        layers = state.kv.layers if self.variant == "full" else state.kv.layers[-1:]
        kv = [(layer.keys[:, :, f:], layer.values[:, :, f:]) for layer in layers]
        if self.variant != "full":  # the fast variants read the last layer only
            kv = [None] * (len(state.kv.layers) - 1) + kv
        hidden = state.hidden[f:] if state.hidden is not None else None
        surprise = surprise_from_cache(
            model, kv, state.tok[f:].to(kv[-1][0].device), state.pos[f:].to(kv[-1][0].device), hidden,
            variant=self.variant, score=self.score, min_gap=self.min_gap,
        )
        return smooth_scores(surprise, self.smooth)


@dataclass
class CounterCausalFast(CounterCausal):
    """The fast variant: the last layer only, from the stored H^(L-1), skipping the last MLP.

    It keeps the paper's raw-logit score: no variant beat it on the benchmarks, and logit costs one dot
    product per row where logprob needs the whole vocabulary.
    """

    name = "counter_causal_fast"
    summary = "counter-causal surprise, last layer only from stored H^(L-1) (fast variant)"
    variant: ClassVar[str] = "fast"
    needs_hidden = True

    score: SurpriseScore = choice("score", SURPRISE_SCORES, default="logit")
