"""Budgets per layer and per KV head (ccviz.engine.allocation, ccviz.engine.survivors): the budgets, the
selection rules, a cache that really holds different entries per layer, and attention over it against an
explicit reference."""

import json
import math
from pathlib import Path

import pytest
import torch
from references import mlp, reference_scores, rms, rope

from ccviz import CcvizError, RunConfig, Trace, generate
from ccviz.engine import CacheSession
from ccviz.engine.allocation import pyramid_budgets
from ccviz.engine.survivors import adaptive_keep, pyramid_keep, select_survivors
from ccviz.models.tiny import build_tiny_model
from ccviz.policies.counter_causal.surprise import causal_pass, surprise_from_cache

TEXT = (
    "Patient record 4471. Mrs. Okafor, 68, was admitted with chest pain. She is allergic to latex. An ECG showed no "
    "acute changes and troponin was normal. Her daughter, Ada, brought the medication list: aspirin 81 mg, "
    "atorvastatin 40 mg and lisinopril 10 mg. She was discharged on day three with a follow-up in clinic KX-4817."
)


@pytest.fixture(scope="module")
def deep():
    """A 4-layer tiny random Llama (4 query heads, 2 KV heads): room for a pyramid."""
    return build_tiny_model(num_layers=4)


def _ids(lm, count=120):
    return lm.tokenizer(TEXT)["input_ids"][:count]


# ----- budgets and selection rules -----------------------------------------------------------------
@pytest.mark.parametrize(
    "cache_size,recent,layers,beta", [(64, 0, 30, 20), (48, 16, 4, 4), (10, 2, 7, 3), (33, 0, 1, 20)]
)
def test_pyramid_budgets_fall_linearly_with_the_uniform_total(cache_size, recent, layers, beta):
    budgets = pyramid_budgets(cache_size, recent, layers, beta)
    scored = cache_size - recent
    assert len(budgets) == layers and sum(budgets) == layers * scored
    assert all(a >= b for a, b in zip(budgets, budgets[1:]))
    if layers > 1:
        assert abs(budgets[-1] - scored / beta) < 1 and abs(budgets[0] - (2 * scored - scored / beta)) < 1
    assert pyramid_budgets(cache_size, recent, layers, 1) == [scored] * layers


def test_pyramid_keep_is_each_layers_own_top_by_its_own_score():
    torch.manual_seed(0)
    n, layers, heads = 40, 3, 2
    score = torch.randn(n, layers, heads)
    held = torch.rand(layers, n) < 0.8
    held[:, -5:] = True  # the newest entries are in every layer
    budgets, recent = [12, 8, 4], 3
    kept = pyramid_keep(score, held, budgets, recent)
    for layer in range(layers):
        rows = [i for i in range(n) if held[layer, i]]
        mean = score[:, layer].mean(-1)
        last = rows[-recent:]
        rest = sorted(rows[:-recent], key=lambda i: (-float(mean[i]), -i))[: budgets[layer]]
        assert kept[layer].tolist() == sorted(last + rest)
    shared = torch.randn(n)  # a per-token score: every layer ranks its own entries by it
    for layer, rows in enumerate(pyramid_keep(shared, held, budgets, recent)):
        own = held[layer].nonzero()[:, 0]
        assert rows.tolist() == own[select_survivors(shared[own], budgets[layer] + recent, recent)].tolist()


def _slow_adaptive(score, visible, cache_size, recent):
    """The rule written out: each head's newest ``recent`` visible entries, then the best (head, entry)
    pairs by score (ties: the later entry, then the lower head) until (J - R) x heads places are filled."""
    layers, heads, n = visible.shape
    result = []
    for layer in range(layers):
        keep = set()
        pairs = []
        for head in range(heads):
            seen = [e for e in range(n) if visible[layer, head, e]]
            keep |= {(head, e) for e in seen[len(seen) - recent :]} if recent else set()
            pairs += [(head, e) for e in seen[: max(len(seen) - recent, 0)]]
        pairs.sort(key=lambda p: (-float(score[p[1], layer, p[0]]), -p[1], p[0]))
        keep |= set(pairs[: (cache_size - recent) * heads])
        result.append(keep)
    return result


