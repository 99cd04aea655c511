"""What crosses the pipe between the server and its model worker, in one place.

The server sends a task (any picklable object with ``execute(lm, progress, should_stop, on_refresh)``;
the app's are in :mod:`.tasks`) on the jobs pipe; the worker answers with tuples whose first item is
one of the kinds below, and a task on the checks pipe (``task.check(lm)``) gets ``("ok", value)`` or
``("error", message)``.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal

READY = "ready"  # (READY, ModelInfo): the model is loaded
LOAD_FAILED = "load_failed"  # (LOAD_FAILED, message): the model could not be loaded; the worker exits
PROGRESS = "progress"  # (PROGRESS, refreshes, processed, total): after every forward pass
CONFIG = "config"  # (CONFIG, trace config): at a run's first refresh
REFRESH = "refresh"  # (REFRESH, new cycles, new token records, peak cache length): after every refresh
DONE = "done"  # (DONE, result): the task's result (a cancelled run's partial trace too)
FAILED = "failed"  # (FAILED, message, partial trace): the run broke part-way
ERROR = "error"  # (ERROR, message): the task was refused or failed before producing anything

State = Literal["loading", "ready", "restarting", "failed"]


@dataclass(frozen=True)
class ModelInfo:
    """What the server needs to know of the worker's model (it never holds the model itself);
    ``max_positions`` is None for a model the app names before the worker has loaded it."""

    name: str
    max_positions: int | None = None


@dataclass(frozen=True)
class WorkerStatus:
    """The worker's state and the one line every page shows about it."""

    state: State
    message: str
    model: ModelInfo | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"


def describe_exit(code: int | None) -> str:
    """A process exit code in words: ``killed by SIGKILL (out of memory, or killed by hand)``."""
    if code is None:
        return "it stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}" + (" (out of memory, or killed by hand)" if -code == signal.SIGKILL else "")
    return f"exit code {code}"
