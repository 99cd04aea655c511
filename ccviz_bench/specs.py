"""Policy specs: a policy name plus options in one string, e.g. ``counter_causal_fast:score=contrast,smooth=5``.

Benchmarks take policies as specs so that any policy in the registry, with any options, can be
measured without code changes; the spec's label is the key of its rows in the result files.

Besides the policy's own options a spec may set the engine's unit of decision, for any policy
(``tova:granularity=word,pool=mean``), the budget's allocation over layers and heads
(``snapkv:allocation=pyramid,pyramid_beta=5``), ``recent_share``: the recent window as a share of each
run's J (``recent_share=0.25`` is recent = J/4 at every budget), and ``protect_question``: the protocol of a
task that asks a question apart from its document. The plain label keeps the question out of eviction (the
field's protocol, as kvpress appends the question after compressing the context); ``protect_question=False``
streams it through the refreshes like the document (the paper's protocol). Only a task that asks a question
pins the protocol in a label's meaning (``meaning(asked=True)``): elsewhere the key changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ccviz.engine import RunConfig
from ccviz.engine.allocation import check_allocation
from ccviz.engine.config import run_unit
from ccviz.errors import CcvizError
from ccviz.fields import Rule, parse_value, rule_of
from ccviz.policies import POLICIES, Policy, make_policy, policy_class
from ccviz.policies.former import former_defaults

ENGINE_KEYS = (
    "granularity",
    "pool",
    "recent_share",
    "allocation",
    "pyramid_beta",
    "left_context",
    "sentence_share",
    "protect_question",
)  # spec keys that are run settings, not policy options
FULL = "full"  # the label of the full-cache reference, run beside the policies as their ceiling
QUESTION_KEY = "protect_question"  # the question's protocol: kept apart (True, the default) or evictable
EVICTABLE = f"{QUESTION_KEY}=False"  # how a label says its question was evictable: its last option
_ENGINE_RULES = {
    "granularity": rule_of(RunConfig, "granularity"),
    "pool": rule_of(RunConfig, "pool"),
    "recent_share": Rule("recent_share", "number", 0, 1),
    "allocation": rule_of(RunConfig, "allocation"),
    "pyramid_beta": rule_of(RunConfig, "pyramid_beta"),
    "left_context": rule_of(RunConfig, "left_context"),
    "sentence_share": rule_of(RunConfig, "sentence_share"),
    QUESTION_KEY: rule_of(RunConfig, QUESTION_KEY),
}

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
        return make_policy(self.name, **{k: v for k, v in self.options if k not in ENGINE_KEYS})

    @property
    def engine(self) -> dict[str, Any]:
        """The spec's run settings (granularity, pool, recent_share), as written."""
        return {k: v for k, v in self.options if k in ENGINE_KEYS}

    def run_settings(self, cache_size: int) -> dict[str, Any]:
        """Keywords of :func:`ccviz.generate` (and of RunConfig) for a run at J = ``cache_size``."""
        settings = self.engine
        share = settings.pop("recent_share", None)
        if share is not None:
            settings["recent"] = round(share * cache_size)
        return settings

    @property
    def title(self) -> str:
        """The spec in the app's plain words for a run (:meth:`ccviz.RunConfig.title`, without the budget): the
        policy's human name and what differs from its defaults, ``Counter-causal surprise (fast) · by word``."""
        engine = self.engine
        share = engine.pop("recent_share", None)
        options = tuple((k, v) for k, v in self.options if k not in ENGINE_KEYS)
        title = RunConfig(policy=self.name, cache_size=1, policy_options=options, **engine).title(budget=False)
        return title if share is None else f"{title} · recent = {share:.0%} of J"

    @property
    def protects_question(self) -> bool:
        """Whether a question asked apart from the document is kept out of eviction (the default)."""
        return bool(dict(self.options).get(QUESTION_KEY, True))

    def in_protocol(self, protect: bool) -> PolicySpec:
        """This spec under one question protocol: ``protect_question`` dropped (kept apart, the plain label)
        or set to False, after the other options (the label its rows take under the paper's protocol)."""
        options = tuple((k, v) for k, v in self.options if k != QUESTION_KEY)
        return PolicySpec(self.name, options if protect else (*options, (QUESTION_KEY, False)))

    def meaning(self, asked: bool = False) -> dict[str, Any]:
        """Every resolved policy option plus the run settings the spec sets, and the policy's own unit
        when it is not the token: what a result label stands for. ``asked``: in a task that asks a question
        apart from its document, also the question's protocol (for a policy that evicts)."""
        policy, engine = self.build(), self.engine
        unit, context = run_unit(
            policy, engine.get("granularity"), engine.get("allocation", "uniform"), engine.get("left_context")
        )
        resolved = {} if unit == "token" else {"granularity": unit, "pool": engine.get("pool", "max")}
        if context:
            resolved["left_context"] = context
        engine.pop(QUESTION_KEY, None)
        protocol = {QUESTION_KEY: self.protects_question} if asked and policy.evicts else {}
        return {**policy.options(), **engine, **resolved, **protocol}

    def means(self, recorded: dict[str, Any], asked: bool = False) -> bool:
        """Whether the spec still means what ``recorded`` (an earlier :meth:`meaning`) says. An option the
        policy gained since counts only when set away from its default, so a new option (``window``)
        leaves results measured before it valid; or, when that default has changed since
        (:mod:`ccviz.policies.former`), away from the value it had then. The question's protocol always counts:
        a meaning recorded without it was measured with the question evictable, before it was a setting."""
        policy = policy_class(self.name)
        defaults = {**policy().options(), **former_defaults(self.name)}
        now = {k: v for k, v in self.meaning(asked).items() if k in recorded or defaults.get(k, object()) != v}
        return now == recorded


