"""Task 5, ablation: which form of counter-causal surprise keeps what matters?

The score grid: {full, fast} x {logit, logprob, contrast} x min_gap {0, 2} x smooth {off, on} = 24
specs. Beyond the paper (:func:`beyond_paper_specs`): the unit of the keep decision (token, word or
sentence, pooled by max or mean), recency hybrids (recent = J/4, J/2), wider smoothing, the layer
split (``from_layer``) and the banded pass (``window``), crossed with the scores that matter, plus the
attention policies by word. Each spec is a screen: answers (and survival) on 20 rare-fact cases at one budget and
perplexity on one segment; the leaders are then confirmed on the full retention set at every budget
and on perplexity with attention sinks (docs/policies.md#why-the-defaults-are-what-they-are).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ccviz.capture import decoder_layers
from ccviz.choices import SURPRISE_SCORES
from ccviz.models import LoadedModel
from ccviz.policies import POLICIES

from ..dispatch import Workers
from ..registry import BenchTask, TaskRun
from ..reports.ablation import ablation_section
from ..specs import PolicySpec, parse_spec
from . import perplexity, retention

ABLATED_POLICIES = ("counter_causal", "counter_causal_fast")  # all layers, and the fast last-layer variant
MIN_GAPS = (0, 2)
# Off, and the 5-neighbour window that helped in the method's first data point (docs/method.md#why-calibrated-scores).
SMOOTHING = (0, 5)
RETENTION_BUDGET = 0.25
PERPLEXITY_BUDGET = 128
# 24 specs x 100 cases would be ~3 CPU-hours; the ablation screens variants on answers (with survival
# beside them) over fewer cases, and on the first perplexity segment; leaders are confirmed on all 100.
RETENTION_CASES = 20
PERPLEXITY_SEGMENTS = 1


UNITS = (
    (),
    (("granularity", "word"), ("pool", "max")),
    (("granularity", "word"), ("pool", "mean")),
    (("granularity", "sentence"), ("pool", "max")),
    (("granularity", "sentence"), ("pool", "mean")),
)
RECENT_SHARES = (0, 0.25, 0.5)  # recent = 0, J/4, J/2
WIDE_SMOOTHING = 9
WINDOWS = (32, 128)  # W; at the screen's J = 25% of ~660 tokens a refresh sees ~210 candidates, so 512 changes nothing
LAYER_SPLITS = (0.25, 0.5, 0.75, 1.0)  # from_layer as a share of L - 1 (0 is the full variant itself)


def spelled_out(spec: PolicySpec) -> PolicySpec:
    """``spec`` with what it leaves unsaid written out where today's defaults differ from the grid's base
    (single tokens, no smoothing, words without left context), so a cell of the grid keeps its label and
    its meaning whatever the defaults become (docs/policies.md#why-the-defaults-are-what-they-are)."""
    cls, said = POLICIES[spec.name], dict(spec.options)
    unit = said.get("granularity", "token")
    base = {"smooth": 0} if any(f.name == "smooth" and f.default != 0 for f in fields(cls)) else {}
    if unit == "word" and cls.default_left_context:
        base["left_context"] = 0
    if cls.default_granularity != "token":
        base["granularity"] = "token"
    return PolicySpec(spec.name, (*spec.options, *((k, v) for k, v in base.items() if k not in said)))


def ablation_specs() -> list[PolicySpec]:
    """The score grid (the paper's options), token by token."""
    return [
        spelled_out(PolicySpec(variant, (("score", score), ("min_gap", gap), ("smooth", smooth))))
        for variant, score, gap, smooth in itertools.product(ABLATED_POLICIES, SURPRISE_SCORES, MIN_GAPS, SMOOTHING)
    ]


def _recent(share: float) -> tuple[tuple[str, float], ...]:
    return (("recent_share", share),) if share else ()


def beyond_paper_specs(num_layers: int) -> list[PolicySpec]:
    """The new axes, each crossed with the scores that matter (``num_layers``: the model's L).

    - units: fast/logit by word and sentence, max and mean; fast/contrast by word and sentence (max);
      the full variant (logprob, ours, and logit, the paper's) by word;
    - recency hybrids: recent J/4 and J/2 for fast/logit and fast/contrast, and with word units for
      fast/logit; recent J/4 for the full variant;
    - wider smoothing (9) for both fast scores, crossed with recent J/4 and J/2 and with word units
      for contrast (the region the score grid never measured);
    - the layer split: from_layer l in {L/4, L/2, 3L/4, L-1} for logit and logprob;
    - the banded pass: window {32, 128} for fast/logit, 128 for full/logprob;
    - the attention policies by token (their defaults, to pair with) and by word, TOVA by sentence,
      and the recency window.
    """
    fast, full = "counter_causal_fast", "counter_causal"
    word, word_mean, sentence, sentence_mean = UNITS[1:]
    specs = [PolicySpec(fast, (("score", "logit"), *unit)) for unit in (word, word_mean, sentence, sentence_mean)]
    specs += [PolicySpec(fast, (("score", "contrast"), *unit)) for unit in (word, sentence)]
    specs += [PolicySpec(full, (("score", score), *word)) for score in ("logprob", "logit")]
    for score, share in itertools.product(("logit", "contrast"), RECENT_SHARES[1:]):
        specs.append(PolicySpec(fast, (("score", score), *_recent(share))))
    specs += [PolicySpec(fast, (("score", "logit"), *word, *_recent(share))) for share in RECENT_SHARES[1:]]
    specs.append(PolicySpec(full, (("score", "logprob"), *_recent(0.25))))
    for score in ("logit", "contrast"):
        specs += [
            PolicySpec(fast, (("score", score), ("smooth", WIDE_SMOOTHING), *_recent(share))) for share in RECENT_SHARES
        ]
    specs.append(PolicySpec(fast, (("score", "contrast"), ("smooth", WIDE_SMOOTHING), *word)))
    for score, share in itertools.product(("logit", "logprob"), LAYER_SPLITS):
        specs.append(PolicySpec(full, (("score", score), ("from_layer", round(share * (num_layers - 1))))))
    specs += [PolicySpec(fast, (("score", "logit"), ("window", window))) for window in WINDOWS]
    specs.append(PolicySpec(full, (("score", "logprob"), ("window", WINDOWS[-1]))))
    for name in ("tova", "h2o", "snapkv"):
        specs += [PolicySpec(name), PolicySpec(name, word)]
    specs += [PolicySpec("tova", sentence), PolicySpec("sliding")]
    return [spelled_out(spec) for spec in specs]


LEFT_CONTEXTS = (3, 8)  # words before a word that ride with it: a few, or most of a clause
SENTENCE_SHARE = 0.5  # the two-level budget: half the scored places to whole sentences first


def answer_forms_specs() -> list[PolicySpec]:
    """Forms aimed at answers (docs/notebook/readings.md#why-a-kept-fact-goes-unanswered), screened on answers next
    to the references they are paired with: the recency window, TOVA, each policy's default and the
    paper's form, and the units they grow from.

    - a surprising word with its left context (k = 3 and 8 words, within its clause), by logit and
      contrast, and for the full variant;
    - clause units (split at , : ; as well as sentence ends);
    - contrast and wider smoothing (9) with word, clause and sentence units;
    - the two-level budget: half the scored places to the best whole sentences, the rest by word.
    """
    fast, full = "counter_causal_fast", "counter_causal"
    word, sentence = UNITS[1], UNITS[3]
    clause = (("granularity", "clause"), ("pool", "max"))
    wide = (("smooth", WIDE_SMOOTHING),)
    references = [PolicySpec("sliding"), PolicySpec("tova"), *ablation_specs()[:1]]  # the paper's form: logit
    references += [  # the token-level defaults these grew from (today's are among the specs below)
        PolicySpec(full, (("score", "logprob"), ("min_gap", 0), ("smooth", 0))),
        PolicySpec(fast, (("score", "logit"), ("min_gap", 0), ("smooth", 0))),
    ]
    specs = [
        PolicySpec(fast, (("score", score), *unit)) for score in ("logit", "contrast") for unit in (word, sentence)
    ]
    specs += [PolicySpec(fast, (("score", "contrast"), *wide, *unit)) for unit in (word, clause, sentence)]
    specs += [PolicySpec(fast, (("score", score), *clause)) for score in ("logit", "contrast")]
    specs += [
        PolicySpec(fast, (("score", score), *word, ("left_context", k)))
        for score in ("logit", "contrast")
        for k in LEFT_CONTEXTS
    ]
    specs += [
        PolicySpec(fast, (("score", score), *word, ("sentence_share", SENTENCE_SHARE)))
        for score in ("logit", "contrast")
    ]
    specs += [PolicySpec(full, (("score", "logprob"), *unit)) for unit in (sentence, (*word, ("left_context", 3)))]
    return [spelled_out(spec) for spec in references + specs]


def quick_beyond_specs(num_layers: int) -> list[PolicySpec]:
    """One spec per new axis, for ``--quick``."""
    return [
        spelled_out(PolicySpec("counter_causal_fast", (*UNITS[3], ("recent_share", 0.25), ("window", 8)))),
        spelled_out(PolicySpec("counter_causal", (("from_layer", num_layers - 1),))),
    ]


def default_labels(measured: set[str], quick: bool) -> set[str]:
    """The labels a default ablation run measures, for the model the ``measured`` labels came from:
    the layer split's largest ``from_layer`` is L - 1, so it tells the model's depth (SmolLM2's 30 if none)."""
    splits = [parse_spec(label).build().options().get("from_layer", 0) for label in measured if "from_layer=" in label]
    layers = max(splits, default=29) + 1
    specs = [*ablation_specs(), *beyond_paper_specs(layers), *answer_forms_specs(), *quick_beyond_specs(layers)]
    return {spec.label for spec in specs}


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
    """Both tasks over the grid (or ``specs``), written as ``ablation_retention`` / ``ablation_perplexity``.

    ``quick`` measures two opposite corners of the score grid, which between them use every option
    value, and one spec of each new axis.
    """
    grid = ablation_specs()
    layers = len(decoder_layers(lm.model))
    every = list(dict.fromkeys([*grid, *beyond_paper_specs(layers), *answer_forms_specs()]))
    specs = specs or ([grid[0], grid[-1], *quick_beyond_specs(layers)] if quick else every)
    if quick:
        r, p = retention.RetentionSettings.quick(), perplexity.PerplexitySettings.quick()
    else:
        r = replace(retention.RetentionSettings(), cases=RETENTION_CASES, accuracy_cases=RETENTION_CASES)
        p = replace(perplexity.PerplexitySettings(), segments=PERPLEXITY_SEGMENTS)
    return {
        "retention": retention.run(
            lm,
            specs,
            replace(r, budgets=(RETENTION_BUDGET,)),
            out,
            name="ablation_retention",
            fresh=fresh,
            log=log,
            workers=workers,
            model_args=model_args,
        ),
        "perplexity": perplexity.run(
            lm,
            specs,
            replace(p, budgets=(min(PERPLEXITY_BUDGET, p.tokens // 2),)),
            out,
            name="ablation_perplexity",
            fresh=fresh,
            log=log,
        ),
    }


def run_task(task: TaskRun) -> None:
    """``bench ablation``: its own policies and settings unless ``--policy`` names others."""
    task.run_own(run)


TASK = BenchTask(
    "ablation",
    "Score-variant ablation",
    run_task,
    (replace(retention.PART, name="ablation_retention"), replace(perplexity.PART, name="ablation_perplexity")),
    ablation_section,
    default_labels,
    takes_set=False,
    quick_subset=True,
)
