"""Why one token was kept or evicted at one refresh: the decision replayed and opened up.

:func:`explain_token` replays a run (the same token ids in the same forward passes, so the same cache)
up to the refresh asked, and there, with every candidate still cached, asks the engine's own code:
the policy's ``score_candidates`` and the session's ``survivors`` for the decision, the counter-causal
policy's scoring under each score (logit, logprob, contrast) for the surprise, and
:func:`ccviz.scoring.counter_causal_weights` / :func:`ccviz.scoring.causal_weights_received` for the
attention behind it. Nothing here re-implements a score; a replay that does not reproduce the
trace's refresh is refused.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from .capture import decoder_layers
from .choices import SURPRISE_SCORES
from .engine import CacheSession, RunConfig
from .errors import CcvizError
from .models import LoadedModel
from .phrases import phrase_spans
from .policies import CounterCausalFast, Policy
from .scoring import causal_weights_received, counter_causal_weights
from .trace import Trace
from .units import first_protected_unit, pool_scores

SCORE_TOLERANCE = 1e-4  # relative: the replayed scores against the trace's (JSON keeps float64 of float32)
MAX_MATCHES = 200


@dataclass
class Explanation:
    """One token at one refresh. ``entries`` are the refresh's candidates (positions, frozen prefix
    excluded) and ``row`` the token's index among them; the attention lists are ``[heads][entries]``:
    ``counter_causal[h][j]`` what the token's reversed query puts on entry j (its future only),
    ``causal[h][j]`` what entry j's own causal query puts on the token (the token itself and the entries after it)."""

    refresh: int
    position: int
    text: str
    status: str  # "candidate", "frozen", "evicted" (before this refresh) or "unseen" (not yet processed)
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


def descending_rank(values: torch.Tensor, index: int) -> int:
    """1-based rank of ``values[index]``, highest first; among equal values the later entry ranks first,
    as every selection in ccviz breaks ties."""
    v = values[index]
    later = torch.arange(values.numel()) > index
    return 1 + int((values > v).sum()) + int(((values == v) & later).sum())


def _surprise_policy(policy: Policy) -> Policy:
    """The counter-causal scorer to explain with: the run's own policy if it is one, else the fast variant's defaults."""
    return policy if policy.counter_causal else CounterCausalFast()


def _reason(session: CacheSession, score: torch.Tensor, units: torch.Tensor | None, row: int, kept: bool) -> tuple[str, int | None]:
    """The rule that decided, in words, and the rank that went with it (None when no rank decided)."""
    config, policy = session.config, session.policy
    n, J, R = score.numel(), config.cache_size, min(config.recent, config.cache_size)
    verdict = "kept" if kept else "evicted"
    if not policy.evicts:
        return f"{policy.name} never evicts: every token stays.", None
    if n <= J:
        return f"The cache held {n} candidates, no more than J = {J}: this refresh evicted nothing.", None
    if units is None:
        if row >= n - R:
            return f"One of the last R = {R} entries, which every refresh keeps.", None
        head = n - R
        rank = descending_rank(score[:head], row)
        return (f"Ranked {rank} of the {head} older candidates by {policy.signal}; the best J − R = {J - R} are kept: "
                f"{verdict}."), rank
    unit, first = int(units[row]), first_protected_unit(units, J, R)
    what = config.granularity
    if unit >= first:
        return f"Its {what} is protected: the last R = {R} entries, extended to whole {what}s, and the last {what} are always kept.", None
    pooled = pool_scores(score, units, config.pool)[:first]
    rank = descending_rank(pooled, unit)
    return (f"Its {what} (unit {unit}, {config.pool} score {float(pooled[unit]):.4g}) ranked {rank} of the {first} older "
            f"{what}s; whole {what}s are kept best first while they fit in J: {verdict}."), rank


