"""What every run is given: a loaded model and its tokenizer."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .windows import layer_windows

TINY_MODEL = "tiny-random"  # the name of the tiny random Llama built for tests (ccviz.models.tiny)


@dataclass
class LoadedModel:
    """A read-only model with its tokenizer; shared by every run, never mutated by one."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    context: int | None = None  # positions a run may reach; None: the model's own (timing probes go beyond it)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def max_positions(self) -> int:
        if self.context is not None:
            return self.context
        return int(getattr(self.model.config, "max_position_embeddings", 2048))

    @property
    def windows(self) -> tuple[int | None, ...] | None:
        """Each layer's sliding window in positions (None: global), or None when every layer is global."""
        return layer_windows(self.model.config)
