"""Attention-based policies against the model's own eager attention, and the refresh rule for every policy."""

import pytest
import torch
import torch.nn.functional as F
from engine_support import LONG_PROMPT
from transformers import DynamicCache

from ccviz import POLICIES, CcvizError, Trace, generate, make_policy
from ccviz.engine import CacheSession, RunConfig, prepare
from ccviz.models.tiny import build_tiny_model

EVICTING = [name for name, cls in POLICIES.items() if cls.evicts]


@pytest.fixture(scope="module")
def eager():
    """SmolLM2 loaded a second time with transformers' eager attention, which returns its weights."""
    from transformers import AutoModelForCausalLM

    from ccviz.models.embedded import converted_default

    model = AutoModelForCausalLM.from_pretrained(converted_default(), attn_implementation="eager", dtype=torch.float32)
    return model.eval().requires_grad_(False)


def _eager_attention(eager, trace) -> torch.Tensor:
    """[layers, queries, keys]: eager attention over every token the run fed, averaged over query heads."""
    fed = max(cycle.step for cycle in trace.cycles)
    ids = torch.tensor([[tok.id for tok in trace.tokens[:fed]]])
    with torch.inference_mode():
        out = eager(input_ids=ids, output_attentions=True)
    return torch.stack(out.attentions)[:, 0].mean(dim=1)


def _no_eviction_cycles(trace):
    return [c for c in trace.cycles if c.kept == list(range(c.step))]


