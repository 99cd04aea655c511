"""A verdict on a run: did it give the expected answer, and when it did not, did eviction take it?

One line heads a run that has an expected answer, in the app and in ``ccviz run --expect``:

    Answered: no. The full cache answers "…code is 4417…". "4417" was evicted at refresh 6 (prefill,
    after 384 tokens): its token '44' (t=412) ranked 141 of 160 by surprise, cut-off J = 128.

"Answered" is :func:`ccviz.phrases.answer_matches`, the benchmarks' rule: the answer's words appear, in
order, among the output's words, case ignored, and hyphens, commas and apostrophes inside a value dropped
("4,417" gives "4417"); other punctuation and spacing never count. The answer's tokens are found in the
document by its text, case ignored (:func:`ccviz.phrases.phrase_spans`). Where they went is read from the
trace alone (no model): the refresh that evicted them, and its rank and cut-off from the scores the trace
recorded, worded as Explain a token words them (:mod:`.ranking`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import torch

from ..phrases import answer_matches, phrase_spans
from ..trace import Trace
from .explanation import explain_without_replay
from .ranking import rank_candidate

QUOTE_REACH = 24  # characters of the full cache's output quoted on each side of its answer
Fate = Literal["kept", "evicted", "absent"]


@dataclass(frozen=True)
class Eviction:
    """The token of the expected answer whose eviction lost it (of the occurrence kept longest): timestep
    ``position``, evicted at refresh ``refresh`` (``phase``, after ``step`` tokens); ``why``: the rank and
    cut-off in words, or the rule that decided; ``explainable``: Explain a token can replay that refresh."""

    position: int
    text: str
    refresh: int
    phase: str
    step: int
    why: str
    explainable: bool


@dataclass(frozen=True)
class Verdict:
    """Whether a run gave ``expected``; the answer's ``fate`` in the document (kept to the end, evicted, or
    absent), the ``eviction`` that lost it, and, when the full cache ran beside it, whether the full cache
    answered and a short window of its output (``full_quote``)."""

    expected: str
    answered: bool
    fate: Fate
    eviction: Eviction | None = None
    full_answered: bool | None = None
    full_quote: str | None = None

    @property
    def text(self) -> str:
        """The verdict in one line (the app adds its link to Explain, the CLI its command)."""
        return f"{self.head} {self.detail}".strip()

    @property
    def head(self) -> str:
        """``Answered: yes.`` or ``Answered: no.``"""
        return f"Answered: {'yes' if self.answered else 'no'}."

    @property
    def detail(self) -> str:
        """The rest of the line: the full cache's answer, and where the answer went when the run did not give it."""
        return " ".join(part for part in (self._full(), self._where()) if part)

    def _full(self) -> str:
        """Whether the full cache answers, quoting it; nothing when it did not run beside this run."""
        if self.full_answered is None:
            return ""
        said = f'"{self.full_quote}"' if self.full_quote else "it generated nothing"
        if self.full_answered:
            return f"The full cache answers too ({said})." if self.answered else f"The full cache answers {said}."
        either = "" if self.answered else " answer either"
        return f"The full cache does not{either} ({said})."

    def _where(self) -> str:
        """Where the answer went, when the run did not give it."""
        answer = f'"{self.expected}"'
        if self.answered:
            return ""
        if self.fate == "absent":
            return f"{answer} is not in the document, so no cache could keep it."
        e = self.eviction
        if e is None:  # kept
            return f"{answer} was kept, yet the answer does not give it: see what the answer read."
        return f"{answer} was evicted at refresh {e.refresh} ({e.phase}, after {e.step} tokens): {e.why}."


def run_verdict(trace: Trace, expected: str | None, full: Trace | None = None) -> Verdict | None:
    """The verdict on ``trace`` for the ``expected`` answer (None when there is none, or it holds no word), with
    the full cache's run beside it when given (the same document and decoding)."""
    expected = expected_answer(expected)
    if expected is None:
        return None
    fate, eviction = _answer_fate(trace, expected)
    full_answered = None if full is None else answer_matches(full.output_text, expected)
    return Verdict(
        expected=expected,
        answered=answer_matches(trace.output_text, expected),
        fate=fate,
        eviction=eviction,
        full_answered=full_answered,
        full_quote=None if full is None else quote(full.output_text, expected),
    )