def parse_spec(text: str) -> PolicySpec:
    """Parse ``name`` or ``name:key=value,key=value`` and check it against the registry now. A scorer's
    name is its reference, ``module:Class`` (``kvpress:SnapKVPress:window_size=32``)."""
    name, _, rest = text.strip().partition(":")
    head, _, tail = rest.partition(":")
    if head and "=" not in head and name not in POLICIES:
        name, rest = f"{name}:{head}", tail
    options = []
    for pair in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise CcvizError(f"policy spec {text!r}: options are written key=value, got {pair!r}")
        options.append((key.strip(), parse_value(raw.strip())))
    spec = PolicySpec(name, tuple(options))
    policy = spec.build()  # unknown names and bad options fail here, with the registry's one-line message
    for key, value in spec.engine.items():
        _ENGINE_RULES[key].check(value)
    check_allocation(spec.engine.get("allocation", "uniform"), policy)
    return spec.in_protocol(spec.protects_question)  # one label per run: the protocol last, the default unsaid


def split_protocol(label: str) -> tuple[str, bool]:
    """A result label without its question protocol, and whether that protocol kept the question apart
    (``("snapkv", False)`` for ``snapkv:protect_question=False``); any label, a spec's or not."""
    for separator in (":", ","):
        if label.endswith(separator + EVICTABLE):
            return label[: -len(EVICTABLE) - 1], False
    return label, True


def with_protocol(label: str, protect: bool) -> str:
    """The label of the same spec under one question protocol (:meth:`PolicySpec.in_protocol`, on its text)."""
    base, _ = split_protocol(label)
    return base if protect else base + ("," if ":" in base else ":") + EVICTABLE


# The paper ranks single tokens by the raw logit; ccviz's counter-causal defaults were chosen by answers
# (docs/policies.md#why-the-defaults-are-what-they-are), so every benchmark measures the paper's form of both
# variants next to them, one option away.
PAPER_FORMS = {name: PolicySpec(name, (("paper", True),)) for name in ("counter_causal", "counter_causal_fast")}


def evicting(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the policies that evict (everything but the full-cache reference)."""
    return frame[frame["policy"] != FULL] if "policy" in frame else frame.iloc[0:0]


def titled(label: str) -> str:
    """A result's label as a report names it: the plain title, then the spec that reproduces it; a label that is
    not a spec (``all``) as it is."""
    try:
        return f"{parse_spec(label).title} (`{label}`)"
    except CcvizError:
        return label


def registered_specs() -> list[PolicySpec]:
    """Every registered policy with its default options, and the paper's own form of each counter-causal
    variant next to ours: the default set of every benchmark."""
    specs = []
    for name in POLICIES:
        specs.append(PolicySpec(name))
        if name in PAPER_FORMS:
            specs.append(PAPER_FORMS[name])
    return specs


def labels_of(specs: list[PolicySpec]) -> set[str]:
    """The evicting policies' labels among ``specs``."""
    return {spec.label for spec in specs} - {FULL}


def registered_labels(measured: set[str], quick: bool) -> set[str]:
    """What a task measuring :func:`registered_specs` measures without ``--policy`` (a task's
    :attr:`.registry.BenchTask.default_labels`)."""
    return labels_of(registered_specs())


def in_policy_order(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows sorted by policy as the benchmarks list them (the full cache, then the registry's order with the
    paper's form next to ours, then any other spec as first measured; a spec under the paper's question
    protocol right after the same spec under the field's), so a table keeps one row order however its rows
    were appended over several runs."""
    if "policy" not in frame.columns or frame.empty:
        return frame
    known = ["full", *(spec.label for spec in registered_specs())]
    rank = {label: i for i, label in enumerate(dict.fromkeys(known))}
    bases = frame["policy"].map(lambda label: split_protocol(label)[0])
    first_seen = {label: len(rank) + i for i, label in enumerate(dict.fromkeys(bases))}
    protected = frame["policy"].map(lambda label: split_protocol(label)[1])
    order = 2 * bases.map(lambda label: rank.get(label, first_seen[label])) + ~protected
    return frame.iloc[order.argsort(kind="stable")]
