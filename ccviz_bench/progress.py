"""How far each task's result files have got: its summaries of the rows measured so far, and what a
rerun of its command would still measure.

A run that was stopped, or is still writing, leaves rows without a fresh ``<name>_summary.csv``
(the harness writes the summary when a run ends). ``bench report``, its SVG charts and the
Benchmarks page all read the files through :func:`read_task`, so they show the same numbers: the
harness's own summary of the rows there are, and the gaps a rerun would fill.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from .registry import BenchTask, Part, all_tasks
from .specs import evicting


@dataclass(kw_only=True)
class TaskFiles:
    """One task's result files as read so far (keyword-only: :class:`.browse.Section` adds its own fields)."""

    meta: dict[str, dict[str, Any]] = field(default_factory=dict)  # file stem -> provenance and settings
    rows: dict[str, pd.DataFrame] = field(default_factory=dict)  # file stem -> measured rows
    summaries: dict[str, pd.DataFrame] = field(default_factory=dict)  # part name -> the harness's summary
    incomplete: list[str] = field(default_factory=list)  # what a rerun of the command would still measure

    @property
    def measured(self) -> bool:
        """Whether any evicting policy has a result yet (the full cache alone shows nothing)."""
        return any(not evicting(frame).empty for frame in self.summaries.values())


def read_task(entry: BenchTask, results: dict[str, Any]) -> TaskFiles:
    """``entry``'s files among ``results`` (:func:`.results.load_results`), each part summarised from its
    rows (its own summary file when the rows are gone), with the gaps its recorded settings leave."""
    found = TaskFiles(
        meta={n: results["meta"][n] for n in entry.files if n in results["meta"]},
        rows={n: results[n] for n in entry.files if n in results},
    )
    for part in entry.parts:
        rows = [found.rows.get(n, pd.DataFrame()) for n in part.files]
        summary = _summary(results, part, rows)
        found.summaries[part.name] = summary
        written = next((found.meta[n] for n in part.files if n in found.meta), None)
        if written is not None:
            gaps = part.gaps or cell_gaps
            found.incomplete += gaps(entry, part, rows, summary, written.get("settings", {}))
        elif found.meta:  # a two-file task's other file: the first one exists
            found.incomplete.append(f"{part.name}: not started yet")
    return found


def read_tasks(results: dict[str, Any]) -> dict[str, TaskFiles]:
    """:func:`read_task` of every registered task, by task name in the registry's order: read once, and
    handed to both the report and its charts (summarising a large folder's rows takes a second or two)."""
    return {entry.name: read_task(entry, results) for entry in all_tasks()}


def current_results(results: dict[str, Any], tasks: dict[str, TaskFiles] | None = None) -> dict[str, Any]:
    """``results`` with each part's ``<name>_summary`` replaced by the summary of the rows measured so far
    (what the SVG charts draw); ``tasks`` is :func:`read_tasks` of ``results`` when already read."""
    current = dict(results)
    for found in (read_tasks(results) if tasks is None else tasks).values():
        for name, summary in found.summaries.items():
            if not summary.empty:
                current[f"{name}_summary"] = summary
    return current


def _summary(results: dict[str, Any], part: Part, rows: list[pd.DataFrame]) -> pd.DataFrame:
    if any(not frame.empty for frame in rows):
        return part.summarise(*rows)
    return results.get(f"{part.name}_summary", pd.DataFrame())


# ----- what a partial run still lacks: each part's :attr:`.registry.Part.gaps` -------------------------------


def _count_range(counts: pd.Series) -> str:
    """How many were measured per cell or policy: "12", or "12-40" when they differ."""
    low, high = int(counts.min()), int(counts.max())
    return f"{low}" if low == high else f"{low}-{high}"


def cell_gaps(
    task: BenchTask, part: Part, rows: list[pd.DataFrame], summary: pd.DataFrame, settings: dict[str, Any]
) -> list[str]:
    """What a task's summary still lacks against its settings: budgets no policy has, budgets some policy
    lacks, or repeats in some cells. The recorded budgets and policies are the union of every run into the
    folder, so each policy is owed every budget: a run at one budget for a few policies leaves the others'
    cells there as holes the tables show as dashes."""
    cells = evicting(summary)
    if cells.empty:
        return [f"{part.name}: no evicting policy measured yet"]
    gaps = []
    measured = set(cells["budget"])
    budgets = [b for b in settings.get("budgets", []) if b not in measured]
    if budgets:
        gaps.append(f"{part.name}: budget{'s' * (len(budgets) > 1)} {', '.join(map(str, budgets))} not measured yet")
    held = cells.groupby("policy", sort=False)["budget"].agg(set)
    for budget in (b for b in settings.get("budgets", []) if b in measured):
        lacking = [policy for policy, have in held.items() if budget not in have]
        if lacking:
            gaps.append(f"{part.name}: budget {budget} not measured yet for {', '.join(lacking)}")
    expected = settings.get(part.setting)
    short = cells[cells[part.count] < expected] if expected is not None else cells.iloc[0:0]
    if not short.empty:
        gaps.append(f"{part.name}: {_count_range(cells[part.count])} of {expected} {part.setting} so far")
    return gaps


def grid_gaps(
    task: BenchTask, part: Part, rows: list[pd.DataFrame], summary: pd.DataFrame, settings: dict[str, Any]
) -> list[str]:
    """What a needle or RULER run still lacks: the cells its settings ask for, per policy, that have no row."""
    grid, (frame,) = part.settings, rows
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in grid.__dataclass_fields__}
    expected = grid(**fields).cells_per_policy
    done = evicting(frame).groupby("policy", sort=False).size()
    if done.empty:
        return [f"{task.name}: no evicting policy measured yet"]
    if done.min() >= expected:
        return []
    return [
        f"{task.name}: {_count_range(done)} of {expected} cells per policy so far "
        f"(contexts up to {int(frame['length'].max())} tokens)"
    ]
