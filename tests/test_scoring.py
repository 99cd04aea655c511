"""Counter-causal surprise against a slow, explicit reference, and the properties of its mask."""

import math

import pytest
import torch
from references import TEXT, assert_close, reference_scores, scores_with_perturbed_entries

from ccviz import CcvizError, generate
from ccviz.engine.survivors import select_survivors
from ccviz.policies import POLICIES
from ccviz.policies.counter_causal import smooth_scores
from ccviz.policies.counter_causal.surprise import causal_pass, counter_causal_surprise

# ----- the explicit reference: per-layer, per-head, per-row loops, softmax written out ------------------


def _check_against_reference(lm, ids, positions=None):
    n = ids.shape[1]
    pos = torch.arange(n) if positions is None else positions
    kv, hidden = causal_pass(lm.model, ids, pos[None])
    for variant in ("full", "fast", "fast_mlp"):
        for min_gap in (0, 2):
            expected = reference_scores(lm.model, kv, ids[0], pos, hidden, variant, min_gap)
            for score, reference in expected.items():
                actual = counter_causal_surprise(
                    lm.model, ids, variant=variant, score=score, min_gap=min_gap, position_ids=pos[None]
                )
                assert actual.dtype == torch.float32 and actual.shape == (n,)
                assert_close(actual, reference)


def test_matches_reference_tiny(tiny):
    ids = torch.tensor([tiny.tokenizer(TEXT)["input_ids"]])
    _check_against_reference(tiny, ids)


def test_matches_reference_smollm(smollm):
    ids = torch.tensor([smollm.tokenizer(TEXT)["input_ids"][:28]])
    _check_against_reference(smollm, ids)


def test_matches_reference_with_gapped_positions(tiny):
    """After eviction positions are not contiguous: RoPE must use the original positions."""
    ids = torch.tensor([tiny.tokenizer(TEXT)["input_ids"][:20]])
    positions = torch.tensor([0, 1, 2, 3, 7, 8, 9, 15, 16, 20, 21, 22, 30, 31, 40, 41, 42, 50, 60, 61])
    _check_against_reference(tiny, ids, positions)


@pytest.mark.parametrize("variant", ["full", "fast", "fast_mlp"])
@pytest.mark.parametrize("min_gap", [0, 2])
def test_mask_is_counter_causal(smollm, variant, min_gap):
    ids = torch.tensor([smollm.tokenizer(TEXT)["input_ids"][:24]])
    i, options = 10, dict(variant=variant, score="logit", min_gap=min_gap)
    perturbed, base = scores_with_perturbed_entries(smollm.model, ids, list(range(0, i + min_gap + 1)), **options)
    assert perturbed[i] == base[i]  # the past and the hidden gap: no effect
    perturbed, base = scores_with_perturbed_entries(smollm.model, ids, [i + min_gap + 1], **options)
    assert abs(perturbed[i] - base[i]) > 1e-4  # the first visible future entry matters


@pytest.mark.parametrize("min_gap", [0, 1, 3])
def test_last_entries_are_infinite_and_the_rest_finite(tiny, min_gap):
    ids = torch.tensor([tiny.tokenizer(TEXT)["input_ids"][:16]])
    s = counter_causal_surprise(tiny.model, ids, variant="full", score="contrast", min_gap=min_gap)
    assert torch.isinf(s[-(min_gap + 1) :]).all() and (s[-(min_gap + 1) :] > 0).all()
    assert torch.isfinite(s[: -(min_gap + 1)]).all()


def test_bad_options_are_rejected(tiny):
    ids = torch.tensor([[1, 2, 3]])
    for kwargs, message in [
        ({"variant": "slow"}, "unknown variant"),
        ({"score": "prob"}, "unknown score"),
        ({"min_gap": -1}, "min_gap"),
        ({"window": 2, "min_gap": 2}, r"window \(2\) must exceed min_gap \(2\)"),
        ({"window": -1}, "window must be at least 0"),
        ({"from_layer": 1, "variant": "fast"}, "from_layer is an option of variant 'full'"),
        ({"from_layer": 2}, "from_layer must be below the model's 2 layers"),
    ]:
        with pytest.raises(CcvizError, match=message):
            counter_causal_surprise(tiny.model, ids, **kwargs)
    with pytest.raises(CcvizError, match=r"shape \[1, n\]"):
        counter_causal_surprise(tiny.model, torch.tensor([1, 2, 3]))


# ----- the layer split and the banded pass -----------------------------------------------------------
def _equal_to(actual, expected, tol):
    assert torch.equal(torch.isinf(actual), torch.isinf(expected))
    finite = torch.isfinite(expected)
    assert (actual[finite] - expected[finite]).abs().max().item() <= tol


