"""Why one token was kept or evicted at one refresh: the decision replayed and opened up.

- :mod:`.explanation`: the :class:`Explanation` record, and what the trace alone answers
  (:func:`explain_without_replay`, :func:`matching_tokens`);
- :mod:`.replay`: :func:`explain_token`, the run replayed with the session's public API up to the
  refresh, and the decision opened with the engine's own scoring;
- :mod:`.render`: the explanation as strict JSON or terminal text (figures: :mod:`ccviz.figures.explain`);
- :mod:`.answer`: what a generated token read most, and what was evicted beside it (``record_reads`` traces);
- :mod:`.full_cache`: what the full cache's answer read that a policy evicted.
"""

from .answer import AnswerSummary, EvictedSpan, ReadEntry, answer_summary, answer_text
from .explanation import MAX_MATCHES, Explanation, explain_without_replay, matching_tokens
from .full_cache import MissedRead, full_cache_reads, missed_reads
from .render import explanation_json, explanation_text
from .replay import SCORE_TOLERANCE, descending_rank, explain_token, replay_explanation

__all__ = [
    "AnswerSummary",
    "EvictedSpan",
    "MAX_MATCHES",
    "MissedRead",
    "ReadEntry",
    "SCORE_TOLERANCE",
    "Explanation",
    "answer_summary",
    "answer_text",
    "descending_rank",
    "explain_token",
    "explain_without_replay",
    "explanation_json",
    "explanation_text",
    "full_cache_reads",
    "matching_tokens",
    "missed_reads",
    "replay_explanation",
]
