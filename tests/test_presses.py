"""kvpress-style scorers as ccviz policies: the first refresh keeps the top J of the scorer's own score on a
plain forward, a user's scorer runs without kvpress, and bad names fail in one line."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch

from ccviz import CcvizError, generate
from ccviz.policies import make_policy
from ccviz.policies.presses import RUNNABLE, press_policies

J, H = 24, 8  # the first refresh that evicts holds J + H entries, all from one plain forward
PROMPT = (  # no sentence twice: a repeated token has a repeated key norm, a tie no two forwards need agree on
    "Maren locked the greenhouse at dusk, checked the boiler gauge twice and wrote 4817 on the back of a seed "
    "packet. Her neighbour, a retired ferry pilot, argued that frost would come early; the almanac disagreed, "
    "and the radio forecast promised drizzle over the harbour until Thursday morning."
)
BRIDGED = [  # scorers whose scores rarely tie, with the options that fit a cache of J + H rows
    ("KnormPress", {}),
    ("StreamingLLMPress", {}),
    ("CompactorPress", {"sink_size_start": 2, "sink_size_end": 2}),
    ("KeyDiffPress", {}),
    ("TOVAPress", {}),
    ("SnapKVPress", {"window_size": 4}),
    ("ObservedAttentionPress", {}),
    ("ExpectedAttentionPress", {"n_sink": 2}),
    ("LeverageScorePress", {}),
    ("CURPress", {}),
    ("NonCausalAttnPress", {}),
    ("CapPress", {}),
    ("LagKVPress", {"lag_size": 8}),
]


def _first_eviction(lm, policy: str, options: dict) -> tuple[list[int], torch.Tensor]:
    """The kept positions and recorded scores ``[J + H]`` of a run's first refresh that evicts."""
    trace = generate(
        lm, PROMPT, policy=policy, policy_options=options, cache_size=J, chunk_size=H, chat=False,
        frozen=0, recent=0, max_new_tokens=1,
    )  # fmt: skip
    cycle = next(c for c in trace.cycles if len(c.candidates) > J)
    assert cycle.candidates == list(range(J + H))
    return sorted(cycle.kept), torch.tensor(cycle.scores["press_score"])


def _reference_scores(lm, press) -> torch.Tensor:
    """``press.score`` of every layer (max over layers and KV heads) ``[J + H]``, called on a plain
    transformers forward over the first J + H tokens, with kvpress's own way of giving each layer its RoPE;
    eager attention weights for the scorer that reads them, None for the rest (as kvpress gives them under SDPA)."""
    model = lm.model
    ids = torch.tensor([lm.tokenizer(PROMPT, add_special_tokens=False)["input_ids"][: J + H]])
    reads = type(press).__name__ == "ObservedAttentionPress"
    own = model.config._attn_implementation  # ccviz's capturing attention, put back for the other tests
    model.set_attn_implementation("eager")
    try:
        out = model(ids, use_cache=True, output_hidden_states=True, output_attentions=reads)
    finally:
        model.set_attn_implementation(own)
    positions = torch.arange(J + H)[None]
    scores = []
    for layer, block in enumerate(model.model.layers):
        module = block.self_attn
        module.rotary_emb = model.model.rotary_emb
        try:
            hidden = block.input_layernorm(out.hidden_states[layer])
            keys, values = out.past_key_values.layers[layer].keys, out.past_key_values.layers[layer].values
            cos, sin = model.model.rotary_emb(hidden, positions)
            weights = out.attentions[layer] if reads else None
            scores.append(press.score(module, hidden, keys, values, weights, {"position_embeddings": (cos, sin)})[0])
        finally:
            del module.rotary_emb
    return torch.stack(scores).amax(dim=(0, 1)).float()


def _seed_sketches(kvpress, monkeypatch) -> None:
    """Leverage scores (alone and in Compactor) draw a Gaussian sketch at every call: the same seed before
    each call gives the bridge's call and the reference's the same sketch."""
    score = kvpress.LeverageScorePress.score

    def seeded(self, *args, **kwargs):
        torch.manual_seed(0)
        return score(self, *args, **kwargs)

    monkeypatch.setattr(kvpress.LeverageScorePress, "score", seeded)