@pytest.mark.parametrize("recent", [0, 4])
def test_adaptive_keep_takes_exactly_the_top_head_entry_pairs(recent):
    torch.manual_seed(1)
    n, layers, heads, cache_size = 50, 2, 3, 12
    score = torch.randn(n, layers, heads).round(decimals=1)  # ties happen
    visible = torch.rand(layers, heads, n) < 0.7
    visible[:, :, -6:] = True
    kept = adaptive_keep(score, visible, cache_size, recent)
    expected = _slow_adaptive(score, visible, cache_size, recent)
    for layer in range(layers):
        got = {(h, e) for h, e in kept[layer].nonzero().tolist()}
        assert got == expected[layer]
        assert len(got) == min(cache_size * heads, int(visible[layer].sum()))
        assert not (kept[layer] & ~visible[layer]).any()  # a head never gets back what it evicted


# ----- the engine ------------------------------------------------------------------------------------
def _feed(lm, config, ids, **session_args):
    session = CacheSession(lm, RunConfig.of(**config).resolved(), **session_args)
    logits = session.feed(ids, all_logits=True)
    return session, logits


def _pyramid_config(policy="tova", **more):
    return dict(
        policy=policy,
        cache_size=24,
        chunk_size=6,
        frozen=2,
        chat=False,
        max_new_tokens=1,
        allocation="pyramid",
        pyramid_beta=4,
        **more,
    )


def test_pyramid_layer_lengths_match_the_budgets_at_every_refresh(deep):
    ids = _ids(deep)
    config = _pyramid_config()
    seen = []

    def check(trace):
        lengths = [layer.keys.shape[-2] for layer in session.cache.kv.layers]
        cycle = trace.cycles[-1]
        assert lengths == [len(cycle.kept_by(layer)) for layer in range(len(lengths))]
        seen.append((cycle.step, lengths))

    session = CacheSession(deep, RunConfig.of(**config).resolved(), on_refresh=check)
    session.feed(ids, all_logits=True)
    budgets = session.selector.budgets
    uniform, _ = _feed(deep, {**config, "allocation": "uniform"}, ids)
    assert len(seen) == len(ids) // 6 and budgets == pyramid_budgets(24, 0, 4, 4) and budgets[0] > budgets[-1]
    for step, lengths in seen:  # a layer under its budget has evicted nothing yet
        assert lengths == [2 + min(b, step - 2) for b in budgets]
    assert seen[-1][0] - 2 > budgets[0] and sum(seen[-1][1]) == 4 * (2 + 24)  # every layer full: the uniform total
    since = len(ids) - seen[-1][0]  # tokens fed after the last refresh, in every layer
    assert [layer.keys.shape[-2] for layer in uniform.cache.kv.layers] == [2 + 24 + since] * 4
    assert session.cache.kv_bytes() == uniform.cache.kv_bytes()


def _reference_logits(model, ids, visible):
    """Teacher-forced logits ``[T, vocab]`` of a Llama written out, where in layer l the query of token t
    reads key s only if ``visible[l][g][t, s]`` for its KV head g: the explicit form of a per-layer cache."""
    cfg = model.config
    eps, theta = cfg.rms_norm_eps, cfg.rope_parameters["rope_theta"]
    heads, kv_heads, dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    n = len(ids)
    pos = torch.arange(n)
    x = model.model.embed_tokens.weight[torch.tensor(ids)].clone()
    for index, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        h = rms(x, layer.input_layernorm.weight, eps)
        q = rope((h @ attn.q_proj.weight.T).view(n, heads, dim), pos, theta)
        k = rope((h @ attn.k_proj.weight.T).view(n, kv_heads, dim), pos, theta)
        v = (h @ attn.v_proj.weight.T).view(n, kv_heads, dim)
        out = torch.zeros(n, heads, dim)
        for head in range(heads):
            group = head // (heads // kv_heads)
            logits = (q[:, head] @ k[:, group].T / math.sqrt(dim)).masked_fill(~visible[index][group], float("-inf"))
            out[:, head] = logits.softmax(-1) @ v[:, group]
        x = x + out.reshape(n, -1) @ attn.o_proj.weight.T
        x = x + mlp(layer.mlp, rms(x, layer.post_attention_layernorm.weight, eps))
    return rms(x, model.model.norm.weight, eps) @ model.lm_head.weight.T


