"""The managed KV cache of one run and everything that must be evicted with it.

One decision per token: the keys/values of every layer, the token ids, the original positions, the
stored residual-stream rows (H^(l) for the layers a policy re-runs from) and every per-policy state are
gathered with the same indices, so they can never drift apart. Under a per-layer allocation
(:mod:`ccviz.engine.allocation`) the side tables hold the union of what the layers keep, and each layer's
K/V holds only its own entries (:class:`LayerMembership` says which), so a smaller layer budget frees
that layer's memory. A policy sees the cache through :class:`Candidates`: the entries a refresh decides
on, alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import CacheLayerMixin

from .models import within_window


@dataclass
class LayerMembership:
    """Which of the cache's entries each layer's K/V rows are, when layers keep different entries.

    ``rows[l]``: ascending indices into the entries (``CacheState.pos`` order), one per K/V row of
    layer l. ``heads[l]`` (allocation "adaptive" only): bool ``[kv_heads, len(rows[l])]``, which of the
    layer's rows each KV head still sees; a head's evicted entries stay in the layer while another head
    keeps them, masked out of its attention (as kvpress realises per-head budgets).
    """

    rows: list[torch.Tensor]
    heads: list[torch.Tensor] | None = None

    @classmethod
    def empty(cls, num_layers: int, kv_heads: int | None = None) -> LayerMembership:
        rows = [torch.empty(0, dtype=torch.long) for _ in range(num_layers)]
        heads = None if kv_heads is None else [torch.empty(kv_heads, 0, dtype=torch.bool) for _ in range(num_layers)]
        return cls(rows, heads)

    def appended(self, start: int, count: int) -> None:
        """Entries ``start .. start + count - 1`` were just appended to every layer, visible to every head."""
        new = torch.arange(start, start + count)
        self.rows = [torch.cat([rows, new]) for rows in self.rows]
        if self.heads is not None:
            self.heads = [torch.cat([heads, heads.new_ones(heads.shape[0], count)], dim=1) for heads in self.heads]

    def held(self, entries: int) -> torch.Tensor:
        """bool ``[layers, entries]``: which entries each layer holds."""
        held = torch.zeros(len(self.rows), entries, dtype=torch.bool)
        for layer, rows in enumerate(self.rows):
            held[layer, rows] = True
        return held

    def visible(self, entries: int) -> torch.Tensor:
        """bool ``[layers, kv_heads, entries]``: which entries each KV head sees (every head of a layer
        sees all the layer holds, unless allocation is adaptive)."""
        if self.heads is None:
            return self.held(entries)[:, None]
        seen = torch.zeros(len(self.rows), self.heads[0].shape[0], entries, dtype=torch.bool)
        for layer, (rows, heads) in enumerate(zip(self.rows, self.heads)):
            seen[layer][:, rows] = heads
        return seen

    def masks(self, new: int, query_heads: int, device: torch.device) -> list[torch.Tensor]:
        """Each layer's attention mask for a pass appending ``new`` entries: bool ``[1, 1 or query_heads,
        new, len(rows[l]) + new]``, True = visible. The new queries see every entry their head keeps and
        the new entries causally (the cache holds only earlier positions, in position order)."""
        causal = torch.ones(new, new, dtype=torch.bool, device=device).tril()
        masks = []
        for layer, rows in enumerate(self.rows):
            if self.heads is None:
                old = torch.ones(1, new, rows.numel(), dtype=torch.bool, device=device)
            else:  # each KV head's visibility serves its group of query heads
                group = query_heads // self.heads[layer].shape[0]
                old = self.heads[layer].to(device).repeat_interleave(group, dim=0)[:, None].expand(-1, new, -1)
            masks.append(torch.cat([old, causal.expand(old.shape[0], -1, -1)], dim=-1)[None])
        return masks

    def columns(self, entries: int, new: int) -> list[torch.Tensor]:
        """Each layer's K/V rows after a pass appending ``new`` entries, as indices into the entries."""
        new_rows = torch.arange(entries, entries + new)
        return [torch.cat([rows, new_rows]) for rows in self.rows]


