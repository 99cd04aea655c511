"""The replay behind an explanation: the run fed again, with the session's public API, up to the refresh
asked, and the decision opened there with the engine's own code.

The same token ids in the same forward passes give the same cache. The session pauses before the
refresh (``feed(..., refresh=False)``), so every candidate is still cached: the policy's
``score_candidates`` and the session's ``survivors`` give the decision, the counter-causal policy's
scoring under each score (logit, logprob, contrast) the surprise, and
``counter_causal_weights`` / ``causal_weights_received`` of :mod:`ccviz.policies.counter_causal.surprise`
the attention behind it. Nothing here re-implements a score; a replay that does not reproduce the
trace's refresh is refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from ..capture import decoder_layers
from ..choices import SURPRISE_SCORES
from ..engine import CacheSession, RunConfig
from ..errors import CcvizError
from ..models import LoadedModel
from ..policies import CounterCausalFast, Policy
from ..policies.counter_causal import SurpriseScorer
from ..policies.counter_causal.surprise import causal_weights_received, counter_causal_weights
from ..trace import Cycle, Trace
from .explanation import Explanation, explain_without_replay
from .ranking import descending_rank, rank_candidate

SCORE_TOLERANCE = 1e-4  # relative: the replayed scores against the trace's (JSON keeps float64 of float32)


def _surprise_policy(policy: Policy) -> Policy:
    """The counter-causal scorer to explain with: the run's own policy if it is one (its ``paper`` flag off,
    keeping the options it set, so that every score can be asked of it), else the fast variant's defaults."""
    if not isinstance(policy, SurpriseScorer):
        return CounterCausalFast()
    return dataclasses.replace(policy, paper=False) if getattr(policy, "paper", False) else policy


def _reason(
    session: CacheSession, score: torch.Tensor, units: torch.Tensor | None, row: int, kept: bool
) -> tuple[str, int | None]:
    """The rule that decided, in words, and the rank that went with it (None when no rank decided)."""
    policy = session.policy
    if not policy.evicts:
        return f"{policy.name} never evicts: every token stays.", None
    ranking = rank_candidate(score, units, session.config, row)
    return ranking.reason(policy.signal, kept), ranking.rank


def _explain_here(session: CacheSession, cycle: Cycle, refresh: int, t: int, text: str) -> Explanation:
    """The explanation at the refresh pending in ``session``: its cache still holds every candidate."""
    lm, view = session.lm, session.candidates()
    rows = session.candidate_rows() - session.cache.frozen  # the candidates among the policy's view
    candidates = view.pos[rows].tolist()
    if candidates != cycle.candidates:
        raise CcvizError(
            f"replaying this trace does not reproduce refresh {refresh} (another model or other settings?)"
        )
    row = candidates.index(t)
    entry = int(rows[row])  # its row in the view, which the attention reads are over
    policy = session.policy
    if policy.evicts:
        score = session.ranked(policy.score_candidates(lm.model, view).to(torch.float32).cpu())
    else:
        score = torch.zeros(len(candidates))
    units = session.units(score)
    evicting = policy.evicts and len(candidates) > session.config.cache_size
    kept = not evicting or row in session.survivors(score, units=units).tolist()
    reason, rank = _reason(session, score, units, row, kept)
    if evicting and torch.isposinf(score[row]):
        reason += " Its score is +inf: no later entry is visible to it yet, so it cannot be judged and ranks first."
    recorded = cycle.scores.get(policy.signal) if policy.evicts else None
    same_scores = recorded is None or torch.allclose(
        score.double(), torch.tensor(recorded, dtype=torch.float64), rtol=SCORE_TOLERANCE, atol=SCORE_TOLERANCE
    )
    scorer = _surprise_policy(policy)
    surprise = {
        name: session.ranked(dataclasses.replace(scorer, score=name, smooth=0).score_candidates(lm.model, view).cpu())
        for name in SURPRISE_SCORES
    }
    kv, tok, pos, hidden = scorer.stream_inputs(lm.model, view)
    settings = dict(variant=scorer.variant, min_gap=scorer.min_gap, window=scorer.window, from_layer=scorer.from_layer)
    reads = counter_causal_weights(lm.model, kv, tok, pos, hidden, row=entry, **settings)
    last = len(decoder_layers(lm.model)) - 1
    received = causal_weights_received(lm.model, view.keys(last), pos, view.residuals[last], column=entry)
    return Explanation(
        refresh=refresh,
        position=t,
        text=text,
        status="candidate",
        reason=reason,
        kept=kept,
        entries=view.pos.tolist(),
        row=entry,
        signal=policy.signal if policy.evicts else None,
        score=float(score[row]) if policy.evicts else None,
        rank=rank,
        surprise={name: float(values[row]) for name, values in surprise.items()},
        surprise_rank={name: descending_rank(values, row) for name, values in surprise.items()},
        surprise_settings=settings,
        counter_causal=reads.cpu().tolist(),
        causal=received.cpu().tolist(),
        matches_trace=same_scores and kept == (t in cycle.kept),
    )


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
    return replay_explanation(
        lm,
        RunConfig.from_trace(trace),
        [tok.id for tok in trace.tokens[: cycle.step]],
        trace.prompt_length,
        cycle,
        refresh,
        position,
        trace.tokens[position].text,
        question_start=trace.question_start,
    )


def replay_explanation(
    lm: LoadedModel,
    config: RunConfig,
    ids: Sequence[int],
    prompt_length: int,
    cycle: Cycle,
    refresh: int,
    position: int,
    text: str,
    *,
    question_start: int | None = None,
) -> Explanation:
    """Feed ``ids`` (the run's first ``cycle.step`` tokens: the prompt, then generated tokens one per pass,
    as the run did; ``question_start``: where its question given apart starts), pause before refresh
    ``refresh`` and explain token ``position`` there."""
    if config.allocation != "uniform":
        raise CcvizError(
            f"explain replays the one keep decision all layers share, and this run's allocation "
            f"{config.allocation!r} decides per layer: the retention figure's layer view shows what "
            "each layer kept"
        )
    # The fast counter-causal scorer watches the replay: it stores H^(L-1), the rows the causal attention
    # each candidate receives is computed from.
    prompt = ids[:prompt_length]  # the prompt so far: a prefill refresh's replay stops before its end
    asked = question_start if question_start is not None and question_start < len(prompt) else None  # yet to come
    session = CacheSession(lm, config, prompt_ids=prompt, observers=[CounterCausalFast()], question_start=asked)
    session.feed(prompt, refresh=False)
    for token in ids[prompt_length:]:
        session.feed([token], phase="decode", refresh=False)
    if not session.refresh_pending or len(session.trace.cycles) != refresh:
        raise CcvizError(f"replaying this trace never reached refresh {refresh}")
    return _explain_here(session, cycle, refresh, position, text)
