"""A queued run's place and estimated wait, from the measured speed of the runs that finished before it.

Runs take the model one at a time, so a run's wait is the rest of the run holding the model plus every
distinct run queued before it (identical runs are computed once: :mod:`ccviz.worker.flights`). Each is
estimated as its tokens (prompt + max new tokens, what the worker will process at most) times the median
seconds per token of recent runs: a median, so one run slowed by a busy machine does not swing every
estimate. A run whose size is unknown (not a generation) counts as the median run. A run that switches the
worker to another model first adds that model's last load time here. Plain Python, no Streamlit.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

RECENT_RUNS = 20  # how many finished runs the speed is the median of


@dataclass(frozen=True)
class Ahead:
    """One distinct run ahead in the queue: its size in tokens (None: unknown), the tokens it has done, and
    the seconds of the model load before it (a switch to its model; 0: none, or never measured)."""

    size: int | None
    processed: int = 0
    load: float = 0.0


class RunSpeeds:
    """The speed of the last :data:`RECENT_RUNS` finished runs of this server (thread-safe)."""

    def __init__(self, keep: int = RECENT_RUNS):
        self._runs: deque[tuple[int, float]] = deque(maxlen=keep)  # (tokens processed, seconds holding the model)
        self._lock = threading.Lock()

    def record(self, tokens: int, seconds: float) -> None:
        """One finished run: ``tokens`` processed in ``seconds`` of holding the model."""
        if tokens > 0 and seconds > 0:
            with self._lock:
                self._runs.append((tokens, seconds))

    def per_token(self) -> float | None:
        """Median seconds per token processed; None before any run finished."""
        with self._lock:
            runs = list(self._runs)
        return statistics.median(seconds / tokens for tokens, seconds in runs) if runs else None

    def per_run(self) -> float | None:
        """Median seconds of a whole run; None before any run finished."""
        with self._lock:
            runs = list(self._runs)
        return statistics.median(seconds for _, seconds in runs) if runs else None


def estimate_wait(ahead: Sequence[Ahead], speeds: RunSpeeds) -> float | None:
    """Seconds until the model is free for a run queued behind ``ahead`` (None: nothing measured yet)."""
    per_token, per_run = speeds.per_token(), speeds.per_run()
    if per_token is None or per_run is None:
        return None
    return sum(
        run.load + (per_run if run.size is None else per_token * max(run.size - run.processed, 0)) for run in ahead
    )


def wait_text(seconds: float) -> str:
    """``about 15 s``, ``about 3 min``: as precise as an estimate deserves."""
    if seconds < 10:
        return f"about {max(round(seconds), 1)} s"
    if seconds < 90:
        return f"about {5 * round(seconds / 5)} s"
    return f"about {round(seconds / 60)} min"


def queue_line(ahead: Sequence[Ahead], speeds: RunSpeeds) -> str:
    """What a queued run shows: ``2 runs ahead, about 15 s`` (the time once a run has been measured)."""
    runs = f"{len(ahead)} run{'' if len(ahead) == 1 else 's'} ahead"
    seconds = estimate_wait(ahead, speeds)
    return runs if seconds is None else f"{runs}, {wait_text(seconds)}"
