"""The benchmark harness: generators, metrics, spans, result files and the perplexity measure."""

import json
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from ccviz import CcvizError
from ccviz.cases.documents import COMBINATIONS, KINDS, make_case
from ccviz.cases.spans import prompt_tokens
from ccviz.prompts import encode_prompt
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
from ccviz_bench.report import provenance_line
from ccviz_bench.results import ResultTable, load_results
from ccviz_bench.specs import PolicySpec, parse_spec, titled
from ccviz_bench.tasks.perplexity import sequence_nll
from ccviz_bench.tasks.retention import RetentionCell, measure_cell


# ----- document generator ----------------------------------------------------------------------
def test_generator_is_deterministic_and_seeded():
    assert make_case(7) == make_case(7)
    assert make_case(7, words=900, position=0.3) == make_case(7, words=900, position=0.3)
    assert make_case(7).prompt != make_case(7, seed=1).prompt
    assert make_case(7).prompt != make_case(8).prompt


@pytest.mark.parametrize("words", [60, 400, 1500])
def test_fact_is_stated_exactly_once_and_the_question_is_last(words):
    for index in range(3 * len(COMBINATIONS)):
        case = make_case(index, words=words)
        start, end = case.answer_span
        assert case.prompt[start:end] == case.answer
        hits = re.findall(rf"(?<!\w){re.escape(case.answer)}(?!\w)", case.prompt, flags=re.IGNORECASE)
        assert len(hits) == 1, (index, case.answer)
        assert case.prompt[case.question_start :].startswith("Question: ")
        assert "\n" not in case.prompt[case.question_start :] and end < case.question_start


def test_every_kind_and_fact_type_is_covered_and_filler_does_not_repeat():
    cases = [make_case(i) for i in range(len(COMBINATIONS))]
    assert {(c.kind, c.fact_type) for c in cases} == set(COMBINATIONS)
    assert {c.kind for c in cases} == set(KINDS)
    for case in cases:
        splitter = r"\n" if case.kind == "chat" else r"(?<=[.?!:])\s+"
        units = [s for s in re.split(splitter, case.prompt) if len(s.split()) > 3]
        assert len(units) == len(set(units)) > 20


def test_position_and_length_are_parameters():
    early = make_case(3, position=0.1, words=600)
    late = make_case(3, position=0.9, words=600)
    assert early.answer_span[0] / len(early.prompt) < 0.2 < 0.8 < late.answer_span[0] / len(late.prompt)
    assert len(make_case(3, words=1200).prompt) > 1.8 * len(make_case(3, words=600).prompt)
    with pytest.raises(CcvizError, match="position"):
        make_case(0, position=1.5)
    with pytest.raises(CcvizError, match="kind/fact"):
        make_case(0, kind="meeting", fact_type="allergy")


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


# ----- spans, specs, result files -----------------------------------------------------------------
def test_spans_map_characters_to_the_engines_timesteps(tiny):
    case = make_case(5)
    tokens = prompt_tokens(tiny.tokenizer, case.prompt)
    assert tokens.ids == encode_prompt(tiny.tokenizer, case.prompt, chat=True).ids
    fact = tokens.timesteps(*case.answer_span)
    assert tiny.tokenizer.decode([tokens.ids[t] for t in fact]).strip() == case.answer
    question = tokens.first_timestep(case.question_start)
    assert tiny.tokenizer.decode(tokens.ids[question : question + 2]).startswith("Question")


def test_policy_specs_parse_and_fail_in_one_line():
    spec = parse_spec("counter_causal_fast:score=contrast,smooth=5")
    assert spec == PolicySpec("counter_causal_fast", (("score", "contrast"), ("smooth", 5)))
    assert spec.label == "counter_causal_fast:score=contrast,smooth=5"
    assert spec.build().smooth == 5
    assert parse_spec("sliding").label == "sliding"
    with pytest.raises(CcvizError, match="unknown policy"):
        parse_spec("nope")
    with pytest.raises(CcvizError, match="key=value"):
        parse_spec("counter_causal:score")
    with pytest.raises(CcvizError, match="no option"):
        parse_spec("sliding:window=3")


