"""The managed KV cache of one run and everything that must be evicted with it.

One decision per token: the keys/values of every layer, the token ids, the original positions, the
stored residual-stream rows (H^(l) for the layers a policy re-runs from) and every per-policy state are gathered with the same indices, so they can never
drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import DynamicCache


@dataclass
class CacheState:
    kv: DynamicCache
    frozen: int
    tok: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    pos: torch.Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    residuals: dict[int, torch.Tensor] = field(default_factory=dict)  # layer l -> H^(l) [n, d_model], when a policy asks
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # per-policy state, one value per entry

    def __len__(self) -> int:
        return int(self.pos.numel())

    @property
    def num_candidates(self) -> int:
        return max(len(self) - self.frozen, 0)

    def append(self, tok: torch.Tensor, pos: torch.Tensor, residuals: dict[int, torch.Tensor] | None = None) -> None:
        """Record the ids, positions (and residual rows, per layer) of tokens whose K/V the model just appended."""
        self.tok = torch.cat([self.tok, tok.to(self.tok.device)])
        self.pos = torch.cat([self.pos, pos.to(self.pos.device)])
        for layer, rows in (residuals or {}).items():
            stored = self.residuals.get(layer)
            self.residuals[layer] = rows if stored is None else torch.cat([stored, rows])

    def keep(self, indices: torch.Tensor) -> None:
        """Keep only the entries at ``indices`` (cache order), in every layer and every side table."""
        for layer in self.kv.layers:
            index = indices.to(layer.keys.device)
            layer.keys = layer.keys.index_select(-2, index)
            layer.values = layer.values.index_select(-2, index)
        self.tok = self.tok[indices]
        self.pos = self.pos[indices]
        self.residuals = {layer: rows[indices.to(rows.device)] for layer, rows in self.residuals.items()}
        self.extras = {name: value[indices.to(value.device)] for name, value in self.extras.items()}
