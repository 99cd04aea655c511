"""Every benchmark task and probe of ``python -m ccviz bench``, each described once.

A task is one :class:`BenchTask`: its name (the CLI word), its title (the report's section and the
page's tab), its settings class, its runner, its result files with their summaries, its tables, its
page figures and its SVG charts. The CLI, ``bench report``, the charts and the Benchmarks page loop
over :data:`TASKS`; adding a task is one module under ``tasks/`` and one entry here.

The parts are named ``"module:attribute"`` (as entry points are) and imported on first use: building
the CLI parser, which every ``ccviz`` command does, needs only the names, not pandas, plotly or the
task modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccviz.references import import_ref

if TYPE_CHECKING:
    import pandas as pd

    from ccviz.models import LoadedModel

    from .dispatch import Workers
    from .specs import PolicySpec

Ref = str  # "module:attribute", imported by :func:`load`


def load(ref: Ref) -> Any:
    """The object a :data:`Ref` names."""
    return import_ref(ref)


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


@dataclass(frozen=True)
class Part:
    """One summary of a task: ``<name>_summary.csv``, summarised from the rows of ``rows`` (default: ``<name>.csv``)."""

    name: str
    settings: Ref  # the settings class that wrote its files
    summarise: Ref  # (rows of each file in ``rows``) -> summary
    count: str = ""  # summary column: how many repeats a cell has
    setting: str = ""  # settings key: how many it should have
    gaps: Ref = "ccviz_bench.progress:cell_gaps"  # what a partial run still lacks (:mod:`.progress`)
    rows: tuple[str, ...] = ()

    @property
    def files(self) -> tuple[str, ...]:
        return self.rows or (self.name,)


@dataclass(frozen=True)
class Charts:
    """A task's SVG charts for ``bench report``: drawn from the ``source`` frame by ``draw`` (:mod:`.plots`)."""

    source: str  # a result name as :func:`.results.load_results` keys it
    draw: Ref  # (frame, colours) -> {file name: svg text}


@dataclass(frozen=True)
class BenchTask:
    """One quality task of ``python -m ccviz bench``."""

    name: str
    title: str
    run: Ref  # (TaskRun) -> None
    parts: tuple[Part, ...]
    tables: Ref  # (Frames) -> markdown, as ``bench report`` prints it (:mod:`.report`)
    default_labels: Ref  # (measured labels, quick) -> the labels a run without --policy measures (:mod:`.reproduce`)
    figures: Ref = "ccviz_bench.browse:no_figures"  # (Frames) -> the page's plotly figures (:mod:`.browse`)
    charts: Charts | None = None
    takes_set: bool = True  # --set changes its settings (ablation and allocation pick their own)
    spreads: bool = False  # --workers and --ray spread its cells
    dispatched: bool = False  # its cells need no model in this process when workers measure them
    quick_subset: bool = False  # --quick measures only part of its default policies

    @property
    def settings(self) -> Ref | None:
        """The settings class ``--quick`` and ``--set`` make an instance of (None: the task picks its own)."""
        return self.parts[0].settings if self.takes_set else None

    @property
    def files(self) -> tuple[str, ...]:
        """Its result files (``<stem>.csv`` rows and ``<stem>.json`` metadata), in the order it writes them."""
        return tuple(dict.fromkeys(stem for part in self.parts for stem in part.files))


@dataclass(frozen=True)
class Probe:
    """One engine probe: ``module`` has ``title(settings)`` and ``run(model_args, settings, emit)``."""

    name: str
    settings: Ref
    module: str


_T, _P, _B = "ccviz_bench.tasks.", "ccviz_bench.reproduce:", "ccviz_bench.browse:"
_RETENTION = (_T + "retention:RetentionSettings", _T + "retention:summarise", "survival_n", "cases")
_PERPLEXITY = (_T + "perplexity:PerplexitySettings", _T + "perplexity:summarise", "segments", "segments")
_GRID = ("n", "trials", "ccviz_bench.progress:grid_gaps")  # needle and ruler: their settings name every cell

