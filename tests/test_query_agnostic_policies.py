"""kvzip, expected_attention and keydiff against slow explicit references, and kvzip's repeat never cached."""

import math

import pytest
import torch
from engine_support import LONG_PROMPT
from transformers import DynamicCache

from ccviz import CcvizError, generate, make_policy
from ccviz.cache import CacheState
from ccviz.engine import CacheSession, RunConfig, prepare
from ccviz.models.tiny import build_tiny_model

SMOLLM_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n"  # SmolLM2's chat template after a user message


def _sharpened(attention: str = "sdpa"):
    """The tiny model with its queries and keys scaled up: its random attention is nearly uniform, which would
    let a wrong prompt, mask or covariance term pass unseen."""
    lm = build_tiny_model()  # the same seed every time: the same weights
    for block in lm.model.model.layers:
        block.self_attn.q_proj.weight.mul_(6)
        block.self_attn.k_proj.weight.mul_(6)
    lm.model.set_attn_implementation(attention)
    return lm


@pytest.fixture(scope="module")
def sharp():
    return _sharpened()


@pytest.fixture(scope="module")
def sharp_eager():
    return _sharpened("eager").model


def _paused_session(lm, policy, fed, cache_size, chunk_size, **settings):
    """A session fed ``fed`` prompt tokens, paused before the refresh that falls due after the last of them."""
    prepared = prepare(
        lm, LONG_PROMPT, RunConfig(policy=policy, cache_size=cache_size, chunk_size=chunk_size, **settings)
    )
    session = CacheSession(lm, prepared.config)
    session.feed(prepared.prompt_ids[:fed], refresh=False)
    assert session.refresh_pending
    return session, prepared.prompt_ids[:fed]


def _scores(session):
    with torch.inference_mode():
        return session.policy.score_candidates(session.lm.model, session.candidates())


def _close(actual, expected):
    torch.testing.assert_close(actual.float(), expected.float(), rtol=1e-4, atol=1e-5)


# ----- keydiff -------------------------------------------------------------------------------------------------------


def keydiff_reference(cache) -> torch.Tensor:
    """Minus the cosine of each key with its layer's and KV head's mean unit key, then the mean over layers and
    heads (a zero key, the tiny model's padding token, counts as cosine 0)."""
    layers = len(cache.kv.layers)
    kv_heads, entries = cache.kv.layers[0].keys.shape[1:3]
    total = torch.zeros(entries)
    for layer in range(layers):
        keys = cache.kv.layers[layer].keys[0].float()
        for head in range(kv_heads):
            unit = torch.stack([k / max(k.norm(), 1e-12) for k in keys[head]])
            anchor = unit.mean(dim=0)
            for j in range(entries):
                total[j] -= keys[head, j] @ anchor / max(keys[head, j].norm() * anchor.norm(), 1e-8)
    return total[cache.frozen :] / (layers * kv_heads)


@pytest.mark.parametrize("lm_name", ["tiny", "smollm"])
def test_keydiff_is_minus_cosine_to_the_mean_key(lm_name, request):
    lm = request.getfixturevalue(lm_name)
    session, _ = _paused_session(lm, "keydiff", 48, 32, 16, frozen=3)  # evictions at 32 already happened
    _close(_scores(session), keydiff_reference(session.cache))


# ----- expected attention -----------------------------------------------------------------------------------------


