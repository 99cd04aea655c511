"""Counter-causal surprise (docs/method.md#counter-causal-surprise): how surprising each cached token is given what follows it.

A fresh residual stream is run over the *cached* keys/values with a reversed mask: entry i attends only to
entries j > i + min_gap. Nothing is recomputed for the keys: the queries are new, the K/V are the cache's.
Every row is independent of the other rows (they read the cache, not each other), so the last
``min_gap + 1`` rows, which see nothing, simply get zero attention output and +inf surprise.

Precision: the residual stream, attention and every score are float32 whatever the model's dtype; each
module (projections, norms, MLP) runs in the model's own dtype on a cast copy of its input, so a bf16
checkpoint is never converted or modified.
"""

from __future__ import annotations

import sys
import weakref

import torch
import torch.nn.functional as F

from .capture import CAPTURE_KWARG, Capture, decoder_layers, install_hooks
from .choices import SURPRISE_SCORES, VARIANTS, SurpriseScore, Variant
from .errors import CcvizError
from .fields import check_whole

_LOGSUMEXP_ROWS = 256  # rows per vocabulary projection in `logprob`: bounds memory to rows x vocab floats


def check_options(variant: Variant, score: SurpriseScore, min_gap: int) -> None:
    if variant not in VARIANTS:
        raise CcvizError(f"unknown variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if score not in SURPRISE_SCORES:
        raise CcvizError(f"unknown score {score!r}: use one of {', '.join(SURPRISE_SCORES)}")
    check_whole("min_gap", min_gap, 0)


def _rotate(attn: torch.nn.Module, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE with the architecture's own function (Llama, Qwen2, Qwen3 and Mistral share its signature)."""
    apply_rotary = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    return apply_rotary(q, q, cos, sin)[0]


def _counter_causal_attention(
    layer: torch.nn.Module,
    x: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor] | None,
    min_gap: int | None,
) -> torch.Tensor:
    """One layer's attention block with fresh queries over cached K/V; ``min_gap=None``: nothing visible.

    Entry i sees entries j > i + min_gap. Reversing the sequence turns that into an ordinary causal mask
    over the queries from index min_gap + 1 on, so SDPA's fused ``is_causal`` kernel does the work
    without an n x n mask; the first ``min_gap + 1`` reversed rows (the last entries) see nothing.
    """
    attn = layer.self_attn
    n, dtype = x.shape[1], attn.o_proj.weight.dtype
    out = torch.zeros(1, n, attn.o_proj.in_features, dtype=dtype, device=x.device)
    shift = None if min_gap is None else min_gap + 1
    if shift is not None and shift < n:
        h = layer.input_layernorm(x.to(dtype))
        q = attn.q_proj(h).view(1, n, -1, attn.head_dim)
        if hasattr(attn, "q_norm"):  # Qwen3
            q = attn.q_norm(q)
        q = _rotate(attn, q.transpose(1, 2), *rope)
        q_rev, k_rev, v_rev = q.flip(-2)[:, :, shift:], keys.flip(-2)[:, :, : n - shift], values.flip(-2)[:, :, : n - shift]
        seen = F.scaled_dot_product_attention(
            q_rev.float(), k_rev.float(), v_rev.float(), is_causal=True, scale=attn.scaling,
            enable_gqa=q.shape[1] != keys.shape[1],
        )
        # reversed row shift + a is entry n - 1 - shift - a: flip back and place rows 0 .. n - 1 - shift
        out[:, : n - shift] = seen.flip(-2).transpose(1, 2).reshape(1, n - shift, -1).to(dtype)
    return attn.o_proj(out).float()


def _mlp_block(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return x + layer.mlp(layer.post_attention_layernorm(x.to(layer.mlp.down_proj.weight.dtype))).float()


def _true_token_logits(model: torch.nn.Module, x: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
    """Logit of each row's own token: one dot product per row instead of a vocabulary projection."""
    head = model.get_output_embeddings()
    final = model.model.norm(x.to(head.weight.dtype))[0].float()
    logits = (final * head.weight[tok].float()).sum(-1)
    if getattr(head, "bias", None) is not None:
        logits = logits + head.bias[tok].float()
    return logits


def _log_normaliser(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """log-sum-exp over the vocabulary of every row, in row chunks so memory stays bounded."""
    head = model.get_output_embeddings()
    final = model.model.norm(x.to(head.weight.dtype))[0]
    return torch.cat([head(rows).float().logsumexp(-1) for rows in final.split(_LOGSUMEXP_ROWS)])


def _residual_stream(
    model: torch.nn.Module,
    kv: list[tuple[torch.Tensor, torch.Tensor]],
    tok: torch.Tensor,
    pos: torch.Tensor | None,
    hidden: torch.Tensor | None,
    variant: Variant,
    min_gap: int | None,
) -> torch.Tensor:
    """The counter-causal residual stream after the last block (before the final norm).

    ``min_gap=None`` runs the same blocks with no entry visible (positions are then unused).
    """
    layers = decoder_layers(model)
    if variant == "full":
        x, first = model.model.embed_tokens(tok)[None].float(), 0
    else:
        if hidden is None:
            raise ValueError("the fast variants need H^(L-1): run the causal pass with Capture(hidden=True)")
        x, first = hidden[None].float(), len(layers) - 1
    rope = model.model.rotary_emb(x, pos[None]) if min_gap is not None else None
    for index in range(first, len(layers)):
        layer = layers[index]
        x = x + _counter_causal_attention(layer, x, *kv[index], rope, min_gap)
        if variant != "fast":  # the reference code's fast variant skips the last MLP
            x = _mlp_block(layer, x)
    return x


_blind_memo: "weakref.WeakKeyDictionary[torch.nn.Module, torch.Tensor]" = weakref.WeakKeyDictionary()


def _blind_logits(model, kv, tok, pos, hidden, variant) -> torch.Tensor:
    """The true-token logit of the same pass with no entry visible (the ``contrast`` baseline).

    In the full variant every attention output is zero, so the stream is a function of the token id
    alone: it is computed once per model and token id and remembered (a float per vocabulary entry).
    """
    if variant != "full":
        return _true_token_logits(model, _residual_stream(model, kv, tok, pos, hidden, variant, None), tok)
    memo = _blind_memo.get(model)
    if memo is None:
        memo = _blind_memo.setdefault(model, torch.full((model.config.vocab_size,), float("nan")))
    missing = torch.unique(tok.cpu()[torch.isnan(memo[tok.cpu()])])
    if missing.numel():
        ids = missing.to(tok.device)
        stream = _residual_stream(model, kv, ids, None, None, "full", None)  # no attention: no positions
        memo[missing] = _true_token_logits(model, stream, ids).cpu()
    return memo[tok.cpu()].to(tok.device)


@torch.inference_mode()
def surprise_from_cache(
    model: torch.nn.Module,
    kv: list[tuple[torch.Tensor, torch.Tensor]],
    tok: torch.Tensor,
    pos: torch.Tensor,
    hidden: torch.Tensor | None = None,
    *,
    variant: Variant = "full",
    score: SurpriseScore = "logit",
    min_gap: int = 0,
) -> torch.Tensor:
    """Counter-causal surprise of every entry of a cache, float32 ``[n]``, higher = more surprising.

    ``kv[l] = (K_l, V_l)`` with shape ``[1, kv_heads, n, head_dim]`` (only the last layer is read by the
    fast variants), ``tok``/``pos`` the entries' token ids and original positions (any increasing
    positions, e.g. after eviction), ``hidden`` the stored H^(L-1) rows for the fast variants.
    The mask is over cache entries: entry i sees entries j > i + min_gap.
    """
    check_options(variant, score, min_gap)
    n = tok.numel()
    surprise = torch.full((n,), float("inf"), dtype=torch.float32)
    if n == 0:
        return surprise
    scored = max(n - min_gap - 1, 0)  # the last min_gap + 1 entries have no visible future
    x = _residual_stream(model, kv, tok, pos, hidden, variant, min_gap)
    logits = _true_token_logits(model, x, tok)
    if score == "logprob":
        logits = logits - _log_normaliser(model, x)
    elif score == "contrast":
        logits = logits - _blind_logits(model, kv, tok, pos, hidden, variant)
    surprise[:scored] = -logits[:scored].cpu()
    return surprise


@torch.inference_mode()
def causal_pass(
    model: torch.nn.Module, input_ids: torch.Tensor, position_ids: torch.Tensor
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]:
    """Run the ordinary causal pass; return every layer's (K, V) and H^(L-1) rows."""
    from transformers import DynamicCache

    install_hooks(model)
    cache, capture = DynamicCache(), Capture(hidden=True)
    device = next(model.parameters()).device
    model(
        input_ids=input_ids.to(device), position_ids=position_ids.to(device), past_key_values=cache,
        use_cache=True, logits_to_keep=1, **{CAPTURE_KWARG: capture},
    )
    return [(layer.keys, layer.values) for layer in cache.layers], capture.hidden_states


def counter_causal_surprise(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    variant: Variant = "full",
    score: SurpriseScore = "logit",
    min_gap: int = 0,
    position_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Surprise of every token of ``input_ids`` ``[1, n]`` given the tokens after it; float32 ``[n]``.

    Runs the causal pass to build the cache and H^(L-1), then the counter-causal pass. The last
    ``min_gap + 1`` entries have no visible future and are ``+inf``.
    """
    check_options(variant, score, min_gap)
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise CcvizError(f"input_ids must have shape [1, n], got {tuple(input_ids.shape)}")
    n = input_ids.shape[1]
    if position_ids is None:
        position_ids = torch.arange(n)[None]
    position_ids = position_ids.reshape(1, n)
    kv, hidden = causal_pass(model, input_ids, position_ids)
    device = next(model.parameters()).device
    return surprise_from_cache(
        model, kv, input_ids[0].to(device), position_ids[0].to(device), hidden,
        variant=variant, score=score, min_gap=min_gap,
    )
