"""Per-forward capture of internal tensors: residual-stream rows (H^(l), the input of layer l), and real attention
weights for the policies that read them.

A :class:`Capture` travels through the model's ``**kwargs`` (transformers hands them down to every
decoder layer and to the attention function), so the hooks installed once on the shared model only
ever write into the capture of the call that is running. Concurrent runs in different threads
therefore never see each other's data.

Attention weights come from ccviz's own attention function, registered with transformers'
``AttentionInterface``: it always runs the normal SDPA kernel, and only for the layers a capture asks
for does it also compute softmax(qK^T * scale + mask) in float32 for the requested queries. Calls
without a capture (or with one that asks for nothing) cost one dictionary lookup per layer.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import torch

CAPTURE_KWARG = "ccviz_capture"
Heads = Literal["mean", "each"]
ATTENTION_IMPLEMENTATION = "ccviz_sdpa"
_install_lock = threading.Lock()


@dataclass(frozen=True)
class AttentionNeed:
    """Which real attention weights a policy reads after each forward pass.

    ``layers``: the last decoder layer or all of them; ``queries``: only the newest query of the pass
    or every query of the pass (a policy that wants the newest w queries keeps its own window);
    ``heads``: the mean over query heads (what every policy reads), or each query head's own weights
    (what a probe needs to take, say, the max over heads of an attention summed over a span).
    """

    layers: Literal["last", "all"]
    queries: Literal["latest", "all"]
    heads: Heads = "mean"

    @property
    def rows(self) -> int | None:
        """Query rows to compute per pass: the newest one, or None for all."""
        return 1 if self.queries == "latest" else None

    @property
    def form(self) -> tuple[int | None, Heads]:
        """What a layer computes for this need: (:attr:`rows`, ``heads``); needs of one form share a tensor."""
        return self.rows, self.heads


@dataclass
class Capture:
    """What one forward pass should record, and what it recorded.

    Under a per-layer allocation the session also passes each layer's own attention ``masks`` (the
    layers hold different entries, so one mask cannot serve them all) and ``columns``: which of the
    cache's ``entries`` each layer's keys are. Attention weights are then returned over all the cache's
    entries (zero where a layer holds none), and with ``per_head`` per KV head.
    """

    residual_layers: tuple[int, ...] = ()  # layers whose input rows H^(l) to record
    residuals: dict[int, torch.Tensor] = field(
        default_factory=dict
    )  # layer -> [chunk, d_model], the stream entering it
    # layer -> the forms asked for (AttentionNeed.form: newest query rows, None: every query of the pass; heads)
    attention_forms: dict[int, tuple[tuple[int | None, Heads], ...]] = field(default_factory=dict)
    # (layer, rows, heads) -> [rows, cache length] float32: attention weights averaged over all query heads
    # (per_head: [kv_heads, rows, cache length], averaged within each KV head's group of query heads;
    # heads "each": [query heads, rows, cache length], every query head's own)
    attention: dict[tuple[int, int | None, Heads], torch.Tensor] = field(default_factory=dict)
    per_head: bool = False
    masks: list[torch.Tensor] | None = None  # per layer: bool [1, 1 or heads, pass, keys], True = visible
    columns: list[torch.Tensor] | None = None  # per layer: each key's index among the cache's entries
    entries: int = 0  # the cache's entries after the pass (with columns)

    @classmethod
    def for_needs(
        cls,
        model: torch.nn.Module,
        needs: Iterable[AttentionNeed],
        residual_layers: Iterable[int] = (),
        *,
        per_head: bool = False,
        **layout,
    ) -> Capture:
        """A capture serving every need; each need gets its own tensor, computed exactly as if it were alone.

        (Reading one row out of a bigger computation can differ in the last bit, and a recorded
        companion signal must never be able to change what the policy keeps.) ``per_head``: every
        need is served at every layer, per KV head (per-layer scores); ``layout``: ``masks``, ``columns``
        and ``entries`` of a per-layer cache.
        """
        last = len(decoder_layers(model)) - 1
        forms: dict[int, set[tuple[int | None, Heads]]] = {}
        for need in needs:
            for layer in range(last + 1) if need.layers == "all" or per_head else (last,):
                forms.setdefault(layer, set()).add(need.form)
        return cls(
            residual_layers=tuple(sorted(set(residual_layers))),
            attention_forms={layer: tuple(f) for layer, f in forms.items()},
            per_head=per_head,
            **layout,
        )

    def weights(self, model: torch.nn.Module, need: AttentionNeed, layer: int = -1) -> torch.Tensor:
        """[rows, cache length]: what ``need`` asked for at ``layer`` (negative: from the end) in this pass,
        averaged over query heads (also when the capture is ``per_head``); a need of ``heads="each"``:
        [query heads, rows, cache length]."""
        weights = self.attention[(layer % len(decoder_layers(model)), *need.form)]
        return weights.mean(dim=0) if self.per_head and need.heads == "mean" else weights

    def stacked(self, model: torch.nn.Module, need: AttentionNeed) -> torch.Tensor:
        """What ``need`` asked for at every layer: [layers, rows, cache length], or with ``per_head``
        [layers, kv_heads, rows, cache length]."""
        return torch.stack([self.attention[(layer, *need.form)] for layer in range(len(decoder_layers(model)))])


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.model.layers


def layer_rope(
    model: torch.nn.Module, like: torch.Tensor, position_ids: torch.Tensor, layer: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The RoPE cos and sin decoder layer ``layer`` rotates with at ``position_ids`` ``[1, m]``: ``[1, m,
    head_dim]`` each, in ``like``'s dtype. Gemma 3's local and global layers rotate with different bases,
    so its rotary embedding takes the layer's type; the other models' one rotation serves every layer."""
    rotary = model.model.rotary_emb
    if _rotates_per_layer_type(type(rotary)):
        return rotary(like, position_ids, decoder_layers(model)[layer].self_attn.layer_type)
    return rotary(like, position_ids)


