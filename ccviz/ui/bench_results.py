"""What the Benchmarks page shows, as plain data (no Streamlit, so it is tested directly).

Each section is one task of ``python -m ccviz bench``: its rows as the harness wrote them, summarised
by the harness's own functions (so a run still in progress shows what it has measured so far), its
provenance, how far it has got, and the one command that reproduces it (:mod:`.bench_commands`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import plotly.graph_objects as go

from ..bench.report import (
    ablation_table,
    allocation_tables,
    decode_table,
    efficiency_table,
    needle_tables,
    perplexity_table,
    provenance_line,
    retention_tables,
    ruler_tables,
)
from ..bench.results import load_results
from ..bench.tasks import decode, efficiency, needle, perplexity, retention
from ..figures.benchmarks import (
    FULL,
    divergence_figure,
    evicting,
    perplexity_figure,
    rate_figure,
    refresh_cost_figure,
    refresh_seconds_figure,
)
from ..figures.needle import ruler_figure
from .bench_commands import plain_command, reproduce_command

UNREADABLE = (ValueError, KeyError, TypeError, IndexError, OSError)  # a file being written, or from another version


def result_folders(root: Path) -> list[Path]:
    """``root`` and each folder directly under it that holds result files: the follow-up measurements
    next to the published run (``bench/results/sinks``, ``bench/results/candidates``), so the page can
    show them without a restart."""
    root = Path(root)
    follow_ups = sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.json"))) if root.is_dir() else []
    return [root, *follow_ups]


@dataclass(frozen=True)
class Part:
    """One result file of a task and how to tell whether every cell has all its repeats."""

    name: str  # file stem: <name>.csv rows, <name>.json metadata
    summarise: Callable[[pd.DataFrame], pd.DataFrame]
    count: str  # summary column: how many repeats a cell has
    setting: str  # settings key: how many it should have


RETENTION = (retention.summarise, "survival_n", "cases")
PERPLEXITY = (perplexity.summarise, "segments", "segments")
PARTS = {
    "retention": [Part("retention", *RETENTION)],
    "perplexity": [Part("perplexity", *PERPLEXITY)],
    "decode": [Part("decode", decode.summarise, "prompts", "prompts")],
    "ablation": [Part("ablation_retention", *RETENTION), Part("ablation_perplexity", *PERPLEXITY)],
    "allocation": [Part("allocation_retention", *RETENTION), Part("allocation_perplexity", *PERPLEXITY)],
    "needle": [Part("needle", needle.summarise_map, "n", "trials")],
    "ruler": [Part("ruler", needle.summarise_ruler, "n", "trials")],
}
GRIDS = {"needle": needle.NeedleSettings, "ruler": needle.RulerSettings}  # tasks whose settings name every cell
EFFICIENCY_PARTS = ("efficiency_refresh", "efficiency_e2e")
TITLES = {
    "retention": "Rare-fact retention",
    "perplexity": "Long-text perplexity",
    "decode": "Decode-heavy generation",
    "efficiency": "Efficiency",
    "ablation": "Score-variant ablation",
    "allocation": "Budget allocation over layers and heads",
    "needle": "Needle",
    "ruler": "RULER-style tasks",
}


@dataclass
class Section:
    """One task's results as the page shows them."""

    task: str  # the ``python -m ccviz bench`` task
    title: str
    meta: dict[str, dict[str, Any]] = field(default_factory=dict)  # file stem -> provenance and settings
    rows: dict[str, pd.DataFrame] = field(default_factory=dict)  # file stem -> measured rows
    summaries: dict[str, pd.DataFrame] = field(default_factory=dict)  # file stem -> the harness's summary
    incomplete: list[str] = field(default_factory=list)  # what a rerun of the command would still measure
    provenance: list[str] = field(default_factory=list)  # commit, date, machine and settings, one line per file
    figures: list[go.Figure] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # markdown, as ``python -m ccviz bench report`` prints them
    command: str = ""
    error: str = ""  # why the files could not be read

    @property
    def measured(self) -> bool:
        """Whether any evicting policy has a result yet (the full cache alone shows nothing)."""
        return any(not evicting(frame).empty for frame in self.summaries.values())