def _explain_here(session: CacheSession, cycle, refresh: int, t: int, text: str) -> Explanation:
    """The explanation at the refresh about to run: the session's cache holds every candidate."""
    cache, lm = session.cache, session.lm
    candidates = cache.pos[cache.frozen :].tolist()
    if candidates != cycle.candidates:
        raise CcvizError(f"replaying this trace does not reproduce refresh {refresh} (another model or other settings?)")
    row = candidates.index(t)
    policy = session.policy
    score = policy.score_candidates(lm.model, cache).to(torch.float32).cpu() if policy.evicts else torch.zeros(len(candidates))
    units = session.units()
    evicting = policy.evicts and len(candidates) > session.config.cache_size
    kept = not evicting or row in session.survivors(score, units=units).tolist()
    reason, rank = _reason(session, score, units, row, kept)
    if evicting and torch.isposinf(score[row]):
        reason += " Its score is +inf: no later entry is visible to it yet, so it cannot be judged and ranks first."
    recorded = cycle.scores.get(policy.signal) if policy.evicts else None
    same_scores = recorded is None or torch.allclose(score.double(), torch.tensor(recorded, dtype=torch.float64),
                                                     rtol=SCORE_TOLERANCE, atol=SCORE_TOLERANCE)
    scorer = _surprise_policy(policy)
    surprise = {name: dataclasses.replace(scorer, score=name, smooth=0).score_candidates(lm.model, cache).cpu()
                for name in SURPRISE_SCORES}
    kv, tok, pos, hidden = scorer.stream_inputs(lm.model, cache)
    settings = dict(variant=scorer.variant, min_gap=scorer.min_gap, window=scorer.window, from_layer=scorer.from_layer)
    reads = counter_causal_weights(lm.model, kv, tok, pos, hidden, row=row, **settings)
    last = len(decoder_layers(lm.model)) - 1
    f = cache.frozen
    received = causal_weights_received(lm.model, cache.kv.layers[last].keys[:, :, f:], pos, cache.residuals[last][f:], column=row)
    return Explanation(
        refresh=refresh, position=t, text=text, status="candidate", reason=reason, kept=kept, entries=candidates, row=row,
        signal=policy.signal if policy.evicts else None, score=float(score[row]) if policy.evicts else None, rank=rank,
        surprise={name: float(values[row]) for name, values in surprise.items()},
        surprise_rank={name: descending_rank(values, row) for name, values in surprise.items()},
        surprise_settings=settings, counter_causal=reads.cpu().tolist(), causal=received.cpu().tolist(),
        matches_trace=same_scores and kept == (t in cycle.kept),
    )


