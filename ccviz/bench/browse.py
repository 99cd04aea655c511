"""What the Benchmarks page shows, as plain data (no Streamlit, so it is tested directly).

Each section is one task of the registry (:data:`.registry.TASKS`): its rows as the harness wrote
them, summarised by the harness's own functions (so a run still in progress shows what it has
measured so far), its provenance, how far it has got, its figures and tables, and the one command
that reproduces it (:mod:`.reproduce`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go

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
from .metrics import summarise_rates
from .registry import TASKS, BenchTask, Frames, Part, find_task, load
from .report import provenance_line
from .reproduce import plain_command, reproduce_command
from .results import load_results
from .tasks.efficiency import timed_sizes

UNREADABLE = (ValueError, KeyError, TypeError, IndexError, OSError)  # a file being written, or from another version


def result_folders(root: Path) -> list[Path]:
    """``root`` and each folder directly under it that holds result files: the follow-up measurements
    next to the published run (``bench/results/sinks``, ``bench/results/candidates``), so the page can
    show them without a restart."""
    root = Path(root)
    follow_ups = sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.json"))) if root.is_dir() else []
    return [root, *follow_ups]


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
    def entry(self) -> BenchTask:
        return find_task(self.task)

    @property
    def measured(self) -> bool:
        """Whether any evicting policy has a result yet (the full cache alone shows nothing)."""
        return any(not evicting(frame).empty for frame in self.summaries.values())


Gaps = Callable[[BenchTask, Part, list[pd.DataFrame], pd.DataFrame, dict[str, Any]], list[str]]


def cell_gaps(
    task: BenchTask, part: Part, rows: list[pd.DataFrame], summary: pd.DataFrame, settings: dict[str, Any]
) -> list[str]:
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


def grid_gaps(
    task: BenchTask, part: Part, rows: list[pd.DataFrame], summary: pd.DataFrame, settings: dict[str, Any]
) -> list[str]:
    """What a needle or RULER run still lacks: the cells its settings ask for, per policy, that have no row."""
    grid, (frame,) = load(part.settings), rows
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in grid.__dataclass_fields__}
    expected = grid(**fields).cells_per_policy
    done = evicting(frame).groupby("policy", sort=False).size()
    if done.empty:
        return [f"{task.name}: no evicting policy measured yet"]
    if done.min() >= expected:
        return []
    low, high = int(done.min()), int(done.max())
    counts = f"{low}" if low == high else f"{low}-{high}"
    return [
        f"{task.name}: {counts} of {expected} cells per policy so far "
        f"(contexts up to {int(frame['length'].max())} tokens)"
    ]


def efficiency_gaps(
    task: BenchTask, part: Part, rows: list[pd.DataFrame], summary: pd.DataFrame, settings: dict[str, Any]
) -> list[str]:
    """What an efficiency run still lacks: sizes a policy's refresh is not yet timed at, end-to-end runs."""
    refresh, e2e = rows
    gaps = []
    if refresh.empty:
        gaps.append("refresh cost: nothing measured yet")
    else:
        done = refresh.groupby("policy")["n"].nunique()
        expected = {policy: len(timed_sizes(policy, settings)) for policy in done.index}
        short = [policy for policy, count in done.items() if count < expected[policy]]
        if short:
            gaps.append(f"refresh cost: {', '.join(short)} not yet at every size it is timed at")
    wanted = set(refresh.get("policy", [])) | {FULL}
    missing = sorted(wanted - set(e2e.get("policy", [])))
    if missing:
        gaps.append(f"end to end: {', '.join(missing)} not measured yet")
    return gaps


def _summary(
    results: dict[str, Any], name: str, summarise: Callable[..., pd.DataFrame], *rows: pd.DataFrame
) -> pd.DataFrame:
    """The harness's summary of the rows measured so far (its own summary file if the rows are gone)."""
    if any(not frame.empty for frame in rows):
        return summarise(*rows)
    return results.get(f"{name}_summary", pd.DataFrame())


# ----- each task's page figures, from its frames (:class:`.registry.Frames`) ---------------------------------
def no_figures(frames: Frames) -> list[go.Figure]:
    return []


def retention_figures(frames: Frames) -> list[go.Figure]:
    summary = frames.summaries["retention"]
    measures = ["accuracy"] * bool(evicting(summary)["accuracy"].notna().any()) + ["survival"]  # answers lead
    return [rate_figure(summary, measure) for measure in measures]


