"""Counter-causal surprise (docs/method.md#counter-causal-surprise): how surprising each cached token is given
what follows it.

A fresh residual stream is run over the *cached* keys/values with a reversed mask: entry i attends only to
entries j > i + min_gap. Nothing is recomputed for the keys: the queries are new, the K/V are the cache's.
Every row is independent of the other rows (they read the cache, not each other), so the last
``min_gap + 1`` rows, which see nothing, simply get zero attention output and +inf surprise. A local
(sliding-window) layer of a hybrid model (Gemma 3) mirrors its causal window: entry i reads only the
entries less than W original positions after it (:mod:`ccviz.models.windows`); its global layers read
every later entry.

Precision: the residual stream, attention and every score are float32 whatever the model's dtype; each
module (projections, norms, MLP) runs in the model's own dtype on a cast copy of its input, so a bf16
checkpoint is never converted or modified.
"""

from __future__ import annotations

import sys
import weakref

import torch
import torch.nn.functional as F

from ...capture import CAPTURE_KWARG, Capture, decoder_layers, install_hooks, layer_rope
from ...choices import SURPRISE_SCORES, VARIANTS, SurpriseScore, Variant
from ...errors import CcvizError
from ...fields import check_whole
from ...models import layer_windows, within_window

_LOGSUMEXP_ROWS = 256  # rows per vocabulary projection in `logprob`: bounds memory to rows x vocab floats


def check_options(variant: Variant, score: SurpriseScore, min_gap: int, from_layer: int = 0, window: int = 0) -> None:
    if variant not in VARIANTS:
        raise CcvizError(f"unknown variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if score not in SURPRISE_SCORES:
        raise CcvizError(f"unknown score {score!r}: use one of {', '.join(SURPRISE_SCORES)}")
    check_whole("min_gap", min_gap, 0)
    check_whole("from_layer", from_layer, 0)
    check_whole("window", window, 0)
    if from_layer and variant != "full":
        raise CcvizError(
            f"from_layer is an option of variant 'full' (the {variant!r} variant starts at the last layer)"
        )
    check_window(min_gap, window)


def check_window(min_gap: int, window: int) -> None:
    """Refuse a window that shows no entry any future: W > 0 must exceed ``min_gap``."""
    if window and window <= min_gap:
        raise CcvizError(f"window ({window}) must exceed min_gap ({min_gap}): otherwise no entry sees any future")


def check_from_layer(from_layer: int, num_layers: int) -> None:
    """Refuse a layer split the model does not have: the stream must start at one of its layers."""
    if from_layer >= num_layers:
        raise CcvizError(f"from_layer must be below the model's {num_layers} layers, got {from_layer}")


def first_layer(model: torch.nn.Module, variant: Variant, from_layer: int = 0) -> int:
    """The layer the counter-causal stream starts at: ``from_layer`` for ``full``, the last for the fast variants.

    Every layer from there on is re-run (attention with the reversed mask, then its MLP, except the
    last MLP under ``fast``); the stream enters it as the stored H^(first) (embeddings when 0).
    """
    layers = len(decoder_layers(model))
    check_from_layer(from_layer, layers)
    return from_layer if variant == "full" else layers - 1


def _rotate(attn: torch.nn.Module, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE with the architecture's own function (Llama, Qwen2, Qwen3, Mistral and Gemma 3 share its signature)."""
    apply_rotary = sys.modules[type(attn).__module__].apply_rotary_pos_emb
    return apply_rotary(q, q, cos, sin)[0]


def _unbanded(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float, shift: int) -> torch.Tensor:
    """Entry i sees every j >= i + shift: ``q`` ``[1, heads, n, d]``, K/V ``[1, kv_heads, n, d]`` (float32);
    returns the rows 0 .. n - 1 - shift, ``[1, heads, n - shift, d]``.

    Reversing the sequence turns the mask into an ordinary causal one over the queries from index
    ``shift`` on, so SDPA's fused ``is_causal`` kernel does the work without an n x n mask.
    """
    n = q.shape[-2]
    q_rev, k_rev, v_rev = q.flip(-2)[:, :, shift:], keys.flip(-2)[:, :, : n - shift], values.flip(-2)[:, :, : n - shift]
    seen = F.scaled_dot_product_attention(
        q_rev, k_rev, v_rev, is_causal=True, scale=scale, enable_gqa=q.shape[1] != keys.shape[1]
    )
    return seen.flip(-2)  # reversed row a is entry n - 1 - shift - a


def _banded(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    scale: float,
    shift: int,
    window: int,
    pos: torch.Tensor | None = None,
    reach: int | None = None,
) -> torch.Tensor:
    """Entry i sees only j in [i + shift, i + window]: O(n * window) time and memory, no n x n mask; with
    ``pos`` ``[n]`` and ``reach`` (a local layer's window), only those less than ``reach`` positions after
    it too, and a row that then sees nothing gets a zero output.

    Queries go in blocks of ``width = window - shift + 1`` rows; block b reads the ``2 * width - 1``
    keys from ``b * width + shift`` on, and within a block the visible band has the same shape for
    every block, so one ``[width, 2 * width - 1]`` band (and the padding past the last entry) masks them
    all in one batched SDPA call. Shapes as :func:`_unbanded`.
    """
    heads, n, d = q.shape[1:]
    width = window - shift + 1  # keys each query sees (fewer near the end)
    blocks = -(-(n - shift) // width)  # only rows 0 .. n - 1 - shift see anything
    span = 2 * width - 1
    rows = blocks * width
    qb = F.pad(q[0, :, : n - shift], (0, 0, 0, rows - (n - shift))).view(heads, blocks, width, d).transpose(0, 1)
    padded = rows - width + span  # keys read from entry `shift` on, padded past the last entry

    def unfold(t: torch.Tensor) -> torch.Tensor:
        return F.pad(t[0, :, shift:], (0, 0, 0, padded - (n - shift))).unfold(1, span, width).permute(1, 0, 3, 2)

    offset = torch.arange(span, device=q.device)
    band = (offset[None] >= torch.arange(width, device=q.device)[:, None]) & (
        offset[None] < torch.arange(width, device=q.device)[:, None] + width
    )
    inside = (torch.arange(blocks, device=q.device)[:, None] * width + offset[None]) < n - shift  # [blocks, span]
    mask = band[None, None] & inside[:, None, None]
    if reach is not None:
        assert pos is not None, "a window in positions needs the positions"
        query_pos = F.pad(pos[: n - shift], (0, rows - (n - shift))).view(blocks, width)
        key_pos = F.pad(pos[shift:], (0, padded - (n - shift))).unfold(0, span, width)  # [blocks, span]
        mask = mask & within_window(query_pos[:, :, None], key_pos[:, None], reach)[:, None]
    seen = F.scaled_dot_product_attention(
        qb, unfold(keys), unfold(values), attn_mask=mask, scale=scale, enable_gqa=heads != keys.shape[1]
    )
    if reach is not None:  # a gap in the positions can leave a row nothing to read
        seen = torch.where(mask.any(-1)[..., None], seen, 0.0)
    return seen.transpose(0, 1).reshape(1, heads, rows, d)[:, :, : n - shift]


def _fresh_queries(layer: torch.nn.Module, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The layer's rotated queries of the stream ``x`` ``[1, n, hidden]``: float32 ``[1, heads, n, head_dim]``."""
    attn = layer.self_attn
    h = layer.input_layernorm(x.to(attn.o_proj.weight.dtype))
    q = attn.q_proj(h).view(1, x.shape[1], -1, attn.head_dim)
    if hasattr(attn, "q_norm"):  # Qwen3
        q = attn.q_norm(q)
    return _rotate(attn, q.transpose(1, 2), *rope).float()


def _counter_causal_attention(
    layer: torch.nn.Module,
    x: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor] | None,
    min_gap: int | None,
    window: int = 0,
    columns: torch.Tensor | None = None,
    *,
    pos: torch.Tensor | None = None,
    reach: int | None = None,
) -> torch.Tensor:
    """One layer's attention block with fresh queries over cached K/V; ``min_gap=None``: nothing visible.

    Entry i sees entries j > i + min_gap (and, with a ``window``, j <= i + window; in a local layer,
    ``reach`` its window, those less than ``reach`` original positions ``pos`` ``[n]`` after it). Every
    row reads the cache, not the other rows, so the last ``min_gap + 1`` entries, which see nothing, get a
    zero output. ``columns``: the entry each key row is, when this layer holds only some of the n entries
    (a per-layer allocation); the rule is the same over the entries it holds, and a row that sees none
    of them gets a zero output. Returns what the block adds to the stream ``[1, n, hidden]``, float32.
    """
    attn = layer.self_attn
    n, dtype = x.shape[1], attn.o_proj.weight.dtype
    out = torch.zeros(1, n, attn.o_proj.in_features, dtype=dtype, device=x.device)
    shift = None if min_gap is None else min_gap + 1
    if pos is None or reach is None or int(pos[-1] - pos[0]) < reach:  # the window cuts nothing here
        reach = None
    # Positions only grow, so a local layer reads fewer than `reach` entries ahead: a band of them.
    band = window if reach is None else min(window or reach - 1, reach - 1)
    if shift is not None and shift < n and (reach is None or reach > shift):  # else nothing is visible
        q = _fresh_queries(layer, x, rope)
        k, v = keys.float(), values.float()
        if columns is not None and columns.numel() < n:
            seen = _subset(q[:, :, : n - shift], k, v, attn.scaling, shift, band, columns, pos, reach)
        elif reach is not None:
            seen = _banded(q, k, v, attn.scaling, shift, band, pos, reach)
        elif band and band < n - 1:  # a window reaching the last entry from entry 0 is no window
            seen = _banded(q, k, v, attn.scaling, shift, band)
        else:
            seen = _unbanded(q, k, v, attn.scaling, shift)
        out[:, : n - shift] = seen.transpose(1, 2).reshape(1, n - shift, -1).to(dtype)
    return _attention_residual(layer, attn.o_proj(out)).float()


def _attention_residual(layer: torch.nn.Module, out: torch.Tensor) -> torch.Tensor:
    """What an attention block adds to the stream: its output, normed again in Gemma's sandwich layers."""
    return layer.post_attention_layernorm(out) if hasattr(layer, "pre_feedforward_layernorm") else out


def _subset(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    scale: float,
    shift: int,
    window: int,
    columns: torch.Tensor,
    pos: torch.Tensor | None = None,
    reach: int | None = None,
) -> torch.Tensor:
    """Rows i of ``q`` ``[1, heads, rows, d]`` over the keys of the entries ``columns`` ``[k]`` (K/V
    ``[1, kv_heads, k, d]``), each seeing the entries j >= i + shift (and, with a ``window``, j <= i +
    window; with ``reach``, less than ``reach`` positions ``pos`` ``[n]`` after i) that the keys hold: an
    explicit ``[rows, k]`` mask, O(rows x k)."""
    i = torch.arange(q.shape[-2], device=q.device)[:, None]
    j = columns.to(q.device)[None]
    visible = (j >= i + shift) & ((j <= i + window) if window else True)
    if reach is not None:
        assert pos is not None, "a window in positions needs the positions"
        visible = visible & within_window(pos[i], pos[j], reach)
    seen = F.scaled_dot_product_attention(
        q, keys, values, attn_mask=visible[None, None], scale=scale, enable_gqa=q.shape[1] != keys.shape[1]
    )
    return torch.where(visible.any(-1)[None, None, :, None], seen, 0.0)  # a row that sees nothing reads nothing


def _mlp_block(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The stream after the layer's MLP block: pre-norm (Llama, Qwen, Mistral) or Gemma's sandwich of norms."""
    h = x.to(layer.mlp.down_proj.weight.dtype)
    if hasattr(layer, "pre_feedforward_layernorm"):
        return x + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(h))).float()
    return x + layer.mlp(layer.post_attention_layernorm(h)).float()


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
    first: int = 0,
    window: int = 0,
    until: int | None = None,
) -> torch.Tensor:
    """The counter-causal residual stream after the last block (before the final norm), started at
    layer ``first`` from ``hidden`` = H^(first) (the embeddings when 0); with ``until``, the stream
    entering that layer instead.

    ``min_gap=None`` runs the same blocks with no entry visible (positions are then unused).
    """
    layers = decoder_layers(model)
    until = len(layers) if until is None else until
    if first == 0:
        x = model.model.embed_tokens(tok)[None].float()
    elif hidden is None:
        raise ValueError(f"a stream from layer {first} needs H^({first}): run the causal pass capturing it")
    else:
        x = hidden[None].float()
    windows = layer_windows(model.config) or (None,) * len(layers)
    ropes: dict[str | None, tuple[torch.Tensor, torch.Tensor]] = {}  # one per kind of layer (Gemma: local, global)
    for index in range(first, until):
        layer = layers[index]
        keys, values, *columns = kv[index]  # (K, V) or, for a layer holding only some entries, (K, V, columns)
        kind = getattr(layer.self_attn, "layer_type", None)
        if min_gap is not None and kind not in ropes:
            ropes[kind] = layer_rope(model, x, pos[None], index)
        rope = ropes.get(kind)
        x = x + _counter_causal_attention(
            layer, x, keys, values, rope, min_gap, window, *columns, pos=pos, reach=windows[index]
        )
        if variant != "fast":  # the reference code's fast variant skips the last MLP
            x = _mlp_block(layer, x)
    return x


_blind_memo: weakref.WeakKeyDictionary[torch.nn.Module, torch.Tensor] = weakref.WeakKeyDictionary()


def _blind_logits(model, kv, tok, pos, hidden, variant, first) -> torch.Tensor:
    """The true-token logit of the same pass with no entry visible (the ``contrast`` baseline).

    From layer 0 every attention output is zero, so the stream is a function of the token id
    alone: it is computed once per model and token id and remembered (a float per vocabulary entry).
    """
    if first != 0:
        return _true_token_logits(model, _residual_stream(model, kv, tok, pos, hidden, variant, None, first), tok)
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
    from_layer: int = 0,
    window: int = 0,
) -> torch.Tensor:
    """Counter-causal surprise of every entry of a cache, float32 ``[n]``, higher = more surprising.

    ``kv[l] = (K_l, V_l)`` with shape ``[1, kv_heads, n, head_dim]`` (only the layers from the first
    re-run one are read: the last under the fast variants, ``from_layer`` on under ``full``), or
    ``(K_l, V_l, columns_l)`` for a layer that holds only the entries ``columns_l`` ``[k]`` (K/V ``[1,
    kv_heads, k, head_dim]``: a per-layer allocation; every entry is still scored),
    ``tok``/``pos`` the entries' token ids and original positions (any increasing positions, e.g.
    after eviction), ``hidden`` the stored rows of the residual stream entering the first re-run
    layer (H^(L-1) for the fast variants, H^(from_layer) for ``full`` with ``from_layer > 0``).
    The mask is over cache entries: entry i sees entries j > i + min_gap, and with ``window`` W > 0
    only those with j <= i + W (cost O(n W) instead of O(n^2)).
    """
    check_options(variant, score, min_gap, from_layer, window)
    first = first_layer(model, variant, from_layer)
    n = tok.numel()
    surprise = torch.full((n,), float("inf"), dtype=torch.float32)
    if n == 0:
        return surprise
    scored = max(n - min_gap - 1, 0)  # the last min_gap + 1 entries have no visible future
    x = _residual_stream(model, kv, tok, pos, hidden, variant, min_gap, first, window)
    logits = _true_token_logits(model, x, tok)
    if score == "logprob":
        logits = logits - _log_normaliser(model, x)
    elif score == "contrast":
        logits = logits - _blind_logits(model, kv, tok, pos, hidden, variant, first)
    surprise[:scored] = -logits[:scored].cpu()
    return surprise


def _attention_row_weights(
    model: torch.nn.Module,
    index: int,
    x: torch.Tensor,
    keys: torch.Tensor,
    pos: torch.Tensor,
    visible: torch.Tensor,
) -> torch.Tensor:
    """Softmax attention probabilities, float32 ``[heads, rows, n]``, of layer ``index``'s queries of ``x``
    ``[1, rows, hidden]`` (at positions ``pos`` ``[rows]``) over ``keys`` ``[1, kv_heads, n, d]``, restricted
    to ``visible`` ``[rows, n]`` (bool); a row that sees nothing is all zeros, as its attention output is."""
    layer = decoder_layers(model)[index]
    q = _fresh_queries(layer, x, layer_rope(model, x, pos[None], index))[0]  # [heads, rows, d]
    k = keys[0].float().repeat_interleave(q.shape[0] // keys.shape[1], dim=0)  # GQA: each query head's key head
    logits = (q @ k.transpose(-1, -2)) * layer.self_attn.scaling
    weights = logits.masked_fill(~visible, float("-inf")).softmax(-1)
    return torch.nan_to_num(weights, nan=0.0)


@torch.inference_mode()
def counter_causal_weights(
    model: torch.nn.Module,
    kv: list[tuple[torch.Tensor, torch.Tensor]],
    tok: torch.Tensor,
    pos: torch.Tensor,
    hidden: torch.Tensor | None = None,
    *,
    row: int,
    variant: Variant = "full",
    min_gap: int = 0,
    from_layer: int = 0,
    window: int = 0,
) -> torch.Tensor:
    """What entry ``row`` reads to be judged: its attention probabilities over the cache entries in the
    last layer of the counter-causal pass, float32 ``[heads, n]`` (zero outside its visible future).

    The same stream as :func:`surprise_from_cache` (same arguments) up to the last layer; there its
    fresh query meets the cached keys under the reversed mask (j > row + min_gap, and j <= row + window
    with a window). Weights times the cached values are that layer's attention output for the row.
    """
    check_options(variant, "logit", min_gap, from_layer, window)
    first = first_layer(model, variant, from_layer)
    last = len(decoder_layers(model)) - 1
    x = _residual_stream(model, kv, tok, pos, hidden, variant, min_gap, first, window, until=last)
    j = torch.arange(tok.numel(), device=tok.device)
    visible = (j > row + min_gap) & ((j <= row + window) if window else torch.ones_like(j, dtype=torch.bool))
    visible = visible & within_window(pos[row], pos, _window_of(model, last))
    return _attention_row_weights(model, last, x[:, row : row + 1], kv[last][0], pos[row : row + 1], visible[None])[
        :, 0
    ]


def _window_of(model: torch.nn.Module, layer: int) -> int | None:
    """Layer ``layer``'s sliding window (None: a global layer)."""
    windows = layer_windows(model.config)
    return None if windows is None else windows[layer]


@torch.inference_mode()
def causal_weights_received(
    model: torch.nn.Module,
    keys: torch.Tensor,
    pos: torch.Tensor,
    hidden: torch.Tensor,
    *,
    column: int,
) -> torch.Tensor:
    """The causal attention entry ``column`` receives in the model's last layer: float32 ``[heads, n]``,
    row j = how much entry j's query puts on it (zero for j < column).

    ``keys`` ``[1, kv_heads, n, d]`` are the cache's last-layer keys and ``hidden`` ``[n, hidden]`` the
    stored rows of the causal stream entering the last layer, H^(L-1): the queries the model itself
    formed for these entries, so this is its own causal attention, restricted to what the cache holds.
    """
    n, last = pos.numel(), len(decoder_layers(model)) - 1
    j = torch.arange(n, device=pos.device)
    visible = j[None, :] <= j[:, None]  # [rows, keys]: causal
    visible = visible & within_window(pos[:, None], pos[None], _window_of(model, last))
    weights = _attention_row_weights(model, last, hidden[None].float(), keys, pos, visible)
    return weights[:, :, column]


@torch.inference_mode()
def causal_pass(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    *,
    residual_layer: int = -1,
) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor | None]:
    """Run the ordinary causal pass; return every layer's (K, V) and the rows of the residual stream
    entering ``residual_layer`` (negative: from the end; default H^(L-1); None for layer 0, the embeddings)."""
    from transformers import DynamicCache

    install_hooks(model)
    layer = residual_layer % len(decoder_layers(model))
    cache, capture = DynamicCache(), Capture(residual_layers=(layer,) if layer else ())
    device = next(model.parameters()).device
    model(
        input_ids=input_ids.to(device),
        position_ids=position_ids.to(device),
        past_key_values=cache,
        use_cache=True,
        logits_to_keep=1,
        **{CAPTURE_KWARG: capture},
    )
    return [(layer.keys, layer.values) for layer in cache.layers], capture.residuals.get(layer)


def counter_causal_surprise(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    variant: Variant = "full",
    score: SurpriseScore = "logit",
    min_gap: int = 0,
    position_ids: torch.Tensor | None = None,
    from_layer: int = 0,
    window: int = 0,
) -> torch.Tensor:
    """Surprise of every token of ``input_ids`` ``[1, n]`` given the tokens after it; float32 ``[n]``.

    Runs the causal pass to build the cache and the residual rows the first re-run layer needs
    (H^(L-1) for the fast variants, H^(from_layer) for ``full``), then the counter-causal pass from that
    layer on. ``window`` W > 0: entry i reads only entries up to i + W. The last ``min_gap + 1``
    entries have no visible future and are ``+inf``.
    """
    check_options(variant, score, min_gap, from_layer, window)
    first = first_layer(model, variant, from_layer)
    if input_ids.ndim != 2 or input_ids.shape[0] != 1:
        raise CcvizError(f"input_ids must have shape [1, n], got {tuple(input_ids.shape)}")
    n = input_ids.shape[1]
    if position_ids is None:
        position_ids = torch.arange(n)[None]
    position_ids = position_ids.reshape(1, n)
    kv, hidden = causal_pass(model, input_ids, position_ids, residual_layer=first)
    device = next(model.parameters()).device
    return surprise_from_cache(
        model,
        kv,
        input_ids[0].to(device),
        position_ids[0].to(device),
        hidden,
        variant=variant,
        score=score,
        min_gap=min_gap,
        from_layer=from_layer,
        window=window,
    )
