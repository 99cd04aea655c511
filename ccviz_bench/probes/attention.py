"""Probe ``attention``: cost of the attention-based policies: refresh scoring, attention capture, decode speed.

1. Refresh: scoring the n + 64 entries of a cache (``score_candidates`` + top-k), against one plain
   causal forward over n tokens (``logits_to_keep=1``, as generate's prefill).
2. Capture: one 64-token chunk forward over an n-entry cache with the policy's attention capture and
   ``observe`` (TOVA: one row of the last layer; SnapKV: every row of the last layer; H2O: every row
   of every layer), against the same forward capturing nothing (what ``full`` and ``sliding`` run).
3. ``full`` decode through ccviz's attention function against plain SDPA (the path before attention
   capture existed).
4. Decode tokens/s of each policy against ``full`` (refresh time included), (a) after a short prompt
   with J large enough that nothing is evicted: pure overhead; (b) after a 1,000-token document at
   J=256, h=64, where the evicting policies also attend over a smaller cache than ``full``.

All timings are interleaved across policies and repeated; the medians are compared. 1 and 2 drive
one :class:`ccviz.CacheSession` per policy, filled with the same text (J above every position fed,
so nothing is evicted): each round feeds the chunk, times the refresh decision, then evicts the
chunk again.

Run: ``python -m ccviz bench attention [--set sizes=640,1280,2560] [--set repeats=5] [--set new_tokens=64]``
(``--threads 1``, the default, gives steadier ratios on a shared machine)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ccviz.capture import ATTENTION_IMPLEMENTATION, install_hooks
from ccviz.cases.texts import long_document
from ccviz.engine import CacheSession, generate
from ccviz.errors import CcvizError
from ccviz.fields import Validated, whole
from ccviz.models import LoadedModel, load_model
from ccviz.prompts import encode_prompt

from ..specs import PolicySpec
from ..tasks.efficiency import decide, filled_session, forward_seconds
from .overhead import PROMPT

SCORED = ["tova", "h2o", "snapkv", "importance_keyproxy"]
DECODED = ["full", "sliding", *SCORED]
PLAIN = "full"  # the chunk forward that captures nothing, the baseline of the capture cost


@dataclass(frozen=True)
class AttentionSettings(Validated):
    sizes: tuple[int, ...] = whole("sizes", 2, default=(640, 1280, 2560), each=True)
    repeats: int = whole("repeats", 1, default=5)
    new_tokens: int = whole("new tokens", 2, default=64)
    chunk: int = whole("chunk size h", 1, default=64)  # of the capture timing and of the decode runs
    document_tokens: int = whole("document tokens", 1, default=1000)
    cache_size: int = whole("cache size J", 1, default=256)  # of the decode runs after the document
    short_cache_size: int = whole("short cache size J", 1, default=512)  # after the short prompt: nothing evicted

    @classmethod
    def quick(cls) -> AttentionSettings:
        return cls(
            sizes=(32,), repeats=1, new_tokens=4, chunk=8, document_tokens=64, cache_size=16, short_cache_size=64
        )


def title(settings: AttentionSettings) -> str:
    return "attention-based policies"


def _chunk_then_refresh(session: CacheSession, chunk: list[int], keep: int | None) -> tuple[float, float]:
    """Seconds of one chunk forward (+ capture and observe: the session's own time of the pass) and of the
    refresh decision that follows (none without ``keep``); the chunk is evicted again after."""
    n = len(session.cache)
    before = session.trace.timings["prefill_seconds"]
    session.feed(chunk)
    forwarded = session.trace.timings["prefill_seconds"] - before
    started = time.perf_counter()
    if keep is not None:
        decide(session, keep)
    refreshed = time.perf_counter() - started
    session.cache.keep(torch.arange(n))
    return forwarded, refreshed


def refresh_and_capture(lm: LoadedModel, settings: AttentionSettings, emit: Callable[[str], None]) -> None:
    size, repeats = settings.chunk, settings.repeats
    emit(f"\n## refresh (score + top-k) and capture cost, {size}-token chunks, median of {repeats}")
    emit(f"{'n':>6} {'forward s':>10} {'chunk s':>8} " + " ".join(f"{p:>20}" for p in SCORED))
    for n in settings.sizes:
        ids = encode_prompt(lm.tokenizer, long_document(lm.tokenizer, n + size), chat=False).ids
        base, chunk = ids[:-size], ids[-size:]
        if len(base) + size * (repeats + 1) > lm.max_positions:
            raise CcvizError(
                f"n={n} plus {repeats + 1} chunks of {size} exceed the model's {lm.max_positions} positions"
            )
        forward = forward_seconds(lm, base, repeats)
        # J above every position fed: the chunks never trigger a refresh, so nothing is ever evicted by one.
        sessions = {
            name: filled_session(lm, base, PolicySpec(name), cache_size=lm.max_positions) for name in [PLAIN, *SCORED]
        }
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in sessions}
        for _ in range(repeats + 1):  # the first round is a warm-up
            for name, session in sessions.items():
                samples[name].append(_chunk_then_refresh(session, chunk, None if name == PLAIN else len(base) // 2))
        plain = statistics.median(s[0] for s in samples[PLAIN][1:])
        cells = []
        for name in SCORED:
            capture = statistics.median(s[0] for s in samples[name][1:]) / plain
            refresh = statistics.median(s[1] for s in samples[name][1:]) / forward
            cells.append(f"{refresh:>9.1e}x ({capture:>5.2f}x)")
        emit(f"{len(base):>6} {forward:>10.3f} {plain:>8.3f} " + " ".join(f"{c:>20}" for c in cells))
    emit("cells: refresh / plain forward over n tokens; in brackets: chunk forward with capture / without")


def _decode_rate(trace) -> float:
    """Generated tokens per second of the decode phase: forward passes plus decode-phase refreshes."""
    seconds = trace.timings["decode_seconds"] + sum(c.seconds for c in trace.cycles if c.phase == "decode")
    generated = sum(tok.source == "generated" for tok in trace.tokens)
    return (generated - 1) / seconds


def decode_speed(lm: LoadedModel, title: str, prompt: str, repeats: int, emit: Callable[[str], None], **kw) -> None:
    rates: dict[str, list[float]] = {policy: [] for policy in DECODED}
    for _ in range(repeats + 1):  # interleaved, so load changes hit every policy alike; the first is a warm-up
        for policy in DECODED:
            rates[policy].append(_decode_rate(generate(lm, prompt, policy=policy, stop_at_eos=False, **kw)))
    medians = {policy: statistics.median(values[1:]) for policy, values in rates.items()}
    emit(f"\n## decode tokens/s, {title}, median of {repeats}")
    for policy in DECODED:
        emit(f"{policy:>20} {medians[policy]:7.1f} tokens/s   {medians[policy] / medians['full']:.2f}x full")


def full_path_overhead(lm: LoadedModel, repeats: int, new_tokens: int, emit: Callable[[str], None]) -> None:
    """``full`` decode through ccviz's attention function against the plain SDPA function it wraps."""
    rates: dict[str, list[float]] = {"sdpa": [], ATTENTION_IMPLEMENTATION: []}
    for _ in range(repeats + 1):
        for implementation in rates:
            lm.model.set_attn_implementation(implementation)
            trace = generate(lm, PROMPT, policy="full", cache_size=64, max_new_tokens=new_tokens, stop_at_eos=False)
            rates[implementation].append(_decode_rate(trace))
    lm.model.set_attn_implementation(ATTENTION_IMPLEMENTATION)
    plain, ours = (statistics.median(values[1:]) for values in rates.values())
    emit(
        f"\n## full decode, {new_tokens} new tokens, median of {repeats}: plain SDPA {plain:.1f} tokens/s, "
        f"ccviz_sdpa {ours:.1f} tokens/s, ratio {ours / plain:.3f}"
    )


def run(model_args: dict[str, Any], settings: AttentionSettings, emit: Callable[[str], None]) -> None:
    lm = load_model(**model_args)
    install_hooks(lm.model)
    repeats, n, h = settings.repeats, settings.new_tokens, settings.chunk
    full_path_overhead(lm, repeats, n, emit)
    refresh_and_capture(lm, settings, emit)
    decode_speed(
        lm,
        f"short chat prompt, J={settings.short_cache_size} (nothing evicted), {n} new tokens",
        PROMPT,
        repeats,
        emit,
        cache_size=settings.short_cache_size,
        chunk_size=h,
        max_new_tokens=n,
    )
    decode_speed(
        lm,
        f"{settings.document_tokens:,}-token document, J={settings.cache_size}, h={h}, {n} new tokens",
        long_document(lm.tokenizer, settings.document_tokens),
        repeats,
        emit,
        cache_size=settings.cache_size,
        chunk_size=h,
        max_new_tokens=n,
        chat=False,
    )