def _strict(value):
    """JSON-ready: infinite scores as the strings "inf" / "-inf", as traces write them."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strict(v) for v in value]
    return value


def explanation_json(explanation: Explanation) -> str:
    """The whole explanation as strict JSON (the attention lists included)."""
    return json.dumps(_strict(dataclasses.asdict(explanation)), allow_nan=False)


def _top(weights: list[list[float]], entries: list[int], trace: Trace, count: int = 5) -> str:
    mean = np.asarray(weights, dtype=np.float64).mean(0) if weights else np.zeros(0)
    order = [i for i in np.argsort(-mean, kind="stable")[:count] if mean[i] > 0]
    return ", ".join(f"t={entries[i]} {trace.tokens[entries[i]].text!r} {mean[i]:.3f}" for i in order) or "none"


def explanation_text(e: Explanation, trace: Trace) -> str:
    """A few lines for a terminal: the verdict, the reason, the numbers, the entries the attention goes to."""
    verdict = {"candidate": "kept" if e.kept else "evicted", "frozen": "frozen", "evicted": "evicted earlier", "unseen": "not processed yet"}[e.status]
    lines = [f"t={e.position} {e.text!r} at refresh {e.refresh}: {verdict}", f"  {e.reason}"]
    if e.status != "candidate":
        return "\n".join(lines)
    if e.signal is not None:
        lines.append(f"  policy score ({e.signal}): {e.score:.4g}" + (f", rank {e.rank}" if e.rank is not None else ""))
    settings = ", ".join(f"{k}={v}" for k, v in e.surprise_settings.items())
    lines.append(f"  counter-causal surprise ({settings}), rank among {len(e.entries)} candidates:")
    lines += [f"    {name:<9} {value:>10.4g}   rank {e.surprise_rank[name]}" for name, value in e.surprise.items()]
    lines.append(f"  reads most of its future (last layer, mean over heads): {_top(e.counter_causal, e.entries, trace)}")
    lines.append(f"  receives most causal attention from: {_top(e.causal, e.entries, trace)}")
    if not e.matches_trace:
        lines.append("  warning: the replay's scores or survivors differ from the trace's (another model or version?)")
    return "\n".join(lines)


class _Explained(Exception):
    """Carries the explanation out of the replay: nothing after the refresh asked is computed."""

    def __init__(self, explanation: Explanation):
        super().__init__("explained")
        self.explanation = explanation


def explain_token(lm: LoadedModel, trace: Trace, refresh: int, position: int) -> Explanation:
    """Why token ``position`` (its original timestep) was kept or evicted at refresh ``refresh`` of ``trace``.

    Replays the run on ``lm`` (the model that produced the trace) up to that refresh, as many forward
    passes as the run took to get there. A frozen token, one evicted before or one not yet processed
    gets its status and a reason without a replay (:func:`explain_without_replay`).
    """
    known = explain_without_replay(trace, refresh, position)
    if known is not None:
        return known
    cycle = trace.cycles[refresh]
    return replay_explanation(lm, RunConfig.from_trace(trace), [tok.id for tok in trace.tokens[: cycle.step]],
                              trace.prompt_length, cycle, refresh, position, trace.tokens[position].text)


def explain_without_replay(trace: Trace, refresh: int, position: int) -> Explanation | None:
    """The explanation when the trace alone gives it (the token was no candidate of that refresh), else None."""
    if not 0 <= refresh < len(trace.cycles):
        raise CcvizError(f"refresh must be 0 to {len(trace.cycles) - 1}, got {refresh}")
    cycle = trace.cycles[refresh]
    if not 0 <= position < len(trace.tokens):
        raise CcvizError(f"token must be 0 to {len(trace.tokens) - 1}, got {position}")
    text = trace.tokens[position].text
    frozen = int(trace.config.get("frozen") or 0)
    if position < frozen:
        return Explanation(refresh, position, text, "frozen", f"Part of the frozen prefix (the first {frozen} entries): never scored, never evicted.", kept=True)
    if position >= cycle.step:
        return Explanation(refresh, position, text, "unseen", f"Not processed yet at refresh {refresh} (after {cycle.step} tokens).")
    if position not in cycle.candidates:
        gone = next(c.index for c in trace.cycles[:refresh] if position in c.candidates and position not in c.kept)
        return Explanation(refresh, position, text, "evicted", f"Evicted earlier, at refresh {gone}: explain that refresh to see why.", kept=False)
    return None


def replay_explanation(lm: LoadedModel, config: RunConfig, ids: Sequence[int], prompt_length: int, cycle, refresh: int,
                       position: int, text: str) -> Explanation:
    """Feed ``ids`` (prompt, then generated tokens one per pass, as the run did) until refresh ``refresh`` starts."""
    if config.allocation != "uniform":
        raise CcvizError(f"explain replays the one keep decision all layers share, and this run's allocation "
                         f"{config.allocation!r} decides per layer: the retention figure's layer view shows what each layer kept")
    last = len(decoder_layers(lm.model)) - 1

    def inspect(session: CacheSession) -> None:
        if len(session.recorder.trace.cycles) == refresh:
            raise _Explained(_explain_here(session, cycle, refresh, position, text))

    session = CacheSession(lm, config, prompt_length=prompt_length, before_refresh=inspect, residual_layers=(last,))
    try:
        session.feed(ids[:prompt_length])
        for token in ids[prompt_length:]:
            session.feed([token], phase="decode")
    except _Explained as found:
        return found.explanation
    raise CcvizError(f"replaying this trace never reached refresh {refresh}")
