"""Task 5, score-variant ablation: which form of counter-causal surprise keeps what matters?

{full, fast} x {logit, logprob, contrast} x min_gap {0, 2} x smooth {off, on} = 24 policy specs,
each measured on rare-fact retention (one budget) and long-text perplexity (one budget). The
policies' defaults are then chosen from these results (docs/policies.md#why-the-defaults-are-what-they-are).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pandas as pd

from ..choices import SURPRISE_SCORES
from ..models import LoadedModel
from . import perplexity, retention
from .specs import PolicySpec

ABLATED_POLICIES = ("counter_causal", "counter_causal_fast")  # all layers, and the fast last-layer variant
MIN_GAPS = (0, 2)
SMOOTHING = (0, 5)  # off, and the 5-neighbour window that helped in the specification's first data point (docs/method.md#why-calibrated-scores)
RETENTION_BUDGET = 0.25
PERPLEXITY_BUDGET = 128
# 24 specs x 100 cases would be ~3 CPU-hours; the ablation ranks variants on fact *survival* (the
# low-noise signal: no answer generated) over fewer cases, and on the first perplexity segment.
RETENTION_CASES = 20
PERPLEXITY_SEGMENTS = 1


def ablation_specs() -> list[PolicySpec]:
    return [
        PolicySpec(variant, (("score", score), ("min_gap", gap), ("smooth", smooth)))
        for variant, score, gap, smooth in itertools.product(ABLATED_POLICIES, SURPRISE_SCORES, MIN_GAPS, SMOOTHING)
    ]


def run(lm: LoadedModel, quick: bool, out: Path, *, specs: list[PolicySpec] | None = None, fresh: bool = False,
        log: Callable[[str], None] = print) -> dict[str, pd.DataFrame]:
    """Both tasks over the grid (or ``specs``), written as ``ablation_retention`` / ``ablation_perplexity``.

    ``quick`` measures two opposite corners of the grid, which between them use every option value.
    """
    grid = ablation_specs()
    specs = specs or ([grid[0], grid[-1]] if quick else grid)
    if quick:
        r, p = retention.RetentionSettings.quick(), perplexity.PerplexitySettings.quick()
    else:
        r = replace(retention.RetentionSettings(), cases=RETENTION_CASES, accuracy_cases=0)
        p = replace(perplexity.PerplexitySettings(), segments=PERPLEXITY_SEGMENTS)
    return {
        "retention": retention.run(lm, specs, replace(r, budgets=(RETENTION_BUDGET,)), out,
                                   name="ablation_retention", fresh=fresh, log=log),
        "perplexity": perplexity.run(lm, specs, replace(p, budgets=(min(PERPLEXITY_BUDGET, p.tokens // 2),)), out,
                                     name="ablation_perplexity", fresh=fresh, log=log),
    }
