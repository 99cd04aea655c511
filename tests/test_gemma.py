"""Gemma 3: local (sliding-window) and global attention layers in the engine, the counter-causal pass and the
attention signals.

A tiny random Gemma 3 built here (3 layers: local, global, local; window 8) checks the window logic in
seconds; the real Gemma 3 270M (the extra ``gemma``) runs the same checks when its package is installed.
"""

import importlib.util
import math

import pytest
import torch
from engine_support import LONG_PROMPT, generated_ids, reference_ids
from references import TEXT, assert_close, reference_surprise, rms, rope, scores_with_perturbed_entries

from ccviz import CcvizError, generate
from ccviz.engine import CacheSession, RunConfig
from ccviz.models import GEMMA_MODEL, LoadedModel, cache_dir, layer_windows, load_model, model_name
from ccviz.models.embedded import GEMMA_PACKAGE, converted_default
from ccviz.policies.counter_causal.surprise import causal_pass, counter_causal_surprise
from ccviz.prompts import PLAIN_SUFFIX, encode_prompt

WINDOW = 8
LAYER_TYPES = ("sliding_attention", "full_attention", "sliding_attention")  # the last layer local: the fast variant
KINDS = ["sliding", "h2o", "tova", "snapkv", "kvzip", "expected_attention", "keydiff", "counter_causal_fast"]


@pytest.fixture(scope="module")
def tiny_gemma() -> LoadedModel:
    """A 3-layer random Gemma 3 with SmolLM2's tokenizer: local, global, local layers, window 8."""
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    tokenizer = AutoTokenizer.from_pretrained(converted_default())
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=len(LAYER_TYPES),
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=WINDOW,
        layer_types=list(LAYER_TYPES),
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        attn_implementation="sdpa",
    )
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    try:
        model = Gemma3ForCausalLM(config)
    finally:
        torch.random.set_rng_state(state)
    return LoadedModel(model=model.eval().requires_grad_(False), tokenizer=tokenizer, name="tiny-gemma")


# ----- the explicit reference: Gemma's blocks written out, per-head, per-row loops ---------------------------
def _norm(module, x):
    """Gemma's RMSNorm: the weight is stored as w - 1."""
    return rms(x, 1 + module.weight, module.eps)


def gemma_reference(model, kv, tok, pos, hidden, variant, min_gap, window=0):
    """{score: surprise} computed the slow, obvious way: Gemma's sandwich of norms, q_norm, each layer type's
    RoPE base, and in a local layer entry i reads only entries j with pos[j] - pos[i] < W (the mirror of
    transformers' ``kv_idx > q_idx - sliding_window``)."""
    cfg = model.config
    layers = model.model.layers
    n_heads, n_kv, dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    n, start = tok.numel(), 0 if variant == "full" else len(layers) - 1

    def stream(visible):
        x = model.model.embed_tokens.weight[tok] * cfg.hidden_size**0.5 if start == 0 else hidden.clone()
        for index in range(start, len(layers)):
            layer, kind = layers[index], cfg.layer_types[index]
            reach = cfg.sliding_window if kind == "sliding_attention" else None
            out = torch.zeros(n, n_heads, dim)
            if visible:
                q = (_norm(layer.input_layernorm, x) @ layer.self_attn.q_proj.weight.T).view(n, n_heads, dim)
                q = rope(_norm(layer.self_attn.q_norm, q), pos, cfg.rope_parameters[kind]["rope_theta"])
                keys, values = kv[index][0][0], kv[index][1][0]
                for head in range(n_heads):
                    group = head // (n_heads // n_kv)
                    logits = q[:, head] @ keys[group].T / math.sqrt(cfg.query_pre_attn_scalar)
                    for i in range(n):
                        allowed = [
                            j
                            for j in range(n)
                            if j > i + min_gap
                            and (not window or j <= i + window)
                            and (reach is None or pos[j] - pos[i] < reach)
                        ]
                        if allowed:
                            weights = torch.softmax(logits[i, allowed], -1)
                            out[i, head] = weights @ values[group, allowed]
            x = x + _norm(layer.post_attention_layernorm, out.reshape(n, -1) @ layer.self_attn.o_proj.weight.T)
            if variant != "fast":
                h = _norm(layer.pre_feedforward_layernorm, x)
                gate = torch.nn.functional.gelu(h @ layer.mlp.gate_proj.weight.T, approximate="tanh")
                x = x + _norm(
                    layer.post_feedforward_layernorm,
                    (gate * (h @ layer.mlp.up_proj.weight.T)) @ layer.mlp.down_proj.weight.T,
                )
        logits = _norm(model.model.norm, x) @ model.lm_head.weight.T
        return logits[torch.arange(n), tok], logits.logsumexp(-1)

    return reference_surprise(stream, n, min_gap)


