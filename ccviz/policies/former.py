"""Options whose default has changed since results and traces were recorded with them: the value a record
that does not name the option ran at. A trace re-runs as it ran (:meth:`ccviz.engine.RunConfig.from_trace`), and
a benchmark result keeps its meaning (``ccviz_bench.specs.PolicySpec.means``)."""

from __future__ import annotations

from typing import Any

FORMER_DEFAULTS: dict[str, dict[str, Any]] = {
    "expected_attention": {"history": False},  # the newest ``window`` entries' queries
}


def former_defaults(policy: str) -> dict[str, Any]:
    """The former defaults of the registered ``policy`` (empty when none changed)."""
    return dict(FORMER_DEFAULTS.get(policy, {}))
