"""The question's protocol in the harness: every task that asks a question asks it apart from its document, kept
out of eviction by default (the field's protocol) and evictable under ``protect_question=False`` (the paper's);
labels, result files, relabelling, pairing, the report and the charts say which ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ccviz import CcvizError
from ccviz.cases.documents import make_case
from ccviz.cases.haystack import make_haystack_case
from ccviz.cases.spans import prepare
from ccviz.prompts import encode_prompt
from ccviz_bench.pairing import default_labels, paired_protocols, paired_with
from ccviz_bench.plots import colours
from ccviz_bench.reports.ablation import ablation_table
from ccviz_bench.reports.retention import retention_tables
from ccviz_bench.results import ResultTable, load_results
from ccviz_bench.specs import PolicySpec, in_policy_order, parse_spec, split_protocol, titled, with_protocol
from ccviz_bench.tables import protocol_pairing
from ccviz_bench.tasks.retention import RetentionCell, measure_cell, summarise
from ccviz_bench.tasks.survival import run_case

ROOT = Path(__file__).resolve().parents[1]
PAPER = "protect_question=False"


def protocol_columns(trace, prepared) -> dict:
    """The run's protocol, as a retention row's extra columns: what the task's own path ran."""
    return {
        "protect": trace.config["protect_question"],
        "asked_at": trace.question_start,
        "expected_at": prepared.question_start,
        "kept_apart": len(trace.kept_question),
        "ids_same": [tok.id for tok in trace.tokens[: len(prepared.tokens.ids)]] == prepared.tokens.ids,
    }


# ----- the run -----------------------------------------------------------------------------------
def test_a_retention_run_keeps_the_question_apart_by_default_on_the_prompts_own_tokens(tiny):
    cell = RetentionCell(0, 60, 0, PolicySpec("sliding"), 0.3, False, 1, protocol_columns)
    row = measure_cell(tiny, cell)
    assert row["protect"] is True and row["asked_at"] == row["expected_at"] == row["question_start"]
    assert row["kept_apart"] > 0 and row["ids_same"]
    assert row["question_evicted"] == 0  # kept apart: never evicted
    paper = measure_cell(tiny, RetentionCell(0, 60, 0, parse_spec(f"sliding:{PAPER}"), 0.3, False, 1, protocol_columns))
    assert paper["protect"] is False and paper["asked_at"] == row["asked_at"] and paper["kept_apart"] == 0
    assert paper["ids_same"] and paper["policy"] == f"sliding:{PAPER}"


def test_a_needle_run_asks_its_question_apart_under_the_specs_protocol(tiny):
    case = make_haystack_case(tiny.tokenizer, "needle", 300, 0.5, kind="number")
    prepared = prepare(tiny.tokenizer, case.prompt, case.question_start, case.required)
    assert prepared.document + "\n\n" + prepared.question == case.prompt
    for label, protect in (("tova", True), (f"tova:{PAPER}", False)):
        trace = run_case(tiny, prepared, parse_spec(label), 0.25, 1).trace
        assert trace.config["protect_question"] is protect and trace.question_start == prepared.question_start
        assert [tok.id for tok in trace.tokens[: len(prepared.tokens.ids)]] == prepared.tokens.ids


def test_asking_apart_encodes_each_tasks_prompt_token_for_token(tiny):
    cases = [make_case(i, words=60, seed=0) for i in range(3)]
    asked = [(c.prompt, c.question_start, [c.answer_span]) for c in cases]
    for task, depth in (("needle", 0.0), ("multikey", 1.0), ("variable_tracking", None)):
        haystack = make_haystack_case(tiny.tokenizer, task, 300, depth, kind="number")
        asked.append((haystack.prompt, haystack.question_start, haystack.required))
    for prompt, start, spans in asked:
        prepared = prepare(tiny.tokenizer, prompt, start, spans)
        encoded = encode_prompt(tiny.tokenizer, prepared.document, chat=True, question=prepared.question)
        assert encoded.ids == encode_prompt(tiny.tokenizer, prompt, chat=True).ids
        assert encoded.question_start == prepared.question_start


def test_a_prompt_whose_question_does_not_follow_a_blank_line_is_refused(tiny):
    with pytest.raises(ValueError, match="blank line"):
        prepare(tiny.tokenizer, "The code is 41.\nQuestion: the code?", 16, [(12, 14)])