@dataclass
class CacheState:
    """Everything one run caches, one row per entry (cache order = ascending original position); the first
    ``frozen`` entries are the frozen prefix, never scored, never evicted."""

    kv: DynamicCache
    frozen: int
    tok: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    pos: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    residuals: dict[int, torch.Tensor] = field(
        default_factory=dict
    )  # layer l -> H^(l) [n, d_model], when a policy asks
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # per-policy state, one value per entry (dim 0)
    totals: dict[str, torch.Tensor] = field(default_factory=dict)  # per-policy state of the whole run: never gathered
    layers: LayerMembership | None = None  # None: every layer holds every entry (allocation "uniform")

    def __len__(self) -> int:
        return int(self.pos.numel())

    def kv_bytes(self) -> int:
        """Bytes the K/V tensors of every layer hold now."""
        return sum(
            layer.keys.nbytes + layer.values.nbytes
            for layer in self.kv.layers
            if isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None
        )

    def append(self, tok: torch.Tensor, pos: torch.Tensor, residuals: dict[int, torch.Tensor] | None = None) -> None:
        """Record the ids, positions (and residual rows, per layer) of tokens whose K/V the model just appended."""
        if self.layers is not None:
            self.layers.appended(len(self), tok.numel())
        self.tok = torch.cat([self.tok, tok.to(self.tok.device)])
        self.pos = torch.cat([self.pos, pos.to(self.pos.device)])
        for layer, rows in (residuals or {}).items():
            stored = self.residuals.get(layer)
            self.residuals[layer] = rows if stored is None else torch.cat([stored, rows])

    def keep(self, indices: torch.Tensor) -> None:
        """Keep only the entries at ``indices`` (cache order), in every layer and every side table."""
        for layer in self.kv.layers:
            _gather(layer, indices)
        self._keep_entries(indices)

    def keep_per_layer(self, rows: list[torch.Tensor], heads: list[torch.Tensor] | None = None) -> None:
        """Layer l keeps the entries ``rows[l]`` (ascending indices into the entries, a subset of what it
        holds; ``heads[l]``: bool ``[kv_heads, len(rows[l])]``, which of them each KV head keeps). One
        gather per layer for its K/V; the side tables keep the union of every layer's entries."""
        held = self.layers
        assert held is not None, "layers keep different entries only under a per-layer allocation"
        union = torch.unique(torch.cat(rows))
        for layer, (cached, kept) in enumerate(zip(self.kv.layers, rows)):
            _gather(cached, torch.searchsorted(held.rows[layer], kept))  # the kept rows of its K/V
        self.layers = LayerMembership([torch.searchsorted(union, kept) for kept in rows], heads)
        self._keep_entries(union)

    def masks(
        self, new_pos: torch.Tensor, query_heads: int, windows: Sequence[int | None] | None, device: torch.device
    ) -> list[torch.Tensor] | None:
        """Each layer's attention mask for a pass appending entries at the original positions ``new_pos``
        ``[new]``: bool ``[1, 1 or query_heads, new, keys_l]``, True = visible (:meth:`LayerMembership.masks`
        under a per-layer allocation), a local layer's (``windows[l]``, :func:`ccviz.models.layer_windows`)
        cut to the keys less than its window before each query in original positions, as transformers
        cuts them in positions it counts itself (which eviction would shift). None when every layer is
        global and holds every entry: transformers' own causal mask serves."""
        if windows is None and self.layers is None:
            return None
        new = new_pos.numel()
        if self.layers is None:
            causal = torch.ones(new, new, dtype=torch.bool, device=device).tril()
            everything = torch.cat([torch.ones(new, len(self), dtype=torch.bool, device=device), causal], -1)
            masks = [everything[None, None]] * len(windows or ())
        else:
            masks = self.layers.masks(new, query_heads, device)
        if windows is None:
            return masks
        key_pos = torch.cat([self.pos, new_pos.to(self.pos.device)])
        columns = None if self.layers is None else self.layers.columns(len(self), new)
        windowed: dict[int, torch.Tensor] = {}  # layers holding every entry share one mask per window
        for layer, window in enumerate(windows):
            if window is None:
                continue
            if columns is None and window in windowed:
                masks[layer] = windowed[window]
                continue
            keys = key_pos if columns is None else key_pos[columns[layer]]
            masks[layer] = masks[layer] & within_window(new_pos[:, None].to(keys.device), keys[None], window).to(device)
            if columns is None:
                windowed[window] = masks[layer]
        return masks

    def _keep_entries(self, indices: torch.Tensor) -> None:
        self.tok = self.tok[indices]
        self.pos = self.pos[indices]
        self.residuals = {layer: rows[indices.to(rows.device)] for layer, rows in self.residuals.items()}
        self.extras = {name: value[indices.to(value.device)] for name, value in self.extras.items()}