def _close(actual, expected):
    torch.testing.assert_close(torch.tensor(actual), expected, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def full_cache_runs(smollm, eager):
    """Each attention policy with a cache large enough that nothing is evicted, plus eager attention."""
    kw = dict(cache_size=512, chunk_size=16, max_new_tokens=12, stop_at_eos=False)
    runs = {
        "tova": generate(smollm, LONG_PROMPT, policy="tova", **kw),
        "h2o": generate(smollm, LONG_PROMPT, policy="h2o", **kw),
        "h2o_normalized": generate(smollm, LONG_PROMPT, policy="h2o", policy_options={"normalize": True}, **kw),
        "snapkv": generate(smollm, LONG_PROMPT, policy="snapkv", record="all", **kw),  # + attention_chunk
    }
    ids = {name: [tok.id for tok in trace.tokens] for name, trace in runs.items()}
    assert all(run_ids == ids["h2o"] for run_ids in ids.values())  # nothing evicted: the same text
    return runs, _eager_attention(eager, runs["h2o"])


def test_tova_is_last_layer_attention_of_the_newest_query(full_cache_runs):
    runs, attention = full_cache_runs
    trace = runs["tova"]
    frozen = trace.config["frozen"]
    cycles = _no_eviction_cycles(trace)
    assert cycles[0] is trace.cycles[0] and len(cycles) == len(trace.cycles) and len(cycles) >= 10
    assert any(c.phase == "decode" for c in cycles)
    for cycle in cycles:
        expected = attention[-1, cycle.step - 1, frozen : cycle.step]
        _close(cycle.scores["attention_last"], expected)


def test_h2o_accumulates_every_query_of_every_layer(full_cache_runs):
    runs, attention = full_cache_runs
    trace = runs["h2o"]
    frozen = trace.config["frozen"]
    received = attention.sum(dim=0).cumsum(dim=0)  # row t: what each key received from queries 0..t
    for cycle in _no_eviction_cycles(trace):
        _close(cycle.scores["h2o_accumulated"], received[cycle.step - 1, frozen : cycle.step])
    for cycle in _no_eviction_cycles(runs["h2o_normalized"]):
        seen = cycle.step - torch.arange(cycle.step)[frozen:]  # queries that could see each entry
        _close(cycle.scores["h2o_accumulated"], received[cycle.step - 1, frozen : cycle.step] / seen)


def test_snapkv_and_chunk_attention_read_the_newest_queries(full_cache_runs):
    runs, attention = full_cache_runs
    trace = runs["snapkv"]
    frozen, h = trace.config["frozen"], trace.config["chunk_size"]
    last = attention[-1]
    for cycle in _no_eviction_cycles(trace):
        window = last[max(cycle.step - 32, 0) : cycle.step, : cycle.step].sum(dim=0)
        pooled = F.avg_pool1d(window[None, None], 5, stride=1, padding=2)[0, 0]
        _close(cycle.scores["snapkv"], pooled[frozen:])
        chunk = last[cycle.step - h : cycle.step, frozen : cycle.step].sum(dim=0)
        _close(cycle.scores["attention_chunk"], chunk)


def test_h2o_carries_survivors_over_unchanged(smollm, eager):
    """After an evicting refresh, the next cycle's sums = survivors' old sums + the new chunk's attention."""
    prepared = prepare(smollm, LONG_PROMPT, RunConfig(policy="h2o", cache_size=48, chunk_size=16))
    snapshots = []

    def snapshot(trace):  # the cache right after each refresh
        state = session.cache
        snapshots.append(
            (
                [(layer.keys.clone(), layer.values.clone()) for layer in state.kv.layers],
                state.extras["h2o_accumulated"].clone(),
            )
        )

    session = CacheSession(smollm, prepared.config, on_refresh=snapshot)
    session.feed(prepared.prompt_ids)
    trace = session.trace
    frozen = trace.config["frozen"]
    evicting = next(i for i, c in enumerate(trace.cycles) if len(c.kept) < c.step)
    before, after = trace.cycles[evicting], trace.cycles[evicting + 1]
    survivors = [before.candidates.index(t) for t in before.kept[frozen:]]
    kv, carried = snapshots[evicting]
    _close(carried[frozen:].tolist(), torch.tensor(before.scores["h2o_accumulated"])[survivors])

    cache = DynamicCache()
    for i, (k, v) in enumerate(kv):
        cache.update(k, v, i)
    ids = [tok.id for tok in trace.tokens[before.step : after.step]]
    with torch.inference_mode():
        out = eager(
            input_ids=torch.tensor([ids]),
            position_ids=torch.arange(before.step, after.step)[None],
            past_key_values=cache,
            use_cache=True,
            output_attentions=True,
        )
    increment = torch.stack(out.attentions)[:, 0].mean(dim=1).sum(dim=(0, 1))
    expected = torch.cat([carried, torch.zeros(len(ids))]) + increment
    _close(after.scores["h2o_accumulated"], expected[frozen:])


@pytest.mark.parametrize("name", EVICTING)
def test_kept_is_frozen_plus_recent_plus_top_scored(tiny, name):
    """Recomputed from the recorded scores, independently of select_survivors: every refresh, every policy
    (by token: the counter-causal policies' own units are tested in tests/test_units.py)."""
    J, h = 24, 8
    trace = generate(tiny, LONG_PROMPT, policy=name, cache_size=J, chunk_size=h, max_new_tokens=24, granularity="token")
    frozen, recent = trace.config["frozen"], trace.config["recent"]
    signal = POLICIES[name].signal
    previous_kept, previous_step, evictions = [], 0, 0
    for cycle in trace.cycles:
        cache = previous_kept + list(range(previous_step, cycle.step))
        assert cycle.candidates == cache[frozen:]
        scores = cycle.scores[signal]
        assert len(scores) == len(cycle.candidates)
        if len(cycle.candidates) <= J:
            assert cycle.kept == cache
        else:
            evictions += 1
            head = len(cycle.candidates) - recent
            ranked = sorted(range(head), key=lambda i: (scores[i], i), reverse=True)[: J - recent]
            chosen = sorted(ranked) + list(range(head, len(cycle.candidates)))
            assert cycle.kept == cache[:frozen] + [cycle.candidates[i] for i in chosen]
        previous_kept, previous_step = cycle.kept, cycle.step
    assert evictions >= 5


def test_h2o_keeps_half_recent_by_default():
    assert make_policy("h2o").default_recent(64) == 32
    assert make_policy("tova").default_recent(64) == 0


def test_companion_signals_never_change_what_is_kept(tiny):
    kw = dict(policy="tova", cache_size=24, chunk_size=8, max_new_tokens=16)
    plain = generate(tiny, LONG_PROMPT, **kw)
    recorded = generate(tiny, LONG_PROMPT, record="all", **kw)
    assert plain.config["record"] == "policy" and recorded.config["record"] == "all"
    assert [c.kept for c in plain.cycles] == [c.kept for c in recorded.cycles]
    assert [c.scores["attention_last"] for c in plain.cycles] == [c.scores["attention_last"] for c in recorded.cycles]
    assert all(set(c.scores) == {"attention_last"} for c in plain.cycles)
    expected = {"attention_last", "attention_chunk"} | ({"surprise"} if "counter_causal_fast" in POLICIES else set())
    for cycle in recorded.cycles:
        assert set(cycle.scores) == expected
        assert all(len(values) == len(cycle.candidates) for values in cycle.scores.values())


def test_key_proxy_is_key_similarity_with_the_newest_key(tiny):
    """The reference code's proxy, for comparing figures: no query, no softmax."""
    prepared = prepare(tiny, LONG_PROMPT, RunConfig(policy="importance_keyproxy", cache_size=64, chunk_size=16))
    session = CacheSession(tiny, prepared.config)
    session.feed(prepared.prompt_ids[:40])  # refreshes at 16 and 32 keep everything (J = 64)
    state = session.cache
    keys = state.kv.layers[-1].keys[0, :, state.frozen :]
    keys = keys / keys.abs().max()
    expected = torch.einsum("hnd,hd->hn", keys, keys[:, -1]).mean(dim=0)
    scores = make_policy("importance_keyproxy").score_candidates(tiny.model, session.candidates())
    torch.testing.assert_close(scores, expected)


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("snapkv", {"kernel": 4}, "kernel must be odd"),
        ("snapkv", {"window": 0}, "window must be at least 1"),
        ("h2o", {"normalize": "yes"}, "normalize must be true or false"),
        ("tova", {"window": 3}, "it takes no options"),
    ],
)
def test_bad_options_are_one_line_errors(name, options, message):
    with pytest.raises(CcvizError, match=message):
        make_policy(name, **options)


def test_bad_record_is_a_one_line_error(tiny):
    with pytest.raises(CcvizError, match="record must be one of policy, all"):
        generate(tiny, "hi", policy="tova", cache_size=8, record="everything")


def test_attention_policies_need_a_capturing_model():
    lm = build_tiny_model()
    lm.model.set_attn_implementation("eager")
    with pytest.raises(CcvizError, match="'h2o' reads attention weights"):
        generate(lm, "hi", policy="h2o", cache_size=8)
    assert generate(lm, "hi", policy="sliding", cache_size=8, max_new_tokens=2).status == "complete"


def test_cli_record_all_keeps_every_signal(tmp_path, capsys):
    from ccviz.cli import main

    out = tmp_path / "trace.json"
    code = main(
        [
            "run",
            "--model",
            "tiny-random",
            "--prompt",
            LONG_PROMPT,
            "--policy",
            "h2o",
            "--cache-size",
            "16",
            "--max-new-tokens",
            "8",
            "--record",
            "all",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    trace = Trace.load(out)
    assert trace.config["record"] == "all" and trace.config["recent"] == 8
    assert {"h2o_accumulated", "attention_last", "attention_chunk"} <= set(trace.cycles[-1].scores)
    capsys.readouterr()
    assert main(["run", "--prompt", "hi", "--policy", "h2o", "--cache-size", "8", "--record", "some"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--record" in err


def test_chunk_attention_sums_every_pass_of_the_chunk(tiny):
    """Prefill in passes smaller than h (as the app's document view does) gives the same running sums."""
    kw = dict(policy="sliding", cache_size=24, chunk_size=8, max_new_tokens=12, record="all")
    chunked = generate(tiny, LONG_PROMPT, **kw)
    stepwise = generate(tiny, LONG_PROMPT, prefill_step=3, **kw)
    for a, b in zip(chunked.cycles, stepwise.cycles, strict=True):
        assert a.kept == b.kept
        _close(b.scores["attention_chunk"], torch.tensor(a.scores["attention_chunk"]))
