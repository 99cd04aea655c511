"""Benchmarks: rare-fact retention, long-text perplexity, decode-heavy generation, efficiency, ablation.

Run them with ``python -m ccviz bench TASK``; read their results with :func:`load_results`.
"""

from .results import load_results

__all__ = ["load_results"]
