"""Every benchmark task and probe of ``python -m ccviz bench``, each described once.

A task is one :class:`BenchTask`, defined by its own module under ``tasks/`` with real functions: its
runner, its result files with their summaries, its tables, its page figures and its SVG charts. The
CLI, ``bench report``, the charts and the Benchmarks page loop over :func:`tasks`.

:data:`LISTINGS` names each task's module lazily: building the CLI parser, which every ``ccviz``
command does, needs only the names (task modules import torch and pandas). Adding a task is one
module under ``tasks/`` and one listing here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccviz.references import import_ref

if TYPE_CHECKING:
    import pandas as pd
    import plotly.graph_objects as go

    from ccviz.models import LoadedModel

    from .dispatch import Workers
    from .specs import PolicySpec


@dataclass(frozen=True)
class TaskRun:
    """What the CLI hands a task's runner: the loaded model (None when workers load their own), the
    ``--policy`` specs (empty: the task's own default set), its settings and where the rows go."""

    lm: LoadedModel | None
    specs: list[PolicySpec]
    settings: Any  # an instance of the task's settings class
    out: Path
    quick: bool
    workers: Workers
    model_args: dict[str, Any]
    fresh: bool
    log: Callable[[str], None]

    def run_own(self, run: Callable[..., Any]) -> None:
        """Call a task's ``run(lm, quick, out, *, specs, workers, model_args, fresh, log)`` with this run: its
        own specs and settings unless ``--policy`` named others (the ablation's grid, the allocations)."""
        run(
            self.lm,
            self.quick,
            self.out,
            specs=self.specs or None,
            workers=self.workers,
            model_args=self.model_args,
            fresh=self.fresh,
            log=self.log,
        )


@dataclass(frozen=True)
class Frames:
    """A task's result frames: summaries by :attr:`Part.name`, measured rows by file stem."""

    summaries: dict[str, pd.DataFrame] = field(default_factory=dict)
    rows: dict[str, pd.DataFrame] = field(default_factory=dict)


# (the task, the part, the rows of each of its files, its summary, the recorded settings) -> what a rerun would
# still measure (:mod:`.progress`)
Gaps = Callable[["BenchTask", "Part", list["pd.DataFrame"], "pd.DataFrame", dict[str, Any]], list[str]]


@dataclass(frozen=True)
class Part:
    """One summary of a task: ``<name>_summary.csv``, summarised from the rows of ``rows`` (default: ``<name>.csv``)."""

    name: str
    settings: type  # the settings class that wrote its files
    summarise: Callable[..., pd.DataFrame]  # (rows of each file in ``rows``) -> summary
    count: str = ""  # summary column: how many repeats a cell has
    setting: str = ""  # settings key: how many it should have
    gaps: Gaps | None = None  # None: :func:`.progress.cell_gaps`
    rows: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        return self.rows or (self.name,)


@dataclass(frozen=True)
class Charts:
    """A task's SVG charts for ``bench report``: drawn from the ``source`` frame by ``draw`` (:mod:`.plots`)."""

    source: str  # a result name as :func:`.results.load_results` keys it
    draw: Callable[[pd.DataFrame, dict[str, Any]], dict[str, str]]  # (frame, style) -> {file name: svg text}


def no_figures(frames: Frames) -> list[go.Figure]:
    return []


@dataclass(frozen=True)
class BenchTask:
    """One quality task of ``python -m ccviz bench``."""

    name: str
    title: str
    run: Callable[[TaskRun], None]
    parts: tuple[Part, ...]
    tables: Callable[[Frames], str]  # markdown, as ``bench report`` prints it
    # (measured labels, quick) -> the labels a run without --policy measures
    default_labels: Callable[[set[str], bool], set[str]]
    figures: Callable[[Frames], list[go.Figure]] = no_figures  # the page's plotly figures
    charts: Charts | None = None
    takes_set: bool = True  # --set changes its settings (ablation and allocation pick their own)
    quick_subset: bool = False  # --quick measures only part of its default policies

    @property
    def settings(self) -> type | None:
        """The settings class ``--quick`` and ``--set`` make an instance of (None: the task picks its own)."""
        return self.parts[0].settings if self.takes_set else None

    @property
    def files(self) -> tuple[str, ...]:
        """Its result files (``<stem>.csv`` rows and ``<stem>.json`` metadata), in the order it writes them."""
        return tuple(dict.fromkeys(stem for part in self.parts for stem in part.files))


@dataclass(frozen=True)
class Listing:
    """A task as the CLI parser knows it without importing it: its name, where its :class:`BenchTask` is
    (``"module:attribute"``) and how ``--workers`` treats it."""

    name: str
    ref: str
    spreads: bool = False  # --workers and --ray spread its cells
    dispatched: bool = False  # its cells need no model in this process when workers measure them

    @property
    def task(self) -> BenchTask:
        found = import_ref(self.ref)
        assert isinstance(found, BenchTask) and found.name == self.name, self.ref
        return found


@dataclass(frozen=True)
class Probe:
    """One engine probe: ``module`` has ``title(settings)`` and ``run(model_args, settings, emit)``; ``settings``
    names its settings class (``"module:Class"``)."""

    name: str
    settings: str
    module: str


_TASKS = "ccviz_bench.tasks."
LISTINGS: tuple[Listing, ...] = (  # in the order ``all`` runs them, the report prints them and the page shows them
    Listing("retention", _TASKS + "retention:TASK", spreads=True),
    Listing("perplexity", _TASKS + "perplexity:TASK"),
    Listing("decode", _TASKS + "decode:TASK"),
    Listing("efficiency", _TASKS + "efficiency:TASK"),
    Listing("ablation", _TASKS + "ablation:TASK", spreads=True),
    Listing("allocation", _TASKS + "allocation:TASK", spreads=True),
    Listing("needle", _TASKS + "needle:NEEDLE", spreads=True, dispatched=True),
    Listing("ruler", _TASKS + "needle:RULER", spreads=True, dispatched=True),
)

PROBES: tuple[Probe, ...] = tuple(  # engine probes: a text report each, never part of ``all``
    Probe(name, f"ccviz_bench.probes.{name}:{name.capitalize()}Settings", f"ccviz_bench.probes.{name}")
    for name in ("overhead", "memory", "cost", "attention")
)

NAMES = tuple(listing.name for listing in LISTINGS)


@cache
def all_tasks() -> tuple[BenchTask, ...]:
    """Every task, in the order of :data:`LISTINGS` (imports every task module)."""
    return tuple(listing.task for listing in LISTINGS)


def find_task(name: str) -> BenchTask:
    """The task called ``name`` (imports its module only)."""
    return next(listing.task for listing in LISTINGS if listing.name == name)


def find_probe(name: str) -> Probe:
    """The probe called ``name``."""
    return next(probe for probe in PROBES if probe.name == name)


def part_of(file: str) -> Part | None:
    """The part whose rows are the result file ``file`` (a stem), or None for a file no task writes."""
    return next((part for entry in all_tasks() for part in entry.parts if file in part.files), None)