def test_benchmarks_measure_every_policy_and_the_papers_form_of_counter_causal():
    from ccviz.policies import POLICIES
    from ccviz_bench.specs import registered_specs

    labels = [spec.label for spec in registered_specs()]
    assert set(POLICIES) < set(labels) and len(labels) == len(set(labels))
    for name in ("counter_causal", "counter_causal_fast"):
        paper = labels[labels.index(name) + 1]  # listed next to ours, so tables show them together
        assert paper == f"{name}:paper=True"
        form = parse_spec(paper).build()
        assert (form.score, form.smooth, form.unit_defaults()) == ("logit", 0, ("token", 0))
        assert parse_spec(paper).meaning() != parse_spec(name).meaning()


def test_result_rows_are_read_in_the_benchmarks_policy_order(tmp_path):
    """Rows appended over several runs (a new default measured later) still make tables in one order."""
    path = tmp_path / "rows.csv"
    policies = ["tova", "my:spec", "counter_causal", "sliding", "full", "counter_causal:paper=True", "tova"]
    pd.DataFrame({"policy": policies, "value": range(len(policies))}).to_csv(path, index=False)
    frame = load_results(tmp_path)["rows"]
    assert frame.policy.tolist() == [
        "full",
        "sliding",
        "tova",
        "tova",
        "counter_causal",
        "counter_causal:paper=True",
        "my:spec",
    ]
    assert frame.value.tolist()[2:4] == [0, 6]  # stable: a policy's own rows keep their order


def test_result_table_resumes_and_refuses_other_settings(tmp_path):
    def table(**kw):
        return ResultTable(tmp_path, "demo", ["case", "policy", "value"], ["case", "policy"], {"words": 10}, **kw)

    first = table()
    first.add({"case": 0, "policy": "sliding", "value": 0.5})
    again = table()
    assert again.has(case=0, policy="sliding") and not again.has(case=1, policy="sliding")
    again.add({"case": 1, "policy": "sliding", "value": 0.25})
    assert again.frame()["value"].tolist() == [0.5, 0.25]
    with pytest.raises(CcvizError, match="other settings"):
        ResultTable(tmp_path, "demo", ["case", "policy", "value"], ["case", "policy"], {"words": 20})
    again.pin_policies([PolicySpec("h2o")])
    pinned = table()
    pinned.meta["policies"]["h2o"] = {"normalize": True}  # as if h2o's default had changed since
    with pytest.raises(CcvizError, match="'h2o' now means"):
        pinned.pin_policies([PolicySpec("h2o")])
    pinned.pin_policies([parse_spec("h2o:normalize=true")])  # written out, the spec is unambiguous
    assert not table(fresh=True).has(case=0, policy="sliding")
    loaded = load_results(tmp_path)
    assert loaded["meta"]["demo"]["settings"] == {"words": 10} and loaded["meta"]["demo"]["commit"]


def _run_table(monkeypatch, directory: Path, commit: str, cpu: str = "CPU A") -> ResultTable:
    """The ``runs`` table opened by a run at ``commit`` (a clean tree) on a machine whose CPU is ``cpu``."""
    import ccviz_bench.results as results

    monkeypatch.setattr(results, "source_commit", lambda: commit)
    monkeypatch.setattr(results, "git", lambda *args: "")
    monkeypatch.setattr(results, "cpu_name", lambda: cpu)
    return ResultTable(directory, "runs", ["case", "policy", "value"], ["case", "policy"], {"words": 10})


