"""Each layer's cached K/V rows as a policy that scores every layer and KV head on its own reads them.

kvzip, expected_attention and keydiff score the entries of each layer's cache per KV head, as kvpress
does, under every allocation: under ``uniform`` every layer holds every entry, under a per-layer
allocation each layer holds its own rows (and under ``adaptive`` each KV head sees only some of them,
:class:`ccviz.cache.LayerMembership`). The scores go back onto the candidates as
``[candidates, layers, kv_heads]`` (zero where a layer does not hold an entry, which
:mod:`ccviz.engine.survivors` never ranks), or, under ``uniform``, reduced to one per candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from ..cache import CacheState, Candidates
from ..capture import decoder_layers, layer_rope


@dataclass
class LayerRows:
    """One layer's cached rows: ``keys`` / ``values`` float32 ``[kv_heads, rows, head_dim]`` (the frozen
    prefix first, cache order), ``entries`` long ``[rows]`` (each row's index among the cache's entries) and
    ``seen`` bool ``[kv_heads, rows]`` (which rows each KV head still sees: all but under ``adaptive``)."""

    keys: torch.Tensor
    values: torch.Tensor
    entries: torch.Tensor
    seen: torch.Tensor


def layer_rows(cache: CacheState) -> list[LayerRows]:
    """Every layer's rows, in layer order."""
    views = []
    for layer, cached in enumerate(cache.kv.layers):
        keys, values = cached.keys[0].float(), cached.values[0].float()  # type: ignore[index]
        device, held = keys.device, cache.layers
        entries = torch.arange(keys.shape[1]) if held is None else held.rows[layer]
        heads = None if held is None else held.heads
        seen = torch.ones(keys.shape[:2], dtype=torch.bool) if heads is None else heads[layer]
        views.append(LayerRows(keys, values, entries.to(device), seen.to(device)))
    return views


def on_candidates(
    candidates: Candidates, views: list[LayerRows], scores: list[torch.Tensor], reduce: Literal["max", "mean"]
) -> torch.Tensor:
    """Per-layer scores ``[kv_heads, rows]`` (one per layer, over ``views``' rows) as the session takes
    them: ``[candidates, layers, kv_heads]`` under a per-layer allocation (zero where a layer holds no such
    entry), else each candidate's ``reduce`` over layers and heads, ``[candidates]``."""
    entries = len(candidates.cache)
    spread = torch.stack(
        [
            score.new_zeros(score.shape[0], entries).index_copy_(1, view.entries, score)
            for score, view in zip(scores, views)
        ]
    )  # [layers, kv_heads, entries]
    per_head = candidates.take(spread.permute(2, 0, 1)).cpu()  # [candidates, layers, kv_heads]
    if candidates.cache.layers is not None:
        return per_head
    return per_head.amax(dim=(1, 2)) if reduce == "max" else per_head.mean(dim=(1, 2))


def prerope_queries(model: torch.nn.Module, layer: int, hidden: torch.Tensor) -> torch.Tensor:
    """The queries layer ``layer`` forms from its input rows ``hidden`` ``[rows, d_model]`` (H^(l), before
    its input norm), before RoPE: float32 ``[heads, rows, head_dim]``."""
    block = decoder_layers(model)[layer]
    attention = block.self_attn
    queries = attention.q_proj(block.input_layernorm(hidden)).view(hidden.shape[0], -1, attention.head_dim)
    if hasattr(attention, "q_norm"):  # Qwen3, Gemma 3: each head's query is normed before RoPE
        queries = attention.q_norm(queries)
    return queries.transpose(0, 1).float()


def rope(
    model: torch.nn.Module, positions: torch.Tensor, like: torch.Tensor, layer: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer ``layer``'s RoPE cos and sin at ``positions`` (long ``[m]``): float32 ``[m, head_dim]`` each."""
    cos, sin = layer_rope(model, like.float(), positions[None].to(like.device), layer)
    return cos[0].float(), sin[0].float()


def rotated(queries: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``queries`` ``[..., rows, head_dim]`` rotated as the model rotates them (cos/sin ``[rows, head_dim]``):
    the half-split RoPE of Llama, Qwen2, Mistral and Gemma, written here so that importing ccviz does not
    import a model's modelling module (seconds of every CLI start)."""
    first, second = queries.chunk(2, dim=-1)
    return queries * cos + torch.cat((-second, first), dim=-1) * sin


def attention_scale(model: torch.nn.Module) -> float:
    """The attention scale s of the model's layers (softmax(s q.k)): 1/sqrt(head_dim) in the models ccviz runs."""
    return float(decoder_layers(model)[0].self_attn.scaling)
