"""The benchmark measures and their tables: Wilson intervals, answer matching, survival, divergence, sign tests,
pairing against defaults, the report's tables and the SVG charts."""

import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from ccviz.trace import Cycle, TokenRecord, Trace
from ccviz_bench.metrics import (
    answer_matches,
    cache_before,
    first_divergence,
    kept_before,
    repeated_ngram_rate,
    wilson_interval,
)
from ccviz_bench.plots import write_plots
from ccviz_bench.specs import titled


# ----- metrics ---------------------------------------------------------------------------------
def test_wilson_interval_matches_published_values():
    low, high = wilson_interval(5, 10)
    assert low == pytest.approx(0.2366, abs=1e-4) and high == pytest.approx(0.7634, abs=1e-4)
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@pytest.mark.parametrize(
    "output, answer, expected",
    [
        ("The patient's insurance policy number is QX-5821.", "QX-5821", True),
        ("qx5821", "QX-5821", True),
        ("QX-582", "QX-5821", False),
        ("The budget was 4,817 euros", "4817", True),
        ("The budget was 14817 euros", "4817", False),
        ("She is allergic to bee stings.", "bee stings", True),
        ("She is allergic to bees.", "bee stings", False),
        ("", "latex", False),
    ],
)
def test_answer_match_is_normalised_but_whole_word(output, answer, expected):
    assert answer_matches(output, answer) is expected


def _trace(cycles: list[tuple[int, list[int]]], n_tokens: int) -> Trace:
    """A hand-built trace: ``cycles`` are (step, kept) pairs."""
    tokens = [TokenRecord(t=t, id=t, text=str(t), source="prompt") for t in range(n_tokens)]
    built = [
        Cycle(index=i, step=step, phase="prefill", candidates=[], kept=kept, scores={}, seconds=0.0)
        for i, (step, kept) in enumerate(cycles)
    ]
    return Trace(config={}, tokens=tokens, cycles=built)


def test_survival_is_read_at_the_last_refresh_before_the_question():
    # Frozen 0-1; refreshes every 4 tokens keep the frozen prefix plus a few chosen entries.
    trace = _trace([(4, [0, 1, 2, 3]), (8, [0, 1, 3, 6, 7]), (12, [0, 1, 6, 10, 11]), (16, [0, 1, 14, 15])], 20)
    assert cache_before(trace, 10) == {0, 1, 3, 6, 7, 8, 9}  # refresh at step 8, then tokens 8 and 9
    assert kept_before(trace, [3], question_start=10) == 1  # kept at step 8; evicted at 12, after the question began
    assert kept_before(trace, [2, 3], question_start=10) == 1  # 2 was evicted at step 8
    assert kept_before(trace, [8, 9], question_start=10) == 2  # processed after the last refresh
    assert kept_before(trace, [3], question_start=8) == 1  # a refresh at the question's own step counts
    assert kept_before(trace, [3], question_start=13) == 0
    assert kept_before(trace, [2], question_start=3) == 1  # before the first refresh nothing is evicted
    with pytest.raises(ValueError):
        kept_before(trace, [12], question_start=10)


def test_first_divergence_and_repeated_ngrams():
    assert first_divergence([1, 2, 3, 4], [1, 2, 9, 4]) == 2
    assert first_divergence([1, 2, 3], [1, 2, 3]) == 3
    assert first_divergence([1, 2, 3], [1, 2]) == 2
    assert repeated_ngram_rate([1, 2, 3, 4, 5, 6], n=2) == 0.0
    assert repeated_ngram_rate([7, 7, 7, 7, 7], n=2) == pytest.approx(3 / 4)
    assert repeated_ngram_rate([1, 2], n=4) == 0.0


