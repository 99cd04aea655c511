"""Task 7, needle maps, and task 8, RULER-style tasks: where in a long context, and at what length,
does each policy still hold a fact when the question comes?

``needle``: one needle (a number, an identifier or a word, :mod:`.haystack`) at each depth x context
length, under each policy at a budget that is a share of the document (default 25%) or a fixed J.
``ruler``: multi-key needles, multi-value needles and variable tracking at a few lengths and budgets.
Each row records *survival* (every required token in the cache when the first question token is read,
as the retention task measures it) and the greedy answer (every expected value in the output). The
full cache runs once per case: the ceiling.

Cells are independent, so they run in this process, in worker processes (``--workers``) or on a Ray
cluster (``--ray``) through :mod:`.dispatch`; this process alone appends the rows, so a partial run
resumes where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd

from ccviz.cases.haystack import KINDS, NEEDLE_BUDGET, NEEDLE_LENGTHS, RULER_TASKS, HaystackCase, make_haystack_case
from ccviz.cases.spans import prepare
from ccviz.engine.budget import check_budget
from ccviz.fields import Validated, choice, number, whole
from ccviz.models import LoadedModel

from ..dispatch import Workers
from ..metrics import answer_matches, summarise_rates
from ..needle_figures import ruler_figure
from ..plots import needle_charts
from ..progress import grid_gaps
from ..registry import BenchTask, Charts, Frames, Part, TaskRun
from ..reports.needle import needle_section, ruler_section
from ..specs import PolicySpec, labels_of, registered_specs
from .survival import case_runs, run_case, run_cells

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLUMNS = [
    "task",
    "length",
    "depth",
    "trial",
    "kind",
    "policy",
    "budget",
    "cache_size",
    "chunk_size",
    "prompt_tokens",
    "doc_tokens",
    "needle_depth",
    "required_tokens",
    "question_start",
    "survived",
    "kept_share",
    "answered",
    "answer_share",
    "output",
    "seconds",
]
KEY = ["task", "length", "depth", "trial", "policy", "budget"]
QUICK_POLICIES = 4  # with --quick and no --policy: the first registered ones (full, sliding, streaming_llm, tova)
SPREAD = ""  # the depth column of a case whose needles the seed spreads (the RULER tasks)
# Variable tracking asks whether a chain of links survives, so the ruler task's default set adds the two
# forms of counter-causal scoring that treat spans differently from a token: whole words (the ablation's
# best unit) and a recent window of J/4 (the recency hybrid).
RULER_VARIANTS = (
    PolicySpec("counter_causal_fast", (("granularity", "word"), ("pool", "max"))),
    PolicySpec("counter_causal_fast", (("recent_share", 0.25),)),
)


class _Grid(Validated):
    """Settings that name every cell: a budget above 1 is a fixed J, so it must be whole."""

    budgets: tuple[float, ...]
    sizes: tuple[str, ...]  # the fields whose lengths multiply into the cells per policy (with the trials)

    def __post_init__(self) -> None:
        super().__post_init__()
        for budget in self.budgets:
            check_budget(budget)

    @property
    def cells_per_policy(self) -> int:
        return self.trials * len(self.budgets) * math.prod(len(getattr(self, name)) for name in self.sizes)


@dataclass(frozen=True)
class NeedleSettings(_Grid):
    lengths: tuple[int, ...] = whole("lengths", 200, default=NEEDLE_LENGTHS, maximum=8000, each=True)
    depths: tuple[float, ...] = number("depths", 0, 1, default=(0.0, 0.167, 0.333, 0.5, 0.667, 0.833, 1.0), each=True)
    budgets: tuple[float, ...] = number("budgets", 0, default=(NEEDLE_BUDGET,), each=True)  # <= 1: share; > 1: J
    trials: int = whole("trials", 1, default=1)  # needles per cell; the needle's kind cycles over the map
    seed: int = whole("seed", 0, default=0)
    sizes: ClassVar[tuple[str, ...]] = ("lengths", "depths")

    @classmethod
    def quick(cls) -> NeedleSettings:
        return cls(lengths=(300, 600), depths=(0.0, 0.5, 1.0), budgets=(0.5,))


@dataclass(frozen=True)
class RulerSettings(_Grid):
    tasks: tuple[str, ...] = choice("tasks", RULER_TASKS, default=RULER_TASKS, each=True)
    lengths: tuple[int, ...] = whole("lengths", 200, default=(1000, 2000), maximum=8000, each=True)
    budgets: tuple[float, ...] = number("budgets", 0, default=(0.1, 0.25, 0.5), each=True)
    trials: int = whole("trials", 1, default=3)  # cases per task x length; the needles' kind cycles with the trial
    seed: int = whole("seed", 0, default=0)
    sizes: ClassVar[tuple[str, ...]] = ("tasks", "lengths")

    @classmethod
    def quick(cls) -> RulerSettings:
        return cls(lengths=(300,), budgets=(0.5,), trials=1)


@dataclass(frozen=True)
class Cell:
    """One row to measure: the case's parameters (the case is rebuilt where it runs), a policy and a budget."""

    task: str
    length: int
    depth: float | None
    trial: int
    kind: str
    seed: int
    spec: PolicySpec
    budget: float

    def case(self, tokenizer) -> HaystackCase:
        return make_haystack_case(
            tokenizer, self.task, self.length, self.depth, trial=self.trial, kind=self.kind, seed=self.seed
        )

    @property
    def depth_column(self) -> float | str:
        """The depth as the result rows key it (RULER's seed-spread needles: blank)."""
        return SPREAD if self.depth is None else self.depth

    def key(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "length": self.length,
            "depth": self.depth_column,
            "trial": self.trial,
            "policy": self.spec.label,
            "budget": self.budget,
        }

    @property
    def needs(self) -> tuple[str, ...]:
        return ()  # every row is measured whole

    def __str__(self) -> str:
        where = "" if self.depth is None else f" at depth {self.depth:.0%}"
        return f"{self.task} {self.length} tokens{where}, trial {self.trial}, {self.spec.label}, budget {self.budget}"