def _kv(layer: object) -> tuple[torch.Tensor, torch.Tensor]:
    """A cache layer's keys and values ``[batch, kv_heads, entries, head_dim]``: every layer of the models ccviz
    runs attends, so after the first forward pass each holds both."""
    if isinstance(layer, CacheLayerMixin) and layer.keys is not None and layer.values is not None:
        return layer.keys, layer.values
    raise RuntimeError(f"cache layer {type(layer).__name__} holds no keys and values")


def _gather(layer: object, index: torch.Tensor) -> None:
    """Keep only the K/V rows (dim -2) at ``index`` of one cache layer."""
    keys, values = _kv(layer)
    assert isinstance(layer, CacheLayerMixin)  # as _kv found; narrows the layer for the writes below
    index = index.to(keys.device)
    layer.keys, layer.values = keys.index_select(-2, index), values.index_select(-2, index)


class Candidates:
    """What a policy scores at a refresh: the cache's candidates (every entry after the frozen prefix), alone.

    Rows are the n candidates in cache order. ``pos`` long ``[n]`` (original positions), ``tok`` long
    ``[n]``, ``extras`` (each per-entry side table of ``CacheState.extras``, candidate rows only),
    ``residuals`` (layer l -> the stored H^(l) rows ``[n, d_model]``, for the layers a policy asked for),
    :meth:`keys` / :meth:`values` (a layer's cached K/V rows). ``cache``: the whole managed cache, for a
    policy that reads beyond the candidates (SnapKV pools each candidate with its neighbours, frozen
    ones included); :meth:`take` cuts a per-entry tensor of it down to the candidates' rows. ``tokenizer``:
    the run's, for a policy that feeds the model text of its own (kvzip's repeat prompt); None when not given.

    Parameters
    ----------
    cache : CacheState
        The run's managed cache; its first ``cache.frozen`` entries are never candidates.
    tokenizer : optional
        The run's tokenizer.
    cache_size : int, optional
        The run's J: how many candidates the refresh keeps (a scorer whose score depends on the share it
        evicts reads it, kvpress's ``compression_ratio``); None when not given.

    Attributes
    ----------
    pos, tok : torch.Tensor
        long ``[n]``: original positions and token ids of the n candidates, in cache order.
    residuals : dict[int, torch.Tensor]
        layer -> stored H^(l) rows ``[n, d_model]``, for the layers a policy asked for.
    extras : dict[str, torch.Tensor]
        per-entry side tables (attention sums, ...), candidate rows only: ``[n, ...]``.
    """

    def __init__(self, cache: CacheState, tokenizer: Any = None, cache_size: int | None = None):
        self.cache = cache
        self.tokenizer = tokenizer
        self.cache_size = cache_size
        frozen = cache.frozen
        self.pos: torch.Tensor = cache.pos[frozen:]
        self.tok: torch.Tensor = cache.tok[frozen:]
        self.extras: dict[str, torch.Tensor] = {name: value[frozen:] for name, value in cache.extras.items()}
        self.residuals: dict[int, torch.Tensor] = {layer: rows[frozen:] for layer, rows in cache.residuals.items()}

    def __len__(self) -> int:
        return int(self.pos.numel())

    def take(self, table: torch.Tensor) -> torch.Tensor:
        """The candidates' rows (dim 0) of a tensor with one row per cache entry."""
        return table[self.cache.frozen :]

    def keys(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s cached keys of the candidates, ``[batch, kv_heads, n_l, head_dim]``: n_l = n unless
        the layer holds only some candidates (a per-layer allocation; :meth:`held` says which)."""
        return _kv(self.cache.kv.layers[layer])[0][:, :, self.cache.frozen :]

    def values(self, layer: int) -> torch.Tensor:
        """Layer ``layer``'s cached values of the candidates, as :meth:`keys`."""
        return _kv(self.cache.kv.layers[layer])[1][:, :, self.cache.frozen :]

    def held(self, layer: int) -> torch.Tensor | None:
        """Which candidates layer ``layer``'s K/V rows are, long ``[n_l]`` ascending indices into the
        candidates; None when the layer holds every candidate (allocation ``uniform``)."""
        if self.cache.layers is None:
            return None
        frozen = self.cache.frozen  # every layer holds the frozen prefix: its first rows
        return self.cache.layers.rows[layer][frozen:] - frozen
