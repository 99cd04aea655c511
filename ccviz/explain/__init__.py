"""Why one token was kept or evicted at one refresh: the decision replayed and opened up.

- :mod:`.explanation`: the :class:`Explanation` record, and what the trace alone answers
  (:func:`explain_without_replay`, :func:`matching_tokens`);
- :mod:`.replay`: :func:`explain_token`, the run replayed with the session's public API up to the
  refresh, and the decision opened with the engine's own scoring;
- :mod:`.ranking`: how a refresh ranked one candidate, and those numbers in words (Explain and the verdict);
- :mod:`.render`: the explanation as strict JSON or terminal text (figures: :mod:`ccviz.figures.explain`);
- :mod:`.answer`: what a generated token read most, and what was evicted beside it (``record_reads`` traces);
- :mod:`.full_cache`: what the full cache's answer read that a policy evicted;
- :mod:`.verdict`: whether a run gave the expected answer and, if not, whether eviction took it.
"""

from .answer import AnswerSummary, EvictedSpan, ReadEntry, answer_summary, answer_text
from .explanation import MAX_MATCHES, Explanation, explain_without_replay, matching_tokens
from .full_cache import MissedRead, full_cache_reads, missed_reads
from .ranking import Ranking, descending_rank, rank_candidate
from .render import explanation_json, explanation_text
from .replay import SCORE_TOLERANCE, explain_token, replay_explanation
from .verdict import Eviction, Verdict, expected_answer, run_verdict

__all__ = [
    "AnswerSummary",
    "EvictedSpan",
    "Eviction",
    "MAX_MATCHES",
    "MissedRead",
    "Ranking",
    "ReadEntry",
    "SCORE_TOLERANCE",
    "Explanation",
    "Verdict",
    "answer_summary",
    "answer_text",
    "descending_rank",
    "explain_token",
    "expected_answer",
    "explain_without_replay",
    "explanation_json",
    "explanation_text",
    "full_cache_reads",
    "matching_tokens",
    "missed_reads",
    "rank_candidate",
    "replay_explanation",
    "run_verdict",
]
