"""The one runner of the survival tasks (retention, ablation, allocation, needle, ruler): is every token
that the answer needs still cached when the question is read?

Each task only says what its cases are (its cells) and what else its rows hold. Everything else is
here, once: the full cache runs once per case as the ceiling and then every other policy at every
budget (:func:`case_runs`); a prompt is prepared once (:func:`prepare`: its timesteps, where the
question starts, how long the document is); the question is asked apart from the document
(:func:`ccviz.generate`'s ``question``), so a spec's ``protect_question`` decides whether a refresh may evict
it, on the very tokens the prompt has as one text; a budget becomes J by the one rule of :mod:`..budget`;
survival is measured once (:func:`run_case`, through :func:`..metrics.kept_before`); and cells are
measured here or by workers and appended as they finish (:func:`run_cells`, through :mod:`..dispatch`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from ccviz.cases.spans import Prepared
from ccviz.engine import generate
from ccviz.engine.budget import cache_size_for
from ccviz.models import LoadedModel, model_name
from ccviz.policies import Policy
from ccviz.trace import Trace

from ..dispatch import Measure, Workers, measure_into
from ..metrics import kept_before
from ..results import ResultTable, write_summary
from ..specs import FULL as FULL_LABEL
from ..specs import PolicySpec

FULL = PolicySpec(FULL_LABEL)
FULL_BUDGET = 1.0  # the full cache runs once per case, recorded as budget 1.0 (the whole document)


def case_runs(specs: Iterable[PolicySpec], budgets: Iterable[float]) -> list[tuple[PolicySpec, float]]:
    """What one case runs under: the full cache once, then every other spec at every budget."""
    budgets = tuple(budgets)
    return [(FULL, FULL_BUDGET)] + [(spec, budget) for spec in specs if spec.name != FULL.name for budget in budgets]


@dataclass(frozen=True)
class Outcome:
    """One case run under one policy and budget: its trace and how many required tokens it kept."""

    trace: Trace
    cache_size: int
    kept: int
    prepared: Prepared

    def columns(self) -> dict[str, Any]:
        """The columns every survival row shares."""
        required = len(self.prepared.required)
        return {
            "cache_size": self.cache_size,
            "chunk_size": self.trace.run_config.chunk_size,
            "doc_tokens": self.prepared.doc_tokens,
            "question_start": self.prepared.question_start,
            "survived": int(self.kept == required),
            "kept_share": round(self.kept / required, 4),
            "seconds": round(self.trace.timings["total_seconds"], 3),
        }


def run_case(
    lm: LoadedModel,
    prepared: Prepared,
    spec: PolicySpec,
    budget: float,
    max_new_tokens: int,
    observers: Sequence[Policy] = (),
) -> Outcome:
    """Generate greedily from the prepared prompt (its question asked apart, under the spec's protocol) under
    ``spec`` at ``budget`` and read what survived to the question; ``observers`` watch the run without
    changing it (:func:`ccviz.generate`)."""
    cache_size = cache_size_for(budget, prepared.doc_tokens)
    trace = generate(
        lm,
        prepared.document,
        question=prepared.question,
        policy=spec.build(),
        cache_size=cache_size,
        max_new_tokens=max_new_tokens,
        observers=observers,
        **spec.run_settings(cache_size),
    )
    return Outcome(trace, cache_size, kept_before(trace, prepared.required, prepared.question_start), prepared)


class Cell(Protocol):
    """One row to measure: it travels to the workers, so it rebuilds its case where it runs."""

    spec: PolicySpec
    budget: float

    def key(self) -> dict[str, Any]:
        """The row's key columns (:attr:`.results.ResultTable.key`)."""

    @property
    def needs(self) -> tuple[str, ...]:
        """Columns the row must fill: a row measured earlier that left one blank is measured again."""


def run_cells(
    name: str,
    lm: LoadedModel | None,
    cells: Sequence[Cell],
    specs: Sequence[PolicySpec],
    settings: dict[str, Any],
    out: Path,
    *,
    columns: list[str],
    key: list[str],
    measure: Measure,
    summarise: Callable[[pd.DataFrame], pd.DataFrame],
    workers: Workers,
    model_args: dict[str, Any],
    fresh: bool,
    log: Callable[[str], None],
    extent: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Measure every cell not yet in ``<out>/<name>.csv``, or there without a column it ``needs``, with
    ``measure`` (a module-level function), rows appended (or replaced) as they finish; the summary of what
    is there (also after an interruption). ``extent``: the settings that only say how many rows to measure."""
    model = lm.name if lm is not None else model_name(model_args.get("name_or_path"))
    table = ResultTable(out, name, columns, key, {"model": model, **settings}, fresh=fresh, extent=extent)
    table.pin_policies([FULL, *specs], asked=True)
    todo = [
        cell
        for cell in cells
        if not table.has(**cell.key()) or any(table.lacks(column, **cell.key()) for column in cell.needs)
    ]
    try:
        measure_into(table, todo, len(cells), measure, lm=lm, model_args=model_args, workers=workers, log=log)
    finally:  # a partial run still leaves its summary
        summary = summarise(table.frame())
        write_summary(out, name, summary)
    return summary
