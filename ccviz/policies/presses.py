"""Any kvpress-style scorer as a ccviz policy: ``kvpress:SnapKVPress``, or ``mymodule:MyScorer`` for one of
a user's own.

kvpress's scorers are pure tensor functions of one layer's inputs: ``score(module, hidden_states, keys,
values, attentions, kwargs)`` returns one score per KV head and position, ``[batch, kv_heads, rows]``.
Its own hook cannot run under our transformers (it reads forward keywords transformers 5 no longer
passes), so ccviz calls ``score`` itself at every refresh, per layer, with what the press reads:

- ``module``: that layer's attention module (the real one: kvpress's helpers dispatch on its class);
- ``hidden_states``: the layer's attention inputs (H^(l) after its input norm) at the cached rows,
  ``[1, rows, d_model]``;
- ``keys`` / ``values``: the layer's cached rows ``[1, kv_heads, rows, head_dim]`` (after RoPE);
- ``attentions``: the rows' causal attention weights ``[1, heads, rows, rows]``, only for a scorer
  that cannot run without them (:data:`READS_ATTENTIONS`, or a class attribute ``reads_attentions``);
  None otherwise, as kvpress passes them under SDPA;
- ``kwargs``: ``position_embeddings``, the layer's RoPE ``(cos, sin)`` ``[1, rows, head_dim]`` each.

A refresh that evicts nothing (the cache still under J) gives every entry the same score when the scorer
cannot score so short a cache (SnapKV's window, Compactor's sinks); one that evicts says why it failed.

The scores go to ccviz's one survivor selector like those of its own per-head policies (KVzip, KeyDiff):
per layer and KV head under a per-layer allocation, else each candidate's max over layers and heads.
The press's options are the policy's options but ``compression_ratio``: J decides how many stay, and a
scorer that reads the ratio (StreamingLLM's evicted block, Compactor's blending) gets the one the refresh
applies to the layer's rows (the candidates over J, over the rows), as kvpress would compress that cache.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ..cache import Candidates
from ..capture import decoder_layers, layer_rope
from ..errors import CcvizError
from ..fields import flag, number, whole
from ..references import import_ref, is_reference
from .base import Policy
from .layerwise import layer_rows, on_candidates, rope

PRESS_PACKAGE = "kvpress"
INSTALL_HINT = "install it with `bash scripts/install.sh --kvpress` (kvpress, without moving transformers)"
READS_ATTENTIONS = frozenset({"ObservedAttentionPress"})  # its score asserts the weights are given
NOT_OPTIONS = frozenset({"compression_ratio"})  # J sets how many entries stay
# The kvpress scorers that run through the bridge with nothing downloaded (docs/policies.md#kvpresss-scorers).
RUNNABLE = (
    "KnormPress",
    "StreamingLLMPress",
    "TOVAPress",
    "SnapKVPress",
    "ObservedAttentionPress",
    "ExpectedAttentionPress",
    "KeyDiffPress",
    "LagKVPress",
    "LeverageScorePress",
    "CURPress",
    "CompactorPress",
    "NonCausalAttnPress",
    "CapPress",
    "RandomPress",
)


def press_policies() -> tuple[str, ...]:
    """The policy names of :data:`RUNNABLE` when kvpress is installed (found without importing it: its import
    takes seconds), else none: the menus and ``ccviz policies`` list them after ccviz's own."""
    if importlib.util.find_spec(PRESS_PACKAGE) is None:
        return ()
    return tuple(f"{PRESS_PACKAGE}:{name}" for name in RUNNABLE)


def is_scorer_spec(name: str) -> bool:
    """Whether a policy name names a scorer class (``module:Class``) rather than a registered policy."""
    return is_reference(name)


@functools.cache
def scorer_policy(name: str) -> type[Policy]:
    """The policy class bridging the scorer ``name`` names (``kvpress:SnapKVPress``): built once per name,
    its options the scorer's own fields. A one-line error when the scorer cannot be found or is not one."""
    scorer = _import_scorer(name)
    if not callable(getattr(scorer, "score", None)) or not dataclasses.is_dataclass(scorer):
        raise CcvizError(
            f"{name!r} is not a scorer: a dataclass with score(module, hidden_states, keys, values, attentions, kwargs)"
        )
    options = [f for f in dataclasses.fields(scorer) if f.init and f.name not in NOT_OPTIONS]
    required = [f.name for f in options if f.default is f.default_factory is dataclasses.MISSING]
    if required:  # a wrapper of another press: nothing to build it from here
        raise CcvizError(f"{name!r} cannot be built from options alone: its {required[0]!r} has no default")
    try:
        scorer()  # its own __init__ may still ask for more (CriticalKVPress wraps another press)
    except Exception as err:
        raise CcvizError(f"{name!r} cannot be built from options alone: {type(err).__name__}: {err}") from None
    summary = (scorer.__doc__ or "").strip().split("\n")[0].strip() or f"kvpress-style scorer {scorer.__name__}"
    attributes = {
        "name": name,
        "title": scorer.__name__,
        "summary": f"{scorer.__name__} (via its score): {summary}",
        "signal": "press_score",
        "head_scores": True,
        "scorer": scorer,
        "__annotations__": {f.name: "Any" for f in options},
        **{f.name: _option(f) for f in options},
    }
    bridged = type(scorer.__name__.replace("Press", "") + "Bridge", (PressBridge,), attributes)
    return dataclasses.dataclass(bridged)


