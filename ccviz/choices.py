"""Every closed set of words ccviz accepts, defined once: the CLI, the harness, the app and the engine import them.

Each is a ``Literal`` type (for type hints) and the tuple of its values (for menus, argparse
``choices`` and validation), so a new value is added in one place.
"""

from __future__ import annotations

from typing import Literal, get_args

Record = Literal["policy", "all"]  # scores kept in a trace: the policy's own, or also the companion signals
Phase = Literal["prefill", "decode"]
Source = Literal["prompt", "generated"]
Status = Literal["complete", "cancelled", "error"]
Device = Literal["cpu", "cuda", "auto"]
Dtype = Literal["float32", "float16", "bfloat16"]
Variant = Literal["full", "fast", "fast_mlp"]  # which layers the counter-causal pass re-runs (docs/method.md)
SurpriseScore = Literal["logit", "logprob", "contrast"]
Granularity = Literal[
    "token", "word", "clause", "sentence"
]  # the unit a refresh keeps or evicts whole (ccviz.engine.units)
Pool = Literal["max", "mean"]  # how a unit's score is made from its tokens' scores
Allocation = Literal[
    "uniform", "pyramid", "adaptive"
]  # how the budget is split over layers and KV heads (ccviz.engine.allocation)

RECORDS: tuple[str, ...] = get_args(Record)
PHASES: tuple[str, ...] = get_args(Phase)
SOURCES: tuple[str, ...] = get_args(Source)
STATUSES: tuple[str, ...] = get_args(Status)
DEVICES: tuple[str, ...] = get_args(Device)
DTYPES: tuple[str, ...] = get_args(Dtype)
VARIANTS: tuple[str, ...] = get_args(Variant)
SURPRISE_SCORES: tuple[str, ...] = get_args(SurpriseScore)
GRANULARITIES: tuple[str, ...] = get_args(Granularity)
POOLS: tuple[str, ...] = get_args(Pool)
ALLOCATIONS: tuple[str, ...] = get_args(Allocation)