def test_charts_are_valid_svg_with_one_line_per_policy(tmp_path):
    summary = pd.DataFrame(
        {
            "policy": ["full", "sliding", "sliding", "tova", "tova"],
            "budget": [1.0, 0.1, 0.5, 0.1, 0.5],
            "survival": [1.0, 0.0, 0.4, 0.1, 0.6],
            "accuracy": [0.8, 0.0, 0.3, float("nan"), 0.5],
        }
    )
    written = write_plots({"retention_summary": summary}, tmp_path)
    assert sorted(p.name for p in written) == ["accuracy.svg", "survival.svg"]
    svg = ET.parse(tmp_path / "survival.svg").getroot()
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2 and len({line.get("stroke") for line in lines}) == 2  # full is the ceiling, not a line
    assert "tova" in (tmp_path / "accuracy.svg").read_text()
    survival_only = summary.assign(accuracy=float("nan"))  # accuracy_cases=0: no accuracy chart, no error
    assert [p.name for p in write_plots({"retention_summary": survival_only}, tmp_path)] == ["survival.svg"]


def test_report_keeps_significant_digits_of_sub_millisecond_refreshes():
    from ccviz_bench.tables import ratio_text

    assert [ratio_text(v) for v in (0.948, 0.0132, 2.34e-5, float("nan"))] == ["0.948x", "0.013x", "2.3e-05x", "-"]


def test_ablation_table_shows_survival_and_kept_share_and_omits_unmeasured_accuracy():
    from ccviz_bench.reports.ablation import ablation_table

    nan = float("nan")
    retention = pd.DataFrame(
        {
            "policy": ["full", "counter_causal:score=logit"],
            "survival": [1.0, 0.25],
            "survival_low": [0.8, 0.1],
            "survival_high": [1.0, 0.5],
            "kept_share": [1.0, 0.4],
            "accuracy": [nan, nan],
            "accuracy_low": [nan, nan],
            "accuracy_high": [nan, nan],
        }
    )
    perplexity = pd.DataFrame({"policy": ["full", "counter_causal:score=logit"], "delta_nll": [0.0, 0.5]})
    table = ablation_table(retention, perplexity)
    assert f"| {titled('counter_causal:score=logit')} | 25% (10-50) | 40% | +0.500 |" in table
    assert "accuracy" not in table and f"| {titled('full')} |" not in table


def test_sign_test_matches_the_binomial_tail():
    from ccviz_bench.metrics import sign_test

    assert sign_test(0, 0) == 1.0
    assert sign_test(6, 0) == pytest.approx(2 / 64)  # all 6 discordant cases one way: 2 * (1/2)^6
    assert sign_test(5, 1) == sign_test(1, 5) == pytest.approx(2 * 7 / 64)
    assert sign_test(np.int64(71), np.int64(1)) == pytest.approx(2 * 73 / 2**72)  # numpy counts: no overflow
    assert sign_test(3, 3) == 1.0


def test_variants_are_paired_with_their_own_default_on_the_same_cases_per_budget():
    from ccviz_bench.pairing import default_labels, paired_with_defaults
    from ccviz_bench.tasks.ablation import answer_forms_specs

    forms = [s.label for s in answer_forms_specs()]
    slow = "counter_causal:score=logprob,granularity=word,pool=max,left_context=3"  # the defaults, spelt out
    fast = "counter_causal_fast:score=contrast,smooth=9,granularity=clause,pool=max"
    assert {label for label in default_labels(forms).values() if label.startswith("counter_causal")} == {slow, fast}
    assert default_labels(["counter_causal", "counter_causal:score=logit", "counter_causal_fast:score=logprob"]) == {
        "counter_causal": "counter_causal",
        "counter_causal:score=logit": "counter_causal",
    }  # fast: its default not measured
    for both in (
        ["counter_causal", "counter_causal:score=logprob"],
        ["counter_causal:score=logprob", "counter_causal"],
    ):
        assert set(default_labels(both).values()) == {"counter_causal"}  # two names for the default: the plain one
    other = "counter_causal:paper=True"
    rows = pd.DataFrame(
        {
            "case": [0, 0, 0, 1, 1, 1, 2, 2, 3, 0, 0],
            "budget": [1.0] + [0.25] * 8 + [0.5] * 2,
            "policy": ["full", slow, other, "full", slow, other, slow, other, other, slow, other],  # case 3: no default
            "survived": [1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0],
        }
    )
    paired = paired_with_defaults(rows).set_index(["policy", "budget"])
    assert paired.loc[(other, 0.25), ["cases", "wins", "losses"]].tolist() == [3, 2, 1]
    assert paired.loc[(other, 0.5), ["cases", "wins", "losses"]].tolist() == [1, 0, 1]
    assert paired.loc[(slow, 0.25), ["wins", "losses", "p"]].tolist() == [0, 0, 1.0]
    assert fast not in paired.index.get_level_values("policy")
    alone = rows.assign(
        policy=rows.policy.replace(other, "counter_causal_fast:score=logprob")
    )  # no fast default measured
    assert paired_with_defaults(alone).policy.tolist() == [slow, slow]


