"""Sliding-window (local) attention layers: which layers are local, and which positions they read.

Gemma 3 mixes local layers (``config.layer_types`` "sliding_attention", window ``config.sliding_window``)
with global ones; Mistral-style configs window every layer. transformers' rule
(``masking_utils.sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``) lets a query at position
p read the keys at positions p - W + 1 .. p: W positions, itself included. ccviz applies the same rule to
*original* positions, which the cache keeps after eviction, and mirrors it in the counter-causal pass
(an entry at p reads the cached entries at p + 1 .. p + W - 1).
"""

from __future__ import annotations

from typing import Any

import torch


def layer_windows(config: Any) -> tuple[int | None, ...] | None:
    """Each decoder layer's window W (None: a global layer), or None when every layer is global."""
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if layer_types is None:
        windows = tuple(window for _ in range(int(config.num_hidden_layers)))
    else:
        windows = tuple(window if kind == "sliding_attention" else None for kind in layer_types)
    return windows if any(w is not None for w in windows) else None


def within_window(query_pos: torch.Tensor, key_pos: torch.Tensor, window: int | None) -> torch.Tensor:
    """bool, broadcast of ``query_pos`` and ``key_pos`` (original positions): whether the two lie less than
    ``window`` positions apart (always True for ``window=None``, a global layer). Which side a key may be
    on (causal, counter-causal) is the caller's rule; this is the window's alone."""
    if window is None:
        return torch.ones(
            torch.broadcast_shapes(query_pos.shape, key_pos.shape), dtype=torch.bool, device=key_pos.device
        )
    return (query_pos - key_pos).abs() < window
