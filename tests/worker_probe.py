"""A task for tests: the model worker answers which ``ccviz.ui`` modules its process has loaded.

It runs in the worker like any task (the worker imports this module when it unpickles the task), so
it sees the worker's own ``sys.modules``. It must itself import nothing of ``ccviz.ui``.
"""

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class LoadedUiModules:
    label = "which ccviz.ui modules the worker has loaded"

    def execute(self, lm, listeners) -> list[str]:
        return sorted(name for name in sys.modules if name == "ccviz.ui" or name.startswith("ccviz.ui."))
