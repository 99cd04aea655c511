"""The model worker: one process that holds the model and runs tasks one at a time for the app.

Why a process: the engine issues thousands of small torch calls per second, each of which needs the
GIL back, so any Python work in the Streamlit server (script reruns, polling fragments, its
``gc.collect`` after every run, figure building) stalls a run held in one of its threads. A separate
process shares no GIL with the server. :mod:`.process` is the worker's side, :mod:`.client` the
server's; :mod:`.protocol` is what crosses between them, and :mod:`.tasks` the work the app sends
(a run, whole-document signals, an explanation). Nothing here imports the app (:mod:`ccviz.ui`).
"""

from .client import ModelWorker, WorkerDied
from .protocol import ModelInfo, WorkerStatus

__all__ = ["ModelInfo", "ModelWorker", "WorkerDied", "WorkerStatus"]