TASKS: tuple[BenchTask, ...] = (  # in the order ``all`` runs them, the report prints them and the page shows them
    BenchTask(
        "retention",
        "Rare-fact retention",
        _T + "retention:run_task",
        (Part("retention", *_RETENTION),),
        "ccviz_bench.reports.retention:retention_section",
        _P + "registered_labels",
        _B + "retention_figures",
        Charts("retention_summary", "ccviz_bench.plots:retention_charts"),
        spreads=True,
    ),
    BenchTask(
        "perplexity",
        "Long-text perplexity",
        _T + "perplexity:run_task",
        (Part("perplexity", *_PERPLEXITY),),
        "ccviz_bench.reports.perplexity:perplexity_section",
        _P + "registered_labels",
        _B + "perplexity_figures",
        Charts("perplexity_summary", "ccviz_bench.plots:perplexity_charts"),
    ),
    BenchTask(
        "decode",
        "Decode-heavy generation",
        _T + "decode:run_task",
        (Part("decode", _T + "decode:DecodeSettings", _T + "decode:summarise", "prompts", "prompts"),),
        "ccviz_bench.reports.decode:decode_section",
        _P + "registered_labels",
        _B + "decode_figures",
    ),
    BenchTask(
        "efficiency",
        "Efficiency",
        _T + "efficiency:run_task",
        (
            Part(
                "efficiency",
                _T + "efficiency:EfficiencySettings",
                _T + "efficiency:summarise",
                gaps="ccviz_bench.progress:efficiency_gaps",
                rows=("efficiency_refresh", "efficiency_e2e"),
            ),
        ),
        "ccviz_bench.reports.efficiency:efficiency_section",
        _P + "efficiency_labels",
        _B + "efficiency_figures",
        Charts("efficiency_refresh", "ccviz_bench.plots:refresh_charts"),
    ),
    BenchTask(
        "ablation",
        "Score-variant ablation",
        _T + "ablation:run_task",
        (Part("ablation_retention", *_RETENTION), Part("ablation_perplexity", *_PERPLEXITY)),
        "ccviz_bench.reports.ablation:ablation_section",
        _P + "ablation_labels",
        takes_set=False,
        spreads=True,
        quick_subset=True,
    ),
    BenchTask(
        "allocation",
        "Budget allocation over layers and heads",
        _T + "allocation:run_task",
        (Part("allocation_retention", *_RETENTION), Part("allocation_perplexity", *_PERPLEXITY)),
        "ccviz_bench.reports.allocation:allocation_section",
        _P + "allocation_labels",
        takes_set=False,
        spreads=True,
        quick_subset=True,
    ),
    BenchTask(
        "needle",
        "Needle in a haystack",
        _T + "needle:run_needle_task",
        (Part("needle", _T + "needle:NeedleSettings", _T + "needle:summarise_map", *_GRID),),
        "ccviz_bench.reports.needle:needle_section",
        _P + "needle_labels",
        spreads=True,
        dispatched=True,
        charts=Charts("needle_summary", "ccviz_bench.plots:needle_charts"),
    ),
    BenchTask(
        "ruler",
        "RULER-style tasks",
        _T + "needle:run_ruler_task",
        (Part("ruler", _T + "needle:RulerSettings", _T + "needle:summarise_ruler", *_GRID),),
        "ccviz_bench.reports.needle:ruler_section",
        _P + "ruler_labels",
        _B + "ruler_figures",
        spreads=True,
        dispatched=True,
    ),
)

PROBES: tuple[Probe, ...] = tuple(  # engine probes: a text report each, never part of ``all``
    Probe(name, f"ccviz_bench.probes.{name}:{name.capitalize()}Settings", f"ccviz_bench.probes.{name}")
    for name in ("overhead", "memory", "cost", "attention")
)

BY_NAME: dict[str, BenchTask | Probe] = {entry.name: entry for entry in (*TASKS, *PROBES)}


def find_task(name: str) -> BenchTask:
    """The task called ``name``."""
    found = BY_NAME[name]
    assert isinstance(found, BenchTask), f"{name} is a probe"
    return found


def part_of(file: str) -> Part | None:
    """The part whose rows are the result file ``file`` (a stem), or None for a file no task writes."""
    return next((part for entry in TASKS for part in entry.parts if file in part.files), None)
