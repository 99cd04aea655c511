"""Metrics of the quality benchmarks: pure functions of texts, token lists and traces (no model).

Kept apart from the runners so each one can be checked on hand-built inputs. Whether an output
answers is the app's rule too (:func:`ccviz.phrases.answer_matches`, re-exported here).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ccviz.phrases import answer_matches as answer_matches  # the tasks' rule, shared with the app
from ccviz.trace import Trace

if TYPE_CHECKING:
    import pandas as pd


def wilson_interval(successes: int, trials: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """Wilson score interval (95% by default) for a binomial proportion; (0, 1) when there are no trials.

    Unlike the normal approximation it stays inside [0, 1] and is sensible at 0/n and n/n, which is
    where eviction benchmarks often are.
    """
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def binomial_rate(hits: pd.Series) -> tuple[int, int, float, float, float]:
    """Trials, successes, rate and its Wilson 95% interval of a column of 0/1 results (blank cells: not
    measured, left out); the rate is NaN when nothing was measured."""
    import pandas as pd

    values = pd.to_numeric(hits, errors="coerce").dropna().astype(int)
    n, k = len(values), int(values.sum())
    low, high = wilson_interval(k, n)
    return n, k, (k / n if n else float("nan")), low, high


def summarise_rates(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Survival and accuracy (with Wilson 95% intervals) and the mean share of answers found, per ``keys``."""
    import pandas as pd

    out = []
    for values, group in rows.groupby(keys, sort=False):
        n_s, k_s, survival, s_low, s_high = binomial_rate(group["survived"])
        n_a, k_a, accuracy, a_low, a_high = binomial_rate(group["answered"])
        out.append(
            {
                **dict(zip(keys, values)),
                "n": n_s,
                "survived": k_s,
                "survival": survival,
                "survival_low": s_low,
                "survival_high": s_high,
                "answered": k_a,
                "accuracy": accuracy,
                "accuracy_low": a_low,
                "accuracy_high": a_high,
                "answer_share": group["answer_share"].mean(),
                "kept_share": group["kept_share"].mean(),
                "cache_size_mean": group["cache_size"].mean(),
                "seconds_mean": group["seconds"].mean(),
            }
        )
    return pd.DataFrame(out)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact sign test (binomial, p = 1/2) on the discordant pairs of a paired comparison.

    Two variants run on the same cases mostly agree; only the cases where exactly one of them kept the
    fact carry evidence, which makes this far more sensitive than comparing two Wilson intervals.
    """
    wins, losses = int(wins), int(losses)  # numpy integers would overflow 2**n past n = 63
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def cache_before(trace: Trace, timestep: int, layer: int | None = None, head: int | None = None) -> set[int]:
    """Timesteps in the cache when token ``timestep`` is about to be processed (of a per-layer run:
    in layer ``layer``'s cache, KV head ``head`` of it; None: in any layer's).

    That is the last refresh at or before it (``step <= timestep``) plus everything processed since
    (nothing is evicted between refreshes); before the first refresh nothing has been evicted at all.
    """
    last = None
    for cycle in trace.cycles:
        if cycle.step > timestep:
            break
        last = cycle
    if last is None:
        return set(range(timestep))
    return set(last.kept_by(layer, head)) | set(range(last.step, timestep))


def kept_before(trace: Trace, timesteps: Sequence[int], question_start: int) -> int:
    """How many of ``timesteps`` (a fact's, a needle's tokens) are still cached when the first question
    token is read: all of them is what the survival tasks call survival."""
    if not timesteps:
        raise ValueError("the fact has no tokens")
    if max(timesteps) >= question_start:
        raise ValueError("the fact must come before the question")
    cached = cache_before(trace, question_start)
    return sum(t in cached for t in timesteps)


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int:
    """Index of the first token where two outputs differ (the common length if one is a prefix of the other)."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return min(len(reference), len(other))


def repeated_ngram_rate(tokens: Sequence[int], n: int = 4) -> float:
    """Share of the n-grams of ``tokens`` that already occurred earlier in it: a degeneration signal
    (looping text scores near 1, fluent text near 0). 0.0 when there are no n-grams."""
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams)