def _check_against_reference(lm, ids, pos, variants=("full", "fast", "fast_mlp"), gaps=(0, 2), window=0):
    kv, hidden_last = causal_pass(lm.model, ids, pos[None])
    for variant in variants:
        for min_gap in gaps:
            expected = gemma_reference(lm.model, kv, ids[0], pos, hidden_last, variant, min_gap, window)
            for score, reference in expected.items():
                actual = counter_causal_surprise(
                    lm.model, ids, variant=variant, score=score, min_gap=min_gap, position_ids=pos[None], window=window
                )
                assert_close(actual, reference)


# ----- the tiny Gemma: the window logic in seconds -------------------------------------------------------------
def test_the_windows_come_from_the_config(tiny_gemma, tiny):
    from transformers import MistralConfig, Qwen2Config

    assert tiny_gemma.windows == (WINDOW, None, WINDOW)
    assert tiny.windows is None  # Llama: every layer global
    assert layer_windows(Qwen2Config(num_hidden_layers=3)) is None  # layer_types, all full_attention
    assert layer_windows(MistralConfig(num_hidden_layers=2, sliding_window=64)) == (64, 64)  # no layer_types


@pytest.mark.parametrize("prompt", [TEXT, LONG_PROMPT], ids=["record", "long"])
def test_full_matches_generate_beyond_the_window(tiny_gemma, prompt):
    """transformers' own sliding masks (generate) and ccviz's, on prompts many windows long."""
    assert len(encode_prompt(tiny_gemma.tokenizer, prompt, chat=True).ids) > 4 * WINDOW
    trace = generate(tiny_gemma, prompt, policy="full", cache_size=64, max_new_tokens=24, stop_at_eos=False)
    assert generated_ids(trace) == reference_ids(tiny_gemma, prompt, 24)


@pytest.mark.parametrize(
    "positions",
    [None, [0, 1, 2, 3, 5, 6, 9, 10, 11, 14, 20, 21, 22, 23, 30, 31, 32, 45, 46, 47, 48, 49]],
    ids=["contiguous", "gapped"],
)
def test_counter_causal_matches_the_windowed_reference(tiny_gemma, positions):
    """Every variant and score; gaps wider than the window leave some rows nothing to read in a local layer."""
    n = 22
    ids = torch.tensor([tiny_gemma.tokenizer(TEXT)["input_ids"][:n]])
    pos = torch.arange(n) if positions is None else torch.tensor(positions)
    _check_against_reference(tiny_gemma, ids, pos)


@pytest.mark.parametrize("window", [3, 12])
def test_the_banded_pass_and_the_layer_window_together(tiny_gemma, window):
    """The ``window`` option (entries) and a local layer's window (positions) cut together: the tighter wins."""
    ids = torch.tensor([tiny_gemma.tokenizer(TEXT)["input_ids"][:24]])
    pos = torch.tensor([0, 1, 2, 3, 4, 5, 9, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 26, 27, 40, 41, 42, 43, 44])
    _check_against_reference(tiny_gemma, ids, pos, variants=("full", "fast"), gaps=(0, 1), window=window)


def test_a_counter_causal_entry_never_reads_past_a_local_window(tiny_gemma):
    """The fast variant re-runs the last layer, a local one: entry i reads entries i + 1 .. i + W - 1 only.
    The full variant passes through the global layer too, which reads the whole future."""
    ids = torch.tensor([tiny_gemma.tokenizer(TEXT)["input_ids"][:30]])
    i, model = 5, tiny_gemma.model
    beyond, edge = list(range(i + WINDOW, 30)), [i + WINDOW - 1]
    fast = dict(variant="fast", score="logit", min_gap=0)
    perturbed, base = scores_with_perturbed_entries(model, ids, beyond, **fast)
    assert perturbed[i] == base[i]
    perturbed, base = scores_with_perturbed_entries(model, ids, edge, **fast)
    assert abs(perturbed[i] - base[i]) > 1e-4  # the last position inside the window matters
    perturbed, base = scores_with_perturbed_entries(model, ids, beyond, variant="full", score="logit", min_gap=0)
    assert abs(perturbed[i] - base[i]) > 1e-4  # through the global layer


def _attention_outputs(lm, config, ids, perturb=None):
    """Each layer's attention output for the last of ``ids``, fed to a session after the others (and after
    ``perturb(cache)``, which may change cached K/V): ``{layer: [hidden]}``."""
    outputs, hooks = {}, []
    for index, layer in enumerate(lm.model.model.layers):
        hooks.append(
            layer.self_attn.register_forward_hook(lambda m, a, out, index=index: outputs.update({index: out[0][0, -1]}))
        )
    try:
        session = CacheSession(lm, config)
        session.feed(ids[:-1])
        if perturb is not None:
            perturb(session.cache)
        session.feed(ids[-1:])
    finally:
        for hook in hooks:
            hook.remove()
    return outputs, session