def expected_answer(text: str | None) -> str | None:
    """``text`` stripped, or None when it is blank or holds no word the rule could look for (``"?!"``)."""
    text = (text or "").strip()
    return text if answer_matches(text, text) else None


def _answer_fate(trace: Trace, expected: str) -> tuple[Fate, Eviction | None]:
    """Kept (some occurrence in the document never lost a token), evicted (with the eviction that lost the
    occurrence kept longest: its first token to go), or absent from the document."""
    end = trace.question_start if trace.question_start is not None else trace.prompt_length
    document = trace.tokens[:end]
    occurrences = [range(first, last + 1) for first, last in phrase_spans([tok.text for tok in document], expected)]
    if not occurrences:
        return "absent", None
    evicted_at = trace.eviction_refreshes()
    lost = [min((int(evicted_at[i]) for i in span if evicted_at[i] >= 0), default=-1) for span in occurrences]
    if min(lost) < 0:
        return "kept", None
    refresh = max(lost)
    occurrence = occurrences[lost.index(refresh)]
    position = document[next(i for i in occurrence if evicted_at[i] == refresh)].t
    return "evicted", _eviction(trace, refresh, position)


def _eviction(trace: Trace, refresh: int, position: int) -> Eviction:
    """Refresh ``refresh``'s eviction of token ``position``, with the rank and cut-off behind it."""
    cycle, uniform = trace.cycles[refresh], trace.run_config.allocation == "uniform"
    why = _why(trace, refresh, position)
    return Eviction(position, trace.tokens[position].text, refresh, cycle.phase, cycle.step, why, uniform)


def _why(trace: Trace, refresh: int, position: int) -> str:
    """Why refresh ``refresh`` evicted token ``position``: its rank by the policy's recorded score and the
    cut-off (Explain's rule, :func:`.ranking.rank_candidate`), or the rule the trace alone gives."""
    known = explain_without_replay(trace, refresh, position)  # a dropped phrase
    if known is not None:
        return known.reason[0].lower() + known.reason[1:].rstrip(".")
    run, cycle = trace.run_config, trace.cycles[refresh]
    if run.allocation != "uniform":
        return f"under {run.allocation} allocation each layer keeps its own entries, and no layer kept it"
    kind = run.policy_type()
    signal = None if kind is None else kind.signal
    scores = None if signal is None else cycle.scores.get(signal)
    if scores is None:
        return "this trace does not record how its policy ranked it"
    units = None if cycle.units is None else torch.tensor(cycle.units)
    ranking = rank_candidate(torch.tensor(scores), units, run, cycle.candidates.index(position))
    return f"its token {trace.tokens[position].text!r} (t={position}) {ranking.cut(signal)}"


def quote(output: str, expected: str, reach: int = QUOTE_REACH) -> str:
    """A short window of ``output`` (spacing collapsed): the whole words within ``reach`` characters of its first
    answer of ``expected`` (of its start when it gives none), with "…" where it was cut."""
    text = " ".join(output.split())
    end = _answer_end(text, expected)
    first, last = (0, 0) if end is None else (max(end - len(expected), 0), end)
    low, high = (first - reach, last + reach) if end is not None else (0, 2 * reach)
    words = [m.span() for m in re.finditer(r"\S+", text)]
    shown = [(a, b) for a, b in words if low <= a and b <= high or a < last and b > first] or [
        (0, min(high, len(text)))
    ]
    start, stop = shown[0][0], shown[-1][1]
    return ("…" if start > 0 else "") + text[start:stop] + ("…" if stop < len(text) else "")


def _answer_end(text: str, expected: str) -> int | None:
    """Where the first answer of ``expected`` in ``text`` ends: the end of the first word at which the text up
    to it gives the answer, by the one rule (:func:`ccviz.phrases.answer_matches`)."""
    return next((m.end() for m in re.finditer(r"\w+", text) if answer_matches(text[: m.end()], expected)), None)
