"""kvpress-style scorers as ccviz policies: the first refresh keeps the top J of the scorer's own score on a
plain forward, a user's scorer runs without kvpress, and bad names fail in one line."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ccviz import CcvizError, generate
from ccviz.policies import make_policy

J, H = 24, 8  # the first refresh that evicts holds J + H entries, all from one plain forward
PROMPT = "The gate code is 4817 and the locker code is 5309. " * 4
BRIDGED = [  # scorers whose scores rarely tie, with the options that fit a cache of J + H rows
    ("KnormPress", {}),
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


def _first_eviction(tiny, policy: str, options: dict) -> list[int]:
    trace = generate(
        tiny, PROMPT, policy=policy, policy_options=options, cache_size=J, chunk_size=H, chat=False,
        frozen=0, recent=0, max_new_tokens=1,
    )  # fmt: skip
    cycle = next(c for c in trace.cycles if len(c.candidates) > J)
    assert len(cycle.candidates) == J + H
    return sorted(cycle.kept)


def _reference_kept(tiny, press) -> list[int]:
    """The top J of ``press.score`` over every layer (max over layers and KV heads), called on a plain
    transformers forward over the first J + H tokens, with kvpress's own way of giving each layer its RoPE;
    eager attention weights for the scorer that reads them, None for the rest (as kvpress gives them under SDPA)."""
    model = tiny.model
    ids = torch.tensor([tiny.tokenizer(PROMPT, add_special_tokens=False)["input_ids"][: J + H]])
    reads = type(press).__name__ == "ObservedAttentionPress"
    model.set_attn_implementation("eager")
    try:
        out = model(ids, use_cache=True, output_hidden_states=True, output_attentions=reads)
    finally:
        model.set_attn_implementation("sdpa")
    positions = torch.arange(J + H)[None]
    scores = []
    for layer, block in enumerate(model.model.layers):
        module = block.self_attn
        module.rotary_emb = model.model.rotary_emb
        try:
            hidden = block.input_layernorm(out.hidden_states[layer])
            keys, values = out.past_key_values.layers[layer].keys, out.past_key_values.layers[layer].values
            cos, sin = model.model.rotary_emb(hidden, positions)
            kwargs = {"position_embeddings": (cos, sin)}
            scores.append(
                press.score(module, hidden, keys, values, out.attentions[layer] if reads else None, kwargs)[0]
            )
        finally:
            del module.rotary_emb
    best = torch.stack(scores).amax(dim=(0, 1))  # [rows]
    return sorted(best.topk(J).indices.tolist())


@pytest.mark.parametrize(("name", "options"), BRIDGED, ids=[name for name, _ in BRIDGED])
def test_the_first_refresh_keeps_the_top_j_of_the_scorers_own_score(tiny, name, options):
    kvpress = pytest.importorskip("kvpress")
    press = getattr(kvpress, name)(**options)
    assert _first_eviction(tiny, f"kvpress:{name}", options) == _reference_kept(tiny, press)


@dataclasses.dataclass
class LastKeyCoordinate:
    """A scorer written in kvpress's style by a user: keeps the entries whose keys' last coordinate is largest."""

    compression_ratio: float = 0.0
    coordinate: int = -1

    def score(self, module, hidden_states, keys, values, attentions, kwargs):
        return keys[..., self.coordinate]


def test_a_users_own_scorer_runs_without_kvpress_and_its_options_are_the_policys(tiny):
    policy = make_policy(f"{__name__}:LastKeyCoordinate", coordinate=0)
    assert policy.options() == {"coordinate": 0}  # compression_ratio is J's to decide
    trace = generate(tiny, PROMPT, policy=policy.name, policy_options={"coordinate": 0}, cache_size=J, chunk_size=H)
    assert trace.run_config.policy == f"{__name__}:LastKeyCoordinate" and trace.run_config.options == {"coordinate": 0}
    assert all(len(set(c.kept) & set(c.candidates)) == min(J, len(c.candidates)) for c in trace.cycles)  # J exactly


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (f"{__name__}:NoSuchScorer", "no scorer 'NoSuchScorer'"),
        ("no_such_module_here:Scorer", "cannot import the scorer"),
        (f"{__name__}:PROMPT", "is not a scorer"),
    ],
)
def test_a_name_that_is_no_scorer_fails_in_one_line(name, message):
    with pytest.raises(CcvizError, match=message):
        make_policy(name)