def measure_cell(lm: LoadedModel, cell: Cell) -> dict[str, Any]:
    """Run one cell's case under its policy and budget (greedy); its result row."""
    case = cell.case(lm.tokenizer)
    prepared = prepare(lm.tokenizer, case.prompt, case.question_start, case.required)
    outcome = run_case(lm, prepared, cell.spec, cell.budget, case.max_new_tokens)
    output = outcome.trace.output_text
    found = [answer_matches(output, answer) for answer in case.answers]
    return {
        "task": cell.task,
        "length": cell.length,
        "depth": cell.depth_column,
        "trial": cell.trial,
        "kind": cell.kind,
        "policy": cell.spec.label,
        "budget": cell.budget,
        "prompt_tokens": prepared.text_tokens,
        "required_tokens": len(prepared.required),
        "needle_depth": round((prepared.required[0] - prepared.tokens.text_start) / prepared.doc_tokens, 4),
        **outcome.columns(),
        "answered": int(all(found)),
        "answer_share": round(sum(found) / len(found), 4),
        "output": output.strip(),
    }


def needle_cells(specs: list[PolicySpec], settings: NeedleSettings) -> list[Cell]:
    """Every cell of the maps: trial by trial, short contexts first, each case under the full cache and then
    every policy at every budget. The needle's kind cycles along the map's diagonals, so every row and
    column of a map sees every kind."""
    cells = []
    for trial in range(settings.trials):
        for i, length in enumerate(settings.lengths):
            for j, depth in enumerate(settings.depths):
                kind = KINDS[(i + j + trial) % len(KINDS)]
                cells += _case_cells("needle", length, depth, trial, kind, settings.seed, specs, settings.budgets)
    return cells


def ruler_cells(specs: list[PolicySpec], settings: RulerSettings) -> list[Cell]:
    cells = []
    for trial in range(settings.trials):
        for length in settings.lengths:
            for task in settings.tasks:
                kind = "number" if task == "variable_tracking" else KINDS[trial % len(KINDS)]
                cells += _case_cells(task, length, None, trial, kind, settings.seed, specs, settings.budgets)
    return cells


def _case_cells(
    task: str,
    length: int,
    depth: float | None,
    trial: int,
    kind: str,
    seed: int,
    specs: list[PolicySpec],
    budgets: tuple[float, ...],
) -> list[Cell]:
    return [Cell(task, length, depth, trial, kind, seed, spec, budget) for spec, budget in case_runs(specs, budgets)]


def _run(
    name: str,
    lm: LoadedModel | None,
    cells: list[Cell],
    specs: list[PolicySpec],
    settings: Any,
    out: Path,
    *,
    workers: Workers,
    model_args: dict[str, Any],
    fresh: bool,
    log: Callable[[str], None],
    summarise: Callable[[pd.DataFrame], pd.DataFrame],
) -> pd.DataFrame:
    return run_cells(
        name,
        lm,
        cells,
        specs,
        asdict(settings),
        out,
        columns=COLUMNS,
        key=KEY,
        measure=measure_cell,
        summarise=summarise,
        workers=workers,
        model_args=model_args,
        fresh=fresh,
        log=log,
    )


