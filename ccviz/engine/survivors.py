"""Who survives a refresh, decided in one place (docs/method.md#the-refresh).

Every keep rule is here: the rank cut (the best J - R by score, the last R always among them, ties to
the more recent entry), whole units at word or sentence granularity (units from :mod:`.units`),
and under a per-layer allocation each layer's own cut (``pyramid``, budgets from :mod:`.allocation`)
or each layer's best (head, entry) pairs (``adaptive``), and around them all the run's pinned and
dropped tokens (:mod:`.pins`). :class:`SurvivorSelector` is built once per
run from its config and applies the decision to the cache, frozen prefix included. Policies only
score the candidates; everything here indexes the candidates (the entries after the frozen prefix).
"""

from __future__ import annotations

from typing import Any

import torch

from ..cache import CacheState
from ..choices import Pool
from .allocation import pyramid_budgets
from .config import RunConfig
from .pins import NO_MARKS, Marks
from .units import group_units, left_context_units, pool_scores, token_classes


def select_survivors(scores: torch.Tensor, cache_size: int, recent: int) -> torch.Tensor:
    """Indices (into the candidates, ascending) of the entries that survive a refresh: the rank cut.

    The last ``recent`` candidates always survive; the other ``cache_size - recent`` places go to the
    best scores. Ties go to the more recent entry, so results never depend on sort internals.
    """
    n = scores.numel()
    if n <= cache_size:
        return torch.arange(n)
    recent = min(recent, cache_size)
    head = n - recent
    # Stable sort of the reversed head: among equal scores the later position comes first.
    order = torch.argsort(scores[:head].flip(0), descending=True, stable=True)
    chosen = head - 1 - order[: cache_size - recent]
    survivors = torch.cat([chosen, torch.arange(head, n)])
    return torch.sort(survivors).values


def first_protected_unit(units: torch.Tensor, cache_size: int, recent: int) -> int:
    """The first unit :func:`select_units` always keeps: the one the recent window starts in, or the last."""
    n = units.numel()
    return int(units[n - min(recent, cache_size)] if recent else units[-1])


def select_units(scores: torch.Tensor, units: torch.Tensor, cache_size: int, recent: int, pool: Pool) -> torch.Tensor:
    """Indices (into the candidates, ascending) of the entries that survive a refresh, units kept whole.

    - Protected: the last ``recent`` candidates, extended back to the start of the unit they cut, and
      the last unit (it may still be growing: its next token arrives after the refresh), so no unit is
      ever split. If the protected tokens alone exceed J (one unit longer than the budget), the last J
      candidates survive instead: the only case that splits a unit.
    - The other places go to whole units by pooled score, best first; a unit that no longer fits is
      skipped and the next one that does fit takes the places (greedy fill). Places that no remaining
      unit fits stay empty, so a refresh never keeps more than J, and keeps exactly J whenever single
      tokens remain to fill it (words: almost always; sentences: up to one sentence short).
    - Ties go to the more recent unit, as at token level.
    """
    n = scores.numel()
    if n <= cache_size:
        return torch.arange(n)
    sizes = torch.bincount(units)
    first_protected = first_protected_unit(units, cache_size, recent)
    protected = torch.arange(sizes.numel()) >= first_protected
    places = cache_size - int(sizes[protected].sum())
    if places < 0:
        return torch.arange(n - cache_size, n)
    kept = protected.clone()
    fill_units(pool_scores(scores, units, pool), sizes, int(first_protected), places, kept)
    return torch.nonzero(kept[units]).flatten()


def fill_units(pooled: torch.Tensor, sizes: torch.Tensor, open_units: int, places: int, kept: torch.Tensor) -> None:
    """Mark in ``kept`` (bool ``[units]``) the best of the first ``open_units`` units by ``pooled`` score
    that fit in ``places`` tokens (``sizes``: tokens per unit), best first; a unit that no longer fits is
    skipped and the next one that does takes the places. Ties go to the more recent unit."""
    order = open_units - 1 - torch.argsort(pooled[:open_units].flip(0), descending=True, stable=True)
    ranked_sizes = sizes[order]
    alive = torch.ones(open_units, dtype=torch.bool)
    while places > 0:  # one round per skipped size: a handful, never one per token
        fits = alive & (ranked_sizes <= places)
        if not fits.any():
            break
        taken = fits & (torch.cumsum(ranked_sizes * fits, 0) <= places)
        kept[order[taken]] = True
        alive &= ~taken
        places -= int(ranked_sizes[taken].sum())


