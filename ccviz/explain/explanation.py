"""What an explanation is, and what the trace alone answers: the token's status at a refresh when it was
no candidate of it, and the tokens a phrase covers."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.pins import phrase_tokens
from ..errors import CcvizError
from ..phrases import phrase_spans
from ..trace import Trace

MAX_MATCHES = 200


@dataclass
class Explanation:
    """One token at one refresh. ``entries`` are the refresh's candidates (positions, frozen prefix
    excluded) and ``row`` the token's index among them; the attention lists are ``[heads][entries]``:
    ``counter_causal[h][j]`` what the token's reversed query puts on entry j (its future only),
    ``causal[h][j]`` what entry j's own causal query puts on the token (the token itself and the entries after it).
    A question kept apart is no candidate, but it is context the policy reads: its entries are among
    ``entries``."""

    refresh: int
    position: int
    text: str
    status: str  # "candidate", "frozen", "question" (kept apart), "evicted" (before this refresh) or "unseen"
    reason: str  # one or two sentences: why it was kept or evicted, or why there is nothing to explain
    kept: bool | None = None
    entries: list[int] = field(default_factory=list)
    row: int | None = None
    signal: str | None = None  # the policy's score, as recorded in the trace
    score: float | None = None
    rank: int | None = None  # 1 = best among the candidates (ties: the more recent ranks first)
    surprise: dict[str, float] = field(default_factory=dict)  # score name -> counter-causal surprise
    surprise_rank: dict[str, int] = field(default_factory=dict)
    surprise_settings: dict[str, object] = field(default_factory=dict)  # variant, min_gap, window, from_layer
    counter_causal: list[list[float]] = field(default_factory=list)
    causal: list[list[float]] = field(default_factory=list)
    matches_trace: bool = True  # the replayed scores and survivors equal the trace's
    evicted_at: int | None = None  # status "evicted": the refresh that evicted it


def matching_tokens(trace: Trace, query: str, step: int) -> list[int]:
    """Every token (timestep) of the first ``step`` that overlaps an occurrence of ``query`` in the text,
    case-insensitive (:func:`ccviz.phrases.phrase_spans`): a word split into several tokens ("amoxicillin")
    is found whole. At most ``MAX_MATCHES``."""
    found: dict[int, None] = {}
    for first, last in phrase_spans([tok.text for tok in trace.tokens[:step]], query):
        found.update(dict.fromkeys(range(first, last + 1)))
        if len(found) >= MAX_MATCHES:
            break
    return list(found)[:MAX_MATCHES]


def explain_without_replay(trace: Trace, refresh: int, position: int) -> Explanation | None:
    """The explanation when the trace alone gives it (the token was no candidate of that refresh), else None."""
    if not 0 <= refresh < len(trace.cycles):
        raise CcvizError(f"refresh must be 0 to {len(trace.cycles) - 1}, got {refresh}")
    cycle = trace.cycles[refresh]
    if not 0 <= position < len(trace.tokens):
        raise CcvizError(f"token must be 0 to {len(trace.tokens) - 1}, got {position}")
    text = trace.tokens[position].text
    frozen = int(trace.run_config.frozen)  # resolved: a trace records the number
    if position < frozen:
        return Explanation(
            refresh,
            position,
            text,
            "frozen",
            f"Part of the frozen prefix (the first {frozen} entries): never scored, never evicted.",
            kept=True,
        )
    if position >= cycle.step:
        return Explanation(
            refresh, position, text, "unseen", f"Not processed yet at refresh {refresh} (after {cycle.step} tokens)."
        )
    question = trace.kept_question
    if position in question:
        return Explanation(
            refresh,
            position,
            text,
            "question",
            "Part of the question (or the turn's end after it), which this run keeps apart: never a candidate, "
            "never evicted, no place of J.",
            kept=True,
        )
    run, prompt = trace.run_config, [tok.text for tok in trace.tokens[: trace.prompt_length]]
    end = question.start if question else None
    for phrase, kept in [*((p, True) for p in run.pin), *((p, False) for p in run.drop)]:
        if position < len(prompt) and phrase_tokens(prompt, phrase, frozen, end)[position]:  # the engine's own rule
            return Explanation(
                refresh,
                position,
                text,
                "candidate" if position in cycle.candidates else "evicted",
                f"Part of {phrase!r}, which this run "
                + (
                    "pins: never evicted (it takes one of the J places)."
                    if kept
                    else "drops: evicted at its first refresh."
                ),
                kept=kept and position in cycle.candidates,
            )
    if position not in cycle.candidates:
        gone = next(c.index for c in trace.cycles[:refresh] if position in c.candidates and position not in c.kept)
        return Explanation(
            refresh,
            position,
            text,
            "evicted",
            f"Evicted earlier, at refresh {gone}: explain that refresh to see why.",
            kept=False,
            evicted_at=gone,
        )
    return None
