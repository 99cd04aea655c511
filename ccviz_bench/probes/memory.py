"""Probe ``memory``: peak memory of a run is bounded by the cache budget, not by the generated length.

Each case runs in a fresh process: load the model, note peak RSS, generate N new tokens, note peak
RSS again; the difference is what the run itself needed. Under eviction it should not grow with N
(ratio ~1.0 between N = 800 and N = 200); under ``full`` it does.

Run: ``python -m ccviz bench memory``
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ccviz.engine import generate
from ccviz.fields import Validated, whole
from ccviz.models import load_model
from ccviz.policies import make_policy

from ..processes import fresh_processes

PROMPT = "Write a very long story about a ship."


@dataclass(frozen=True)
class MemorySettings(Validated):
    short_tokens: int = whole("short new tokens", 1, default=200)
    long_tokens: int = whole("long new tokens", 1, default=800)
    cache_size: int = whole("cache size J", 1, default=128)
    chunk_size: int = whole("chunk size h", 1, default=32)
    policies: tuple[str, ...] = ("sliding", "counter_causal_fast", "full")

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in self.policies:
            make_policy(str(name))  # an unknown name fails now, with the registry's message

    @classmethod
    def quick(cls) -> MemorySettings:
        return cls(short_tokens=4, long_tokens=16, cache_size=8, chunk_size=2, policies=("sliding", "full"))


def title(settings: MemorySettings) -> str:
    return f"peak RSS growth of one run (MB above the loaded model), J={settings.cache_size}, h={settings.chunk_size}"


def peak_growth_mb(
    model_args: dict[str, Any], threads: int, settings: MemorySettings, policy: str, new_tokens: int
) -> float:
    """One case, in a fresh process: how far the peak RSS rose during one run of ``new_tokens``."""
    torch.set_num_threads(threads)
    lm = load_model(**model_args)
    generate(lm, "Hello", policy="sliding", cache_size=8, max_new_tokens=2)  # warm-up: allocator, kernels
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    generate(
        lm,
        PROMPT,
        policy=policy,
        cache_size=settings.cache_size,
        chunk_size=settings.chunk_size,
        max_new_tokens=new_tokens,
        stop_at_eos=False,
    )
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return (after - before) / 1024


def run(model_args: dict[str, Any], settings: MemorySettings, emit: Callable[[str], None]) -> None:
    short_n, long_n = settings.short_tokens, settings.long_tokens
    emit(f"{'policy':<22} {'N=' + str(short_n):>8} {'N=' + str(long_n):>8} {'ratio':>7}")
    threads = torch.get_num_threads()
    with fresh_processes(__name__) as pool:
        for policy in settings.policies:
            short, long = (
                pool.submit(peak_growth_mb, model_args, threads, settings, policy, n).result()
                for n in (short_n, long_n)
            )
            emit(f"{policy:<22} {short:>8.1f} {long:>8.1f} {long / max(short, 1e-9):>7.2f}")
