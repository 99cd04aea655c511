"""Probe ``overhead``: decode tokens/s of ``generate(policy="full")`` against ``model.generate``.

Both run in this process on the same prompt and the same number of new tokens; decode speed of
model.generate is (time for N tokens - time for 1 token) / (N - 1), i.e. without its prefill.
Target: ratio >= 0.9. Also: wall time of a 1,000-token prompt + 200 new tokens under
``sliding`` at J=256, h=64.

Run: ``python -m ccviz bench overhead [--set repeats=5]``
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ccviz.cases.texts import long_document
from ccviz.engine import generate
from ccviz.fields import Validated, whole
from ccviz.models import load_model
from ccviz.prompts import encode_prompt

from ..timing import median_seconds

PROMPT = "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle."


@dataclass(frozen=True)
class OverheadSettings(Validated):
    repeats: int = whole("repeats", 1, default=5)
    new_tokens: int = whole("new tokens", 2, default=64)  # of the decode comparison
    document_tokens: int = whole("document tokens", 1, default=1000)  # the sliding run's prompt
    sliding_new_tokens: int = whole("sliding new tokens", 1, default=200)
    cache_size: int = whole("cache size J", 1, default=256)  # of the sliding run
    chunk_size: int = whole("chunk size h", 1, default=64)

    @classmethod
    def quick(cls) -> OverheadSettings:
        return cls(repeats=1, new_tokens=4, document_tokens=64, sliding_new_tokens=8, cache_size=16, chunk_size=4)


def title(settings: OverheadSettings) -> str:
    return "engine overhead"


def run(model_args: dict[str, Any], settings: OverheadSettings, emit: Callable[[str], None]) -> None:
    lm = load_model(**model_args)
    n, repeats = settings.new_tokens, settings.repeats
    ids = torch.tensor([encode_prompt(lm.tokenizer, PROMPT, chat=True).ids], device=lm.device)
    mask = torch.ones_like(ids)

    def hf(new: int):
        with torch.inference_mode():
            lm.model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False)

    hf_decode = (median_seconds(lambda: hf(n), repeats) - median_seconds(lambda: hf(1), repeats)) / (n - 1)

    def engine():
        return generate(lm, PROMPT, policy="full", cache_size=64, max_new_tokens=n, stop_at_eos=False)

    engine()  # warm-up
    per_token = []
    for _ in range(repeats):
        trace = engine()
        per_token.append(trace.timings["decode_seconds"] / (n - 1))
    per_token.sort()
    engine_decode = per_token[len(per_token) // 2]

    doc = long_document(lm.tokenizer, settings.document_tokens)
    J, h, new = settings.cache_size, settings.chunk_size, settings.sliding_new_tokens
    sliding = median_seconds(
        lambda: generate(
            lm, doc, policy="sliding", cache_size=J, chunk_size=h, max_new_tokens=new, chat=False, stop_at_eos=False
        ),
        max(1, repeats // 2),
        warmup=0,
    )
    emit(f"model.generate decode: {1 / hf_decode:8.1f} tokens/s")
    emit(f"ccviz full decode:     {1 / engine_decode:8.1f} tokens/s")
    emit(f"ratio (ccviz / model.generate): {hf_decode / engine_decode:.3f}   target >= 0.9")
    emit(f"sliding J={J} h={h}, {settings.document_tokens:,}-token prompt + {new} new tokens: {sliding:.2f} s (median)")
