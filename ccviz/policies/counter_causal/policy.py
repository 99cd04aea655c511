"""Counter-causal surprise policies: keep the tokens that are surprising given what comes after them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch

from ...cache import Candidates
from ...capture import decoder_layers
from ...choices import SURPRISE_SCORES, Granularity, SurpriseScore
from ...errors import CcvizError
from ...fields import choice, flag, whole
from ..base import Policy
from .surprise import check_from_layer, check_window, first_layer, surprise_from_cache


def smooth_scores(scores: torch.Tensor, window: int) -> torch.Tensor:
    """Average each score with its neighbours (a centred window of ``window`` candidates).

    A phrase-level fix: a fact spans several tokens, so a token next to surprising ones is
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


PAPER_FORM: dict[str, Any] = {"score": "logit", "smooth": 0}  # and single tokens (unit_defaults)


@dataclass
class SurpriseScorer(Policy):
    """A policy that scores by counter-causal surprise: the capability explain-a-token and the allocations
    ask for (it has ``score``, ``min_gap``, ``window`` and the stream's inputs). What both counter-causal
    policies share: the score, the mask, smoothing, the recent window, the band.

    Options: ``score`` (logit: the paper's raw logit; logprob: minus the log-probability of the true
    token; contrast: minus the no-future logit, which removes the own-embedding bias of tied
    embeddings), ``min_gap`` (hide the nearest future entries, which leak the token), ``smooth``
    (average over a window of that many neighbouring candidates before ranking; 0 or 1 = off; the
    recorded ``surprise`` is then the smoothed value that ranked them), ``recent`` (trailing entries
    always kept when generate's ``recent`` is not given), ``window`` (W > 0: each candidate reads only
    the next W entries, O(n W) instead of O(n^2); 0 = its whole future, the paper's), ``paper`` (the
    paper's exact form, one option away from ours: the raw logit, no smoothing, single tokens; the
    defaults ccviz chose by answers differ in those, docs/policies.md#why-the-defaults-are-what-they-are).
    """

    signal = "surprise"
    variant: ClassVar[str]

    score: SurpriseScore = choice("score", SURPRISE_SCORES, default="logit")
    min_gap: int = whole("min_gap", 0, default=0)
    smooth: int = whole("smooth", 0, default=0)
    recent: int = whole("recent", 0, default=0)
    window: int = whole("window", 0, default=0)
    paper: bool = flag("paper", default=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_window(self.min_gap, self.window)
        if self.paper:
            self._take_paper_form()

    def _take_paper_form(self) -> None:
        """Set the options the paper fixes (left at their default, or given as the paper's); another value
        given with ``paper`` is refused, since the run would no longer be the paper's form."""
        defaults: dict[str, Any] = {f.name: f.default for f in fields(self)}
        for name, value in PAPER_FORM.items():
            given = getattr(self, name)
            if given not in (value, defaults[name]):
                raise CcvizError(f"paper=true is the paper's form, with {name}={value}: drop {name}={given} or paper")
            setattr(self, name, value)

    def unit_defaults(self) -> tuple[Granularity, int]:
        return ("token", 0) if self.paper else super().unit_defaults()

    @property
    def from_layer(self) -> int:
        return 0

    def default_recent(self, cache_size: int) -> int:
        return self.recent

    def residual_layers(self, num_layers: int) -> tuple[int, ...]:
        check_from_layer(self.from_layer, num_layers)
        first = self.from_layer if self.variant == "full" else num_layers - 1
        return (first,) if first else ()

    def stream_inputs(
        self, model: torch.nn.Module, candidates: Candidates
    ) -> tuple[list, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(kv, tok, pos, hidden)`` of the candidates, as :func:`.surprise.surprise_from_cache` takes them.

        Frozen entries precede every candidate, so no candidate could see them: the candidates alone
        are the stream. Only the layers the stream re-runs are read; the others are None. A layer
        holding only some candidates (a per-layer allocation) brings which ones, as a third element.
        """
        first = first_layer(model, self.variant, self.from_layer)
        kv: list = [None] * first
        for layer in range(first, len(decoder_layers(model))):
            held = candidates.held(layer)
            kv.append((candidates.keys(layer), candidates.values(layer), *(() if held is None else (held,))))
        device = kv[-1][0].device
        hidden = candidates.residuals[first] if first else None
        return kv, candidates.tok.to(device), candidates.pos.to(device), hidden

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        surprise = surprise_from_cache(
            model,
            *self.stream_inputs(model, candidates),
            variant=self.variant,
            score=self.score,
            min_gap=self.min_gap,
            from_layer=self.from_layer,
            window=self.window,
        )
        return smooth_scores(surprise, self.smooth)


@dataclass
class CounterCausal(SurpriseScorer):
    """The paper's policy, all L layers: surprise of each candidate given the candidates after it.

    Defaults here, chosen by answers on the retention cases (docs/policies.md#why-the-defaults-are-what-they-are):
    ``score=logprob``, and whole words, each with up to 3 words before it in its clause
    (``granularity="word"``, ``left_context=3``); ``paper=True`` is the paper's form. Its own
    option ``from_layer`` (the layer split): the stream starts from the stored residual entering layer
    l, H^(l), and re-runs layers l .. L-1, each with its MLP; 0 = every layer (the paper's), L-1 = the
    ``fast_mlp`` variant. Only the H^(l) the chosen l needs is stored.
    """

    name = "counter_causal"
    title = "Counter-causal surprise"
    summary = "counter-causal surprise, all layers (the paper's method, scored by log-probability, by word)"
    variant: ClassVar[str] = "full"
    default_granularity: ClassVar[Granularity] = "word"
    default_left_context: ClassVar[int] = 3

    score: SurpriseScore = choice("score", SURPRISE_SCORES, default="logprob")
    from_layer: int = whole("from_layer", 0, default=0)  # type: ignore[assignment]  # an option here, 0 on the base


@dataclass
class CounterCausalFast(SurpriseScorer):
    """The fast variant: the last layer only, from the stored H^(L-1), skipping the last MLP.

    Defaults here, chosen by answers on the retention cases (docs/policies.md#why-the-defaults-are-what-they-are):
    ``score=contrast`` (one dot product per row, as the paper's logit), averaged over 9 neighbours, and whole
    clauses (``granularity="clause"``, a clause scored by its best token); ``paper=True`` is the paper's form.
    """

    name = "counter_causal_fast"
    title = "Counter-causal surprise (fast)"
    summary = "counter-causal surprise, last layer only from stored H^(L-1) (fast variant, by clause)"
    variant: ClassVar[str] = "fast"
    needs_hidden = True
    default_granularity: ClassVar[Granularity] = "clause"

    score: SurpriseScore = choice("score", SURPRISE_SCORES, default="contrast")
    smooth: int = whole("smooth", 0, default=9)