def ruler_specs() -> list[PolicySpec]:
    """The ruler task's default policies: every registered one, then :data:`RULER_VARIANTS`."""
    return [*registered_specs(), *RULER_VARIANTS]


def default_specs(task: str, quick: bool = False) -> list[PolicySpec]:
    """What ``needle`` or ``ruler`` measures without ``--policy``; with ``--quick``, the first
    :data:`QUICK_POLICIES` of it."""
    specs = ruler_specs() if task == "ruler" else registered_specs()
    return specs[:QUICK_POLICIES] if quick else specs


def run_grid(
    kind: str,
    lm: LoadedModel | None,
    specs: list[PolicySpec],
    settings: NeedleSettings | RulerSettings,
    out: Path,
    *,
    workers: Workers = Workers(),
    model_args: dict[str, Any] | None = None,
    fresh: bool = False,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Measure every missing cell of ``kind`` ("needle": the needle maps, per-cell summary; "ruler": the
    RULER-style cases, summary per task x length x budget) into ``<kind>.csv``; its summary."""
    cells, summarise = GRIDS[kind]
    return _run(
        kind,
        lm,
        cells(specs, settings),
        specs,
        settings,
        out,
        workers=workers,
        model_args=model_args or {},
        fresh=fresh,
        log=log,
        summarise=summarise,
    )


def run_needle(
    lm: LoadedModel | None, specs: list[PolicySpec], settings: NeedleSettings, out: Path, **options: Any
) -> pd.DataFrame:
    """:func:`run_grid` of the needle maps into ``needle.csv``; the per-cell summary."""
    return run_grid("needle", lm, specs, settings, out, **options)


def run_ruler(
    lm: LoadedModel | None, specs: list[PolicySpec], settings: RulerSettings, out: Path, **options: Any
) -> pd.DataFrame:
    """:func:`run_grid` of the RULER-style cases into ``ruler.csv``; the summary per task x length x budget."""
    return run_grid("ruler", lm, specs, settings, out, **options)


MAP_KEYS = ["policy", "budget", "length", "depth"]
RULER_KEYS = ["task", "policy", "budget", "length"]


def summarise_map(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per map cell (policy x budget x length x depth), its trials together."""
    return pd.DataFrame() if rows.empty else summarise_rates(rows, MAP_KEYS)


def summarise_ruler(rows: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame() if rows.empty else summarise_rates(rows, RULER_KEYS)


def run_grid_task(kind: str, task: TaskRun) -> None:
    """``bench needle`` or ``bench ruler``: :func:`default_specs` unless ``--policy`` names others."""
    run_grid(
        kind,
        task.lm,
        task.specs or default_specs(kind, task.quick),
        task.settings,
        task.out,
        workers=task.workers,
        model_args=task.model_args,
        fresh=task.fresh,
        log=task.log,
    )


def run_needle_task(task: TaskRun) -> None:
    run_grid_task("needle", task)


def run_ruler_task(task: TaskRun) -> None:
    run_grid_task("ruler", task)


GRIDS = {"needle": (needle_cells, summarise_map), "ruler": (ruler_cells, summarise_ruler)}  # cells, summary


def needle_labels(measured: set[str], quick: bool) -> set[str]:
    return labels_of(default_specs("needle", quick))


def ruler_labels(measured: set[str], quick: bool) -> set[str]:
    return labels_of(default_specs("ruler", quick))


def ruler_figures(frames: Frames) -> list[go.Figure]:
    """The page's figures: each RULER task's survival, kept share and answers, pooled over lengths."""
    pooled = summarise_rates(frames.rows["ruler"], ["task", "policy", "budget"])
    return [ruler_figure(pooled, measure) for measure in ("survival", "kept_share", "accuracy")]


NEEDLE = BenchTask(
    "needle",
    "Needle in a haystack",
    run_needle_task,
    (Part("needle", NeedleSettings, summarise_map, "n", "trials", grid_gaps),),
    needle_section,
    needle_labels,
    charts=Charts("needle_summary", needle_charts),
)
RULER = BenchTask(
    "ruler",
    "RULER-style tasks",
    run_ruler_task,
    (Part("ruler", RulerSettings, summarise_ruler, "n", "trials", grid_gaps),),
    ruler_section,
    ruler_labels,
    ruler_figures,
)
