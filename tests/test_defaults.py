"""The counter-causal defaults chosen by answers, the paper's form one option away, and results that keep
their meaning when a default changes (scripts/bench/relabel.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ccviz import RunConfig, generate
from ccviz.errors import CcvizError
from ccviz.policies import make_policy
from ccviz_bench.results import ResultTable
from ccviz_bench.specs import parse_spec, registered_specs

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "The patient, Mr Rowe, is allergic to amoxicillin. He takes 20 mg of lisinopril daily, with food."


def unit_of(config: RunConfig) -> tuple:
    resolved = config.resolved()
    return resolved.granularity, resolved.left_context, resolved.options.get("score"), resolved.options.get("smooth")


@pytest.mark.parametrize(
    "settings, unit",
    [
        (dict(policy="counter_causal"), ("word", 3, "logprob", 0)),
        (dict(policy="counter_causal_fast"), ("clause", 0, "contrast", 9)),
        (dict(policy="counter_causal", policy_options={"paper": True}), ("token", 0, "logit", 0)),
        (dict(policy="counter_causal_fast", policy_options={"paper": True}), ("token", 0, "logit", 0)),
        (dict(policy="counter_causal", granularity="token"), ("token", 0, "logprob", 0)),  # context: word units only
        (dict(policy="counter_causal", granularity="word", left_context=0), ("word", 0, "logprob", 0)),
        (dict(policy="counter_causal_fast", granularity="word"), ("word", 0, "contrast", 9)),
        (dict(policy="counter_causal_fast", allocation="pyramid"), ("token", 0, "contrast", 9)),  # per layer: tokens
        (dict(policy="tova"), ("token", 0, None, None)),
    ],
)
def test_a_run_takes_its_policys_own_unit_unless_it_names_one(settings, unit):
    assert unit_of(RunConfig(cache_size=64, **settings)) == unit


def test_the_papers_form_is_one_option_and_refuses_what_it_is_not():
    paper = make_policy("counter_causal_fast", paper=True, score="logit")  # the paper's own value may be given too
    assert (paper.score, paper.smooth, paper.unit_defaults()) == ("logit", 0, ("token", 0))
    with pytest.raises(CcvizError, match="paper=true is the paper's form, with score=logit: drop score=contrast"):
        make_policy("counter_causal", paper=True, score="contrast")
    with pytest.raises(CcvizError, match="left context and sentence share shape word units"):
        RunConfig(policy="counter_causal", cache_size=64, policy_options={"paper": True}, left_context=3).resolved()
    labels = [spec.label for spec in registered_specs()]
    assert labels[labels.index("counter_causal_fast") + 1] == "counter_causal_fast:paper=True"  # measured next to ours


def test_a_trace_of_an_older_default_reruns_as_it_was(tiny):
    """A trace records the run resolved (unit, left context, every option), so the old token-level logit default
    re-runs token by token by logit, whatever today's defaults."""
    old = RunConfig(
        policy="counter_causal_fast",
        cache_size=24,
        max_new_tokens=3,
        granularity="token",
        left_context=0,
        policy_options={"score": "logit", "min_gap": 0, "smooth": 0, "recent": 0, "window": 0},
    )
    trace = generate(tiny, PROMPT, old)
    assert len(trace.cycles) > 1  # it evicted
    again = RunConfig.from_trace(trace)
    assert (again.granularity, again.left_context, again.options["score"], again.options["smooth"]) == (
        "token",
        0,
        "logit",
        0,
    )
    rerun = generate(tiny, PROMPT, again)
    assert [c.kept for c in rerun.cycles] == [c.kept for c in trace.cycles] and rerun.output_text == trace.output_text
    today = generate(tiny, PROMPT, policy="counter_causal_fast", cache_size=24, max_new_tokens=3)
    assert (today.config["granularity"], today.config["policy_options"]["score"]) == ("clause", "contrast")