def test_the_retention_report_pairs_variants_measured_next_to_their_default():
    from ccviz_bench.reports.retention import retention_pairing

    rows = pd.DataFrame(
        {
            "case": [0, 0, 1, 1, 2, 2],
            "budget": [0.25] * 6,
            "answered": [0, 1, 0, 1, 1, 1],
            "policy": ["counter_causal", "counter_causal:score=logit"] * 3,
        }
    )
    assert (
        f"| {titled('counter_causal:score=logit')} | J=25% | counter_causal | 3 | +2 / -0 (p 0.5) |"
        in retention_pairing(rows)
    )
    assert retention_pairing(rows[rows.policy == "counter_causal"]) == ""  # no variants, no sliding: no table
    sliding = pd.DataFrame({"case": [0, 1, 2], "budget": [0.5] * 3, "answered": [1, 0, 1], "policy": ["sliding"] * 3})
    tova = sliding.assign(policy="tova", answered=[0, 1, ""])  # a blank answer pairs with nothing
    text = retention_pairing(pd.concat([sliding, tova]))
    assert f"| {titled('tova')} | +1 / -1 (p 1) | +1 / -1 (p 1) |" in text  # per budget, then pooled over case x budget


def test_the_retention_report_marks_the_cells_of_an_unfinished_run_with_their_count():
    from ccviz_bench.reports.retention import retention_tables
    from ccviz_bench.tasks.retention import summarise

    def cells(policy: str, budget: float, answered: list[int]) -> pd.DataFrame:
        n = len(answered)
        return pd.DataFrame(
            {"case": range(n), "budget": budget, "policy": policy, "answered": answered, "survived": answered}
        ).assign(cache_size=16, kept_share=0.5, seconds=1.0)

    whole = pd.concat([cells("full", 1.0, [1] * 10), cells("sliding", 0.25, [1] * 5 + [0] * 5)])
    text = retention_tables(summarise(whole))
    assert "10 cases per cell, Wilson" in text and "n=" not in text
    partial = pd.concat([whole, cells("sliding", 0.5, [1, 0, 0])])  # a run stopped after 3 of 10 cases
    text = retention_tables(summarise(partial))
    assert "10 cases per cell (n= marks a cell with fewer" in text
    assert f"| {titled('sliding')} | 50% (24-76) | 33% (6-79), n=3 |" in text
    smaller_later = retention_tables(summarise(pd.concat([partial, cells("sliding", 0.1, [0] * 10)])))
    assert "| policy | J=10% | J=25% | J=50% |" in smaller_later  # budgets read left to right


