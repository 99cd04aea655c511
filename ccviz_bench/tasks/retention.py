"""Task 1, rare-fact retention: is a fact stated once still cached when the question about it is read,
and can the model still answer?

For every case x policy x budget (J as a fraction of the document's tokens, h = J/4) the prompt
(document + question, one chat turn, the question asked apart: kept out of eviction unless the spec says
``protect_question=False``) is run through the engine. *Survival*: every token of the
fact's value is in the cache at the last refresh before the first question token. *Accuracy*: the
model also answers (greedy; on every case unless ``accuracy_cases`` says fewer), checked by normalised
string match: answers are the measure, survival the diagnosis. The full cache runs once per case and
is the ceiling for every budget. A row measured when its case was not answered is measured again once
it is (``cases``, ``accuracy_cases`` and ``budgets`` only say which rows there are, so a results file grows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ccviz.cases.documents import Case, make_case
from ccviz.cases.prose import make_prose_case
from ccviz.cases.spans import Prepared, prepare
from ccviz.fields import Validated, choice, number, whole
from ccviz.models import LoadedModel
from ccviz.trace import Trace

from ..diagnosis import MEASURES, diagnose
from ..dispatch import Workers
from ..figures import rate_figure
from ..metrics import answer_matches, binomial_rate
from ..plots import retention_charts
from ..reading import ReadingProbe
from ..registry import BenchTask, Charts, Frames, Part, TaskRun
from ..reports.retention import retention_section
from ..specs import PolicySpec, evicting, registered_labels, registered_specs
from .survival import case_runs, run_case, run_cells

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLUMNS = [
    "case",
    "kind",
    "fact_type",
    "position",
    "doc_tokens",
    "fact_start",
    "fact_tokens",
    "question_start",
    "policy",
    "budget",
    "cache_size",
    "chunk_size",
    "survived",
    "kept_share",
    "answered",
    "output",
    "seconds",
    *MEASURES,  # why a kept fact goes unanswered (:mod:`..diagnosis`); blank in rows measured before them
]
KEY = ["case", "policy", "budget"]
# Which rows there are, not what a row means: a results file grows with them (one budget now, more later).
EXTENT = ("cases", "accuracy_cases", "budgets")


FAMILIES: dict[str, Callable[..., Case]] = {  # the kinds of case (docs/benchmarks.md#two-families-of-cases)
    "records": make_case,  # generated clinical records, chats and meeting notes: one fact in filler
    "prose": make_prose_case,  # real prose with the fact and two distractors of its form
}


@dataclass(frozen=True)
class RetentionSettings(Validated):
    cases: int = whole("cases", 1, default=100)
    accuracy_cases: int = whole("accuracy cases", 0, default=100)  # the first ones also generate an answer
    words: int = whole("words", 1, default=400)  # document body length (about 660 tokens with SmolLM2's tokenizer)
    budgets: tuple[float, ...] = number(
        "budgets", 0, 1, default=(0.1, 0.25, 0.5), each=True
    )  # J as a share of the document
    max_new_tokens: int = whole(
        "max new tokens", 1, default=24
    )  # the model restates the question before the value: 12 cut answers short
    seed: int = whole("seed", 0, default=0)
    family: str = choice("family", tuple(FAMILIES), default="records")  # generated records, or real prose

    @classmethod
    def quick(cls) -> RetentionSettings:
        return cls(cases=2, accuracy_cases=1, words=60, budgets=(0.5,), max_new_tokens=8)


Extra = Callable[[Trace, Prepared], dict]  # more columns of a row, from its run's trace


@dataclass(frozen=True)
class RetentionCell:
    """One row to measure: a case (rebuilt where it runs, from its index) under one policy and budget."""

    index: int
    words: int
    seed: int
    spec: PolicySpec
    budget: float
    answer: bool
    max_new_tokens: int
    extra: Extra | None = None  # a module-level function: it travels to worker processes by name
    family: str = "records"

    def key(self) -> dict[str, Any]:
        return {"case": self.index, "policy": self.spec.label, "budget": self.budget}

    @property
    def needs(self) -> tuple[str, ...]:
        return ("answered",) if self.answer else ()

    def __str__(self) -> str:
        return f"case {self.index}, {self.spec.label}, budget {self.budget}"


def measure_cell(lm: LoadedModel, cell: RetentionCell) -> dict:
    """Run one case under one policy and budget (generating the answer only on answered cases); its result
    row, with ``extra``'s columns."""
    case = FAMILIES[cell.family](cell.index, words=cell.words, seed=cell.seed)
    prepared = prepare(lm.tokenizer, case.prompt, case.question_start, [case.answer_span])
    probe = ReadingProbe(timestep=len(prepared.tokens.ids))  # what the answer reads of the fact
    new_tokens = cell.max_new_tokens if cell.answer else 1
    outcome = run_case(lm, prepared, cell.spec, cell.budget, new_tokens, observers=[probe])
    output = outcome.trace.output_text
    return {
        "case": case.index,
        "kind": case.kind,
        "fact_type": case.fact_type,
        "position": round(case.position, 4),
        "fact_start": prepared.required[0],
        "fact_tokens": len(prepared.required),
        "policy": cell.spec.label,
        "budget": cell.budget,
        **outcome.columns(),
        "answered": int(answer_matches(output, case.answer)) if cell.answer else "",
        "output": output.strip() if cell.answer else "",
        **diagnose(outcome.trace, prepared, lm.tokenizer, probe.readings(prepared.required)),
    } | ({} if cell.extra is None else cell.extra(outcome.trace, prepared))


