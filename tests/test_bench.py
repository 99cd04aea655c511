"""The benchmark tasks on real runs: retention, perplexity, efficiency's sizes and shared fills."""

import math

import pytest
import torch

from ccviz.cases.documents import make_case
from ccviz.prompts import encode_prompt
from ccviz_bench.results import load_results
from ccviz_bench.specs import PolicySpec
from ccviz_bench.tasks.perplexity import sequence_nll
from ccviz_bench.tasks.retention import RetentionCell, measure_cell


# ----- the measures on real runs -----------------------------------------------------------------
def test_retention_survival_follows_the_sliding_window_rule(tiny):
    """Under a sliding window the fact survives iff it is within J of the last refresh step before the
    question: an analytic check of the whole measurement path (spans, trace, metric)."""
    for index in range(4):
        row = measure_cell(tiny, RetentionCell(index, 120, 0, PolicySpec("sliding"), 0.3, False, 1))
        J, h = row["cache_size"], row["chunk_size"]
        last_refresh = row["question_start"] // h * h
        expected = row["fact_start"] >= last_refresh - J  # the fact's tokens are consecutive: its first decides
        assert row["survived"] == int(expected), (index, row)


@pytest.mark.parametrize("fixture", ["tiny", "smollm"])
def test_perplexity_under_full_equals_the_models_teacher_forced_nll(fixture, request):
    lm = request.getfixturevalue(fixture)
    text = make_case(2, words=60).prompt
    total, count = sequence_nll(lm, text, policy="full", cache_size=32)
    ids = torch.tensor([encode_prompt(lm.tokenizer, text, chat=False).ids])
    with torch.inference_mode():
        logits = lm.model(input_ids=ids).logits[0, :-1].float()
    expected = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum").item()
    assert count == ids.shape[1] - 1
    assert total / count == pytest.approx(expected / count, abs=1e-4)  # nats per token


# Slow: 30-45 s on SmolLM2; the default run checks the full cache's NLL on SmolLM2 and the task on the tiny model.
@pytest.mark.slow
def test_perplexity_rises_when_a_small_window_forgets_the_context(smollm):
    text = make_case(2, words=60).prompt
    full, count = sequence_nll(smollm, text, policy="full", cache_size=32)
    evicted, _ = sequence_nll(smollm, text, policy="sliding", cache_size=16)
    assert evicted / count > full / count + 0.05  # the refreshes really happen inside the measure


# ----- efficiency: which sizes each policy is timed at, and the fitted exponent ------------------------
def test_quadratic_passes_stop_early_and_others_go_to_every_size():
    from ccviz_bench.tasks.efficiency import timed_sizes

    settings = {"sizes": [512, 4096, 8192, 32768], "full_max_n": 8192, "attention_max_n": 4096}
    assert timed_sizes("counter_causal_fast", settings) == [512, 4096, 8192, 32768]
    assert timed_sizes("counter_causal_fast:window=128", settings) == [512, 4096, 8192, 32768]
    assert timed_sizes("counter_causal:window=512", settings) == [512, 4096, 8192]  # the full variant, banded or not
    assert timed_sizes("counter_causal", settings) == [512, 4096, 8192]
    assert timed_sizes("tova", settings) == [512, 4096] and timed_sizes("h2o", settings) == [512, 4096]
    assert timed_sizes("sliding", settings) == [512, 4096, 8192, 32768]
    assert timed_sizes("tova", {"sizes": [512, 1024]}) == [512, 1024]  # metadata from before the limits


def test_fitted_exponent_recovers_a_power_law_and_skips_missing_times():
    import pandas as pd

    from ccviz_bench.tasks.efficiency import fitted_exponent

    n = pd.Series([512, 1024, 2048, 4096])
    assert fitted_exponent(n, 3e-9 * n.astype(float) ** 2) == pytest.approx(2.0)
    assert fitted_exponent(n, pd.Series([1e-3, float("nan"), 4e-3, 8e-3])) == pytest.approx(1.0)
    assert math.isnan(fitted_exponent(n[:1], pd.Series([1.0])))


def test_policies_that_only_read_the_cache_share_one_fill():
    from ccviz_bench.specs import parse_spec
    from ccviz_bench.tasks.efficiency import fill_groups

    specs = [
        parse_spec(t)
        for t in (
            "sliding",
            "tova",
            "counter_causal",
            "counter_causal_fast",
            "counter_causal_fast:window=128",
            "counter_causal:from_layer=7",
            "h2o",
            "sliding:granularity=word",
        )
    ]
    policies = {s.label: s.build() for s in specs}
    groups = [[s.label for s in group] for group in fill_groups(specs, policies, 30)]
    assert ["tova"] in groups and ["h2o"] in groups  # they capture attention or keep per-pass state
    # the fast variant's fill stores H^(29), enough for every policy that needs less
    assert ["counter_causal_fast", "sliding", "counter_causal", "counter_causal_fast:window=128"] in groups
    assert ["counter_causal:from_layer=7"] in groups and ["sliding:granularity=word"] in groups
    assert sorted(label for group in groups for label in group) == sorted(policies)


def test_retention_measures_again_the_rows_that_were_not_answered(tiny, tmp_path):
    """A results file measured without answers gains them on the next run: each row once, now answered."""
    from dataclasses import replace

    from ccviz_bench.tasks import retention

    settings = replace(retention.RetentionSettings.quick(), accuracy_cases=0)
    specs = [PolicySpec("sliding")]
    retention.run(tiny, specs, settings, tmp_path, log=lambda _: None)
    before = load_results(tmp_path)["retention"]
    assert before["answered"].isna().all() and len(before) == 4
    retention.run(tiny, specs, replace(settings, accuracy_cases=settings.cases), tmp_path, log=lambda _: None)
    after = load_results(tmp_path)["retention"]
    assert len(after) == 4 and after["answered"].isin([0, 1]).all()
    assert sorted(after["case"].astype(str) + after["policy"]) == sorted(before["case"].astype(str) + before["policy"])
    summary = load_results(tmp_path)["retention_summary"]
    assert (summary["accuracy_n"] == 2).all()
