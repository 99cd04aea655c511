"""Task 5, score-variant ablation: which form of counter-causal surprise keeps what matters?

{full, fast} x {logit, logprob, contrast} x min_gap {0, 2} x smooth {off, on} = 24 policy specs,
each measured on rare-fact retention (one budget) and long-text perplexity (one budget). The
policies' defaults are then chosen from these results (README, "Benchmarks: quality").
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Callable

import pandas as pd

from ..models import LoadedModel
from ..policies import POLICIES
from . import perplexity, retention
from .metrics import sign_test
from .specs import PolicySpec, parse_spec

VARIANTS = ("counter_causal", "counter_causal_fast")
SCORES = ("logit", "logprob", "contrast")
MIN_GAPS = (0, 2)
SMOOTHING = (0, 5)  # off, and the 5-neighbour window that helped in method.md's first data point
RETENTION_BUDGET = 0.25
PERPLEXITY_BUDGET = 128
# 24 specs x 100 cases would be ~3 CPU-hours; the ablation ranks variants on fact *survival* (the
# low-noise signal: no answer generated) over fewer cases, and on the first perplexity segment.
RETENTION_CASES = 20
PERPLEXITY_SEGMENTS = 1


def ablation_specs() -> list[PolicySpec]:
    return [
        PolicySpec(variant, (("score", score), ("min_gap", gap), ("smooth", smooth)))
        for variant, score, gap, smooth in itertools.product(VARIANTS, SCORES, MIN_GAPS, SMOOTHING)
    ]


def default_label(name: str) -> str | None:
    """The grid label of a variant's current default options (what ``counter_causal`` alone means);
    None for a policy the grid does not vary (``bench ablation --policy`` takes any spec)."""
    defaults = POLICIES[name]().options()
    return next((s.label for s in ablation_specs() if s.name == name and s.build().options() == defaults), None)


def paired_with_defaults(rows: pd.DataFrame) -> pd.DataFrame:
    """Each grid variant against its own variant's default on the same cases: the cases where only it
    kept the fact (``wins``), where only the default did (``losses``), and the sign test's p."""
    survived = rows[rows.policy != "full"].pivot_table(index="case", columns="policy", values="survived", aggfunc="first")
    names = {label: parse_spec(label).name for label in survived.columns}
    references = {name: default_label(name) for name in set(names.values())}
    out = []
    for label in survived.columns:
        reference = references[names[label]]
        if reference not in survived:
            continue
        paired = survived[label].notna() & survived[reference].notna()
        mine, theirs = survived.loc[paired, label].astype(int), survived.loc[paired, reference].astype(int)
        wins, losses = int(((mine == 1) & (theirs == 0)).sum()), int(((mine == 0) & (theirs == 1)).sum())
        out.append({"policy": label, "default": reference, "cases": int(paired.sum()), "wins": wins, "losses": losses,
                    "p": sign_test(wins, losses)})
    return pd.DataFrame(out, columns=["policy", "default", "cases", "wins", "losses", "p"])


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
