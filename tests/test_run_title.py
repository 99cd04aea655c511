"""A run's title: the policy's human name and only what differs from its defaults (RunConfig.title), while
describe() stays the exact spelling."""

from dataclasses import dataclass

from ccviz import POLICIES, RunConfig, generate
from ccviz.policies import register_policy
from ccviz.policies.sliding import Sliding


def test_every_registered_policy_has_a_human_name_of_its_own():
    names = {name: cls.human_name() for name, cls in POLICIES.items()}
    assert names["counter_causal_fast"] == "Counter-causal surprise (fast)" and names["sliding"] == "Sliding window"
    assert names["streaming_llm"] == "StreamingLLM"  # a subclass of Sliding, not called by its parent's title
    assert len(set(names.values())) == len(names)


def test_defaults_are_hidden_and_the_unit_a_policy_keeps_whole_is_named():
    assert RunConfig(policy="tova", cache_size=128).title() == "TOVA · J = 128"
    assert RunConfig(policy="counter_causal_fast", cache_size=128).title() == (
        "Counter-causal surprise (fast) · by clause · J = 128"
    )
    assert RunConfig(policy="tova", cache_size=128).title(budget=False) == "TOVA"


def test_a_resolved_config_is_titled_as_the_one_it_came_from(tiny):
    """A trace records every option and the budget resolved: the defaults among them stay hidden."""
    trace = generate(tiny, "word " * 30, policy="counter_causal_fast", cache_size=16, chat=False, max_new_tokens=2)
    run = trace.run_config
    assert "smooth=9" in run.describe() and run.title() == "Counter-causal surprise (fast) · by clause · J = 16"


def test_a_changed_option_is_shown_and_the_options_it_implies_are_not():
    assert (
        RunConfig(policy="snapkv", cache_size=64, policy_options={"window": 8}).title()
        == "SnapKV · window = 8 · J = 64"
    )
    assert RunConfig(policy="expected_attention", cache_size=8, policy_options={"history": False}).title() == (
        "Expected attention · history off · J = 8"
    )
    paper = RunConfig(policy="counter_causal_fast", cache_size=128, policy_options={"paper": True}).resolved()
    assert "score=logit" in paper.describe() and "smooth=0" in paper.describe()
    assert paper.title() == "Counter-causal surprise (fast) · paper · J = 128"  # its score and smoothing go with it


def test_a_unit_pool_and_left_context_other_than_the_policys_own_are_shown():
    fast = RunConfig(policy="counter_causal_fast", cache_size=64)
    assert fast.replace(granularity="word", pool="mean").title() == (
        "Counter-causal surprise (fast) · by word (mean) · J = 64"
    )
    assert fast.replace(granularity="token").title() == "Counter-causal surprise (fast) · by token · J = 64"
    assert RunConfig(policy="tova", cache_size=64, granularity="token").title() == "TOVA · J = 64"
    words = RunConfig(policy="counter_causal", cache_size=64)
    assert words.title() == "Counter-causal surprise · by word · J = 64"  # its own 3 words of left context: hidden
    assert (
        words.replace(left_context=1).title() == "Counter-causal surprise · by word · 1 word of left context · J = 64"
    )


def test_allocation_pins_drops_budget_and_an_evictable_question_are_shown():
    config = RunConfig(policy="snapkv", cache_size=64, allocation="pyramid", pyramid_beta=4)
    assert config.title() == "SnapKV · pyramid allocation (β = 4) · J = 64"
    assert (
        RunConfig(policy="tova", cache_size=64, allocation="adaptive").title() == "TOVA · adaptive allocation · J = 64"
    )
    what_if = RunConfig(policy="sliding", cache_size=16, pin=("a b",), drop="c", protect_question=False)
    assert what_if.title() == "Sliding window · pinning 'a b' · dropping 'c' · question evictable · J = 16"
    assert what_if.describe() == "sliding, pinning 'a b', dropping 'c', question evictable"  # the exact spelling
    assert (
        RunConfig(policy="tova", cache_size=64, chunk_size=8, recent=4).title() == "TOVA · J = 64 · h = 8 · recent = 4"
    )
    assert RunConfig(policy="tova", cache_size=64, chunk_size=16, recent=0).title() == "TOVA · J = 64"  # J/4, tova's 0


def test_a_plugin_policy_without_a_title_is_called_by_its_name(registry):
    @register_policy
    @dataclass
    class Wide(Sliding):
        name = "wide_sliding"
        summary = "a test plugin without a title"
        width: int = 3

    assert Wide.human_name() == "wide_sliding"
    assert RunConfig(policy="wide_sliding", cache_size=8, policy_options={"width": 5}).title() == (
        "wide_sliding · width = 5 · J = 8"
    )


def test_a_trace_of_a_policy_not_installed_here_still_has_a_title():
    config = RunConfig.from_dict(
        {"policy": "gone_plugin", "cache_size": 8, "policy_options": {"k": 2}}, check_policy=False
    )
    assert config.policy_type() is None and config.title() == "gone_plugin · k = 2 · J = 8"