def perplexity_figures(frames: Frames) -> list[go.Figure]:
    return [perplexity_figure(frames.summaries["perplexity"])]


def decode_figures(frames: Frames) -> list[go.Figure]:
    return [divergence_figure(frames.summaries["decode"])]


def ruler_figures(frames: Frames) -> list[go.Figure]:
    pooled = summarise_rates(frames.rows["ruler"], ["task", "policy", "budget"])
    return [ruler_figure(pooled, measure) for measure in ("survival", "kept_share", "accuracy")]


def efficiency_figures(frames: Frames) -> list[go.Figure]:
    refresh = frames.rows.get("efficiency_refresh", pd.DataFrame())
    if refresh.empty:
        return []
    summary = frames.summaries.get("efficiency", pd.DataFrame())
    exponents = dict(zip(summary["policy"], summary["refresh_exponent"])) if "refresh_exponent" in summary else {}
    return [refresh_cost_figure(refresh), refresh_seconds_figure(refresh, exponents)]


def _present(section: Section) -> None:
    """Provenance lines, then (once an evicting policy has a result) the figures and tables."""
    named = len(section.meta) > 1  # the efficiency, ablation and allocation tasks write two files each
    section.provenance = [f"{name}: " * named + provenance_line(meta) for name, meta in section.meta.items()]
    if section.measured:
        frames = Frames(section.summaries, section.rows)
        section.figures = load(section.entry.figures)(frames)
        section.tables = [load(section.entry.tables)(frames)]


def _fill(section: Section, results: dict[str, Any]) -> None:
    entry = section.entry
    section.meta = {n: results["meta"][n] for n in entry.files if n in results["meta"]}
    section.rows = {n: results[n] for n in entry.files if n in results}
    for part in entry.parts:
        rows = [section.rows.get(n, pd.DataFrame()) for n in part.files]
        summary = _summary(results, part.name, load(part.summarise), *rows)
        section.summaries[part.name] = summary
        written = next((section.meta[n] for n in part.files if n in section.meta), None)
        if written is not None:
            gaps: Gaps = load(part.gaps)
            section.incomplete += gaps(entry, part, rows, summary, written.get("settings", {}))
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
    for entry in TASKS:
        section = Section(entry.name, entry.title, error=failure)
        if not failure:
            try:
                _fill(section, results)
                _present(section)
            except UNREADABLE as err:
                section.error = f"could not read the {entry.name} results: {type(err).__name__}: {err}"
        sections.append(section)
    for section in sections:
        policies = {str(p) for frame in section.rows.values() if "policy" in frame for p in frame["policy"]}
        section.command = reproduce_command(
            section.task, section.meta, policies, directory, complete=not section.incomplete
        )
    quick, like = _folder_defaults(sections)
    for section in sections:
        if not section.meta:  # not measured yet: propose the settings, model and threads of the others
            section.command = plain_command(section.task, quick, like, directory)
    return sections


FilesKey = tuple[tuple[str, int, int], ...]  # (name, mtime in ns, size) of each file of a folder


def files_key(directory: Path) -> FilesKey:
    """What the files directly in ``directory`` are now: any row a run appends changes a size or an mtime."""
    entries = []
    for path in Path(directory).iterdir() if Path(directory).is_dir() else ():
        try:
            stat = path.stat()
        except OSError:  # removed since it was listed (--fresh): the next key tells
            continue
        if path.is_file():
            entries.append((path.name, stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(entries))


_READ: dict[Path, tuple[FilesKey, list[Section]]] = {}  # folder -> its files' key and its sections, one per folder
_READING = threading.Lock()  # one reader at a time: sessions opening the page together share the first one's work


def cached_sections(directory: Path) -> list[Section]:
    """:func:`load_sections` of ``directory``, read and summarised (figures drawn) once per change of its files.

    Reading, summarising and drawing the published results takes seconds (the needle and RULER
    summaries most); the page asks on every rerun of every session. The sections are shared between
    sessions: treat them as read-only. A run still writing its rows changes the key, so its new rows
    show at the next rerun."""
    directory = Path(directory)
    with _READING:
        key = files_key(directory)
        known = _READ.get(directory)
        if known is None or known[0] != key:
            known = _READ[directory] = key, load_sections(directory)
        return known[1]


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