def _visibility(trace, layers, kv_heads):
    """From the trace alone: ``[layer][kv head]`` bool [T, T], which keys each query could read."""
    n = len(trace.tokens)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    visible = [[causal.clone() for _ in range(kv_heads)] for _ in range(layers)]
    for cycle, after in zip(trace.cycles, [*trace.cycles[1:], None]):
        until = n if after is None else after.step  # the queries processed after this refresh, before the next
        for layer in range(layers):
            for head in range(kv_heads):
                gone = torch.ones(cycle.step, dtype=torch.bool)
                gone[cycle.kept_by(layer, head if cycle.num_heads else None)] = False
                visible[layer][head][cycle.step : until, : cycle.step] &= ~gone
    return visible


@pytest.mark.parametrize(
    "policy,allocation",
    [
        ("tova", "pyramid"),
        ("tova", "adaptive"),
        ("snapkv", "pyramid"),
        ("h2o", "pyramid"),
        ("counter_causal_fast", "pyramid"),
    ],
)
def test_attention_under_per_layer_eviction_matches_an_explicit_reference(deep, policy, allocation):
    ids = _ids(deep, 90)
    session, logits = _feed(deep, _pyramid_config(policy, recent=3) | {"allocation": allocation}, ids)
    trace = session.trace
    assert trace.cycles[-1].num_layers == 4 and (trace.cycles[-1].num_heads == 2) == (allocation == "adaptive")
    sets = {tuple(trace.cycles[-1].kept_by(layer, head)) for layer in range(4) for head in range(2)}
    assert len(sets) > 1  # the layers (and heads) really hold different entries (on random weights H2O's and
    # SnapKV's heads all rank by age, so adaptive is tested with TOVA)
    with torch.no_grad():
        expected = _reference_logits(deep.model, ids, _visibility(trace, 4, 2))
    assert (logits - expected).abs().max().item() < 1e-4


def test_adaptive_run_keeps_exactly_the_top_pairs_of_its_scores(deep):
    ids = _ids(deep, 72)
    config = RunConfig.of(**_pyramid_config("tova", recent=2) | {"allocation": "adaptive"}).resolved()
    before = []

    session = CacheSession(deep, config)
    for start in range(0, len(ids), 6):  # pause before each refresh, to record what it decides on
        session.feed(ids[start : start + 6], refresh=False)
        if session.refresh_pending:
            candidates = session.candidates()
            before.append(
                (
                    session.policy.score_candidates(session.lm.model, candidates).clone(),
                    session.visible_candidates().clone(),
                    candidates.pos.tolist(),
                )
            )
    session.refresh()
    assert len(before) == len(session.trace.cycles) == len(ids) // 6
    for cycle, (score, visible, candidates) in zip(session.trace.cycles, before):
        expected = _slow_adaptive(score, visible, 24, 2)
        for layer in range(4):
            for head in range(2):
                kept = {candidates[e] for h, e in expected[layer] if h == head}
                assert set(cycle.kept_by(layer, head)) - set(range(2)) == kept


def test_counter_causal_over_a_layer_that_holds_some_entries_matches_the_reference(tiny):
    ids = torch.tensor([tiny.tokenizer(TEXT)["input_ids"][:40]])
    pos = torch.arange(40)
    kv, hidden = causal_pass(tiny.model, ids, pos[None], residual_layer=-1)
    torch.manual_seed(2)
    held = [sorted(set(torch.randperm(40)[:28].tolist()) | {39}) for _ in kv]
    subset = [(k[:, :, rows], v[:, :, rows], torch.tensor(rows)) for (k, v), rows in zip(kv, held)]
    for variant, min_gap, window in (("full", 0, 0), ("fast", 1, 0), ("full", 0, 6)):
        expected = reference_scores(tiny.model, subset, ids[0], pos, hidden, variant, min_gap, window=window, held=held)
        for score in ("logit", "logprob"):
            actual = surprise_from_cache(
                tiny.model, subset, ids[0], pos, hidden, variant=variant, score=score, min_gap=min_gap, window=window
            )
            finite = torch.isfinite(expected[score])
            assert torch.equal(finite, torch.isfinite(actual))
            assert (actual[finite] - expected[score][finite]).abs().max() < 1e-3


