"""Policy specs: a policy name plus options in one string, e.g. ``counter_causal_fast:score=contrast,smooth=5``.

Benchmarks take policies as specs so that any policy in the registry, with any options, can be
measured without code changes; the spec's label is the key of its rows in the result files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CcvizError
from ..fields import parse_value
from ..policies import POLICIES, Policy, make_policy

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class PolicySpec:
    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def label(self) -> str:
        if not self.options:
            return self.name
        return self.name + ":" + ",".join(f"{key}={value}" for key, value in self.options)

    def build(self) -> Policy:
        return make_policy(self.name, **dict(self.options))


def parse_spec(text: str) -> PolicySpec:
    """Parse ``name`` or ``name:key=value,key=value`` and check it against the registry now."""
    name, _, rest = text.strip().partition(":")
    options = []
    for pair in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise CcvizError(f"policy spec {text!r}: options are written key=value, got {pair!r}")
        options.append((key.strip(), parse_value(raw.strip())))
    spec = PolicySpec(name, tuple(options))
    spec.build()  # unknown names and bad options fail here, with the registry's one-line message
    return spec


# The paper ranks by the raw logit; ccviz's full variant defaults to logprob, chosen by the benchmarks
# (docs/policies.md#why-the-defaults-are-what-they-are), so every benchmark measures the paper's form too.
PAPER_FORM = PolicySpec("counter_causal", (("score", "logit"),))


def registered_specs() -> list[PolicySpec]:
    """Every registered policy with its default options, and the paper's own form of counter-causal
    next to ours: the default set of every benchmark."""
    specs = []
    for name in POLICIES:
        specs.append(PolicySpec(name))
        if name == PAPER_FORM.name:
            specs.append(PAPER_FORM)
    return specs


def in_policy_order(frame: "pd.DataFrame") -> "pd.DataFrame":
    """Rows sorted by policy as the benchmarks list them (the full cache, then the registry's order with the
    paper's form next to ours, then any other spec as first measured), so a table keeps one row order
    however its rows were appended over several runs."""
    if "policy" not in frame.columns or frame.empty:
        return frame
    known = ["full", *(spec.label for spec in registered_specs())]
    rank = {label: i for i, label in enumerate(dict.fromkeys(known))}
    first_seen = {label: len(rank) + i for i, label in enumerate(dict.fromkeys(frame["policy"]))}
    order = frame["policy"].map(lambda label: rank.get(label, first_seen[label]))
    return frame.iloc[order.argsort(kind="stable")]
