"""An :class:`~ccviz.explain.Explanation` as strict JSON or as a few lines for a terminal (the figures are in
:mod:`ccviz.figures.explain`)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from ..trace import Trace
from .explanation import Explanation


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
    verdict = {
        "candidate": "kept" if e.kept else "evicted",
        "frozen": "frozen",
        "evicted": "evicted earlier",
        "unseen": "not processed yet",
    }[e.status]
    lines = [f"t={e.position} {e.text!r} at refresh {e.refresh}: {verdict}", f"  {e.reason}"]
    if e.status != "candidate":
        return "\n".join(lines)
    if e.signal is not None:
        lines.append(f"  policy score ({e.signal}): {e.score:.4g}" + (f", rank {e.rank}" if e.rank is not None else ""))
    settings = ", ".join(f"{k}={v}" for k, v in e.surprise_settings.items())
    lines.append(f"  counter-causal surprise ({settings}), rank among {len(e.entries)} candidates:")
    lines += [f"    {name:<9} {value:>10.4g}   rank {e.surprise_rank[name]}" for name, value in e.surprise.items()]
    lines.append(
        f"  reads most of its future (last layer, mean over heads): {_top(e.counter_causal, e.entries, trace)}"
    )
    lines.append(f"  receives most causal attention from: {_top(e.causal, e.entries, trace)}")
    if not e.matches_trace:
        lines.append("  warning: the replay's scores or survivors differ from the trace's (another model or version?)")
    return "\n".join(lines)
