"""The engine against transformers' own generate, and the refresh cycle's invariants."""

import pytest
import torch
from engine_support import LONG_PROMPT, PROMPTS, generated_ids, reference_ids

from ccviz import generate
from ccviz.engine import CacheSession, RunConfig, prepare
from ccviz.prompts import encode_prompt


@pytest.mark.parametrize("prompt", PROMPTS, ids=["short", "haiku", "long"])
def test_full_policy_matches_model_generate(smollm, prompt):
    trace = generate(smollm, prompt, policy="full", cache_size=64, max_new_tokens=24)
    assert len(encode_prompt(smollm.tokenizer, prompt, chat=True).ids) > 0
    assert generated_ids(trace) == reference_ids(smollm, prompt, 24)
    if prompt is LONG_PROMPT:
        assert sum(c.phase == "prefill" for c in trace.cycles) >= 5  # several chunks of h = 16


def test_chunked_prefill_equals_token_by_token(tiny):
    kwargs = dict(policy="sliding", cache_size=24, chunk_size=8, max_new_tokens=20)
    chunked = generate(tiny, LONG_PROMPT, **kwargs)
    stepwise = generate(tiny, LONG_PROMPT, prefill_step=1, **kwargs)
    assert [c.kept for c in chunked.cycles] == [c.kept for c in stepwise.cycles]
    assert [c.step for c in chunked.cycles] == [c.step for c in stepwise.cycles]
    assert generated_ids(chunked) == generated_ids(stepwise)


def test_refresh_invariants_sliding(tiny):
    J, h = 20, 5
    trace = generate(tiny, LONG_PROMPT, policy="sliding", cache_size=J, chunk_size=h, max_new_tokens=30)
    frozen = trace.config["frozen"]
    assert frozen > 0  # chat template prefix
    previous_kept, previous_step = [], 0
    for cycle in trace.cycles:
        assert cycle.step % h == 0
        new = list(range(previous_step, cycle.step))
        assert cycle.candidates == [t for t in previous_kept + new if t >= frozen]
        previous_kept, previous_step = cycle.kept, cycle.step
        expected = list(range(min(frozen, cycle.step))) + list(range(max(frozen, cycle.step - J), cycle.step))
        assert cycle.kept == expected
        if cycle.step >= frozen + J:
            assert len(cycle.kept) == frozen + J
    assert trace.peak_cache_length == frozen + J + h


def test_cache_entries_keep_their_ids_and_positions(tiny):
    prepared = prepare(
        tiny, LONG_PROMPT, RunConfig(policy="streaming_llm", cache_size=16, chunk_size=4, frozen=0, chat=False)
    )
    session = CacheSession(tiny, prepared.config)
    ids = prepared.prompt_ids
    session.feed(ids[: len(ids) // 4 * 4 - 2])  # the last pass ends off a refresh boundary
    for token in ids[:5]:  # and some decode steps: positions keep counting, tokens are "generated"
        session.feed([token], phase="decode")
    trace = session.trace
    assert session.processed % 4 != 0 and trace.tokens[-1].source == "generated"
    all_ids = torch.tensor([tok.id for tok in trace.tokens])
    state = session.cache
    assert trace.config["frozen"] == 4  # the sinks
    assert state.pos.tolist() == trace.cycles[-1].kept + list(range(trace.cycles[-1].step, session.processed))
    assert torch.equal(state.tok, all_ids[state.pos])
    for layer in state.kv.layers:
        assert layer.keys.shape[-2] == len(state)


def test_short_prompt_never_evicts(tiny):
    trace = generate(
        tiny, "Hello there, how are you?", policy="sliding", cache_size=64, chunk_size=16, max_new_tokens=5
    )
    n = trace.config["prompt_tokens"]
    assert n < 64 + 16
    for cycle in trace.cycles:
        assert cycle.kept == list(range(cycle.step))


def test_sampling_is_seeded(tiny):
    kw = dict(policy="sliding", cache_size=16, max_new_tokens=15, do_sample=True, temperature=1.0, top_p=0.9)
    a = generate(tiny, "Once upon a time", seed=3, **kw)
    b = generate(tiny, "Once upon a time", seed=3, **kw)
    c = generate(tiny, "Once upon a time", seed=4, **kw)
    assert generated_ids(a) == generated_ids(b)
    assert generated_ids(a) != generated_ids(c)


def test_progress_and_cancel(tiny):
    calls = []
    trace = generate(
        tiny,
        LONG_PROMPT,
        policy="sliding",
        cache_size=16,
        max_new_tokens=50,
        progress=lambda r, p, t: calls.append((r, p, t)),
        should_stop=lambda: len(calls) >= 6,
    )
    assert trace.status == "cancelled" and trace.stop_reason == "cancelled"
    assert len(calls) == 6
    assert [p for _, p, _ in calls] == sorted(p for _, p, _ in calls)
    assert all(t == calls[0][2] for _, _, t in calls)
    assert len(trace.cycles) == calls[-1][0]


def test_frozen_auto_is_the_template_prefix(smollm):
    encoded = encode_prompt(smollm.tokenizer, "Hi", chat=True)
    prefix_text = smollm.tokenizer.decode(encoded.ids[: encoded.template_prefix])
    assert prefix_text.endswith("<|im_start|>user\n")
    assert "You are a helpful AI assistant" in prefix_text
