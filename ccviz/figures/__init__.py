"""Figures and HTML views built from a :class:`~ccviz.trace.Trace` alone: no Streamlit, no model.

The app, the Traces page (uploaded files) and the tests all use these same builders, so what a user
sees for a live run and for a reloaded trace is identical. The benchmark harness's figures live with it
(:mod:`ccviz_bench.figures`).
"""

from .compare import PhraseSurvival, jaccard_matrix, overlap_heatmap, phrase_survival, run_summary
from .data import eviction_cycles, latest_scores, per_token, recorded_values, signals, survived, visible_text
from .retention import (
    COLOURINGS,
    RetentionGrid,
    comparison_heatmaps,
    per_layer,
    retention_grid,
    retention_heatmap,
    retention_image_html,
)
from .sentences import Sentence, sentence_html, split_sentences
from .tokens import cycle_context_html, highlight_html, survival_html

__all__ = [
    "COLOURINGS",
    "PhraseSurvival",
    "RetentionGrid",
    "Sentence",
    "comparison_heatmaps",
    "cycle_context_html",
    "eviction_cycles",
    "highlight_html",
    "jaccard_matrix",
    "latest_scores",
    "overlap_heatmap",
    "per_layer",
    "per_token",
    "recorded_values",
    "phrase_survival",
    "retention_grid",
    "retention_heatmap",
    "retention_image_html",
    "run_summary",
    "sentence_html",
    "signals",
    "split_sentences",
    "survival_html",
    "survived",
    "visible_text",
]
