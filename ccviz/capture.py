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

import threading
from dataclasses import dataclass, field
from typing import Iterable, Literal

import torch

CAPTURE_KWARG = "ccviz_capture"
ATTENTION_IMPLEMENTATION = "ccviz_sdpa"
_install_lock = threading.Lock()


@dataclass(frozen=True)
class AttentionNeed:
    """Which real attention weights a policy reads after each forward pass.

    ``layers``: the last decoder layer or all of them; ``queries``: only the newest query of the pass
    or every query of the pass (a policy that wants the newest w queries keeps its own window).
    """

    layers: Literal["last", "all"]
    queries: Literal["latest", "all"]

    @property
    def rows(self) -> int | None:
        """Query rows to compute per pass: the newest one, or None for all."""
        return 1 if self.queries == "latest" else None


@dataclass
class Capture:
    """What one forward pass should record, and what it recorded."""

    residual_layers: tuple[int, ...] = ()  # layers whose input rows H^(l) to record
    residuals: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [chunk, d_model], the stream entering it
    # layer -> the row counts asked for (newest query rows; None: every query of the pass)
    attention_rows: dict[int, tuple[int | None, ...]] = field(default_factory=dict)
    # (layer, rows) -> [rows, cache length] float32: attention weights averaged over all query heads
    attention: dict[tuple[int, int | None], torch.Tensor] = field(default_factory=dict)

    @classmethod
    def for_needs(cls, model: torch.nn.Module, needs: Iterable[AttentionNeed], residual_layers: Iterable[int] = ()) -> "Capture":
        """A capture serving every need; each need gets its own tensor, computed exactly as if it were alone.

        (Reading one row out of a bigger computation can differ in the last bit, and a recorded
        companion signal must never be able to change what the policy keeps.)
        """
        last = len(decoder_layers(model)) - 1
        rows: dict[int, set[int | None]] = {}
        for need in needs:
            for layer in range(last + 1) if need.layers == "all" else (last,):
                rows.setdefault(layer, set()).add(need.rows)
        return cls(residual_layers=tuple(sorted(set(residual_layers))), attention_rows={layer: tuple(r) for layer, r in rows.items()})

    def weights(self, model: torch.nn.Module, need: AttentionNeed, layer: int = -1) -> torch.Tensor:
        """[rows, cache length]: what ``need`` asked for at ``layer`` (negative: from the end) in this pass."""
        return self.attention[(layer % len(decoder_layers(model)), need.rows)]


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return model.model.layers


def attention_weights(
    query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, scaling: float, rows: int | None
) -> torch.Tensor:
    """softmax(qK^T * scaling + mask) in float32 for the newest ``rows`` queries, averaged over query heads.

    ``query`` [1, heads, q, d], ``key`` [1, kv_heads, n, d] (GQA: each KV head serves heads / kv_heads
    query heads; averaging over all query heads averages each group, then the groups). ``mask`` is
    the one SDPA received: boolean (True = visible), additive float, or None, which SDPA reads as
    causal with the queries at the end of the cache. Returns [rows, n].
    """
    heads, q_len, d = query.shape[1:]
    kv_heads, n = key.shape[1], key.shape[2]
    rows = q_len if rows is None else min(rows, q_len)
    q = query[0, :, q_len - rows :].float().reshape(kv_heads, -1, d)  # each KV head's query heads, stacked
    logits = torch.bmm(q, key[0].float().transpose(1, 2)).view(kv_heads, heads // kv_heads, rows, n) * scaling
    if mask is None:
        if rows > 1:  # the newest query sees everything; earlier ones stop at their own position
            visible = torch.arange(n, device=key.device) <= torch.arange(n - rows, n, device=key.device)[:, None]
            logits = logits.masked_fill(~visible, float("-inf"))
    elif mask.dtype == torch.bool:
        logits = logits.masked_fill(~mask[0, :, q_len - rows :], float("-inf"))
    else:
        logits = logits + mask[0, :, q_len - rows :].float()
    return torch.softmax(logits, dim=-1).mean(dim=(0, 1))


def _attention_forward(module: torch.nn.Module, query, key, value, attention_mask, *args, **kwargs):
    """The SDPA path, plus the attention weights of the layers the running capture asks for."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward  # heavy: only once a model runs

    capture = kwargs.get(CAPTURE_KWARG)
    if capture is not None and module.layer_idx in capture.attention_rows:
        scaling = kwargs.get("scaling")
        scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
        for rows in capture.attention_rows[module.layer_idx]:
            capture.attention[(module.layer_idx, rows)] = attention_weights(query, key, attention_mask, scaling, rows)
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
