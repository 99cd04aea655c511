"""Shared helpers for the benchmark scripts: medians of repeated timings and a machine label."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from datetime import date
from typing import Callable


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def header(title: str) -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "?"
    import torch

    return (
        f"# {title}\n# {date.today().isoformat()}  commit {commit or '?'}  {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