def test_a_variant_replaces_its_default_only_by_answering_more_pooled_and_fewer_at_no_budget():
    from ccviz_bench.pairing import default_decision
    from ccviz_bench.reports.retention import retention_pairing

    def cells(policy: str, budget: float, answered: list[int]) -> pd.DataFrame:
        return pd.DataFrame({"case": range(len(answered)), "budget": budget, "policy": policy, "answered": answered})

    base, good, bad = "counter_causal_fast", "counter_causal_fast:score=contrast", "counter_causal_fast:score=logprob"
    zeros = [0] * 8
    rows = pd.concat(
        [
            *(cells(base, b, zeros) for b in (0.1, 0.25, 0.5)),
            cells(good, 0.1, [1, 1, 1, 0, 0, 0, 0, 0]),  # 3 wins per budget: no budget alone is significant,
            cells(good, 0.25, [1, 1, 1, 0, 0, 0, 0, 0]),  # 9 pooled are (p = 2 / 2**9)
            cells(good, 0.5, [1, 1, 1, 0, 0, 0, 0, 0]),
            cells(bad, 0.1, [1] * 8),  # 8 wins at one budget ...
            cells(bad, 0.25, [1] * 8),
            cells(base, 0.75, [1] * 6 + [0, 0]),  # ... but a budget where it answers significantly fewer
            cells(bad, 0.75, zeros),
            cells(bad, 0.5, zeros),
            cells(good, 0.75, [1] * 6 + [0, 0]),  # the same answers as the default there
        ]
    )
    decided = default_decision(rows).set_index("policy")
    assert decided.loc[good, ["budgets", "wins", "losses"]].tolist() == [4, 9, 0]
    assert decided.loc[good, "p"] == pytest.approx(2 / 2**9) and decided.loc[good, "replaces_default"]
    assert decided.loc[bad, "fewer_at"] == [0.75] and not decided.loc[bad, "replaces_default"]
    partial = default_decision(rows[~((rows.policy == good) & (rows.budget == 0.5))]).set_index("policy")
    assert partial.loc[good, "missing"] == 8 and not partial.loc[good, "replaces_default"]  # every cell first
    fewer_cases = default_decision(rows[~((rows.policy == good) & (rows.case == 7))]).set_index("policy")
    assert fewer_cases.loc[good, "missing"] == 4 and not fewer_cases.loc[good, "replaces_default"]
    text = retention_pairing(rows)
    assert f"| {titled(good)} | {base} | 4 | +9 / -0 (p 0.0039) | meets the rule |" in text
    assert f"| {titled(bad)} | {base} | 4 | +16 / -6 (p 0.052) | answers fewer at J=75% |" in text
    assert f"Meets the rule: `{good}` (replacing `{base}`)." in text
    assert "No variant meets the rule: every default stands" in retention_pairing(rows[rows.policy != good])


def test_ruler_variants_are_paired_by_the_share_of_required_tokens_kept_per_task_and_budget():
    from ccviz_bench.reports.needle import ruler_pairing

    word, fast = "counter_causal_fast:granularity=word,pool=max", "counter_causal_fast"
    rows = pd.DataFrame(
        {  # two cases (length, trial) of one task at one budget; no policy keeps the chain whole
            "task": ["variable_tracking"] * 5,
            "budget": [1.0, 0.25, 0.25, 0.25, 0.25],
            "length": [1000] * 5,
            "trial": [0, 0, 0, 1, 1],
            "policy": ["full", fast, word, fast, word],
            "kept_share": [1.0, 0.4, 0.8, 0.5, 0.5],
        }
    )
    text = ruler_pairing(rows)
    assert f"| variable_tracking: {word} vs {fast} | +1 / -0 (p 1) |" in text  # a tie counts for neither
    assert ruler_pairing(rows[rows.policy != word]) == ""


def test_retention_breakdown_splits_survival_by_fact_type_and_position_at_the_middle_budget():
    from ccviz_bench.reports.retention import retention_breakdown

    rows = pd.DataFrame(
        {
            "policy": ["full"] + ["sliding"] * 5,
            "budget": [1.0, 0.1, 0.25, 0.25, 0.25, 0.5],
            "fact_type": ["name", "name", "name", "number", "number", "number"],
            "position": [0.1, 0.1, 0.1, 0.5, 0.9, 0.9],
            "survived": [1, 1, 0, 0, 1, 1],
        }
    )
    text = retention_breakdown(rows)
    assert "at J=25%" in text  # budgets 10%, 25% and 50%: the middle one
    assert f"| {titled('sliding')} | 0% (1) | 50% (2) |" in text  # name, number
    assert f"| {titled('sliding')} | 0% (1) | 0% (1) | 100% (1) |" in text  # first, middle, last third
    assert f"| {titled('full')} |" not in text
