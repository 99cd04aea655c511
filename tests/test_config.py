"""RunConfig: every field's bad value gets a one-line error naming it, and a trace's config re-runs the trace."""

import dataclasses
import math

import pytest
import torch

from ccviz import CacheSession, CcvizError, RunConfig, Trace, generate, run_generation
from ccviz.engine import prepare
from ccviz.fields import rule_of

PROMPT = "The harbour master logs every ship by name and tonnage, and keeps the ledger in a locked drawer. " * 4

# field -> (bad value, words the message must contain); every field of RunConfig must be here
BAD = {
    "policy": [(3, "policy must be a policy name"), ("nope", "unknown policy 'nope'")],
    "cache_size": [
        (0, "cache size J must be at least 1"),
        (2.5, "cache size J must be a whole number"),
        ("8", "cache size J must be a whole number"),
        (True, "cache size J must be a whole number"),
    ],
    "policy_options": [
        ({"nope": 1}, "has no option 'nope'"),
        (5, "policy_options must be a mapping"),
        ({"window": 0}, "window must be at least 1"),
    ],
    "chunk_size": [
        (0, "chunk size h must be at least 1"),
        (1.5, "chunk size h must be a whole number"),
        (64, "chunk size h (64) must not exceed the cache size J (16)"),
    ],
    "frozen": [
        (-1, "frozen must be at least 0"),
        ("most", "frozen must be a whole number or 'auto'"),
        (1.5, "frozen must be a whole number"),
    ],
    "recent": [(-1, "recent must be at least 0"), (17, "recent (17) must not exceed the cache size J (16)")],
    "max_new_tokens": [(0, "max new tokens must be at least 1"), (None, "max new tokens must be a whole number")],
    "chat": [("yes", "chat must be true or false")],
    "do_sample": [(1, "do_sample must be true or false")],
    "temperature": [
        ("hot", "temperature must be a finite number"),
        (math.nan, "temperature must be a finite number"),
        (0.0, "temperature must be above 0 when sampling"),
    ],
    "top_p": [(1.5, "top-p must be in (0, 1]"), (math.inf, "top-p must be a finite number")],
    "seed": [(-1, "seed must be at least 0"), (1.5, "seed must be a whole number"), (2**70, "seed must be at most")],
    "prefill_step": [(0, "prefill step must be at least 1")],
    "stop_at_eos": [(None, "stop_at_eos must be true or false")],
    "record": [("everything", "record must be one of policy, all")],
    "record_reads": [("yes", "record_reads must be true or false")],
    "granularity": [("phrase", "granularity must be one of token, word, clause, sentence")],
    "pool": [("median", "pool must be one of max, mean")],
    "left_context": [(-1, "left context must be at least 0"), (65, "left context must be at most 64")],
    "sentence_share": [(1.5, "sentence share must be at most 1"), ("half", "sentence share must be a finite number")],
    "allocation": [("diagonal", "allocation must be one of uniform, pyramid, adaptive")],
    "pyramid_beta": [(0.5, "pyramid beta must be at least 1"), ("steep", "pyramid beta must be a finite number")],
    "pin": [([""], "pin takes phrases of the prompt (non-empty strings)"), ((3,), "pin takes phrases")],
    "drop": [(5, "drop takes phrases of the prompt"), (["a", " "], "drop takes phrases")],
    "protect_question": [("no", "protect_question must be true or false")],
    "policy_class": [
        ("Tova", "policy class must be written 'module:QualName'"),
        (3, "policy class must be written"),
        ("no_such_module:Tova", "cannot import the policy class 'no_such_module:Tova' of policy 'snapkv'"),
        ("ccviz.policies.tova:Tova", "is not the Policy subclass named 'snapkv'"),
    ],
}
BASE = dict(policy="snapkv", cache_size=16)
SAMPLING = {"temperature", "top_p"}  # checked against the sampling range only when sampling


def test_every_field_has_bad_values_listed():
    assert set(BAD) == {f.name for f in dataclasses.fields(RunConfig)}


@pytest.mark.parametrize("field, value, message", [(f, v, m) for f, cases in BAD.items() for v, m in cases])
def test_a_bad_value_of_every_field_gets_a_one_line_error(field, value, message):
    settings = {**BASE, field: value, **({"do_sample": True} if field in SAMPLING else {})}
    with pytest.raises(CcvizError) as err:
        RunConfig(**settings)
    assert message in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(CcvizError, match=".") as again:  # generate's keywords build the same config
        generate(None, PROMPT, **settings)
    assert str(again.value) == str(err.value)


def test_equal_settings_are_one_cache_key_however_written():
    a = RunConfig(policy="snapkv", cache_size=16, policy_options={"window": 8, "kernel": 3})
    b = RunConfig(policy="snapkv", cache_size=16, policy_options=(("kernel", 3), ("window", 8)))
    assert a == b and hash(a) == hash(b) and a.options == {"kernel": 3, "window": 8}
    assert RunConfig.from_dict(a.to_dict()) == a
    assert a.replace(cache_size=32).cache_size == 32
    with pytest.raises(CcvizError, match="chunk size h"):
        a.replace(chunk_size=99)


