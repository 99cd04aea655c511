"""Picking the next token from logits: greedy, or seeded temperature / top-p sampling."""

from __future__ import annotations

import torch

from ..models import LoadedModel
from .config import RunConfig


class Sampler:
    """One per run: its generator is seeded from the config, so a seeded run repeats exactly."""

    def __init__(self, config: RunConfig):
        self.config = config
        self.generator = torch.Generator(device="cpu")
        if config.seed is not None:
            self.generator.manual_seed(config.seed)

    def pick(self, logits: torch.Tensor) -> int:
        """The next token id from ``[vocab]`` logits."""
        if not self.config.do_sample:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.cpu() / self.config.temperature, dim=-1)
        if self.config.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= self.config.top_p
            sorted_probs[outside] = 0.0
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=self.generator))


def eos_ids(lm: LoadedModel) -> set[int]:
    """Every end-of-sequence id the model's generation config, config or tokenizer names."""
    ids: set[int] = set()
    for source in (getattr(lm.model, "generation_config", None), lm.model.config, lm.tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids
