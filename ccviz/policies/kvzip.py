from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from ..cache import CacheState, Candidates
from ..capture import CAPTURE_KWARG, Capture, decoder_layers
from ..errors import CcvizError
from ..fields import whole
from ..models import layer_windows, within_window
from .base import Policy
from .layerwise import LayerRows, attention_scale, layer_rows, on_candidates, prerope_queries, rope, rotated

REPEAT_PROMPT = "\n\nRepeat the previous context:"
CONTINUE_PROMPT = "\n\nRepeat the part of the previous context, starting with"  # a later chunk's prompt
OVERLAP = 8  # tokens of the previous chunk a later chunk's prompt quotes (kvpress's prev_postfix_size)
QUERY_BLOCK = 256  # repeat queries whose attention weights are held at once: bounds a refresh's memory


@dataclass
class KVzip(Policy):
    """KVzip (Kim et al. 2025, arXiv 2505.23416; kvpress's KVzipPress): keep what the model reads to
    repeat the cached context.

    Why: an entry the model needs to reconstruct the context is one some future question may need,
    whatever that question is (query-agnostic). At each refresh the model is teacher-forced on a repeat:
    the prompt "Repeat the previous context:" (after a blank line, then, as kvpress does, the chat
    template's end of the user turn and the assistant header; a bare newline for a model without a
    template) followed by the candidates' own tokens, attending over the cache: one forward whose keys
    are the cache's plus the repeat's own (causal among the repeat). Its positions continue after the
    last processed one (where kvpress's repeat also continues). Each candidate's score is the largest
    attention weight it receives from any repeat query, over the query heads that share its KV head:
    per layer ``[kv_heads, rows]``, from the repeat's rotated queries ``[heads, m, d]`` recomputed from each
    layer's captured input and the layer's keys ``[kv_heads, rows + m, d]``.

    The repeat's keys and values never stay: the cache's K/V tensors are put back exactly as they were
    (same tensors, same lengths) after the pass, and nothing is appended to the ``CacheState``. Candidates
    beyond ``chunk`` are repeated ``chunk`` at a time, one forward each, as kvpress does (2,048): a later
    chunk's prompt is "Repeat the part of the previous context, starting with" and the previous chunk's
    last 8 tokens, and its entries score by its own queries. kvpress's softmax in a later chunk reads only
    the sinks, that chunk's keys and the repeat; ours reads every cached key, as the forward itself does.

    kvpress ranks (layer, head, entry) triples (AdaKV-style, ``allocation=adaptive`` here, where the scores
    are ``[candidates, layers, kv_heads]``); it has no one decision for every layer and head, so ``uniform``
    takes each candidate's max over layers and KV heads (its best (layer, head) pair, the one kvpress would
    rank it by). kvpress also pins its first 4 tokens with score 1; here the run's frozen prefix does that.
    The cost is a forward over about as many tokens as the cache holds, at every refresh.
    """

    name = "kvzip"
    title = "KVzip"
    summary = "KVzip: attention each entry receives while the model repeats the cached context"
    signal = "kvzip"
    head_scores = True

    chunk: int = whole("chunk", 1, default=2048)

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        if candidates.tokenizer is None:
            raise CcvizError("kvzip writes a repeat prompt, so its candidates need the run's tokenizer")
        cache = candidates.cache
        views = layer_rows(cache)
        scores = [view.keys.new_zeros(view.keys.shape[:2]) for view in views]  # [kv_heads, rows] per layer
        first, later, suffix = repeat_framing(candidates.tokenizer)
        tok = candidates.tok.tolist()
        for begin in range(0, len(tok), self.chunk):
            end = min(begin + self.chunk, len(tok))
            prompt = first if begin == 0 else later + tok[max(begin - OVERLAP, 0) : begin]
            scored = range(cache.frozen + begin, cache.frozen + end)  # the entries this repeat scores
            best = repeat_attention(model, cache, views, prompt + suffix + tok[begin:end])
            for score, view, received in zip(scores, views, best):
                inside = (view.entries >= scored.start) & (view.entries < scored.stop)
                score[:, inside] = received[:, inside]
        return on_candidates(candidates, views, scores, "max")


@lru_cache(maxsize=8)
def repeat_framing(tokenizer: Any) -> tuple[list[int], list[int], list[int]]:
    """Token ids of the first chunk's prompt, a later chunk's prompt, and what closes the user turn before
    the repeated text (the chat template's text after a user message, with the assistant header); computed
    once per tokenizer (callers never change the lists)."""
    suffix = "\n"
    if getattr(tokenizer, "chat_template", None):
        marker = "\u2063kvzip\u2063"
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": marker}], add_generation_prompt=True, tokenize=False
        )
        suffix = rendered.split(marker, 1)[1]

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    return encode(REPEAT_PROMPT), encode(CONTINUE_PROMPT), encode(suffix)


@torch.inference_mode()
def repeat_attention(model: torch.nn.Module, cache: CacheState, views: list[LayerRows], ids: list[int]) -> list:
    """Teacher-force ``ids`` over the cache and return, per layer, float32 ``[kv_heads, rows]``: the largest
    attention weight each of the layer's cached rows receives from any of the repeat's queries and query
    heads of its group. The cache's K/V tensors are put back as they were, whatever happens."""
    layers = decoder_layers(model)
    m, device = len(ids), views[0].keys.device
    start = int(cache.pos[-1]) + 1
    positions = torch.arange(start, start + m)
    query_heads = int(model.config.num_attention_heads)  # type: ignore[union-attr]
    windows = layer_windows(model.config)  # local layers: the repeat reads only its window of positions
    capture = Capture(
        residual_layers=tuple(range(len(layers))), masks=cache.masks(positions, query_heads, windows, device)
    )
    saved = [(layer.keys, layer.values) for layer in cache.kv.layers]  # type: ignore[attr-defined]
    try:
        model(
            input_ids=torch.tensor([ids], device=device),
            position_ids=positions[None].to(device),
            past_key_values=cache.kv,
            use_cache=True,
            logits_to_keep=1,
            **{CAPTURE_KWARG: capture},
        )
        scale = attention_scale(model)
        received = []
        for layer, (cached, view) in enumerate(zip(cache.kv.layers, views)):
            queries = rotated(
                prerope_queries(model, layer, capture.residuals[layer]), *rope(model, positions, view.keys, layer)
            )
            window, near = None if windows is None else windows[layer], None
            if window is not None:  # a local layer: the keys within its window of each repeat query
                key_pos = torch.cat([cache.pos[view.entries.cpu()], positions])
                near = within_window(positions[:, None], key_pos[None], window).to(device)
            received.append(_received(queries, cached, view, scale, near))
        return received
    finally:
        for layer, (keys, values) in zip(cache.kv.layers, saved):
            layer.keys, layer.values = keys, values  # type: ignore[attr-defined]


def _received(
    queries: torch.Tensor, cached: Any, view: LayerRows, scale: float, near: torch.Tensor | None = None
) -> torch.Tensor:
    """``queries`` ``[heads, m, d]`` (rotated) against the layer's keys after the pass ``[kv_heads, rows + m, d]``:
    each cached row's largest weight, ``[kv_heads, rows]``; a block of queries at a time. ``near`` bool ``[m,
    rows + m]``: which keys lie within a local layer's window of each query (None: a global layer's, all)."""
    keys = cached.keys[0].float()
    kv_heads, rows = view.seen.shape
    heads, m, d = queries.shape
    grouped = queries.view(kv_heads, heads // kv_heads, m, d)
    causal = torch.ones(m, m, dtype=torch.bool, device=keys.device).tril()
    best = keys.new_zeros(kv_heads, rows)
    for first in range(0, m, QUERY_BLOCK):
        block = grouped[:, :, first : first + QUERY_BLOCK]  # [kv_heads, groups, b, d]
        b = block.shape[2]
        visible = torch.cat(
            [view.seen[:, None].expand(-1, b, -1), causal[first : first + b].expand(kv_heads, -1, -1)], -1
        )
        if near is not None:
            visible = visible & near[first : first + b]
        logits = (block @ keys.transpose(1, 2)[:, None]) * scale  # [kv_heads, groups, b, rows + m]
        weights = torch.softmax(logits.masked_fill(~visible[:, None], float("-inf")), dim=-1)
        best = torch.maximum(best, weights[..., :rows].amax(dim=(1, 2)))
    return best
