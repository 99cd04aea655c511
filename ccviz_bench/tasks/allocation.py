"""Task 6, allocation: does splitting the budget over layers and heads close the gap between attention
scoring and counter-causal scoring, or widen it?

The cells (:func:`allocation_specs`): ``uniform`` / ``pyramid`` / ``adaptive`` x {snapkv, tova, h2o}
and ``uniform`` / ``pyramid`` x {counter_causal_fast, counter_causal} (adaptive needs per-head
scores, which surprise does not have). Rare-fact retention (``allocation_retention``) and perplexity
with 4 attention sinks (``allocation_perplexity``) under the standard settings, each row with what
the run cost: peak K/V memory (every layer's own length) and refresh seconds, and for retention the
share of layers (and KV heads) that held the whole fact when the question came.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from ccviz.cases.spans import Prepared
from ccviz.models import LoadedModel
from ccviz.trace import Trace

from ..dispatch import Workers
from ..metrics import cache_before
from ..registry import BenchTask, TaskRun
from ..reports.allocation import allocation_section
from ..specs import PolicySpec, labels_of
from . import perplexity, retention

ATTENTION_POLICIES = ("snapkv", "tova", "h2o")
COUNTER_CAUSAL_POLICIES = ("counter_causal_fast", "counter_causal")
COST_COLUMNS = ("peak_cache_mb", "refresh_seconds")
ACCURACY_CASES = (
    20  # answers on the first 20 cases (survival on all 100): 13 cells x 3 budgets x 100 runs is hours already
)
SINKS = 4


def allocation_specs() -> list[PolicySpec]:
    """Every cell: each policy at its defaults under each allocation it supports."""

    def under(name: str, allocations: tuple[str, ...]) -> list[PolicySpec]:
        return [PolicySpec(name, () if a == "uniform" else (("allocation", a),)) for a in allocations]

    specs = [spec for name in ATTENTION_POLICIES for spec in under(name, ("uniform", "pyramid", "adaptive"))]
    return specs + [spec for name in COUNTER_CAUSAL_POLICIES for spec in under(name, ("uniform", "pyramid"))]


def costs(trace: Trace) -> dict:
    """What a run cost: its peak K/V memory in MiB and its refresh time."""
    return {
        "peak_cache_mb": round(trace.peak_cache_bytes / 2**20, 3),
        "refresh_seconds": round(trace.timings["refresh_seconds"], 4),
    }


def layer_share(trace: Trace, fact: list[int], timestep: int) -> float:
    """The share of layers (of (layer, KV head) pairs under ``adaptive``) that held every token of ``fact``
    when token ``timestep`` was read; 1 or 0 under ``uniform``."""
    last = trace.cycles[-1] if trace.cycles else None
    layers = [None] if last is None or last.num_layers is None else range(last.num_layers)
    heads = [None] if last is None or last.num_heads is None else range(last.num_heads)
    held = [set(fact) <= cache_before(trace, timestep, layer, head) for layer in layers for head in heads]
    return sum(held) / len(held)


def retention_columns(trace: Trace, prepared: Prepared) -> dict:
    return costs(trace) | {"layer_share": round(layer_share(trace, prepared.required, prepared.question_start), 4)}


def run(
    lm: LoadedModel,
    quick: bool,
    out: Path,
    *,
    specs: list[PolicySpec] | None = None,
    fresh: bool = False,
    log: Callable[[str], None] = print,
    workers: Workers = Workers(),
    model_args: dict[str, Any] | None = None,
) -> dict[str, pd.DataFrame]:
    """Both tasks over every cell (or ``specs``), written as ``allocation_retention`` / ``allocation_perplexity``."""
    specs = specs or allocation_specs()
    if quick:
        r, p = retention.RetentionSettings.quick(), perplexity.PerplexitySettings.quick()
        specs = specs[:3]
    else:
        r = replace(retention.RetentionSettings(), accuracy_cases=ACCURACY_CASES)
        p = replace(perplexity.PerplexitySettings(), budgets=(64, 128))
    return {
        "retention": retention.run(
            lm,
            specs,
            r,
            out,
            name="allocation_retention",
            fresh=fresh,
            log=log,
            workers=workers,
            model_args=model_args,
            extra=retention_columns,
            extra_columns=(*COST_COLUMNS, "layer_share"),
        ),
        "perplexity": perplexity.run(
            lm,
            specs,
            replace(p, frozen=SINKS),
            out,
            name="allocation_perplexity",
            fresh=fresh,
            log=log,
            extra=costs,
            extra_columns=COST_COLUMNS,
        ),
    }


def run_task(task: TaskRun) -> None:
    """``bench allocation``: its own policies and settings unless ``--policy`` names others."""
    task.run_own(run)


def default_labels(measured: set[str], quick: bool) -> set[str]:
    return labels_of(allocation_specs())


TASK = BenchTask(
    "allocation",
    "Budget allocation over layers and heads",
    run_task,
    (replace(retention.PART, name="allocation_retention"), replace(perplexity.PART, name="allocation_perplexity")),
    allocation_section,
    default_labels,
    takes_set=False,
    quick_subset=True,
)