def test_a_result_table_records_each_run_that_wrote_rows_and_its_commit(tmp_path, monkeypatch):
    """A file grows over runs at several commits: each run that wrote rows keeps its own entry, a run that wrote
    none adds nothing, and a file from before runs were recorded keeps its rows under its last commit, marked."""

    def run_at(commit: str) -> ResultTable:
        return _run_table(monkeypatch, tmp_path, commit)

    legacy = run_at("aaa0001")
    legacy.add({"case": 0, "policy": "sliding", "value": 1})
    meta_path = tmp_path / "runs.json"
    meta = json.loads(meta_path.read_text())
    del meta["runs"]  # as written before this version
    meta_path.write_text(json.dumps(meta))
    second = run_at("bbb0002")
    second.add({"case": 1, "policy": "sliding", "value": 2})
    second.add({"case": 1, "policy": "tova", "value": 3})
    run_at("ccc0003")  # opens the file, writes nothing
    third = run_at("ddd0004")
    third.add({"case": 2, "policy": "tova", "value": 4})
    runs = json.loads(meta_path.read_text())["runs"]
    assert [(r["commit"], r["rows"], r["policies"], r.get("earlier", False)) for r in runs] == [
        ("aaa0001", 1, [], True),
        ("bbb0002", 2, ["sliding", "tova"], False),
        ("ddd0004", 1, ["tova"], False),
    ]
    assert all(r["started"] <= r["ended"] for r in runs)
    line = provenance_line(json.loads(meta_path.read_text()))
    assert "runs at commits `aaa0001` and earlier commits (1 rows), `bbb0002` (2 rows; " in line
    assert "`ddd0004` (1 rows; " in line and "the others did not record theirs" in line


def test_each_run_records_its_machine_and_a_file_resumed_elsewhere_names_both(tmp_path, monkeypatch):
    """The header's machine is only the latest run's: a file measured on one machine says so once, and one
    resumed on another names each run's machine, instead of claiming the latest for every row."""
    for directory, second_cpu in [(tmp_path / "same", "CPU A"), (tmp_path / "moved", "CPU B")]:
        _run_table(monkeypatch, directory, "aaa0001", "CPU A").add({"case": 0, "policy": "tova", "value": 1})
        _run_table(monkeypatch, directory, "bbb0002", second_cpu).add({"case": 1, "policy": "tova", "value": 2})
        _run_table(monkeypatch, directory, "ccc0003", "CPU C")  # opens the file (the header now says CPU C), no rows
    same = provenance_line(json.loads((tmp_path / "same" / "runs.json").read_text()))
    assert "`aaa0001` (1 rows), `bbb0002` (1 rows), on CPU A, " in same and "CPU C" not in same
    moved = provenance_line(json.loads((tmp_path / "moved" / "runs.json").read_text()))
    assert "`aaa0001` (1 rows; CPU A, " in moved and "`bbb0002` (1 rows; CPU B, " in moved and "CPU C" not in moved
    assert "(each run names its own)" in moved


def test_a_result_table_grows_columns_refills_blank_cells_and_lets_extent_settings_change(tmp_path):
    """A file from before a column was added gains it blank; a row that left a column blank is measured
    again and replaced (not duplicated); settings that only count rows may change between runs."""
    old = ResultTable(tmp_path, "grow", ["case", "policy", "value"], ["case", "policy"], {"words": 10, "cases": 2})
    old.add({"case": 0, "policy": "tova", "value": 1})
    columns = ["case", "policy", "value", "answered"]
    grown = ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 10, "cases": 5}, extent=("cases",))
    assert grown.has(case=0, policy="tova") and grown.lacks("answered", case=0, policy="tova")
    assert not grown.lacks("answered", case=1, policy="tova")  # no row: missing, not lacking
    grown.add({"case": 1, "policy": "tova", "value": 2, "answered": 0})
    grown.add({"case": 0, "policy": "tova", "value": 3, "answered": 1})  # the refill replaces the row
    frame = grown.frame()
    assert sorted(zip(frame["case"], frame["value"], frame["answered"])) == [(0, 3, 1), (1, 2, 0)]
    again = ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 10, "cases": 9}, extent=("cases",))
    assert not again.lacks("answered", case=0, policy="tova") and again.meta["rows"] == 2
    assert again.meta["settings"]["cases"] == 9
    fewer = ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 10, "cases": 3}, extent=("cases",))
    assert fewer.meta["settings"]["cases"] == 9  # the file still holds what the larger run measured
    with pytest.raises(CcvizError, match="other settings"):  # what a row means still may not change
        ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 20, "cases": 9}, extent=("cases",))
    with pytest.raises(CcvizError, match="other columns"):  # a column gone is not a column added
        ResultTable(
            tmp_path, "grow", ["case", "policy"], ["case", "policy"], {"words": 10, "cases": 9}, extent=("cases",)
        )


