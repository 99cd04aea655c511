"""How one refresh ranked one candidate, and those numbers in words: one rule for Explain a token (from the
replayed scores) and the verdict on a run (from the scores the trace recorded).

:func:`rank_candidate` says which of the refresh's rules decided (the cache was not full, the recent
window, the rank cut over single tokens, a protected unit, the rank of whole units) and the rank that
went with it; :meth:`Ranking.reason` writes it as Explain's sentence, :meth:`Ranking.cut` as the
verdict's short clause. The rules themselves are the engine's (:mod:`ccviz.engine.survivors`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import torch

from ..engine import RunConfig
from ..engine.survivors import first_protected_unit
from ..engine.units import pool_scores

Rule = Literal["not full", "recent", "rank", "protected unit", "unit rank"]


def descending_rank(values: torch.Tensor, index: int) -> int:
    """1-based rank of ``values[index]``, highest first; among equal values the later entry ranks first,
    as every selection in ccviz breaks ties."""
    v = values[index]
    later = torch.arange(values.numel()) > index
    return 1 + int((values > v).sum()) + int(((values == v) & later).sum())


@dataclass(frozen=True)
class Ranking:
    """The rule that decided one candidate at one refresh, with its numbers: ``candidates`` scored, J and
    R, and for a rank, ``rank`` among ``among`` (the older candidates, or the older units of ``unit``,
    ranked by their ``pool`` score ``pooled``)."""

    rule: Rule
    candidates: int
    cache_size: int
    recent: int
    unit: str = "token"
    rank: int | None = None
    among: int = 0
    unit_index: int | None = None
    pool: str = "max"
    pooled: float | None = None

    def reason(self, signal: str | None, kept: bool) -> str:
        """Explain's sentence: the rule, in words, and the verdict it gave."""
        n, J, R, what = self.candidates, self.cache_size, self.recent, self.unit
        verdict = "kept" if kept else "evicted"
        if self.rule == "not full":
            return f"The cache held {n} candidates, no more than J = {J}: this refresh evicted nothing."
        if self.rule == "recent":
            return f"One of the last R = {R} entries, which every refresh keeps."
        if self.rule == "rank":
            return (
                f"Ranked {self.rank} of the {self.among} older candidates by {signal}; the best J − R = {J - R} "
                f"are kept: {verdict}."
            )
        if self.rule == "protected unit":
            return (
                f"Its {what} is protected: the last R = {R} entries, extended to whole {what}s, and the last {what} "
                "are always kept."
            )
        return (
            f"Its {what} (unit {self.unit_index}, {self.pool} score {self.pooled:.4g}) ranked {self.rank} of the "
            f"{self.among} older {what}s; whole {what}s are kept best first while they fit in J = {J}: {verdict}."
        )

    def cut(self, signal: str | None) -> str:
        """The verdict's words for an evicted candidate, after its name: its rank and the cut-off it missed."""
        J, R, what = self.cache_size, self.recent, self.unit
        by = f" by {signal}" if signal else ""
        if self.rule == "rank":
            older = f"the {self.among} older candidates" if R else f"{self.among}"
            return f"ranked {self.rank} of {older}{by}, cut-off {f'J − R = {J - R}' if R else f'J = {J}'}"
        if self.rule == "unit rank":
            return (
                f"is in {what} {self.unit_index}, which ranked {self.rank} of the {self.among} older {what}s by its "
                f"{self.pool} score; whole {what}s are kept best first while they fit in J = {J}"
            )
        return f"({self.reason(signal, kept=False).rstrip('.')})"  # another rule: pins and drops took its place


def rank_candidate(score: torch.Tensor, units: torch.Tensor | None, config: RunConfig, row: int) -> Ranking:
    """How a refresh of a run under ``config`` (resolved: J, R and the unit are numbers and words) ranked
    candidate ``row``, from every candidate's ``score`` ``[candidates]`` and, under word or sentence units,
    each one's unit number ``units`` (the engine's :func:`~ccviz.engine.survivors.select_survivors` and
    :func:`~ccviz.engine.survivors.select_units` rules)."""
    n, J = score.numel(), config.cache_size
    R = min(int(config.recent or 0), J)
    ranking = Ranking("not full", n, J, R)
    if n <= J:
        return ranking
    if units is None:
        if row >= n - R:
            return replace(ranking, rule="recent")
        return replace(ranking, rule="rank", rank=descending_rank(score[: n - R], row), among=n - R)
    unit, first = int(units[row]), first_protected_unit(units, J, R)
    what = str(config.granularity)
    if unit >= first:
        return replace(ranking, rule="protected unit", unit=what)
    pooled = pool_scores(score, units, config.pool)[:first]
    return replace(
        ranking,
        rule="unit rank",
        unit=what,
        rank=descending_rank(pooled, unit),
        among=first,
        unit_index=unit,
        pool=config.pool,
        pooled=float(pooled[unit]),
    )