def _cell_gaps(part: Part, summary: pd.DataFrame, settings: dict[str, Any]) -> list[str]:
    """What a task's summary still lacks against its settings: budgets, or repeats in some cells."""
    cells = evicting(summary)
    if cells.empty:
        return [f"{part.name}: no evicting policy measured yet"]
    gaps = []
    budgets = [b for b in settings.get("budgets", []) if b not in set(cells["budget"])]
    if budgets:
        gaps.append(f"{part.name}: budget{'s' * (len(budgets) > 1)} {', '.join(map(str, budgets))} not measured yet")
    expected = settings.get(part.setting)
    short = cells[cells[part.count] < expected] if expected is not None else cells.iloc[0:0]
    if not short.empty:
        low, high = int(cells[part.count].min()), int(cells[part.count].max())
        done = f"{low}" if low == high else f"{low}-{high}"
        gaps.append(f"{part.name}: {done} of {expected} {part.setting} so far")
    return gaps


def _grid_gaps(task: str, rows: pd.DataFrame, settings: dict[str, Any]) -> list[str]:
    """What a needle or RULER run still lacks: the cells its settings ask for, per policy, that have no row."""
    grid = GRIDS[task]
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in grid.__dataclass_fields__}
    expected = grid(**fields).cells_per_policy
    done = evicting(rows).groupby("policy", sort=False).size()
    if done.empty:
        return [f"{task}: no evicting policy measured yet"]
    if done.min() >= expected:
        return []
    low, high = int(done.min()), int(done.max())
    counts = f"{low}" if low == high else f"{low}-{high}"
    return [f"{task}: {counts} of {expected} cells per policy so far (contexts up to {int(rows['length'].max())} tokens)"]


def _efficiency_gaps(refresh: pd.DataFrame, e2e: pd.DataFrame, settings: dict[str, Any]) -> list[str]:
    gaps = []
    sizes = settings.get("sizes", [])
    if refresh.empty:
        gaps.append("refresh cost: nothing measured yet")
    else:
        done = refresh.groupby("policy")["n"].nunique()
        expected = {policy: len(efficiency.timed_sizes(policy, settings)) for policy in done.index}
        short = [policy for policy, count in done.items() if count < expected[policy]]
        if short:
            gaps.append(f"refresh cost: {', '.join(short)} not yet at every size it is timed at")
    wanted = set(refresh.get("policy", [])) | {FULL}
    missing = sorted(wanted - set(e2e.get("policy", [])))
    if missing:
        gaps.append(f"end to end: {', '.join(missing)} not measured yet")
    return gaps


def _summary(results: dict[str, Any], name: str, summarise: Callable[..., pd.DataFrame],
             *rows: pd.DataFrame) -> pd.DataFrame:
    """The harness's summary of the rows measured so far (its own summary file if the rows are gone)."""
    if any(not frame.empty for frame in rows):
        return summarise(*rows)
    return results.get(f"{name}_summary", pd.DataFrame())


def _figures(task: str, summaries: dict[str, pd.DataFrame], rows: dict[str, pd.DataFrame]) -> list[go.Figure]:
    if task == "retention":
        summary = summaries["retention"]
        measures = ["survival"] + ["accuracy"] * bool(evicting(summary)["accuracy"].notna().any())
        return [rate_figure(summary, measure) for measure in measures]
    if task == "perplexity":
        return [perplexity_figure(summaries["perplexity"])]
    if task == "decode":
        return [divergence_figure(summaries["decode"])]
    if task == "ruler":
        pooled = needle.summarise_rates(rows["ruler"], ["task", "policy", "budget"])
        return [ruler_figure(pooled, measure) for measure in ("survival", "kept_share", "accuracy")]
    if task == "efficiency" and not rows.get("efficiency_refresh", pd.DataFrame()).empty:
        summary = summaries.get("efficiency", pd.DataFrame())
        exponents = dict(zip(summary["policy"], summary["refresh_exponent"])) if "refresh_exponent" in summary else {}
        return [refresh_cost_figure(rows["efficiency_refresh"]), refresh_seconds_figure(rows["efficiency_refresh"], exponents)]
    return []