def _pinned_file(folder: Path, labels: list[str], pinned: dict[str, dict]) -> None:
    """Retention rows (real ones, from the published results) under ``labels``, with their pinned meanings."""
    published = pd.read_csv(ROOT / "bench/results/retention.csv", nrows=len(labels))
    published.assign(policy=labels).to_csv(folder / "retention.csv", index=False)
    (folder / "retention.json").write_text(json.dumps({"task": "retention", "policies": pinned}), encoding="utf-8")


def test_relabelling_gives_rows_measured_under_an_old_default_the_label_that_means_them_today(tmp_path):
    old_fast = {"score": "logit", "min_gap": 0, "smooth": 0, "recent": 0}  # pinned before window and paper existed
    candidate = "counter_causal_fast:score=contrast,smooth=9,granularity=clause,pool=max"
    old_word = "counter_causal:score=logprob,granularity=word,pool=max"  # measured with no left context
    pinned = {
        "full": {},
        "counter_causal_fast": old_fast,
        candidate: {**old_fast, "score": "contrast", "smooth": 9, "granularity": "clause", "pool": "max"},
        old_word: {"score": "logprob", "min_gap": 0, "smooth": 0, "recent": 0, "granularity": "word", "pool": "max"},
        "sliding": {},
    }
    labels = list(pinned)
    _pinned_file(tmp_path, labels, pinned)
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench/relabel.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    relabelled = pd.read_csv(tmp_path / "retention.csv").policy.tolist()
    assert relabelled == [  # retention rows pinned before the question's protocol was a setting: it streamed
        "full",
        "counter_causal_fast:paper=True,protect_question=False",
        "counter_causal_fast:protect_question=False",
        "counter_causal:left_context=0,protect_question=False",  # by word, its default unit now, no left context
        "sliding:protect_question=False",
    ]
    columns = list(pd.read_csv(tmp_path / "retention.csv").columns)
    table = ResultTable(tmp_path, "retention", columns, ["case", "policy"], {})
    table.pin_policies([parse_spec(label) for label in relabelled], asked=True)  # a run's check before adding rows
    summary = pd.read_csv(tmp_path / "retention_summary.csv")  # written again from the relabelled rows
    assert "counter_causal_fast:paper=True,protect_question=False" in set(summary.policy)


def test_a_default_changed_after_its_option_was_added_keeps_old_rows_and_traces_at_the_old_value(tmp_path):
    """Expected Attention gained ``history`` (default false), then its default became true: a meaning or a
    trace recorded without it ran at false, so the bare name no longer means it, and relabelling says so."""
    window_form = {"n_future_positions": 512, "n_sink": 4, "use_covariance": True, "use_vnorm": True}
    window_form |= {"epsilon": 0.0, "window": 256}  # pinned before history existed
    assert not parse_spec("expected_attention").means(window_form)  # a run would refuse to mix its rows in
    assert parse_spec("expected_attention:history=false").means(window_form)
    pinned = {"full": {}, "expected_attention": window_form}
    pinned["expected_attention:history=True"] = {**window_form, "history": True}
    _pinned_file(tmp_path, list(pinned), pinned)
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts/bench/relabel.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    relabelled = pd.read_csv(tmp_path / "retention.csv").policy.tolist()
    assert relabelled == [
        "full",
        "expected_attention:history=False,protect_question=False",
        "expected_attention:protect_question=False",
    ]
    from types import SimpleNamespace

    recorded = {"policy": "expected_attention", "cache_size": 64, "policy_options": window_form}
    assert RunConfig.from_trace(SimpleNamespace(config=recorded)).options["history"] is False
    assert RunConfig(policy="expected_attention", cache_size=64).resolved().options["history"] is True


def test_a_trace_from_before_units_were_recorded_reruns_by_token():
    from types import SimpleNamespace

    recorded = {"policy": "counter_causal", "cache_size": 64, "policy_options": {"score": "logprob"}}
    old = RunConfig.from_trace(SimpleNamespace(config=recorded))
    assert (old.granularity, old.left_context) == ("token", 0)
    assert RunConfig.from_dict(recorded).resolved().granularity == "word"  # a config of today's: the policy's own