# ----- labels and result files ---------------------------------------------------------------------
def test_the_protocol_is_a_spec_key_written_last_and_unsaid_when_kept_apart():
    assert parse_spec(f"counter_causal_fast:{PAPER},paper=True").label == f"counter_causal_fast:paper=True,{PAPER}"
    assert parse_spec("sliding:protect_question=True").label == "sliding"
    assert parse_spec(f"sliding:{PAPER}").run_settings(64) == {"protect_question": False}
    with pytest.raises(CcvizError, match="true or false"):
        parse_spec("sliding:protect_question=3")
    assert split_protocol(f"a:b=1,{PAPER}") == ("a:b=1", False) and split_protocol("my:spec") == ("my:spec", True)
    assert with_protocol("sliding", False) == f"sliding:{PAPER}" and with_protocol(f"tova:{PAPER}", True) == "tova"
    paper = parse_spec(f"snapkv:{PAPER}")
    assert paper.meaning() == PolicySpec("snapkv").meaning()  # no question asked: the protocol changes nothing
    assert paper.meaning(asked=True) == {**PolicySpec("snapkv").meaning(), "protect_question": False}
    assert PolicySpec("snapkv").meaning(asked=True)["protect_question"] is True
    assert PolicySpec("full").meaning(asked=True) == {}  # it never evicts


def test_rows_measured_before_the_protocol_existed_are_not_mixed_with_either(tmp_path):
    table = ResultTable(tmp_path, "retention", ["case", "policy"], ["case", "policy"], {})
    table.meta["policies"] = {"sliding": {}, "full": {}}  # pinned when the question streamed
    with pytest.raises(CcvizError, match="'sliding' now means"):
        table.pin_policies([PolicySpec("full"), PolicySpec("sliding")], asked=True)
    table.pin_policies([PolicySpec("full"), PolicySpec("sliding")])  # perplexity asks no question: unchanged