@pytest.mark.parametrize("model", ["tiny", "smollm"])
@pytest.mark.parametrize("score", ["logit", "logprob", "contrast"])
def test_from_layer_ends_are_the_full_and_fast_mlp_variants(request, model, score):
    lm = request.getfixturevalue(model)
    ids = torch.tensor([lm.tokenizer(TEXT)["input_ids"][:40]])
    last = len(lm.model.model.layers) - 1
    full = counter_causal_surprise(lm.model, ids, variant="full", score=score)
    _equal_to(counter_causal_surprise(lm.model, ids, variant="full", score=score, from_layer=0), full, 1e-5)
    fast_mlp = counter_causal_surprise(lm.model, ids, variant="fast_mlp", score=score)
    _equal_to(counter_causal_surprise(lm.model, ids, variant="full", score=score, from_layer=last), fast_mlp, 1e-5)


def test_from_a_middle_layer_matches_the_reference(smollm):
    """l = 15 of 30: the stream starts from the stored H^(15) and re-runs layers 15..29, each with its MLP."""
    ids = torch.tensor([smollm.tokenizer(TEXT)["input_ids"][:20]])
    pos = torch.arange(ids.shape[1])
    kv, hidden = causal_pass(smollm.model, ids, pos[None], residual_layer=15)
    expected = reference_scores(smollm.model, kv, ids[0], pos, hidden, "full", 1, first=15)
    for score, reference in expected.items():
        assert_close(counter_causal_surprise(smollm.model, ids, score=score, min_gap=1, from_layer=15), reference)


def test_the_from_layer_policy_stores_only_the_residual_it_needs(tiny):
    from ccviz import CacheSession, RunConfig

    for options, layers in [({}, []), ({"from_layer": 1}, [1])]:
        session = CacheSession(tiny, RunConfig("counter_causal", cache_size=64, policy_options=options, chat=False))
        session.feed(tiny.tokenizer(TEXT)["input_ids"][:20])
        assert sorted(session.cache.residuals) == layers
    session = CacheSession(tiny, RunConfig("counter_causal_fast", cache_size=64, chat=False))
    session.feed(tiny.tokenizer(TEXT)["input_ids"][:20])
    assert sorted(session.cache.residuals) == [1]
    with pytest.raises(CcvizError, match="from_layer must be below the model's 2 layers"):
        CacheSession(tiny, RunConfig("counter_causal", cache_size=64, policy_options={"from_layer": 2}))


@pytest.mark.parametrize("variant", ["full", "fast"])
@pytest.mark.parametrize("min_gap, window", [(0, 3), (1, 4), (0, 1)])
def test_banded_pass_matches_the_reference(tiny, variant, min_gap, window):
    ids = torch.tensor([tiny.tokenizer(TEXT)["input_ids"][:23]])
    pos = torch.arange(ids.shape[1])
    kv, hidden = causal_pass(tiny.model, ids, pos[None])
    expected = reference_scores(tiny.model, kv, ids[0], pos, hidden, variant, min_gap, window=window)
    for score, reference in expected.items():
        actual = counter_causal_surprise(tiny.model, ids, variant=variant, score=score, min_gap=min_gap, window=window)
        assert_close(actual, reference)


@pytest.mark.parametrize("variant", ["full", "fast"])
def test_a_window_covering_every_entry_is_no_window(smollm, variant):
    ids = torch.tensor([smollm.tokenizer(TEXT)["input_ids"][:30]])
    n = ids.shape[1]
    unbanded = counter_causal_surprise(smollm.model, ids, variant=variant, score="logprob", min_gap=1)
    for window in (n - 1, n, 10 * n):  # entry 0 reaches the last entry: identical, bit for bit
        assert torch.equal(
            counter_causal_surprise(smollm.model, ids, variant=variant, score="logprob", min_gap=1, window=window),
            unbanded,
        )
    # one short of that, the banded kernel runs; only entry 0 loses a key, the others see their whole future
    banded = counter_causal_surprise(smollm.model, ids, variant=variant, score="logprob", min_gap=1, window=n - 2)
    _equal_to(banded[1:], unbanded[1:], 1e-4)
    assert abs(banded[0] - unbanded[0]) > 1e-6


@pytest.mark.parametrize("variant", ["full", "fast"])
def test_a_banded_entry_never_sees_beyond_its_window(smollm, variant):
    ids = torch.tensor([smollm.tokenizer(TEXT)["input_ids"][:30]])
    n, i, W = ids.shape[1], 6, 8
    options = dict(variant=variant, score="logit", min_gap=0, window=W)
    # every layer's rows read the cache, never other rows, so the band holds through all of them
    for entries in (list(range(i + W + 1, n)), list(range(0, i + 1))):
        perturbed, base = scores_with_perturbed_entries(smollm.model, ids, entries, **options)
        assert perturbed[i] == base[i]
    perturbed, base = scores_with_perturbed_entries(smollm.model, ids, [i + W], **options)
    assert abs(perturbed[i] - base[i]) > 1e-4  # the last entry inside the window matters


