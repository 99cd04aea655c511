"""What a caller can hook into a run, and the error a run that breaks part-way raises."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..trace import Trace

ProgressCallback = Callable[[int, int, int], None]
"""Called as ``progress(refreshes_done, tokens_processed, tokens_total)`` after every forward pass."""
RefreshCallback = Callable[[Trace], None]
"""Called as ``on_refresh(trace)`` after every refresh with the live trace: its config, every cycle so
far and the records of every token up to the newest cycle's step, i.e. a loadable partial trace (the app's
worker process streams it to the page as the run goes)."""
StopCheck = Callable[[], bool]
"""Polled between forward passes: True stops the run, which returns its partial trace as "cancelled"."""


@dataclass(frozen=True)
class Listeners:
    """Everything that watches one computation, handed along as one: the app's worker gives it to each task,
    which passes on what it uses (``**vars(listeners)`` as :func:`run_generation`'s keywords)."""

    progress: ProgressCallback | None = None
    should_stop: StopCheck | None = None
    on_refresh: RefreshCallback | None = None


class GenerationFailed(RuntimeError):
    """A run broke part-way; ``trace`` holds every token and cycle completed before the error (it loads)."""

    def __init__(self, message: str, trace: Trace):
        super().__init__(message)
        self.trace = trace