@pytest.mark.parametrize("model", ["tiny", pytest.param("smollm", marks=pytest.mark.slow)])
@pytest.mark.parametrize(("name", "options"), BRIDGED, ids=[name for name, _ in BRIDGED])
def test_the_first_refresh_keeps_the_top_j_of_the_scorers_own_score(request, monkeypatch, model, name, options):
    kvpress = pytest.importorskip("kvpress")
    lm = request.getfixturevalue(model)
    _seed_sketches(kvpress, monkeypatch)
    press = getattr(kvpress, name)(compression_ratio=H / (J + H), **options)  # J of the J + H rows stay
    kept, scores = _first_eviction(lm, f"kvpress:{name}", options)
    reference = _reference_scores(lm, press)
    torch.testing.assert_close(scores, reference, rtol=1e-3, atol=1e-4)
    evicted = sorted(set(range(J + H)) - set(kept))
    assert len(kept) == J and reference[kept].min() >= reference[evicted].max()  # a top J (ties either way)


@pytest.mark.parametrize(("name", "options"), [*BRIDGED, ("RandomPress", {})], ids=[n for n, _ in BRIDGED] + ["Random"])
def test_every_bridged_scorer_refreshes_in_chunked_prefill_and_in_decode_keeping_exactly_j(tiny, name, options):
    pytest.importorskip("kvpress")
    trace = generate(
        tiny, PROMPT, question="What is the gate code?", policy=f"kvpress:{name}", policy_options=options,
        cache_size=16, chunk_size=4, max_new_tokens=12,
    )  # fmt: skip
    assert {c.phase for c in trace.cycles} == {"prefill", "decode"}
    assert all(len(set(c.kept) & set(c.candidates)) == min(16, len(c.candidates)) for c in trace.cycles)


@dataclasses.dataclass
class LastKeyCoordinate:
    """A scorer written in kvpress's style by a user: keeps the entries whose keys' last coordinate is largest."""

    compression_ratio: float = 0.0
    coordinate: int = -1

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return keys[..., self.coordinate]


def test_the_reference_forward_gives_the_model_back_as_it_was(tiny):
    from ccviz.capture import captures_attention, install_hooks

    kvpress = pytest.importorskip("kvpress")
    install_hooks(tiny.model)
    _reference_scores(tiny, kvpress.KnormPress())
    assert captures_attention(tiny.model)


def test_a_users_own_scorer_runs_without_kvpress_and_its_options_are_the_policys(tiny):
    policy = make_policy(f"{__name__}:LastKeyCoordinate", coordinate=0)
    assert policy.options() == {"coordinate": 0}  # compression_ratio is J's to decide
    trace = generate(tiny, PROMPT, policy=policy.name, policy_options={"coordinate": 0}, cache_size=J, chunk_size=H)
    assert trace.run_config.policy == f"{__name__}:LastKeyCoordinate" and trace.run_config.options == {"coordinate": 0}
    assert all(len(set(c.kept) & set(c.candidates)) == min(J, len(c.candidates)) for c in trace.cycles)  # J exactly


@dataclasses.dataclass
class Wrapper:
    """A press that wraps another, as kvpress's CriticalKVPress does: nothing to build it from options."""

    press: object
    compression_ratio: float = 0.0

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return self.press.score(module, hidden_states, keys, values, attentions, kwargs)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (f"{__name__}:NoSuchScorer", "no scorer 'NoSuchScorer'"),
        ("no_such_module_here:Scorer", "cannot import the scorer"),
        (f"{__name__}:PROMPT", "is not a scorer"),
        (f"{__name__}:Wrapper", "its 'press' has no default"),
    ],
)
def test_a_name_that_is_no_scorer_fails_in_one_line(name, message):
    with pytest.raises(CcvizError, match=message):
        make_policy(name)


def test_the_docs_say_of_every_installed_press_whether_it_runs_and_the_menus_offer_those_that_do():
    kvpress = pytest.importorskip("kvpress")
    text = Path(__file__).parents[1].joinpath("docs", "policies.md").read_text(encoding="utf-8")
    table = text.split("Every press of kvpress")[1].split("\n## ")[0]
    lines = [line for line in table.splitlines() if line.startswith("| `")]
    rows = {name: line for line in lines for name in re.findall(r"`(\w+Press)`", line.split("|")[1])}
    assert set(rows) == {name for name in dir(kvpress) if name.endswith("Press")} - {"BasePress", "ScorerPress"}
    assert {name for name, line in rows.items() if line.split("|")[2].strip().startswith("runs")} == set(RUNNABLE)
    assert all(issubclass(getattr(kvpress, name), kvpress.ScorerPress) for name in RUNNABLE)
    assert press_policies() == tuple(f"kvpress:{name}" for name in RUNNABLE)


