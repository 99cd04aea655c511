"""A task for tests: holds the model worker until stopped (or ``seconds`` pass), so other runs queue behind it.

The worker imports this module when it unpickles the task (as ``worker_probe``); it imports nothing of ccviz.
"""

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Hold:
    seconds: float = 60.0
    label = "holding the model"

    def execute(self, lm, listeners) -> str:
        listeners.progress(0, 1, 1)  # the server now knows the model is held
        end = time.monotonic() + self.seconds
        while not listeners.should_stop() and time.monotonic() < end:
            time.sleep(0.01)
        return "released"