def test_relabelling_gives_rows_that_streamed_the_question_the_papers_protocol(tmp_path):
    pinned = {
        "full": {},
        "sliding": {},
        "counter_causal_fast": {"score": "logit", "min_gap": 0, "smooth": 0, "recent": 0},  # the paper's form
        "tova:granularity=word,pool=max": {"granularity": "word", "pool": "max"},
    }
    labels = list(pinned)
    rows = pd.read_csv(ROOT / "bench/results/retention.csv", nrows=len(labels)).assign(policy=labels)
    rows.to_csv(tmp_path / "retention.csv", index=False)
    runs = [{"commit": "abc", "rows": 4, "policies": labels}]
    meta = {"task": "retention", "policies": pinned, "runs": runs}
    (tmp_path / "retention.json").write_text(json.dumps(meta), encoding="utf-8")
    no_question = pd.read_csv(ROOT / "bench/results/perplexity.csv", nrows=2).assign(policy=["full", "sliding"])
    no_question.to_csv(tmp_path / "perplexity.csv", index=False)
    (tmp_path / "perplexity.json").write_text(json.dumps({"policies": {"full": {}, "sliding": {}}}), encoding="utf-8")
    script = [sys.executable, str(ROOT / "scripts/bench/relabel.py"), str(tmp_path)]
    done = subprocess.run(script, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    relabelled = pd.read_csv(tmp_path / "retention.csv").policy.tolist()
    assert relabelled == [
        "full",
        f"sliding:{PAPER}",
        f"counter_causal_fast:paper=True,{PAPER}",
        f"tova:granularity=word,pool=max,{PAPER}",
    ]
    assert pd.read_csv(tmp_path / "perplexity.csv").policy.tolist() == ["full", "sliding"]  # no question asked
    meta = json.loads((tmp_path / "retention.json").read_text())
    assert meta["runs"][0]["policies"] == relabelled  # the runs' record names the rows as they are now
    table = ResultTable(tmp_path, "retention", list(rows.columns), ["case", "policy"], {})
    table.pin_policies([parse_spec(label) for label in relabelled], asked=True)  # what a run checks first
    again = subprocess.run(script, capture_output=True, text=True)
    assert again.returncode == 0 and again.stdout == ""  # nothing left to relabel


def test_twins_are_listed_together_in_policy_order():
    frame = pd.DataFrame({"policy": [f"tova:{PAPER}", "my:spec", f"sliding:{PAPER}", "tova", "full", "sliding"]})
    assert in_policy_order(frame).policy.tolist() == [
        "full",
        "sliding",
        f"sliding:{PAPER}",
        "tova",
        f"tova:{PAPER}",
        "my:spec",
    ]


# ----- pairing and the report ----------------------------------------------------------------------
def _rows(answers: dict[str, list[int]], budget: float = 0.25) -> pd.DataFrame:
    return pd.concat(
        pd.DataFrame({"case": range(len(a)), "budget": budget, "policy": label, "answered": a})
        for label, a in answers.items()
    ).assign(fact_type="number", position=0.5)


def test_pairing_stays_within_a_protocol_and_twins_pair_across():
    paper = f"counter_causal:paper=True,{PAPER}"
    labels = ["counter_causal", f"counter_causal:{PAPER}", "counter_causal:paper=True", paper]
    assert default_labels(labels) == {
        "counter_causal": "counter_causal",
        "counter_causal:paper=True": "counter_causal",
        f"counter_causal:{PAPER}": f"counter_causal:{PAPER}",
        paper: f"counter_causal:{PAPER}",
    }
    rows = _rows(
        {
            "sliding": [0, 0, 1, 1],
            f"sliding:{PAPER}": [0, 0, 0, 1],
            "tova": [1, 1, 1, 0],
            f"tova:{PAPER}": [1, 0, 0, 0],
            f"h2o:{PAPER}": [1, 1, 1, 1],  # no plain twin: paired with nothing across protocols
        }
    )
    against = paired_with(rows).set_index("policy")
    assert against.loc["tova", "default"] == "sliding" and against.loc[f"tova:{PAPER}", "default"] == f"sliding:{PAPER}"
    twins = paired_protocols(rows).set_index("policy")
    assert set(twins.index) == {"sliding", "tova"}
    assert twins.loc["tova", ["default", "cases", "wins", "losses", "total", "reference_total"]].tolist() == [
        f"tova:{PAPER}",
        4,
        2,
        0,
        3.0,
        1.0,
    ]


def test_the_report_says_each_tables_protocol_and_pairs_the_twins():
    streamed = _rows({"full": [1, 1, 1, 1], f"sliding:{PAPER}": [0, 0, 0, 1], f"tova:{PAPER}": [1, 0, 0, 0]})
    streamed = streamed.assign(budget=streamed.budget.where(streamed.policy != "full", 1.0), survived=1)
    streamed = streamed.assign(cache_size=16, kept_share=1.0, seconds=1.0)
    text = retention_tables(summarise(streamed), streamed)
    assert "question evictable (the paper's protocol)" in text and "question kept apart" not in text
    assert "spec by spec" not in text  # nothing measured under both
    both = pd.concat([streamed, streamed[streamed.policy == f"tova:{PAPER}"].assign(policy="tova", answered=1)])
    text = retention_tables(summarise(both), both)
    assert f"question kept apart (the field's protocol); rows labelled `{PAPER}`: question evictable" in text
    assert f"| {titled('tova')} | J=25% | 4 | 100% | 25% | +3 / -0 (p 0.25) |" in text
    assert protocol_pairing(streamed) == ""


def test_the_ablation_table_sets_perplexity_on_the_spec_under_either_protocol():
    summary = pd.DataFrame(
        {
            "policy": [f"tova:{PAPER}"],
            "survival": [0.5],
            "survival_low": [0.1],
            "survival_high": [0.9],
            "kept_share": [0.5],
            "accuracy": [float("nan")],
        }
    )
    perplexity = pd.DataFrame({"policy": ["full", "tova", "h2o"], "delta_nll": [0.0, 0.25, 0.5]})
    text = ablation_table(summary, perplexity)
    assert f"| {titled(f'tova:{PAPER}')} | 50% (10-90) | 50% | +0.250 |" in text
    assert f"| {titled('h2o')} | - | - | +0.500 |" in text  # perplexity alone keeps its own row


def test_a_spec_keeps_its_colour_under_either_protocol_unless_both_are_charted():
    one = colours([[f"sliding:{PAPER}", f"tova:{PAPER}"], ["sliding", "tova"]])
    assert one[f"sliding:{PAPER}"] == one["sliding"] != one["tova"] == one[f"tova:{PAPER}"]
    both = colours([["sliding", f"sliding:{PAPER}"], ["sliding"]])
    assert both["sliding"] != both[f"sliding:{PAPER}"]


def test_the_published_results_name_their_protocol():
    """Everything committed before the protocol was a setting streamed the question, and its label says so;
    a plain label, measured since with the question kept apart, always has that twin."""
    for name in ("retention", "needle", "ruler", "ablation_retention"):
        labels = set(load_results(ROOT / "bench" / "results")[name].policy) - {"full"}
        evictable = {split_protocol(label)[0] for label in labels if not split_protocol(label)[1]}
        assert evictable, name
        assert all(split_protocol(label)[0] in evictable for label in labels), name