def test_resolving_makes_every_default_concrete_and_is_idempotent(tiny):
    prepared = prepare(tiny, PROMPT, RunConfig(policy="h2o", cache_size=16))
    resolved = prepared.config
    assert resolved.chunk_size == 4 and resolved.recent == 8 and resolved.prefill_step == 4  # J/4, H2O's J/2
    assert resolved.frozen > 0 and resolved.policy_options == (("normalize", False),)  # the chat template, every option
    assert resolved.resolved() == resolved
    assert rule_of(RunConfig, "cache_size").minimum == 1  # the bound the app's widget uses


def test_attention_sinks_are_bounded_by_the_prompt_once(tiny):
    """A 1-token raw prompt under StreamingLLM freezes that one token, not 4, and its trace re-runs."""
    trace = generate(
        tiny, "hi", policy="streaming_llm", cache_size=4, chunk_size=2, chat=False, max_new_tokens=8, stop_at_eos=False
    )
    assert trace.config["frozen"] == trace.prompt_length == 1
    assert [len(c.kept) for c in trace.cycles] == [2, 4, 5, 5]  # generated tokens stay evictable
    assert [c.kept for c in run_generation(tiny, "hi", RunConfig.from_trace(trace)).cycles] == [
        c.kept for c in trace.cycles
    ]


@pytest.mark.parametrize(
    "ids, phase, message",
    [
        ([], "prefill", "at least one token"),
        (["a"], "prefill", "token ids must be whole numbers"),
        ([1.5], "prefill", "token ids must be whole numbers"),
        ([True], "prefill", "token ids must be whole numbers"),
        ([10**6], "prefill", "token ids must be whole numbers from 0 to"),
        ([1], "later", "phase must be one of prefill, decode"),
    ],
)
def test_a_bad_feed_is_refused_before_any_model_work(tiny, ids, phase, message):
    session = CacheSession(tiny, RunConfig(policy="sliding", cache_size=8, chat=False))
    with pytest.raises(CcvizError, match=message):
        session.feed(ids, phase=phase)
    assert session.processed == len(session.cache) == len(session.trace.tokens) == 0


def test_prefill_after_decode_and_a_mismatched_instance_are_refused(tiny):
    from ccviz import make_policy

    session = CacheSession(tiny, RunConfig(policy="sliding", cache_size=8, chat=False))
    session.feed([1, 2], phase="decode")
    with pytest.raises(CcvizError, match="cannot be fed after generated ones"):
        session.feed([3])
    assert len(session.cache) == len(session.trace.tokens) == 2
    with pytest.raises(CcvizError, match="the policy instance is 'tova' but the config names 'sliding'"):
        CacheSession(tiny, RunConfig(policy="sliding", cache_size=8), policy=make_policy("tova"))
    with pytest.raises(CcvizError, match="not as policy_options as well"):
        generate(tiny, "hi", policy=make_policy("snapkv"), policy_options={"window": 3}, cache_size=8)


def test_the_trace_config_round_trips_and_reruns_the_same_run(tiny, tmp_path):
    config = RunConfig(
        policy="counter_causal_fast",
        cache_size=12,
        chunk_size=3,
        frozen=2,
        recent=2,
        max_new_tokens=9,
        do_sample=True,
        temperature=0.9,
        top_p=0.8,
        seed=7,
        prefill_step=2,
        stop_at_eos=False,
        record="all",
        policy_options={"smooth": 3},
    )
    trace = run_generation(tiny, PROMPT, config)
    trace.save(tmp_path / "run.json")
    loaded = Trace.load(tmp_path / "run.json")
    again = RunConfig.from_trace(loaded)
    assert again == prepare(tiny, PROMPT, config).config  # the resolved config, exactly
    assert {k: v for k, v in loaded.config.items() if k not in again.to_dict()} == {
        "model": tiny.name,
        "prompt_tokens": trace.prompt_length,
        "ccviz_version": loaded.config["ccviz_version"],
    }
    rerun = run_generation(tiny, PROMPT, again)
    assert rerun.tokens == trace.tokens and [(c.kept, c.scores) for c in rerun.cycles] == [
        (c.kept, c.scores) for c in trace.cycles
    ]


def test_a_session_fed_token_by_token_matches_generate(tiny):
    """The public step-level API: what generate does is a loop over feed."""
    config = RunConfig(policy="tova", cache_size=12, chunk_size=4, chat=False, max_new_tokens=1)
    reference = generate(tiny, PROMPT, **{**config.to_dict(), "policy": "tova"})
    prepared = prepare(tiny, PROMPT, config)
    session = CacheSession(tiny, prepared.config)
    for token in prepared.prompt_ids:
        logits = session.feed([token])
    fed = session.trace.cycles
    assert [(c.step, c.kept) for c in fed] == [(c.step, c.kept) for c in reference.cycles]
    for ours, theirs in zip(fed, reference.cycles):  # one query at a time vs h at once: float rounding only
        torch.testing.assert_close(
            torch.tensor(ours.scores["attention_last"]), torch.tensor(theirs.scores["attention_last"])
        )
    assert reference.tokens[-1].id == int(logits.argmax())
