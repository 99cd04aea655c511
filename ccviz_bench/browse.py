"""What the Benchmarks page shows, as plain data (no Streamlit, so it is tested directly).

Each section is one task of the registry (:func:`.registry.tasks`): its rows as the harness wrote
them, summarised by the harness's own functions (so a run still in progress shows what it has
measured so far), its provenance, how far it has got, its figures and tables, and the one command
that reproduces it (:mod:`.reproduce`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from .digest import ModelResults
from .figures import frontier_figure
from .progress import TaskFiles, read_task
from .registry import BenchTask, Frames, all_tasks, find_task
from .reproduce import plain_command, reproduce_command
from .results import load_results
from .specs import parse_spec
from .tables import provenance_line

UNREADABLE = (ValueError, KeyError, TypeError, IndexError, OSError)  # a file being written, or from another version


def result_folders(root: Path) -> list[Path]:
    """``root`` and each folder directly under it that holds result files: the follow-up measurements
    next to the published run (``bench/results/sinks``, ``bench/results/candidates``), so the page can
    show them without a restart."""
    root = Path(root)
    follow_ups = sorted(p for p in root.iterdir() if p.is_dir() and any(p.glob("*.json"))) if root.is_dir() else []
    return [root, *follow_ups]


@dataclass
class Section(TaskFiles):
    """One task's results as the page shows them: its files as read so far (:class:`.progress.TaskFiles`)
    and what the page draws from them."""

    task: str  # the ``python -m ccviz bench`` task
    title: str
    provenance: list[str] = field(default_factory=list)  # commit, date, machine and settings, one line per file
    figures: list[go.Figure] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # markdown, as ``python -m ccviz bench report`` prints them
    command: str = ""
    error: str = ""  # why the files could not be read
    frontier: go.Figure | None = None  # retention: answers against the efficiency task's refresh cost

    @property
    def entry(self) -> BenchTask:
        return find_task(self.task)


def _present(section: Section) -> None:
    """Provenance lines, then (once an evicting policy has a result) the figures and tables."""
    named = len(section.meta) > 1  # the efficiency, ablation and allocation tasks write two files each
    section.provenance = [f"{name}: " * named + provenance_line(meta) for name, meta in section.meta.items()]
    if section.measured:
        frames = Frames(section.summaries, section.rows)
        section.figures = section.entry.figures(frames)
        section.tables = [section.entry.tables(frames)]


def load_sections(directory: Path) -> list[Section]:
    """Every task's section, in the order ``bench all`` runs them; unreadable files give ``error``."""
    try:
        results = load_results(directory)
    except UNREADABLE as err:
        results, failure = {"meta": {}}, f"could not read the results in {directory}: {err}"
    else:
        failure = ""
    sections = []
    for entry in all_tasks():
        section = Section(entry.name, entry.title, error=failure)
        if not failure:
            try:
                section = Section(entry.name, entry.title, **vars(read_task(entry, results)))
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
    _place_frontier(sections)
    return sections


def _place_frontier(sections: list[Section]) -> None:
    """Give the retention section the answers-against-cost figure when the efficiency section has costs for
    some of its policies (:mod:`.frontier`)."""
    by_task = {section.task: section for section in sections}
    retention, efficiency = by_task.get("retention"), by_task.get("efficiency")
    if retention is None or efficiency is None or "budget" not in retention.rows.get("retention", ()):
        return
    settings = retention.meta.get("retention", {}).get("settings", {})
    results = {"retention": retention.rows["retention"], "efficiency_summary": efficiency.summaries.get("efficiency")}
    model = ModelResults(str(settings.get("model", "")), "", {**results, "meta": retention.meta})
    points = model.frontier
    if not points.empty:
        names = {spec: parse_spec(spec).title for spec in points.spec.unique()}
        title = f"Answers against refresh cost<br><sup>{model.protocol}</sup>"
        retention.frontier = frontier_figure(points, names, title)


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