def _rope_matrix(position: int, d: int, theta: float) -> torch.Tensor:
    """The d x d rotation RoPE applies at ``position`` (pairs i and i + d/2, as rotate_half pairs them)."""
    rotation = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        angle = position / theta ** (2 * i / d)
        c, s = math.cos(angle), math.sin(angle)
        rotation[i, i], rotation[i, i + d // 2] = c, -s
        rotation[i + d // 2, i], rotation[i + d // 2, i + d // 2] = s, c
    return rotation


def expected_attention_reference(
    lm, cache, ids, *, window=256, n_future=512, n_sink=4, cov=True, vnorm=True, eps=0.0, history=None
):
    """kvpress's formula with explicit loops and the model's own weights. The queries come from a plain forward's
    hidden states over ``ids`` (every token fed; nothing evicted yet), or from ``history``: each layer's input
    rows ``[rows, d_model]`` of every token the run processed, its sinks left out."""
    model = lm.model
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    d = config.hidden_size // heads
    theta = config.rope_parameters["rope_theta"]
    entries = len(cache)
    if history is None:
        with torch.inference_mode():
            hidden = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        assert entries == len(ids), "the recent queries are read from a run that has evicted nothing"
        recent = list(range(max(n_sink, entries - window), entries))
        history = [hidden[layer][0, recent] for layer in range(len(model.model.layers))]
    start = int(cache.pos[-1]) + 1  # the next position
    average = sum(_rope_matrix(start + t, d, theta) for t in range(n_future)) / n_future
    per_layer = []
    for layer, block in enumerate(model.model.layers):
        rows = block.input_layernorm(history[layer]).double()  # [w, d_model]
        queries = rows @ block.self_attn.q_proj.weight.double().T  # [w, heads * d]
        keys = cache.kv.layers[layer].keys[0].double()
        values = cache.kv.layers[layer].values[0].double()
        scores = torch.zeros(kv_heads, entries, dtype=torch.float64)
        for head in range(heads):
            q = queries[:, head * d : (head + 1) * d]
            mean = average @ q.mean(dim=0)
            centred = q - q.mean(dim=0)
            sigma = average @ (centred.T @ centred / len(q)) @ average.T
            kv = head // (heads // kv_heads)
            logits = torch.tensor(
                [
                    keys[kv, j] @ mean / math.sqrt(d) + (keys[kv, j] @ sigma @ keys[kv, j] / d / 2 if cov else 0.0)
                    for j in range(n_sink, entries)
                ]
            )
            scores[kv, n_sink:] += torch.softmax(logits, dim=0) / (heads // kv_heads)
        if vnorm:
            scores[:, n_sink:] = (scores[:, n_sink:] + eps) * values[:, n_sink:].norm(dim=-1)
        scores[:, :n_sink] = scores[:, n_sink:].max() + 1
        per_layer.append(scores)
    return torch.stack(per_layer).mean(dim=(0, 1))[cache.frozen :]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"history": False, "window": 10, "n_future_positions": 7, "n_sink": 2},
        {"history": False},
        {"use_covariance": False, "use_vnorm": False},
        {"epsilon": 0.5},
    ],
)
def test_expected_attention_is_kvpress_formula_on_the_tiny_model(sharp, options):
    session, ids = _paused_session(sharp, "expected_attention", 32, 64, 16, frozen=0, policy_options=options)
    names = {"window": "window", "n_future_positions": "n_future", "n_sink": "n_sink"}
    names |= {"use_covariance": "cov", "use_vnorm": "vnorm", "epsilon": "eps"}
    named = {names[k]: v for k, v in options.items() if k != "history"}  # nothing evicted: every query either way
    reference = expected_attention_reference(sharp, session.cache, ids, **named)
    _close(_scores(session), reference)


def test_expected_attention_history_reads_every_query_before_any_eviction(sharp):
    """Before anything is evicted, the run's history is every cached entry: the window's formula without a window."""
    options = {"window": 3}  # history (the default) does not use the window
    session, ids = _paused_session(sharp, "expected_attention", 32, 64, 16, frozen=0, policy_options=options)
    _close(_scores(session), expected_attention_reference(sharp, session.cache, ids, window=10**9))


def test_expected_attention_history_keeps_the_queries_of_evicted_tokens(sharp, monkeypatch):
    """After refreshes have evicted, the statistics still hold the queries of every token processed, each
    from the layer inputs the engine computed when that token was fed (recorded here as the cache appends them)."""
    appended = []
    real_append = CacheState.append

    def recording(state, tok, pos, residuals=None):
        appended.append({layer: rows.clone() for layer, rows in (residuals or {}).items()})
        real_append(state, tok, pos, residuals)

    monkeypatch.setattr(CacheState, "append", recording)
    session, ids = _paused_session(sharp, "expected_attention", 56, 24, 8, frozen=2, policy_options={"history": True})
    assert len(session.cache) < len(ids)  # refreshes evicted
    layers = len(sharp.model.model.layers)
    history = [torch.cat([rows[layer] for rows in appended])[4:] for layer in range(layers)]  # the 4 sinks left out
    assert history[0].shape[0] == len(ids) - 4
    windowed = expected_attention_reference(sharp, session.cache, ids, history=[h[-10:] for h in history])
    _close(_scores(session), expected_attention_reference(sharp, session.cache, ids, history=history))
    assert not torch.allclose(_scores(session), windowed.float())  # the evicted queries count