def run(
    lm: LoadedModel,
    specs: list[PolicySpec],
    settings: RetentionSettings,
    out: Path,
    *,
    name: str = "retention",
    fresh: bool = False,
    log: Callable[[str], None] = print,
    extra: Extra | None = None,
    extra_columns: tuple[str, ...] = (),
    workers: Workers = Workers(),
    model_args: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Measure every missing row (case-major, so an interrupted run leaves every cell equally filled);
    ``extra`` adds the ``extra_columns`` to every row. Rows are independent, so ``workers`` may spread
    them (:mod:`..dispatch`; worker processes load the model from ``model_args``)."""
    runs = case_runs(specs, settings.budgets)
    cells = [
        RetentionCell(
            index,
            settings.words,
            settings.seed,
            spec,
            budget,
            index < settings.accuracy_cases,
            settings.max_new_tokens,
            extra,
            settings.family,
        )
        for index in range(settings.cases)
        for spec, budget in runs
    ]
    recorded = asdict(settings)
    if settings.family == "records":  # the only family before there were two: folders measured then resume
        del recorded["family"]
    return run_cells(
        name,
        lm,
        cells,
        specs,
        recorded,
        out,
        columns=COLUMNS + list(extra_columns),
        key=KEY,
        measure=measure_cell,
        summarise=summarise,
        workers=workers,
        model_args=model_args or {},
        fresh=fresh,
        log=log,
        extent=EXTENT,
    )


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per policy x budget: survival and accuracy with Wilson 95% intervals, and the full-cache
    accuracy on the same cases (the ceiling)."""
    if rows.empty:
        return pd.DataFrame()
    full = rows[rows.policy == "full"].set_index("case")["answered"]
    out = []
    for (policy, budget), group in rows.groupby(["policy", "budget"], sort=False):
        n_s, k_s, survival, s_low, s_high = binomial_rate(group["survived"])
        n_a, k_a, accuracy, a_low, a_high = binomial_rate(group["answered"])
        answered_cases = group.loc[pd.to_numeric(group["answered"], errors="coerce").notna(), "case"]
        _, _, ceiling, _, _ = binomial_rate(full.reindex(answered_cases))
        out.append(
            {
                "policy": policy,
                "budget": budget,
                "cache_size_mean": group["cache_size"].mean(),
                "survival_n": n_s,
                "survival": survival,
                "survival_low": s_low,
                "survival_high": s_high,
                "kept_share": group["kept_share"].mean(),
                "accuracy_n": n_a,
                "accuracy": accuracy,
                "accuracy_low": a_low,
                "accuracy_high": a_high,
                "full_accuracy": ceiling,
                "seconds_mean": group["seconds"].mean(),
            }
        )
    return pd.DataFrame(out)


def run_task(task: TaskRun) -> None:
    """``bench retention``: every registered policy unless ``--policy`` names others."""
    run(
        task.lm,
        task.specs or registered_specs(),
        task.settings,
        task.out,
        workers=task.workers,
        model_args=task.model_args,
        fresh=task.fresh,
        log=task.log,
    )


def figures(frames: Frames) -> list[go.Figure]:
    """The page's figures: answers (once measured), then survival, against budget."""
    summary = frames.summaries["retention"]
    measures = ["accuracy"] * bool(evicting(summary)["accuracy"].notna().any()) + ["survival"]  # answers lead
    return [rate_figure(summary, measure) for measure in measures]


PART = Part("retention", RetentionSettings, summarise, "survival_n", "cases")
TASK = BenchTask(
    "retention",
    "Rare-fact retention",
    run_task,
    (PART,),
    retention_section,
    registered_labels,
    figures,
    Charts("retention_summary", retention_charts),
)