def top_sentences(
    scores: torch.Tensor, words: torch.Tensor, sentences: torch.Tensor, places: int, open_words: int, pool: Pool
) -> torch.Tensor:
    """bool ``[candidates]``: the best whole sentences by pooled score within ``places`` tokens, among the
    sentences that end before word ``open_words`` (where the protected tail starts): the first level of
    the two-level budget (``sentence_share``)."""
    open_tokens = int((words < open_words).sum())
    ends = torch.zeros(int(sentences[-1]) + 1, dtype=torch.long).scatter_reduce(
        0, sentences, torch.arange(sentences.numel()), reduce="amax", include_self=False
    )
    open_sentences = int((ends < open_tokens).sum())  # sentences are runs: the ones wholly before the tail
    kept = torch.zeros(ends.numel(), dtype=torch.bool)
    fill_units(pool_scores(scores, sentences, pool), torch.bincount(sentences), open_sentences, places, kept)
    return kept[sentences]


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


class SurvivorSelector:
    """Who survives each refresh of one run, built from its (resolved) config: J, R, the granularity and
    pool, the allocation with its per-layer budgets (``budgets``: the scored places of each layer under
    ``pyramid``, else None), and the pinned and dropped tokens (``marks``, :mod:`.pins`).

    Pins and drops are applied here, around every rule: the pinned candidates present, p of them, are set
    apart and kept (in every layer and KV head), the dropped ones set apart and evicted, and the rule
    runs on the rest with J - p places (under ``pyramid``, budgets from J - p), so at most J survive."""

    def __init__(self, config: RunConfig, tokenizer: Any, vocab_size: int, num_layers: int, marks: Marks = NO_MARKS):
        self.config, self.tokenizer, self.vocab_size, self.num_layers = config, tokenizer, vocab_size, num_layers
        self.marks = marks
        self.budgets = (
            pyramid_budgets(config.cache_size, config.recent, num_layers, config.pyramid_beta)
            if config.allocation == "pyramid"
            else None
        )

    def split(self, pos: torch.Tensor | None, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices into the ``n`` candidates (positions ``pos``; None: no marks apply): the ones ranked as
        usual, and the pinned ones, kept apart. Dropped candidates are in neither: they never survive."""
        if pos is None:
            return torch.arange(n), torch.arange(0)
        pinned, dropped = self.marks.at(pos)
        return (~(pinned | dropped)).nonzero()[:, 0], pinned.nonzero()[:, 0]

    def units(self, tok: torch.Tensor, score: torch.Tensor | None = None) -> torch.Tensor | None:
        """The unit number of every candidate (``tok`` long ``[candidates]``): long ``[candidates]``, or
        None at token granularity. With ``left_context`` the units depend on the candidates' ``score``
        ``[candidates]`` too (:func:`.units.left_context_units`; without one: the words)."""
        config = self.config
        if config.granularity == "token":
            return None
        classes = token_classes(self.tokenizer, self.vocab_size)
        units = group_units(tok, classes, config.granularity)
        if config.left_context and score is not None and score.dim() == 1:
            units = left_context_units(
                score, units, group_units(tok, classes, "clause"), config.left_context, config.pool
            )
        return units

    def survivors(
        self,
        score: torch.Tensor,
        units: torch.Tensor | None = None,
        cache_size: int | None = None,
        recent: int | None = None,
        tok: torch.Tensor | None = None,
        pos: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Indices (into the candidates, ascending) that one decision for every layer keeps given the
        candidates' ``score`` ``[candidates]``: the rank cut, or whole units when ``units`` are given
        (under ``sentence_share``, the best whole sentences first: their token ids ``tok`` are needed).
        ``cache_size`` / ``recent`` default to the run's. ``pos``: the candidates' positions, for the run's
        pins and drops (:meth:`split`; None: none apply)."""
        cache_size = self.config.cache_size if cache_size is None else cache_size
        recent = self.config.recent if recent is None else recent
        rest, pinned = self.split(pos, score.shape[0])
        if units is not None:  # numbered 0, 1, ... again without the pinned and dropped tokens
            units = torch.unique_consecutive(units[rest], return_inverse=True)[1]
        kept = self._ranked(score[rest], units, cache_size - pinned.numel(), recent, None if tok is None else tok[rest])
        return torch.sort(torch.cat([rest[kept], pinned])).values

    def _ranked(
        self, score: torch.Tensor, units: torch.Tensor | None, cache_size: int, recent: int, tok: torch.Tensor | None
    ) -> torch.Tensor:
        """:meth:`survivors` among candidates that are neither pinned nor dropped."""
        if units is None:
            return select_survivors(score, cache_size, recent)
        share, pool = self.config.sentence_share, self.config.pool
        if share and score.numel() > cache_size:  # whole sentences first, then words (units) in the rest
            assert tok is not None, "the two-level budget reads the sentences of the candidates' tokens"
            sentences = group_units(tok, token_classes(self.tokenizer, self.vocab_size), "sentence")
            places = round(share * (cache_size - min(recent, cache_size)))
            first = top_sentences(
                score, units, sentences, places, first_protected_unit(units, cache_size, recent), pool
            )
            score = score.masked_fill(first, float("inf"))
        return select_units(score, units, cache_size, recent, pool)

    def keep(
        self,
        cache: CacheState,
        rows: torch.Tensor,
        score: torch.Tensor,
        units: torch.Tensor | None,
        visible: torch.Tensor | None,
    ) -> None:
        """Evict from ``cache`` what this refresh does not keep: every entry outside the candidates (the frozen
        prefix, a kept question) stays, and the candidates' survivors.

        ``rows``: the candidates' rows in the cache, long ``[candidates]`` ascending; ``score``: the policy's
        ``[candidates]`` (or ``[candidates, layers, kv_heads]``); ``units`` from :meth:`units`; ``visible``:
        bool ``[layers, kv_heads, candidates]`` under a per-layer allocation (which candidates each layer's KV
        heads still see), None under ``uniform``: one gather for all.
        """
        pos, tok, config = cache.pos[rows], cache.tok[rows], self.config
        if visible is None:
            if score.shape[0] > config.cache_size or bool(self.marks.at(pos)[1].any()):
                cache.keep(_kept_rows(len(cache), rows, rows[self.survivors(score, units, tok=tok, pos=pos)]))
            return
        rest, pinned = self.split(pos, score.shape[0])
        before, places = int(visible.sum()), config.cache_size - pinned.numel()
        if config.allocation == "pyramid":  # one head set per layer: what the layer holds
            budgets = (
                pyramid_budgets(places, config.recent, self.num_layers, config.pyramid_beta)
                if pinned.numel()
                else self.budgets
            )
            assert budgets is not None, "built under pyramid"
            kept = [
                torch.cat([rest[k], pinned])
                for k in pyramid_keep(score[rest], visible[:, 0, rest], budgets, config.recent)
            ]
            if sum(k.numel() for k in kept) < before:
                cache.keep_per_layer([_kept_rows(len(cache), rows, rows[k]) for k in kept])
            return
        pairs = []  # per layer, bool [kv_heads, entries]: every entry outside the candidates, the rule's choice
        for pair in adaptive_keep(score[rest], visible[:, :, rest], places, config.recent):
            full = pair.new_ones(pair.shape[0], len(cache))
            full[:, rows] = False
            full[:, rows[rest]], full[:, rows[pinned]] = pair, True
            pairs.append(full)
        if sum(int(p[:, rows].sum()) for p in pairs) == before:
            return
        kept_rows = [pair.any(dim=0).nonzero()[:, 0] for pair in pairs]
        cache.keep_per_layer(kept_rows, [pair[:, r] for pair, r in zip(pairs, kept_rows)])


def _kept_rows(entries: int, rows: torch.Tensor, survivors: torch.Tensor) -> torch.Tensor:
    """long, ascending: the cache rows a refresh keeps, out of ``entries``: every row outside the candidates'
    ``rows``, and the ``survivors`` among them."""
    kept = torch.ones(entries, dtype=torch.bool)
    kept[rows] = False
    kept[survivors] = True
    return kept.nonzero()[:, 0]
