"""Every task's tables as one markdown report, with where and when they were measured
(docs/benchmarks.md#where-the-results-are); each task's own tables are in :mod:`ccviz_bench.reports`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .progress import TaskFiles, read_tasks
from .registry import Frames, all_tasks
from .results import load_results
from .tables import provenance_line


def report(directory: str | Path | None = None) -> str:
    """All available summaries of a results folder as markdown."""
    return report_results(load_results(directory))


def report_results(results: dict[str, Any], tasks: dict[str, TaskFiles] | None = None) -> str:
    """:func:`report` of results already loaded with :func:`load_results`: one section per task with an
    evicting policy measured, in the registry's order, under the provenance of its first result file.
    Each part is summarised from the rows measured so far (:mod:`.progress`; ``tasks`` is
    :func:`.progress.read_tasks` of ``results`` when already read), so a stopped or running run reports
    what it has, and says what a rerun of its command would still measure."""
    meta, sections = results["meta"], []
    found_by_task = read_tasks(results) if tasks is None else tasks
    for entry in all_tasks():
        found = found_by_task[entry.name]
        if found.measured:
            provenance = provenance_line(meta[next(stem for stem in entry.files if stem in meta)])
            partial = f"Partial run, still to measure: {'; '.join(found.incomplete)}.\n\n" * bool(found.incomplete)
            body = entry.tables(Frames(found.summaries, found.rows))
            sections.append(f"### {entry.title}\n\n{provenance}\n\n{partial}{body}")
    return "\n\n".join(sections) if sections else "no evicting policy measured yet"