def _import_scorer(name: str) -> type:
    try:
        return import_ref(name)
    except ModuleNotFoundError as err:
        if err.name == PRESS_PACKAGE:
            raise CcvizError(f"policy {name!r} needs kvpress, which is not installed: {INSTALL_HINT}") from None
        raise CcvizError(f"cannot import the scorer {name!r}: {err}") from None
    except AttributeError:
        raise CcvizError(f"no scorer {name.partition(':')[2]!r} in {name.partition(':')[0]!r}") from None
    except Exception as err:  # the module's own failure on import
        raise CcvizError(f"cannot import the scorer {name!r}: {type(err).__name__}: {err}") from None


def _option(field: dataclasses.Field) -> Any:
    """A scorer field as a ccviz option with its default (its type decides the widget and the check)."""
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
    if isinstance(default, bool):
        return flag(field.name, default=default)
    if isinstance(default, int):
        return whole(field.name, None, default=default)
    if isinstance(default, float):
        return number(field.name, default=default)
    return dataclasses.field(default=default)


class PressBridge(Policy):
    """Base of the classes :func:`scorer_policy` builds: one per scorer, its options the scorer's fields."""

    scorer: type

    def residual_layers(self, num_layers: int) -> tuple[int, ...]:
        return tuple(range(num_layers))  # every layer's inputs: ``hidden_states`` of its score

    def press(self) -> Any:
        """The scorer, built with this policy's options."""
        return self.scorer(**self.options())

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        cache, press = candidates.cache, self.press()
        views = layer_rows(cache)
        evicted = 0 if candidates.cache_size is None else max(0, len(candidates) - candidates.cache_size)
        blocks = decoder_layers(model)
        reads = type(press).__name__ in READS_ATTENTIONS or bool(getattr(press, "reads_attentions", False))
        scores = []
        for layer, (view, block) in enumerate(zip(views, blocks)):
            module = block.self_attn
            dtype = module.q_proj.weight.dtype
            rows = view.entries.to(cache.residuals[layer].device)
            hidden = block.input_layernorm(cache.residuals[layer][rows].to(dtype))[None]  # [1, rows, d_model]
            keys, values = view.keys.to(dtype)[None], view.values.to(dtype)[None]
            cos, sin = rope(model, cache.pos[view.entries.cpu()], keys, layer)
            cos, sin = cos.to(dtype)[None], sin.to(dtype)[None]
            if hasattr(press, "compression_ratio"):
                press.compression_ratio = min(evicted / keys.shape[2], 0.99)
            weights = _causal_weights(module, hidden, keys, cos, sin) if reads else None
            kwargs = {"position_embeddings": (cos, sin)}
            with _rotary_on(module, model, layer):
                try:
                    score = press.score(module, hidden, keys, values, weights, kwargs)[0].float()  # [kv_heads, rows]
                except Exception as err:  # a scorer's own assertion (too few rows for its window, ...)
                    if evicted:
                        why = f"{type(err).__name__}: {err}"
                        raise CcvizError(f"{self.name} could not score layer {layer}: {why}") from err
                    score = view.keys.new_ones(view.keys.shape[:2])  # nothing to evict: every entry alike
            scores.append(score)
        return on_candidates(candidates, views, scores, "max")


def _causal_weights(
    module: torch.nn.Module, hidden: torch.Tensor, keys: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """Each cached row's attention over the rows up to it, as an eager forward would return it:
    ``[1, heads, rows, rows]`` (the model's queries from ``hidden``, rotated; its keys as cached)."""
    heads, head_dim = module.config.num_attention_heads, module.head_dim
    queries = module.q_proj(hidden).view(1, hidden.shape[1], heads, head_dim).transpose(1, 2)
    if hasattr(module, "q_norm"):
        queries = module.q_norm(queries)
    first, second = queries.chunk(2, dim=-1)
    queries = queries * cos[:, None] + torch.cat((-second, first), dim=-1) * sin[:, None]
    keys = keys.repeat_interleave(heads // keys.shape[1], dim=1)
    logits = queries @ keys.transpose(-1, -2) * module.scaling
    n = keys.shape[2]
    future = torch.ones(n, n, dtype=torch.bool, device=keys.device).triu(1)
    return logits.masked_fill(future, float("-inf")).softmax(dim=-1)


@contextmanager
def _rotary_on(module: torch.nn.Module, model: torch.nn.Module, layer: int) -> Iterator[None]:
    """Give ``module`` the ``rotary_emb`` kvpress's scorers call (``rotary_emb(x, position_ids)``), for the
    call only: the layer's own RoPE (a local layer's, on Gemma), set as a plain attribute so the model's
    modules and weights never change."""
    if hasattr(module, "rotary_emb"):
        yield
        return
    rotary: Callable[..., Any] = lambda x, position_ids: layer_rope(model, x, position_ids, layer)  # noqa: E731
    object.__setattr__(module, "rotary_emb", rotary)
    try:
        yield
    finally:
        del module.__dict__["rotary_emb"]