def test_a_nan_written_to_a_result_table_reads_back_as_a_number(tmp_path):
    """csv writes a float NaN as "nan": it reads back as a missing number, not as text in a float column."""
    rows = ResultTable(tmp_path, "timed", ["policy", "n", "ratio"], ["policy", "n"], {})
    rows.add({"policy": "sliding", "n": 512, "ratio": 0.25})
    rows.add({"policy": "sliding", "n": 16384, "ratio": float("nan")})  # past the forward baseline
    frame = load_results(tmp_path)["timed"]
    assert frame["ratio"].dtype == float and frame["ratio"].isna().tolist() == [False, True]
    assert frame["policy"].tolist() == ["sliding", "sliding"]


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
    from ccviz_bench.report import _ratio

    assert [_ratio(v) for v in (0.948, 0.0132, 2.34e-5, float("nan"))] == ["0.948x", "0.013x", "2.3e-05x", "-"]


def test_ablation_table_shows_survival_and_kept_share_and_omits_unmeasured_accuracy():
    from ccviz_bench.report import ablation_table

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
    from ccviz_bench.report import retention_pairing

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
    from ccviz_bench.report import retention_tables
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
    from ccviz_bench.report import retention_pairing

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


def test_ruler_variants_are_paired_by_the_share_of_required_tokens_kept_per_task_and_budget():
    from ccviz_bench.report import ruler_pairing

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
    from ccviz_bench.report import retention_breakdown

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


def test_every_task_is_described_once_in_the_registry():
    """One entry per task: unique names, titles and result files, and every part it names exists."""
    from ccviz_bench import registry

    names = [entry.name for entry in (*registry.TASKS, *registry.PROBES)]
    titles = [entry.title for entry in registry.TASKS]
    files = [stem for entry in registry.TASKS for stem in entry.files]
    assert len(set(names)) == len(names) and len(set(titles)) == len(titles) and len(set(files)) == len(files)
    for entry in registry.TASKS:
        refs = [entry.run, entry.tables, entry.default_labels, entry.figures]
        refs += [ref for part in entry.parts for ref in (part.summarise, part.gaps)]
        refs += [entry.charts.draw] if entry.charts else []
        assert all(callable(registry.load(ref)) for ref in refs), entry.name
        for part in entry.parts:
            assert registry.part_of(part.files[0]) is part and hasattr(registry.load(part.settings), "quick")
        assert (entry.settings is None) == (not entry.takes_set)
    assert all(hasattr(registry.load(probe.settings), "quick") for probe in registry.PROBES)
    assert registry.part_of("not_a_result") is None


def test_one_budget_rule_labels_every_budget():
    from ccviz.engine.budget import budget_text, is_share

    assert is_share(1.0) and not is_share(2)
    assert budget_text(0.25) == "J=25%" and budget_text(512.0) == "J=512"
    assert budget_text(0.1, "{:.0%} of the document", "{:d} tokens") == "10% of the document"
    assert budget_text(1024, "{:.0%} of the document", "{:d} tokens") == "1024 tokens"


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