def _noise_at(positions):
    """A perturbation of every layer's cached K/V at the entries holding ``positions``."""

    def perturb(cache):
        rows = torch.isin(cache.pos, torch.tensor(positions)).nonzero()[:, 0]
        assert rows.numel() == len(positions), "every perturbed position is cached"
        generator = torch.Generator().manual_seed(0)
        with torch.inference_mode():  # the cache's tensors are inference tensors
            for layer in cache.kv.layers:
                layer.keys[:, :, rows] += torch.randn(layer.keys[:, :, rows].shape, generator=generator)
                layer.values[:, :, rows] += torch.randn(layer.values[:, :, rows].shape, generator=generator)

    return perturb


def test_a_local_layer_never_reads_past_its_window_in_the_causal_pass(tiny_gemma):
    """The full cache: the query at position p reads p - W + 1 .. p in a local layer (p - W is out), all in a
    global one: the edge transformers' sliding_window_overlay draws."""
    ids = tiny_gemma.tokenizer(LONG_PROMPT)["input_ids"][:30]
    config = RunConfig("full", cache_size=64, chat=False)
    base, _ = _attention_outputs(tiny_gemma, config, ids)
    p = len(ids) - 1
    outside, _ = _attention_outputs(tiny_gemma, config, ids, _noise_at(list(range(p - WINDOW + 1))))
    inside, _ = _attention_outputs(tiny_gemma, config, ids, _noise_at([p - WINDOW + 1]))
    assert torch.equal(outside[0], base[0])  # layer 0, local: p - W and before are out of its reach
    assert not torch.allclose(inside[0], base[0])  # p - W + 1 is in
    assert not torch.allclose(outside[1], base[1])  # layer 1, global: everything is in


def test_after_eviction_the_window_is_in_original_positions(tiny_gemma):
    """A frozen prefix survives every refresh: a few entries before the newest in the cache, hundreds of
    positions before it in the text. The local layer no longer reads it; the global layer does."""
    ids = tiny_gemma.tokenizer(LONG_PROMPT)["input_ids"][:41]
    config = RunConfig("sliding", cache_size=4, chunk_size=4, frozen=3, chat=False)
    base, session = _attention_outputs(tiny_gemma, config, ids)
    assert session.cache.pos.tolist()[:4] == [0, 1, 2, 36] and len(session.cache) <= WINDOW  # W entries, query included
    frozen, _ = _attention_outputs(tiny_gemma, config, ids, _noise_at([0, 1, 2]))
    assert torch.equal(frozen[0], base[0])
    assert not torch.allclose(frozen[1], base[1])


@pytest.mark.parametrize("policy", ["kvzip", "expected_attention"])
def test_query_agnostic_scores_of_a_local_layer_stay_inside_its_window(tiny_gemma, policy):
    """kvzip's repeat and expected attention's next queries start after the last position p: a local layer
    reads p - W + 1 on, so an older entry gets nothing there (sinks aside), and something in the global one."""
    config = RunConfig(policy, cache_size=256, frozen=0, allocation="pyramid", chat=False)
    session = CacheSession(tiny_gemma, config)
    session.feed(tiny_gemma.tokenizer(LONG_PROMPT)["input_ids"][:40])
    scores = session.policy.score_candidates(tiny_gemma.model, session.candidates())  # [n, layers, kv_heads]
    pos = session.candidates().pos
    old = (pos <= 40 - WINDOW) & (pos >= 4)  # expected attention's 4 sinks score the layer's largest + 1
    assert scores.shape[:2] == (40, 3) and (scores[old, 0] == 0).all() and (scores[old, 1] > 0).all()
    assert (scores[pos > 40 - WINDOW, 0] > 0).all()


@pytest.mark.parametrize("policy", [*KINDS, "counter_causal"])
def test_every_kind_of_policy_runs_on_a_hybrid_model(tiny_gemma, policy):
    trace = generate(tiny_gemma, LONG_PROMPT, policy=policy, cache_size=12, max_new_tokens=6)
    assert trace.cycles and all(len(c.kept) <= trace.config["frozen"] + 12 for c in trace.cycles)


@pytest.mark.parametrize("policy, allocation", [("kvzip", "adaptive"), ("counter_causal", "pyramid")])
def test_a_per_layer_allocation_keeps_the_windows(tiny_gemma, policy, allocation):
    """Layers holding different entries: each layer's mask comes from its own rows' positions."""
    trace = generate(tiny_gemma, LONG_PROMPT, policy=policy, cache_size=12, max_new_tokens=6, allocation=allocation)
    assert trace.cycles