# ----- next to ccviz's own versions ----------------------------------------------------------------------------
# Where the definitions agree the bridge gives ccviz's own policy's result; where they differ, why:
# - KeyDiff: the same per-head score (tested below); under ``uniform`` ccviz's own averages the heads, the
#   bridge takes their max, as for every bridged scorer.
# - StreamingLLM: the same kept set (tested below) once ccviz's 4 sinks, frozen and outside J, are counted
#   inside the press's budget, as kvpress counts them.
# - TOVA: kvpress scores each layer by its own newest query's attention, ccviz's own reads the last layer's
#   only, so the bridge's max over layers ranks otherwise.
# - SnapKV: kvpress's window is the last ``window_size`` cached rows, kept; ccviz's own observes the queries
#   of its window as they pass and pools over the candidates and their neighbours.
# - Expected attention: ccviz's own takes the query statistics of the whole run by default (``history``),
#   kvpress's of the rows it is given, the cache.
# - H2O and ObservedAttention: H2O sums the attention of every query the run has made (evicted ones too),
#   kvpress averages that of the queries in the cache, each layer apart.
def test_bridged_keydiff_scores_every_layer_and_head_as_ccvizs_own(tiny):
    pytest.importorskip("kvpress")
    from ccviz import RunConfig
    from ccviz.engine import CacheSession
    from ccviz.policies import KeyDiff

    config = RunConfig(policy="kvpress:KeyDiffPress", cache_size=64, chat=False, frozen=0, allocation="adaptive")
    session = CacheSession(tiny, config.resolved())
    session.feed(tiny.tokenizer(PROMPT, add_special_tokens=False)["input_ids"][: J + H], refresh=False)
    candidates = session.candidates()
    bridged = session.policy.score_candidates(tiny.model, candidates)
    ours = KeyDiff().score_candidates(tiny.model, candidates)
    assert bridged.shape == ours.shape == (J + H, 2, tiny.model.config.num_key_value_heads)
    torch.testing.assert_close(bridged, ours)


def test_bridged_streaming_llm_keeps_ccvizs_own_set_with_the_sinks_inside_the_budget(tiny):
    pytest.importorskip("kvpress")
    bridged, _ = _first_eviction(tiny, "kvpress:StreamingLLMPress", {"n_sink": 4})
    trace = generate(
        tiny, PROMPT, policy="streaming_llm", cache_size=J - 4, chunk_size=H, chat=False, recent=0, max_new_tokens=1
    )
    ours = next(c for c in trace.cycles if len(set(c.candidates)) > J - 4)
    assert bridged == sorted(ours.kept) == [0, 1, 2, 3, *range(J + H - (J - 4), J + H)]


def test_a_bench_spec_names_a_scorer_by_its_reference_and_keeps_its_options():
    pytest.importorskip("kvpress")
    from ccviz_bench.specs import parse_spec

    spec = parse_spec("kvpress:SnapKVPress:window_size=32")
    assert (spec.name, spec.options, spec.label) == (
        "kvpress:SnapKVPress",
        (("window_size", 32),),
        "kvpress:SnapKVPress:window_size=32",
    )
    assert spec.build().options() == {"window_size": 32, "kernel_size": 5}
    assert spec.means(spec.meaning()) and parse_spec("kvpress:KnormPress").label == "kvpress:KnormPress"


def test_a_trace_of_a_bridged_scorer_reruns_identically_and_explains_a_token(tiny, tmp_path):
    pytest.importorskip("kvpress")
    from ccviz import Trace, run_generation
    from ccviz.explain import explain_token

    trace = generate(
        tiny, PROMPT, policy="kvpress:SnapKVPress", policy_options={"window_size": 4}, cache_size=J, chunk_size=H,
        max_new_tokens=4,
    )  # fmt: skip
    trace.save(tmp_path / "trace.json")
    loaded = Trace.load(tmp_path / "trace.json")
    rerun = run_generation(tiny, PROMPT, loaded.run_config)
    assert [c.kept for c in rerun.cycles] == [c.kept for c in trace.cycles] and rerun.tokens == trace.tokens
    cycle = next(c for c in trace.cycles if set(c.candidates) - set(c.kept))
    evicted = min(set(cycle.candidates) - set(cycle.kept))
    why = explain_token(tiny, loaded, cycle.index, evicted)
    assert why.status == "candidate" and why.kept is False and why.matches_trace and why.signal == "press_score"
