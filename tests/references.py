"""Slow, explicit references the tests hold the fast code against: counter-causal surprise written out with
per-layer, per-head, per-row loops and the softmax by hand (RMS norm, RoPE, the MLP), and a closeness check."""

import math

import torch

from ccviz.policies.counter_causal.surprise import causal_pass, surprise_from_cache

TEXT = (
    "Patient record 4471. Mrs. Okafor, 68, was admitted with chest pain. She is allergic to latex. "
    "An ECG showed no acute changes and troponin was normal."
)


def rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x, pos, theta):
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    angles = pos.double()[:, None] * inv_freq[None]
    cos, sin = torch.cat([angles.cos()] * 2, -1).float(), torch.cat([angles.sin()] * 2, -1).float()
    rotated = torch.cat([-x[..., dim // 2 :], x[..., : dim // 2]], -1)
    return x * cos[:, None] + rotated * sin[:, None]


def mlp(mlp, x):
    return (torch.nn.functional.silu(x @ mlp.gate_proj.weight.T) * (x @ mlp.up_proj.weight.T)) @ mlp.down_proj.weight.T


def reference_scores(model, kv, tok, pos, hidden, variant, min_gap, first=None, window=0, held=None):
    """Return {score: tensor} for logit, logprob and contrast, computed the slow, obvious way.

    ``first``: the layer the stream starts at, from ``hidden`` (default: 0 for full, L-1 for the fast
    variants); ``window`` W > 0: entry i sees only j <= i + W; ``held[l]``: the entries layer l's K/V
    rows are (default: all of them, in order)."""
    cfg = model.config
    eps, theta = cfg.rms_norm_eps, cfg.rope_parameters["rope_theta"]
    layers = model.model.layers
    n_heads, n_kv, dim = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    n = tok.numel()

    start = first if first is not None else 0 if variant == "full" else len(layers) - 1

    def stream(visible):
        x = model.model.embed_tokens.weight[tok].clone() if start == 0 else hidden.clone()
        for index in range(start, len(layers)):
            layer = layers[index]
            out = torch.zeros(n, n_heads, dim)
            if visible:
                q = (rms(x, layer.input_layernorm.weight, eps) @ layer.self_attn.q_proj.weight.T).view(n, n_heads, dim)
                q = rope(q, pos, theta)
                keys, values = kv[index][0][0], kv[index][1][0]
                entries = list(range(n)) if held is None else held[index]
                for head in range(n_heads):
                    group = head // (n_heads // n_kv)
                    logits = q[:, head] @ keys[group].T / math.sqrt(dim)
                    for i in range(n):
                        allowed = [
                            r for r, j in enumerate(entries) if j > i + min_gap and (not window or j <= i + window)
                        ]
                        if not allowed:
                            continue
                        row = logits[i, allowed]
                        weights = torch.exp(row - row.max())
                        weights = weights / weights.sum()
                        out[i, head] = weights @ values[group, allowed]
            x = x + out.reshape(n, -1) @ layer.self_attn.o_proj.weight.T
            if variant != "fast":
                x = x + mlp(layer.mlp, rms(x, layer.post_attention_layernorm.weight, eps))
        logits = rms(x, model.model.norm.weight, eps) @ model.lm_head.weight.T
        return logits[torch.arange(n), tok], logits.logsumexp(-1)

    return reference_surprise(stream, n, min_gap)


def reference_surprise(stream, n, min_gap):
    """{score: surprise} from ``stream(visible)`` -> (true-token logits, log-normalisers) of a reference's
    counter-causal stream, with (True) and without (False) the visible future; +inf where none is visible."""
    true, normaliser = stream(True)
    blind, _ = stream(False)
    no_future = torch.arange(n) >= n - 1 - min_gap
    result = {"logit": -true, "logprob": -(true - normaliser), "contrast": -(true - blind)}
    for value in result.values():
        value[no_future] = math.inf
    return result


def assert_close(actual, expected, tol=1e-3):
    assert torch.equal(torch.isinf(actual), torch.isinf(expected))
    finite = torch.isfinite(expected)
    diff = (actual[finite] - expected[finite]).abs().max().item()
    assert diff < tol, f"max abs difference {diff}"


def scores_with_perturbed_entries(model, ids, entries, **options):
    """Surprise of every entry after adding noise to the cached K/V of ``entries`` in every layer, and without."""
    pos = torch.arange(ids.shape[1])
    kv, hidden = causal_pass(model, ids, pos[None])
    base = surprise_from_cache(model, kv, ids[0], pos, hidden, **options)
    generator = torch.Generator().manual_seed(0)
    changed = []
    for keys, values in kv:
        keys, values = keys.clone(), values.clone()
        keys[:, :, entries] += torch.randn(keys[:, :, entries].shape, generator=generator)
        values[:, :, entries] += torch.randn(values[:, :, entries].shape, generator=generator)
        changed.append((keys, values))
    return surprise_from_cache(model, changed, ids[0], pos, hidden, **options), base
