"""Benchmarks: the quality tasks (``tasks/``), the engine probes (``probes/``) and their generated inputs
(``data/``), each task described once in :mod:`.registry`.

Run them with ``python -m ccviz bench TASK``; read their results with :func:`load_results`.
"""

from .results import load_results

__all__ = ["load_results"]
