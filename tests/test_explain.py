"""Explain a token: the replayed decision equals the run's, on the real model, and its attention is the engine's."""

import pytest
import torch

from ccviz import CcvizError, generate
from ccviz.choices import SURPRISE_SCORES
from ccviz.explain import descending_rank, explain_token
from ccviz.policies.counter_causal.surprise import (
    _counter_causal_attention,
    _residual_stream,
    causal_pass,
    causal_weights_received,
    counter_causal_surprise,
    counter_causal_weights,
)

DOC = (
    "The museum's night guard, Tomas, keeps the spare key to the east wing in a blue tin under the reception desk. "
    "Every evening he walks the galleries twice, checks the windows, and writes the temperature of each room in a "
    "logbook. The locker code is 4817. Where is the spare key kept?"
)


@pytest.fixture(scope="module")
def run(smollm):
    """The paper's fast form, token by token by raw logit, so each verdict is one rank among the tokens."""
    return generate(
        smollm,
        DOC,
        policy="counter_causal_fast",
        policy_options={"paper": True},
        cache_size=24,
        chunk_size=8,
        recent=4,
        max_new_tokens=6,
        chat=False,
    )


def _rank_reference(scores: list[float], index: int) -> int:
    """Slow: sort (score, position) pairs best first, the later position first among equals."""
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], -i))
    return order.index(index) + 1


def test_surprise_at_the_first_refresh_equals_counter_causal_surprise_of_the_text_so_far(smollm, run):
    cycle = run.cycles[0]
    ids = torch.tensor([[tok.id for tok in run.tokens[: cycle.step]]])
    t = cycle.candidates[2]
    e = explain_token(smollm, run, 0, t)
    assert e.status == "candidate" and e.kept and e.matches_trace
    for score in SURPRISE_SCORES:  # nothing is evicted yet: the cache is the text's own causal pass
        reference = counter_causal_surprise(smollm.model, ids, variant="fast", score=score)
        assert e.surprise[score] == pytest.approx(float(reference[t]), rel=1e-5, abs=1e-5)
    assert e.score == pytest.approx(cycle.scores["surprise"][2], rel=1e-6)


def test_ranks_and_verdicts_equal_the_traces_at_an_evicting_refresh(smollm, run):
    cycle = next(c for c in run.cycles if len(c.candidates) > 24)
    recorded, n = cycle.scores["surprise"], len(cycle.candidates)
    older = [t for t in cycle.candidates[: n - 4]]
    evicted = next(t for t in older if t not in cycle.kept)
    kept = next(t for t in older if t in cycle.kept)
    for t, verdict in ((evicted, False), (kept, True), (cycle.candidates[-2], True)):
        e = explain_token(smollm, run, cycle.index, t)
        row = cycle.candidates.index(t)
        assert e.kept is verdict and e.matches_trace
        assert e.score == pytest.approx(recorded[row], rel=1e-6)
        assert e.surprise["logit"] == pytest.approx(recorded[row], rel=1e-6)  # the policy's own score is logit
        if row < n - 4:  # ranked against the older candidates: the best J - R = 20 stay
            assert e.rank == _rank_reference(recorded[: n - 4], row) and (e.rank <= 20) is verdict
            assert "Ranked" in e.reason
        else:
            assert e.rank is None and "last R = 4" in e.reason
        for score in SURPRISE_SCORES:
            assert 1 <= e.surprise_rank[score] <= n


def test_at_the_defaults_a_clause_verdict_equals_the_traces(smollm):
    """The default fast form ranks whole clauses by their best smoothed contrast: the replay agrees with the run."""
    run = generate(smollm, DOC, policy="counter_causal_fast", cache_size=24, chunk_size=8, recent=4, max_new_tokens=2)
    assert (run.config["granularity"], run.config["policy_options"]["smooth"]) == ("clause", 9)
    cycle = next(c for c in run.cycles if len(c.candidates) > 24)
    older = cycle.candidates[: len(cycle.candidates) - 4]
    for verdict in (False, True):
        t = next(t for t in older if (t in cycle.kept) is verdict)
        e = explain_token(smollm, run, cycle.index, t)
        assert e.kept is verdict and e.matches_trace and "unit" in e.reason