@functools.cache
def _rotates_per_layer_type(rotary: type) -> bool:
    return "layer_type" in inspect.signature(rotary.forward).parameters


def attention_weights(
    query: torch.Tensor,
    key: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float,
    rows: int | None,
    per_head: bool = False,
    heads: Heads = "mean",
) -> torch.Tensor:
    """softmax(qK^T * scaling + mask) in float32 for the newest ``rows`` queries, averaged over query heads.

    ``query`` [1, heads, q, d], ``key`` [1, kv_heads, n, d] (GQA: each KV head serves heads / kv_heads
    query heads; averaging over all query heads averages each group, then the groups). ``mask`` is
    the one SDPA received: boolean (True = visible), additive float, or None, which SDPA reads as
    causal with the queries at the end of the cache; one mask for all heads or one per query head.
    Returns [rows, n]; ``per_head``: [kv_heads, rows, n], each KV head's group averaged; ``heads="each"``:
    [query heads, rows, n], nothing averaged (whatever ``per_head`` says).
    """
    num_heads, q_len, d = query.shape[1:]
    kv_heads, n = key.shape[1], key.shape[2]
    rows = q_len if rows is None else min(rows, q_len)
    q = query[0, :, q_len - rows :].float().reshape(kv_heads, -1, d)  # each KV head's query heads, stacked
    logits = torch.bmm(q, key[0].float().transpose(1, 2)).view(kv_heads, num_heads // kv_heads, rows, n) * scaling
    if mask is not None:
        mask = mask[0, :, q_len - rows :]
        if mask.shape[0] > 1:  # one mask per query head: group them as the logits are
            mask = mask.reshape(kv_heads, num_heads // kv_heads, rows, n)
    if mask is None:
        if rows > 1:  # the newest query sees everything; earlier ones stop at their own position
            visible = torch.arange(n, device=key.device) <= torch.arange(n - rows, n, device=key.device)[:, None]
            logits = logits.masked_fill(~visible, float("-inf"))
    elif mask.dtype == torch.bool:
        logits = logits.masked_fill(~mask, float("-inf"))
    else:
        logits = logits + mask.float()
    weights = torch.softmax(logits, dim=-1)  # [kv_heads, group, rows, n]: query head kv * group + g
    if heads == "each":
        return weights.flatten(0, 1)
    return weights.mean(dim=1 if per_head else (0, 1))


def _over_entries(weights: torch.Tensor, columns: torch.Tensor, entries: int) -> torch.Tensor:
    """Attention weights over one layer's keys ``[..., keys]`` spread over all the cache's entries (zero elsewhere)."""
    spread = weights.new_zeros(*weights.shape[:-1], entries)
    return spread.index_copy_(-1, columns.to(weights.device), weights)


def _attention_forward(module: torch.nn.Module, query, key, value, attention_mask, *args, **kwargs):
    """The SDPA path, plus the attention weights of the layers the running capture asks for; a capture of
    a per-layer cache brings each layer's own mask."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # heavy: only once a model runs

    capture = kwargs.get(CAPTURE_KWARG)
    if capture is not None and capture.masks is not None:
        attention_mask = capture.masks[module.layer_idx]
    if capture is not None and module.layer_idx in capture.attention_forms:
        scaling = kwargs.get("scaling")
        scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
        for rows, heads in capture.attention_forms[module.layer_idx]:
            weights = attention_weights(query, key, attention_mask, scaling, rows, capture.per_head, heads)
            if capture.columns is not None:
                weights = _over_entries(weights, capture.columns[module.layer_idx], capture.entries)
            capture.attention[(module.layer_idx, rows, heads)] = weights
    return sdpa_attention_forward(module, query, key, value, attention_mask, *args, **kwargs)


def _layer_input_recorder(index: int):
    """A forward pre-hook for decoder layer ``index``: records its input rows when the running capture asks."""

    def record(module, args, kwargs) -> None:
        capture = kwargs.get(CAPTURE_KWARG)
        if capture is not None and index in capture.residual_layers:
            hidden = args[0] if args else kwargs["hidden_states"]
            capture.residuals[index] = hidden[0]

    return record


def _use_capturing_attention(model: torch.nn.Module) -> None:
    """Switch an SDPA model to ccviz's attention function (identical results; SDPA's masks)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if ATTENTION_IMPLEMENTATION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION_IMPLEMENTATION, _attention_forward)
        AttentionMaskInterface.register(ATTENTION_IMPLEMENTATION, sdpa_mask)
    if model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(ATTENTION_IMPLEMENTATION)


def install_hooks(model: torch.nn.Module) -> None:
    """Install ccviz's capture hooks once per model; they do nothing for calls without a Capture."""
    with _install_lock:
        if getattr(model, "_ccviz_hooks_installed", False):
            return
        for index, layer in enumerate(decoder_layers(model)):
            layer.register_forward_pre_hook(_layer_input_recorder(index), with_kwargs=True)
        _use_capturing_attention(model)
        model._ccviz_hooks_installed = True


def captures_attention(model: torch.nn.Module) -> bool:
    """Whether this model's attention calls go through ccviz's capturing function."""
    return model.config._attn_implementation == ATTENTION_IMPLEMENTATION