def test_the_plain_format_serves_a_model_without_a_chat_template(tiny_gemma):
    import copy

    tokenizer = copy.copy(tiny_gemma.tokenizer)
    tokenizer.chat_template = None
    encoded = encode_prompt(tokenizer, "Question: what is 2 + 2?", chat=True)
    start = list(tokenizer("", add_special_tokens=True)["input_ids"])
    text = list(tokenizer("Question: what is 2 + 2?", add_special_tokens=False)["input_ids"])
    assert encoded.ids == start + text + list(tokenizer(PLAIN_SUFFIX, add_special_tokens=False)["input_ids"])
    assert encoded.template_prefix == len(start)


def test_a_missing_gemma_package_says_how_to_install_it(monkeypatch, tmp_path):
    from ccviz.models import embedded

    monkeypatch.setenv("CCVIZ_CACHE_DIR", str(tmp_path))  # no converted copy there
    real = importlib.util.find_spec
    monkeypatch.setattr(
        embedded.importlib.util, "find_spec", lambda name: None if name == GEMMA_PACKAGE else real(name)
    )
    assert model_name(GEMMA_MODEL) == GEMMA_MODEL  # a name, checked without loading anything
    with pytest.raises(CcvizError) as raised:
        load_model(GEMMA_MODEL)
    message = str(raised.value)
    assert "\n" not in message and "pip install -e '.[gemma]'" in message and "scripts/install.sh --gemma" in message


# ----- the real Gemma 3 270M -----------------------------------------------------------------------------
_GEMMA_THERE = importlib.util.find_spec(GEMMA_PACKAGE) is not None or (cache_dir() / "models" / GEMMA_MODEL).is_dir()
needs_gemma = pytest.mark.skipif(
    not _GEMMA_THERE, reason="Gemma 3 270M is not installed: pip install -e '.[gemma]' (or scripts/install.sh --gemma)"
)
FACT = (
    "Clinical record. Visit 1: the patient, Mr. Arlen Voss, reported mild headaches. Visit 2: he mentioned that "
    "he is allergic to amoxicillin. Visit 3: blood pressure was normal and he slept well.\n\n"
    "Question: Which drug is the patient allergic to? Answer with the exact value from the text."
)


@pytest.fixture(scope="session")
def gemma() -> LoadedModel:
    return load_model(GEMMA_MODEL)  # the first load converts the GGUF once (about 2 minutes on 2 cores)


@needs_gemma
def test_gemma_loads_with_its_local_and_global_layers(gemma):
    assert type(gemma.model).__name__ == "Gemma3ForCausalLM" and gemma.name == GEMMA_MODEL
    assert gemma.windows is not None and len(gemma.windows) == 18
    assert gemma.windows.count(None) == 3 and set(gemma.windows) == {512, None}
    assert not getattr(gemma.tokenizer, "chat_template", None)  # a base model: the plain format
    assert encode_prompt(gemma.tokenizer, FACT, chat=True).template_prefix == 1  # <bos>


@needs_gemma
@pytest.mark.parametrize("prompt", [FACT, LONG_PROMPT * 5], ids=["fact", "beyond-the-window"])
def test_gemma_full_matches_generate(gemma, prompt):
    """The long prompt goes in passes of 256 tokens: the third one's local layers stop at 512 positions back."""
    if prompt is not FACT:
        assert len(encode_prompt(gemma.tokenizer, prompt, chat=True).ids) > 512 + 32
    trace = generate(gemma, prompt, policy="full", cache_size=1024, max_new_tokens=8)
    assert generated_ids(trace) == reference_ids(gemma, prompt, 8)


@needs_gemma
def test_gemma_answers_in_the_plain_format(gemma):
    trace = generate(gemma, FACT, policy="full", cache_size=64, max_new_tokens=8)
    assert "amoxicillin" in gemma.tokenizer.decode(generated_ids(trace)).lower()


@needs_gemma
def test_gemma_counter_causal_matches_the_reference(gemma):
    """32 entries spread over 1,116 positions: the local layers' 512-position window cuts every row's future
    (the fast variants re-run the last layer only, a global one)."""
    ids = torch.tensor([gemma.tokenizer(LONG_PROMPT)["input_ids"][:32]])
    pos = torch.arange(32) * 36
    _check_against_reference(gemma, ids, pos, variants=("full",), gaps=(0,))


@needs_gemma
@pytest.mark.parametrize("policy", ["counter_causal", "counter_causal_fast", "h2o", "kvzip", "sliding"])
def test_gemma_runs_a_policy_of_each_kind(gemma, policy):
    trace = generate(gemma, FACT, policy=policy, cache_size=48, max_new_tokens=2, stop_at_eos=False)
    assert trace.cycles and len(generated_ids(trace)) == 2