def test_smoothing_averages_neighbours_and_keeps_inf():
    scores = torch.tensor([1.0, 2.0, 6.0, 3.0, math.inf])
    smoothed = smooth_scores(scores, 3)
    expected = torch.tensor([1.5, 3.0, 11 / 3, 4.5, math.inf])
    assert torch.allclose(smoothed[:4], expected[:4]) and smoothed[4] == math.inf
    assert torch.equal(smooth_scores(scores, 1), scores)


# ----- inside the engine ------------------------------------------------------------------------------
LONG = (
    "The observatory log for the night of the ninth records three events. At dusk the dome motor stalled "
    "and was restarted by hand. Around midnight a bright meteor crossed the field of the main telescope, "
    "spoiling two exposures. The serial number of the replacement camera, delivered that morning, is "
    "KX-4471-B. Clouds rolled in before dawn and the session ended early. What is the camera's serial number?"
)


@pytest.mark.parametrize("policy", ["counter_causal", "counter_causal_fast"])
@pytest.mark.parametrize(
    "options", [{}, {"score": "contrast", "smooth": 3, "min_gap": 1}, {"score": "logprob", "recent": 4}]
)
def test_engine_keeps_frozen_plus_top_surprise(tiny, policy, options):
    J, h = 16, 4
    trace = generate(
        tiny,
        LONG,
        policy=policy,
        policy_options=options,
        cache_size=J,
        chunk_size=h,
        max_new_tokens=12,
        granularity="token",
    )  # by token: each survivor is one of the top scores (units: tests/test_units.py)
    frozen, recent = trace.config["frozen"], trace.config["recent"]
    assert recent == options.get("recent", 0)
    assert trace.config["policy_options"]["score"] == options.get("score", POLICIES[policy]().score)
    evicting = 0
    for cycle in trace.cycles:
        surprise = torch.tensor(cycle.scores["surprise"])
        assert surprise.numel() == len(cycle.candidates)
        if surprise.numel():
            assert math.isinf(surprise[-1]) and torch.isfinite(surprise[: -1 - options.get("min_gap", 0)]).all()
        survivors = select_survivors(surprise, J, recent)
        expected = list(range(min(frozen, cycle.step))) + [cycle.candidates[i] for i in survivors.tolist()]
        assert cycle.kept == expected
        if len(cycle.candidates) > J:
            evicting += 1
            assert len(cycle.kept) == frozen + J
            # the survivors are exactly the best scores (recent aside)
            head = len(cycle.candidates) - recent
            kept_scores = sorted(surprise[:head][[i for i in survivors.tolist() if i < head]].tolist(), reverse=True)
            assert kept_scores == sorted(surprise[:head].tolist(), reverse=True)[: J - recent]
    assert evicting >= 5


def test_in_engine_surprise_equals_standalone_before_eviction(smollm):
    """At the first refresh nothing was evicted yet: the engine's scores are those of the plain function."""
    trace = generate(
        smollm, LONG, policy="counter_causal", cache_size=64, chunk_size=16, max_new_tokens=1, chat=False, frozen=3
    )
    cycle = trace.cycles[0]
    ids = torch.tensor([[tok.id for tok in trace.tokens[: cycle.step]]])
    standalone = counter_causal_surprise(smollm.model, ids, variant="full", score=POLICIES["counter_causal"]().score)
    assert_close(torch.tensor(cycle.scores["surprise"]), standalone[3:])


def test_ties_are_broken_towards_recent_entries():
    scores = torch.tensor([1.0, 5.0, 1.0, 1.0, 5.0, 0.0])
    assert select_survivors(scores, 3, 0).tolist() == [1, 3, 4]
    assert select_survivors(scores, 3, 1).tolist() == [1, 4, 5]


def test_half_precision_model_scores_in_float32(tiny):
    """A bf16 copy of the model gives float32 scores that rank tokens like the float32 model."""
    import copy

    half = copy.deepcopy(tiny.model).to(torch.bfloat16)
    ids = torch.tensor([tiny.tokenizer(TEXT)["input_ids"][:24]])
    for variant in ("full", "fast"):
        exact = counter_causal_surprise(tiny.model, ids, variant=variant, score="logprob")[:-1]
        approx = counter_causal_surprise(half, ids, variant=variant, score="logprob")
        assert approx.dtype == torch.float32 and torch.isfinite(approx[:-1]).all()
        approx = approx[:-1]
        ranks = lambda v: v.argsort().argsort().float()  # noqa: E731
        correlation = torch.corrcoef(torch.stack([ranks(exact), ranks(approx)]))[0, 1]
        assert correlation > 0.9


def test_ccviz_scoring_is_the_public_name_of_the_same_functions():
    from ccviz import scoring
    from ccviz.policies.counter_causal import surprise

    assert scoring.__all__ and all(getattr(scoring, name) is getattr(surprise, name) for name in scoring.__all__)