# ----- choices, refusals, traces ---------------------------------------------------------------------
def test_uniform_is_the_default_and_records_nothing_per_layer(tiny):
    plain = generate(tiny, TEXT, policy="tova", cache_size=16, max_new_tokens=2, chat=False)
    uniform = generate(tiny, TEXT, policy="tova", cache_size=16, max_new_tokens=2, chat=False, allocation="uniform")
    strip = lambda t: [(c.candidates, c.kept, c.scores, c.layer_kept, c.head_kept) for c in t.cycles]  # noqa: E731
    assert strip(plain) == strip(uniform) and plain.cycles[-1].layer_kept is None
    assert plain.config["allocation"] == "uniform" and plain.peak_cache_bytes > 0


@pytest.mark.parametrize(
    "settings,message",
    [
        (dict(policy="counter_causal_fast", allocation="adaptive"), "needs per-head scores"),
        (dict(policy="sliding", allocation="adaptive"), "one score per token"),
        (dict(policy="tova", allocation="pyramid", pyramid_beta=0.5), "pyramid beta must be at least 1"),
        (dict(policy="tova", allocation="diagonal"), "allocation must be one of uniform, pyramid, adaptive"),
    ],
)
def test_bad_allocations_are_refused_in_one_line(settings, message):
    with pytest.raises(CcvizError, match=message) as err:
        RunConfig(cache_size=16, **settings)
    assert "\n" not in str(err.value)


def test_allocation_keeps_single_tokens(tiny):
    with pytest.raises(CcvizError, match="granularity 'token'"):
        generate(tiny, TEXT, policy="tova", cache_size=16, max_new_tokens=1, allocation="pyramid", granularity="word")


