"""Whole-document signals for display: every token of a document scored once, nothing evicted.

The Surprise page asks "what does each signal think of this text?" independently of any budget, so
these run the same code the policies use, on the full document: the counter-causal scorer directly,
and a no-eviction H2O run (J = h = document length) that also records the companion attention signals.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .engine import ProgressCallback, RefreshCallback, generate
from .models import LoadedModel
from .policies.counter_causal.surprise import counter_causal_surprise
from .prompts import encode_prompt
from .trace import Trace

ATTENTION_SIGNALS = {
    "attention_chunk": "attention received (last layer, from every token of the document)",
    "h2o_accumulated": "H2O accumulation (every layer, every query)",
    "attention_last": "attention from the last token (last layer)",
}
ATTENTION_STEP = 256  # prompt tokens per forward pass: bounds the captured attention rows of all layers


def document_surprise(
    lm: LoadedModel, prompt: str, *, chat: bool, variant: str = "fast", score: str = "logit", min_gap: int = 0
) -> list[float]:
    """Counter-causal surprise of every prompt token (template included), +inf where no future is visible."""
    ids = encode_prompt(lm.tokenizer, prompt, chat=chat).ids
    surprise = counter_causal_surprise(lm.model, torch.tensor([ids]), variant=variant, score=score, min_gap=min_gap)
    return surprise.tolist()


def document_attention(
    lm: LoadedModel,
    prompt: str,
    *,
    chat: bool,
    frozen: int | str = "auto",
    progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_refresh: RefreshCallback | None = None,
) -> Trace:
    """A prefill of the whole document under H2O with room for everything, scored once at the end.

    Its single refresh records, for every token after the frozen prefix, the signals named in
    ``ATTENTION_SIGNALS``; read them with :func:`ccviz.figures.latest_scores`.
    """
    n = len(encode_prompt(lm.tokenizer, prompt, chat=chat).ids)
    return generate(
        lm,
        prompt,
        policy="h2o",
        cache_size=n,
        chunk_size=n,
        frozen=frozen,
        chat=chat,
        max_new_tokens=1,
        record="all",
        prefill_step=ATTENTION_STEP,
        progress=progress,
        should_stop=should_stop,
        on_refresh=on_refresh,
    )