def test_expected_attention_on_smollm(smollm):
    session, ids = _paused_session(smollm, "expected_attention", 48, 64, 16, frozen=3)
    _close(_scores(session), expected_attention_reference(smollm, session.cache, ids))


# ----- kvzip ---------------------------------------------------------------------------------------------------------


def kvzip_reference(eager, tokenizer, cache, chunk=2048) -> torch.Tensor:
    """The repeat teacher-forced through an eager-attention copy of the model over a copy of the cache:
    ``[candidates, layers, kv_heads]``, each candidate's largest weight from its chunk's repeat queries and the
    query heads of each KV head's group."""
    config = eager.config
    layers, heads, kv_heads = config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads
    group = heads // kv_heads
    tok = cache.tok[cache.frozen :].tolist()
    first = tokenizer.encode("\n\nRepeat the previous context:", add_special_tokens=False)
    later = tokenizer.encode("\n\nRepeat the part of the previous context, starting with", add_special_tokens=False)
    suffix = tokenizer.encode(SMOLLM_SUFFIX, add_special_tokens=False)
    best = torch.zeros(len(tok), layers, kv_heads)
    for begin in range(0, len(tok), chunk):
        prompt = first if begin == 0 else later + tok[max(begin - 8, 0) : begin]
        ids = prompt + suffix + tok[begin : begin + chunk]
        start = int(cache.pos[-1]) + 1
        with torch.inference_mode():
            copy = DynamicCache()
            for layer, cached in enumerate(cache.kv.layers):
                copy.update(cached.keys.clone(), cached.values.clone(), layer)
            out = eager(
                input_ids=torch.tensor([ids]),
                position_ids=torch.arange(start, start + len(ids))[None],
                past_key_values=copy,
                output_attentions=True,
            )
        for layer, weights in enumerate(out.attentions):  # [1, heads, m, entries + m]
            for head in range(heads):
                for j in range(begin, min(begin + chunk, len(tok))):
                    received = weights[0, head, :, cache.frozen + j].max()
                    best[j, layer, head // group] = max(best[j, layer, head // group], received)
    return best


@pytest.fixture(scope="module")
def smollm_eager():
    from transformers import AutoModelForCausalLM

    from ccviz.models.embedded import converted_default

    model = AutoModelForCausalLM.from_pretrained(converted_default(), attn_implementation="eager", dtype=torch.float32)
    return model.eval().requires_grad_(False)


@pytest.mark.parametrize("chunk", [2048, 9, 5])
def test_kvzip_is_the_largest_attention_from_the_repeat_on_the_tiny_model(sharp, sharp_eager, chunk):
    session, _ = _paused_session(sharp, "kvzip", 48, 24, 8, frozen=3, policy_options={"chunk": chunk})
    lengths = [layer.keys.shape[-2] for layer in session.cache.kv.layers]
    tensors = [layer.keys for layer in session.cache.kv.layers]
    scores = _scores(session)
    assert [layer.keys.shape[-2] for layer in session.cache.kv.layers] == lengths == [len(session.cache)] * 2
    assert all(layer.keys is kept for layer, kept in zip(session.cache.kv.layers, tensors))
    _close(scores, kvzip_reference(sharp_eager, sharp.tokenizer, session.cache, chunk).amax(dim=(1, 2)))


def test_kvzip_scores_each_layer_and_kv_head_for_adaptive(sharp, sharp_eager):
    """Before any eviction every layer and head holds every entry, so the eager reference still applies."""
    session, _ = _paused_session(sharp, "kvzip", 24, 64, 8, frozen=3, allocation="adaptive")
    scores = _scores(session)
    assert scores.shape == (21, 2, 2)
    _close(scores, kvzip_reference(sharp_eager, sharp.tokenizer, session.cache))


def test_kvzip_on_smollm(smollm, smollm_eager):
    session, _ = _paused_session(smollm, "kvzip", 64, 32, 16, frozen=3)  # two refreshes have evicted
    expected = kvzip_reference(smollm_eager, smollm.tokenizer, session.cache).amax(dim=(1, 2))
    _close(_scores(session), expected)


def _greedy(session, prompt_ids, new_tokens):
    logits = session.feed(prompt_ids)
    for _ in range(new_tokens):
        logits = session.feed([int(logits.argmax())], phase="decode")


@pytest.mark.parametrize("allocation", ["uniform", "adaptive"])
def test_kvzip_never_caches_its_repeat(tiny, allocation):
    """After every refresh of a real generation each layer's K/V holds exactly the entries CacheState says, and
    every cached position is one the run fed."""
    prepared = prepare(tiny, LONG_PROMPT, RunConfig(policy="kvzip", cache_size=24, chunk_size=8, allocation=allocation))
    checked = []

    def check(trace):
        cache = session.cache
        if cache.layers is None:
            rows = [len(cache)] * len(cache.kv.layers)
        else:
            rows = [r.numel() for r in cache.layers.rows]
            pairs = [int(heads.sum()) for heads in cache.layers.heads]  # each layer's (head, entry) pairs: J per head
            assert max(pairs) <= (24 + cache.frozen) * cache.kv.layers[0].keys.shape[1]
        assert [layer.keys.shape[-2] for layer in cache.kv.layers] == rows
        assert [layer.values.shape[-2] for layer in cache.kv.layers] == rows
        assert max(trace.cycles[-1].kept) < session.processed and trace.cycles[-1].kept == cache.pos.tolist()
        checked.append(trace.cycles[-1].step)

    session = CacheSession(tiny, prepared.config, on_refresh=check)
    _greedy(session, prepared.prompt_ids, 20)
    trace = session.finish("max_new_tokens")
    total = len(prepared.prompt_ids) + 20
    assert len(checked) == len(trace.cycles) >= 10 and checked[-1] <= total
    assert all(max(cycle.kept) < total for cycle in trace.cycles)
    if allocation == "uniform":
        assert all(len(cycle.kept) <= 24 + prepared.config.frozen for cycle in trace.cycles)
    else:
        assert all(cycle.head_kept for cycle in trace.cycles)


# ----- all three ---------------------------------------------------------------------------------------------------

QUERY_AGNOSTIC = ["kvzip", "expected_attention", "keydiff"]


@pytest.mark.parametrize("name", QUERY_AGNOSTIC)
@pytest.mark.parametrize("allocation", ["uniform", "pyramid", "adaptive"])
def test_each_runs_end_to_end(tiny, name, allocation):
    trace = generate(tiny, LONG_PROMPT, policy=name, cache_size=16, max_new_tokens=8, allocation=allocation)
    assert trace.status == "complete" and len(trace.cycles) >= 5
    fed = len(trace.tokens)
    signal = make_policy(name).signal
    for cycle in trace.cycles:
        assert len(cycle.scores[signal]) == len(cycle.candidates)
        assert all(math.isfinite(s) for s in cycle.scores[signal])
        assert max(cycle.kept) < fed


@pytest.mark.parametrize(
    "name, options, message",
    [
        ("kvzip", {"chunk": 0}, "chunk must be at least 1"),
        ("expected_attention", {"n_future_positions": 0}, "n_future_positions must be at least 1"),
        ("expected_attention", {"epsilon": -0.1}, "epsilon must be at least 0"),
        ("expected_attention", {"use_vnorm": "yes"}, "use_vnorm must be true or false"),
        ("expected_attention", {"window": 2.5}, "window must be a whole number"),
        ("keydiff", {"window": 3}, "it takes no options"),
    ],
)
def test_bad_options_are_one_line_errors(name, options, message):
    with pytest.raises(CcvizError, match=message) as err:
        make_policy(name, **options)
    assert "\n" not in str(err.value)


def test_the_efficiency_task_times_them_and_stops_kvzip_with_the_full_variant():
    from ccviz_bench.specs import registered_specs
    from ccviz_bench.tasks.efficiency import default_specs, timed_sizes

    assert set(QUERY_AGNOSTIC) <= {spec.label for spec in registered_specs()} <= {s.label for s in default_specs()}
    settings = {"sizes": [512, 4096, 8192, 32768], "full_max_n": 8192, "attention_max_n": 4096}
    assert timed_sizes("kvzip", settings) == [512, 4096, 8192]  # its repeat is a forward over the whole cache
    assert timed_sizes("keydiff", settings) == timed_sizes("expected_attention:history=false", settings)
    assert timed_sizes("keydiff", settings) == settings["sizes"]
    assert timed_sizes("expected_attention", settings) == [512, 4096]  # its running sums need a real fill