def test_tokens_outside_the_candidates_get_their_status_without_a_replay(smollm, run):
    last = run.cycles[-1]
    gone = next(t for t in run.cycles[0].candidates if t not in last.kept)
    e = explain_token(smollm, run, len(run.cycles) - 1, gone)
    assert e.status == "evicted" and e.kept is False and "Evicted earlier, at refresh" in e.reason
    e = explain_token(smollm, run, 0, run.cycles[0].step + 3)
    assert e.status == "unseen"
    with pytest.raises(CcvizError, match="refresh must be"):
        explain_token(smollm, run, len(run.cycles), 0)


def test_counter_causal_weights_are_the_attention_the_pass_itself_applies(smollm):
    """Weights times the cached values, through o_proj, give the engine's SDPA attention output for the row."""
    model = smollm.model
    ids = smollm.tokenizer(DOC, return_tensors="pt").input_ids[:, :40]
    n, row = ids.shape[1], 11
    pos = torch.arange(n)
    for variant, min_gap, window in (("fast", 0, 0), ("fast", 2, 9), ("full", 1, 0)):
        kv, hidden = causal_pass(model, ids, pos[None], residual_layer=-1 if variant == "fast" else 0)
        weights = counter_causal_weights(
            model,
            kv,
            ids[0],
            pos,
            hidden if variant == "fast" else None,
            row=row,
            variant=variant,
            min_gap=min_gap,
            window=window,
        )
        visible = torch.zeros(n, dtype=torch.bool)
        visible[row + min_gap + 1 : (row + window + 1) if window else n] = True
        assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[0]), atol=1e-5)
        assert weights[:, ~visible].abs().max() == 0
        last = len(model.model.layers) - 1
        first = last if variant == "fast" else 0
        x = _residual_stream(
            model, kv, ids[0], pos, hidden if variant == "fast" else None, variant, min_gap, first, window, until=last
        )
        layer, (keys, values) = model.model.layers[last], kv[last]
        rope = model.model.rotary_emb(x, pos[None])
        engine = _counter_causal_attention(layer, x, keys, values, rope, min_gap, window)[0, row]
        groups = weights.shape[0] // values.shape[1]
        per_head = torch.einsum("hn,hnd->hd", weights, values[0].float().repeat_interleave(groups, 0))
        assert torch.allclose(layer.self_attn.o_proj(per_head.reshape(1, -1)).float()[0], engine, atol=1e-4)


def test_causal_weights_received_match_an_explicit_softmax_of_the_models_own_queries(smollm):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = smollm.model
    ids = smollm.tokenizer(DOC, return_tensors="pt").input_ids[:, :30]
    n, column = ids.shape[1], 7
    pos = torch.arange(n)
    kv, hidden = causal_pass(model, ids, pos[None])
    got = causal_weights_received(model, kv[-1][0], pos, hidden, column=column)
    layer = model.model.layers[-1]
    attn = layer.self_attn
    q = attn.q_proj(layer.input_layernorm(hidden[None])).view(1, n, -1, attn.head_dim).transpose(1, 2)
    cos, sin = model.model.rotary_emb(hidden[None], pos[None])
    q = apply_rotary_pos_emb(q, q, cos, sin)[0][0].float()
    keys = kv[-1][0][0].float()
    for h in range(q.shape[0]):
        k = keys[h // (q.shape[0] // keys.shape[0])]
        for j in range(n):  # slow: one query at a time, over the keys up to its own position
            probs = torch.softmax(q[h, j] @ k[: j + 1].T * attn.scaling, -1)
            expected = float(probs[column]) if j >= column else 0.0
            assert float(got[h, j]) == pytest.approx(expected, abs=1e-5)


def test_descending_rank_breaks_ties_towards_the_later_entry():
    values = torch.tensor([3.0, 5.0, 3.0, float("inf"), 1.0])
    assert (
        [descending_rank(values, i) for i in range(5)]
        == [_rank_reference(values.tolist(), i) for i in range(5)]
        == [4, 2, 3, 1, 5]
    )