def test_version_2_traces_round_trip_and_version_1_files_still_load(deep, tmp_path):
    trace = generate(deep, TEXT, policy="snapkv", cache_size=16, max_new_tokens=2, chat=False, allocation="adaptive")
    path = tmp_path / "t.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded.to_dict() == trace.to_dict() and loaded.schema_version == 2
    cycle = loaded.cycles[-1]
    assert sorted(set().union(*(cycle.kept_by(layer) for layer in range(4)))) == cycle.kept
    assert cycle.layer_counts() == [sum(t in cycle.kept_by(layer) for layer in range(4)) for t in cycle.kept]
    old = trace.to_dict()
    old["schema_version"] = 1
    del old["peak_cache_bytes"]
    for raw in old["cycles"]:
        del raw["layer_kept"], raw["head_kept"]
    v1 = Trace.from_dict(old)
    assert (
        v1.peak_cache_bytes == 0
        and v1.cycles[-1].kept_by(3) == v1.cycles[-1].kept
        and v1.cycles[-1].layer_counts() == [1] * len(v1.cycles[-1].kept)
    )


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda c: c.update(layer_kept=["zz"] * 4), "hex"),
        (lambda c: c.update(layer_kept=["00" * (len(c["layer_kept"][0]) // 2)] * 4), "cover every kept entry"),
        (lambda c: c.update(head_kept=[row[:1] for row in c["head_kept"]]), "cover exactly"),
        (lambda c: c.update(layer_kept=None), "head_kept needs layer_kept"),
    ],
)
def test_bad_per_layer_sets_are_refused(deep, change, message):
    data = generate(
        deep, TEXT, policy="tova", cache_size=16, max_new_tokens=1, chat=False, allocation="adaptive"
    ).to_dict()
    change(data["cycles"][-1])
    with pytest.raises(CcvizError, match=message):
        Trace.from_json(json.dumps(data))


def test_the_heatmap_shows_one_layers_cache_and_how_many_layers_hold_each_token(deep):
    from ccviz.figures import comparison_heatmaps, retention_grid, retention_heatmap

    settings = dict(policy="tova", cache_size=16, chunk_size=4, max_new_tokens=2, chat=False)
    adaptive = generate(deep, TEXT, allocation="adaptive", **settings)
    grid = retention_grid(adaptive, layer=3, head=1)
    for row, index in enumerate(grid.rows):
        kept = adaptive.cycles[index].kept_by(3, 1)
        assert grid.timesteps[row, : len(kept)].tolist() == kept and (grid.timesteps[row, len(kept) :] == -1).all()
    counts = retention_grid(adaptive, "layers")
    for row, index in enumerate(counts.rows):
        cycle = adaptive.cycles[index]
        assert counts.z[row, : len(cycle.kept)].tolist() == cycle.layer_counts()
    assert set(counts.z[~torch.isnan(torch.tensor(counts.z))].tolist()) <= {1, 2, 3, 4}
    title = retention_heatmap(adaptive, "layers", layer=2).layout.title.text
    assert "adaptive" in title and "layer 2" in title
    uniform = generate(deep, TEXT, **settings)
    with pytest.raises(CcvizError, match="allocation uniform"):
        retention_heatmap(uniform, "layers")
    with pytest.raises(CcvizError, match="layer must be 0 to 3"):
        retention_heatmap(adaptive, layer=4)
    pyramid = generate(deep, TEXT, allocation="pyramid", **settings)
    fig = comparison_heatmaps([uniform, pyramid], ["uniform", "pyramid"], layer=3)
    assert fig.data[1].z.shape[1] < fig.data[0].z.shape[1]  # the last layer of the pyramid holds least


def test_uniform_traces_are_those_of_the_engine_before_allocation_existed(smollm):
    """Traces recorded at commit c957054, before per-layer allocation: the same kept sets, candidates and
    output, and the same scores (to float32 rounding, should this CPU order a sum differently: an Intel Xeon
    gives surprise scores 2e-5 from the AMD EPYC's that recorded them)."""
    recorded = json.loads((Path(__file__).parent / "data" / "uniform_before_allocation.json").read_text())
    for name, before in recorded["runs"].items():
        policy, _, extra = name.partition("-")
        settings = dict(pair.split("=") for pair in filter(None, [extra]))
        trace = generate(
            smollm,
            recorded["prompt"],
            policy=policy,
            cache_size=48,
            max_new_tokens=12,
            allocation="uniform",
            **settings,
        )
        assert trace.output_text == before["output_text"], name
        assert [(c.candidates, c.kept) for c in trace.cycles] == [
            (c["candidates"], c["kept"]) for c in before["cycles"]
        ], name
        for cycle, old in zip(trace.cycles, before["cycles"]):
            assert cycle.scores.keys() == old["scores"].keys()
            for signal, values in old["scores"].items():
                expected = torch.tensor([float(v) for v in values])
                # rounding is relative to the vector's scale: a score near 0 among scores near 17 carries their error
                scale = expected[torch.isfinite(expected)].abs().max().item() if torch.isfinite(expected).any() else 1.0
                assert torch.allclose(torch.tensor(cycle.scores[signal]), expected, rtol=1e-4, atol=1e-5 * scale), (
                    name,
                    signal,
                )


@pytest.mark.parametrize(
    "policy,allocation", [("snapkv", "pyramid"), ("counter_causal_fast", "pyramid"), ("h2o", "adaptive")]
)
def test_every_signal_is_recorded_per_candidate_under_a_per_layer_allocation(deep, policy, allocation):
    """The companions watch the same per-layer cache: per-head ones reduced like the policy's score."""
    trace = generate(
        deep, TEXT, policy=policy, cache_size=16, max_new_tokens=2, chat=False, allocation=allocation, record="all"
    )
    for cycle in trace.cycles:
        assert {"attention_last", "attention_chunk", "surprise"} <= set(cycle.scores)
        assert all(len(values) == len(cycle.candidates) for values in cycle.scores.values())