def _table(task: str, summaries: dict[str, pd.DataFrame], rows: dict[str, pd.DataFrame]) -> str:
    if task == "retention":
        return retention_tables(summaries["retention"], rows.get("retention"))
    if task == "perplexity":
        return perplexity_table(summaries["perplexity"])
    if task == "decode":
        return decode_table(summaries["decode"])
    if task == "efficiency":
        return efficiency_table(summaries["efficiency"])
    if task == "needle":
        return needle_tables(rows["needle"])
    if task == "ruler":
        return ruler_tables(rows["ruler"])
    if task == "allocation":
        return allocation_tables(rows.get("allocation_retention"), summaries.get("allocation_perplexity"), rows.get("allocation_perplexity"))
    return ablation_table(summaries.get("ablation_retention"), summaries.get("ablation_perplexity"),
                          rows.get("ablation_retention"))


def _present(section: Section) -> None:
    """Provenance lines, then (once an evicting policy has a result) the figures and tables."""
    named = len(section.meta) > 1  # the efficiency, ablation and allocation tasks write two files each
    section.provenance = [f"{name}: " * named + provenance_line(meta) for name, meta in section.meta.items()]
    if section.measured:
        section.figures = _figures(section.task, section.summaries, section.rows)
        section.tables = [_table(section.task, section.summaries, section.rows)]


def _fill(section: Section, results: dict[str, Any]) -> None:
    names = EFFICIENCY_PARTS if section.task == "efficiency" else [p.name for p in PARTS[section.task]]
    section.meta = {n: results["meta"][n] for n in names if n in results["meta"]}
    section.rows = {n: results[n] for n in names if n in results}
    if section.task == "efficiency":
        refresh, e2e = (section.rows.get(n, pd.DataFrame()) for n in EFFICIENCY_PARTS)
        section.summaries["efficiency"] = _summary(results, "efficiency", efficiency.summarise, refresh, e2e)
        settings = section.meta.get("efficiency_refresh", {}).get("settings", {})
        section.incomplete = _efficiency_gaps(refresh, e2e, settings) if section.meta else []
        return
    for part in PARTS[section.task]:
        rows = section.rows.get(part.name, pd.DataFrame())
        summary = _summary(results, part.name, part.summarise, rows)
        section.summaries[part.name] = summary
        if part.name in section.meta:
            settings = section.meta[part.name].get("settings", {})
            gaps = _grid_gaps if section.task in GRIDS else lambda _, __, s: _cell_gaps(part, summary, s)
            section.incomplete += gaps(section.task, rows, settings)
        elif section.meta:  # a two-file task's other file: the first one exists
            section.incomplete.append(f"{part.name}: not started yet")


def load_sections(directory: Path) -> list[Section]:
    """Every task's section, in the order ``bench all`` runs them; unreadable files give ``error``."""
    try:
        results = load_results(directory)
    except UNREADABLE as err:
        results, failure = {"meta": {}}, f"could not read the results in {directory}: {err}"
    else:
        failure = ""
    sections = []
    for task, title in TITLES.items():
        section = Section(task, title, error=failure)
        if not failure:
            try:
                _fill(section, results)
                _present(section)
            except UNREADABLE as err:
                section.error = f"could not read the {task} results: {type(err).__name__}: {err}"
        sections.append(section)
    for section in sections:
        policies = {str(p) for frame in section.rows.values() if "policy" in frame for p in frame["policy"]}
        section.command = reproduce_command(section.task, section.meta, policies, directory,
                                            complete=not section.incomplete)
    quick, like = _folder_defaults(sections)
    for section in sections:
        if not section.meta:  # not measured yet: propose the settings, model and threads of the others
            section.command = plain_command(section.task, quick, like, directory)
    return sections


def _folder_defaults(sections: list[Section]) -> tuple[bool, dict[str, Any]]:
    """Whether the measured tasks used the quick settings, and one task's metadata (model, threads)."""
    quick = any("--quick" in section.command.split() for section in sections if section.meta)
    return quick, next((meta for section in sections for meta in section.meta.values()), {})


def command_for_all(sections: list[Section], directory: Path) -> str | None:
    """``python -m ccviz bench all`` with the settings, model and folder the sections were measured with;
    None when a task here was measured with settings or policies of its own (a follow-up folder such as
    ``bench/results/sinks``), which ``all`` would not repeat: then only each task's own command does."""
    quick, like = _folder_defaults(sections)
    for section in sections:
        own = next(iter(section.meta.values()), None)
        if own is not None and section.command != plain_command(section.task, quick, own, directory):
            return None
    return plain_command("all", quick, like, directory)
