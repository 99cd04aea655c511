"""The one timing helper of every benchmark task and probe, and where a measurement comes from.

A ratio to a baseline timed in the same process survives noisy, shared machines better than seconds
do, so every measure here is a median of repeated calls after a warm-up, and every report starts
with the date, the commit of the code measured, the machine and the torch threads. This module
needs nothing but the standard library and torch, so a measuring script copied into an older
checkout can bring it along.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent  # git is asked about the code being measured, wherever results go


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Median wall time of ``repeats`` calls of ``fn``, after ``warmup`` untimed calls (the first calls
    pay for allocation and kernel selection)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def git(*args: str) -> str:
    """What ``git ARGS`` prints in the ccviz source tree ("" outside a checkout or on any failure)."""
    try:
        out = subprocess.run(["git", *args], cwd=SOURCE_DIR, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def source_commit() -> str:
    """The short commit of the ccviz source being measured ("unknown" outside a git checkout)."""
    return git("rev-parse", "--short", "HEAD") or "unknown"


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header(title: str) -> str:
    """Two comment lines: ``title``, then the date, the commit of the ccviz source, the machine and torch."""
    import torch

    return (
        f"# {title}\n# {date.today().isoformat()}  commit {source_commit()}  {cpu_name()}, "
        f"{os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)"
    )
