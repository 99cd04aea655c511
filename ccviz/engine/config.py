"""RunConfig: every setting of one run, validated once and serialised once.

The same frozen object is what :func:`ccviz.generate` builds from its keywords, what the CLI builds
from its flags, what the app's jobs use as their result-cache key, and (resolved, every default made
concrete) what a trace records as its ``config``, so a saved trace can be re-run exactly:
``RunConfig.from_trace(trace)`` (``trace.run_config``). Field rules live in the field declarations
(:mod:`ccviz.fields`); the app's widgets read their bounds from there too. :meth:`RunConfig.describe`
is the exact spelling of a run (the CLI, the app's labels, the run tables); :meth:`RunConfig.title` the
same run in plain words for headings: the policy's human name and only what differs from its defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import InitVar, dataclass
from typing import Any, Protocol

from ..choices import ALLOCATIONS, GRANULARITIES, POOLS, RECORDS, Allocation, Granularity, Pool, Record
from ..errors import CcvizError
from ..fields import check_fields, choice, flag, number, whole
from ..policies import POLICIES, Policy, make_policy
from ..policies.former import former_defaults
from ..references import import_ref, is_reference
from .allocation import check_allocation

Options = tuple[tuple[str, Any], ...]
DECODING = ("chat", "do_sample", "max_new_tokens", "seed", "stop_at_eos", "temperature", "top_p")


def run_unit(
    policy: Policy, granularity: Granularity | None, allocation: Allocation, left_context: int | None
) -> tuple[Granularity, int]:
    """The unit a run keeps whole and its left context, from what the run says (None: not said) and the
    policy's own defaults. A per-layer allocation keeps single tokens, so there the policy's unit gives way
    to the token unless the run names one; a left context the run does not give applies to word units only."""
    unit, context = policy.unit_defaults()
    granularity = granularity or ("token" if allocation != "uniform" else unit)
    if left_context is None:
        left_context = context if granularity == "word" else 0
    return granularity, left_context


class Recorded(Protocol):
    """What :meth:`RunConfig.from_trace` reads of a trace: its ``config`` object."""

    @property
    def config(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class RunConfig:
    """One run: the policy and its options, the budget (J, h, frozen, recent), the unit of the keep
    decision (``granularity``, ``pool``: :mod:`ccviz.engine.units`), how the budget is split over layers and
    KV heads (``allocation``, ``pyramid_beta``: :mod:`ccviz.engine.allocation`) and decoding.

    ``chunk_size=None`` means h = J/4 (the paper's), ``frozen="auto"`` the chat template up to the
    user-turn header (0 in raw text), ``recent=None`` and ``granularity=None`` the policy's own defaults,
    ``prefill_step=None`` h tokens per prefill forward. ``pin`` and ``drop`` are phrases of the prompt
    whose tokens are never evicted (taking places of J) or evicted at their first refresh
    (:mod:`ccviz.engine.pins`); a list or a single string becomes a tuple. ``protect_question``: a question
    given apart from the document (``generate(..., question=...)``) is kept, never a candidate; False streams
    it through the refreshes like the document (the paper's protocol). ``policy_options`` may be
    given as a dict; it is stored as sorted (name, value) pairs, so equal settings are equal (and hash
    equal) however they were written.

    ``policy_class`` ("module:QualName") names the class to build when it is not the one registered
    as ``policy`` (a built policy that was never registered; :meth:`of` sets it): a trace of such a run
    re-runs wherever that class can be imported. ``check_policy=False`` takes the policy as recorded
    without building it (a trace's config whose policy is not installed here); a run builds it anyway.

    Parameters
    ----------
    policy : str
        A registered policy name (``ccviz.POLICIES``).
    cache_size : int
        J, the cache's budget in entries (the frozen prefix and a question kept apart take no place of it).
    chunk_size : int, optional
        h, tokens processed between refreshes (default J/4).

    The other fields are keywords with the defaults above; every one is validated when the config is built
    (a bad value raises :class:`ccviz.CcvizError` in one line).
    """

    policy: str
    cache_size: int = whole("cache size J", 1)
    policy_options: Options = ()
    chunk_size: int | None = whole("chunk size h", 1, default=None, optional=True)
    frozen: int | str = whole("frozen", 0, default="auto", words=("auto",))
    recent: int | None = whole("recent", 0, default=None, optional=True)
    max_new_tokens: int = whole("max new tokens", 1, default=128)
    chat: bool = flag("chat", default=True)
    do_sample: bool = flag("do_sample", default=False)
    temperature: float = number("temperature", default=1.0)
    top_p: float = number("top-p", default=1.0)
    seed: int | None = whole("seed", 0, default=None, optional=True, maximum=2**63 - 1)  # torch's generator range
    prefill_step: int | None = whole("prefill step", 1, default=None, optional=True)
    stop_at_eos: bool = flag("stop_at_eos", default=True)
    record: Record = choice("record", RECORDS, default="policy")
    record_reads: bool = flag("record_reads", default=False)  # what each generated token read (engine.reads)
    granularity: Granularity | None = choice(
        "granularity", GRANULARITIES, default=None, optional=True
    )  # the unit kept whole; None: the policy's
    pool: Pool = choice("pool", POOLS, default="max")  # a unit's score from its tokens' (word and sentence units)
    # word units only: each word takes along up to this many words before it in its clause (ccviz.engine.units);
    # None: the policy's own (policy.unit_defaults)
    left_context: int | None = whole("left context", 0, default=None, optional=True, maximum=64)
    # word units only: this share of the scored places goes to the best whole sentences first, the rest by word
    sentence_share: float = number("sentence share", 0, 1, default=0.0)
    allocation: Allocation = choice(
        "allocation", ALLOCATIONS, default="uniform"
    )  # the budget over layers and heads (ccviz.engine.allocation)
    pyramid_beta: float = number(
        "pyramid beta", 1, default=20.0
    )  # pyramid: the last layer keeps (J - R) / beta scored entries
    # what-if phrases of the prompt (ccviz.engine.pins): pinned ones are never evicted, within J; dropped ones are
    pin: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    # a question given apart from the document (and the template's turn suffix after it) is never evicted and
    # takes no place of J; False: it streams through the refreshes like any token (the paper's protocol)
    protect_question: bool = flag("protect_question", default=True)
    policy_class: str | None = None  # "module:QualName" of a policy class that is not the one registered as ``policy``
    check_policy: InitVar[bool] = True

    def __post_init__(self, check_policy: bool) -> None:
        if not isinstance(self.policy, str):
            raise CcvizError(f"policy must be a policy name, got {self.policy!r}")
        reference = self.policy_class
        if reference is not None and not (isinstance(reference, str) and is_reference(reference)):
            raise CcvizError(f"policy class must be written 'module:QualName', got {self.policy_class!r}")
        object.__setattr__(self, "policy_options", _options(self.policy_options))
        object.__setattr__(self, "pin", _phrases(self.pin, "pin"))
        object.__setattr__(self, "drop", _phrases(self.drop, "drop"))
        check_fields(self)
        if self.chunk_size is not None and self.chunk_size > self.cache_size:
            raise CcvizError(f"chunk size h ({self.chunk_size}) must not exceed the cache size J ({self.cache_size})")
        if set(self.pin) & set(self.drop):
            raise CcvizError(f"{sorted(set(self.pin) & set(self.drop))[0]!r} is both pinned and dropped")
        if self.recent is not None and self.recent > self.cache_size:
            raise CcvizError(f"recent ({self.recent}) must not exceed the cache size J ({self.cache_size})")
        if self.do_sample and not self.temperature > 0:
            raise CcvizError(f"temperature must be above 0 when sampling, got {self.temperature}")
        if self.do_sample and not 0 < self.top_p <= 1:
            raise CcvizError(f"top-p must be in (0, 1], got {self.top_p}")
        if check_policy:  # an unknown name or a bad option fails now, with the registry's message
            check_allocation(self.allocation, self.build_policy())

    @classmethod
    def of(cls, policy: str | Policy, **settings: Any) -> RunConfig:
        """A config from a policy name or a built policy (whose name, options and, when it is not the
        registered one, class are taken; it need not be registered, nor importable to run here)."""
        if isinstance(policy, Policy):
            if settings.pop("policy_options", None):
                raise CcvizError("give a built policy's options when building it, not as policy_options as well")
            kind = type(policy)
            ours = POLICIES.get(policy.name) is kind
            settings["policy_class"] = None if ours else f"{kind.__module__}:{kind.__qualname__}"
            config = cls(policy=policy.name, policy_options=_options(policy.options()), check_policy=ours, **settings)
            check_allocation(config.allocation, policy)
            return config
        return cls(policy=policy, policy_options=settings.pop("policy_options", None) or (), **settings)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.policy_options)

    def build_policy(self) -> Policy:
        """A fresh policy: per-run memory lives in the cache, so every run gets its own."""
        if self.policy_class is None:
            return make_policy(self.policy, **self.options)
        return make_policy(_import_policy(self.policy_class, self.policy), **self.options)

    def describe(self) -> str:
        """The run's policy in words, as every place names a run (the app's labels and headings, the CLI,
        the run tables): ``tova (window=8) by word (mean), pyramid``: the options, a unit other than
        the token, an allocation other than uniform, the pinned and dropped phrases."""
        options = ", ".join(f"{key}={value}" for key, value in self.policy_options)
        text = f"{self.policy} ({options})" if options else self.policy
        if self.granularity not in (None, "token"):
            text += f" by {self.granularity} ({self.pool})"
        if self.left_context:
            text += f" with {self.left_context} words of left context"
        if self.sentence_share:
            text += f", {self.sentence_share:.0%} to whole sentences first"
        text += f", {self.allocation}" if self.allocation != "uniform" else ""
        for verb, phrases in (("pinning", self.pin), ("dropping", self.drop)):
            text += f", {verb} {', '.join(map(repr, phrases))}" if phrases else ""
        return text if self.protect_question else text + ", question evictable"

    def title(self, budget: bool = True) -> str:
        """The run in plain words, for headings: the policy's human name (``Policy.title``) and only what
        differs from its defaults, then the budget: ``Counter-causal surprise (fast) · smooth = 3 · by clause ·
        pinning 'x' · J = 128``. Shown: options off their dataclass default (one that another shown option
        implies, as ``paper`` implies its score, is left out), the unit kept whole when it is more than a token
        (and single tokens when the policy's own unit is another), a pool or left context other than the
        policy's own, an allocation other than uniform, pins and drops, an evictable question; with ``budget``,
        J and any h or recent off its default. :meth:`describe` stays the exact spelling."""
        kind = self.policy_type()
        policy = _built(kind, self.options)
        parts = [kind.human_name() if kind else self.policy, *_option_words(kind, self.options)]
        parts += self._unit_words(policy)
        if self.allocation != "uniform":
            beta = "" if self.pyramid_beta == _DEFAULTS["pyramid_beta"] else f" (β = {self.pyramid_beta:g})"
            parts.append(f"{self.allocation} allocation" + (beta if self.allocation == "pyramid" else ""))
        parts += [f"pinning {p!r}" for p in self.pin] + [f"dropping {p!r}" for p in self.drop]
        parts += [] if self.protect_question else ["question evictable"]
        if budget:
            parts += [f"J = {self.cache_size}", *self._budget_words(policy)]
        return " · ".join(parts)

    def _unit_words(self, policy: Policy | None) -> list[str]:
        """The title's words for the unit kept whole (single tokens: only when the policy's own unit is another),
        a pool, left context or sentence share other than the policy's own."""
        own, own_context = run_unit(policy, None, self.allocation, None) if policy else (None, None)
        unit = self.granularity or own
        words = []
        if unit not in (None, "token"):  # whole units are shown even as the policy's own: they shape what it keeps
            words.append(f"by {unit}" + ("" if self.pool == _DEFAULTS["pool"] else f" ({self.pool})"))
        elif unit == "token" and own not in (None, "token"):
            words.append("by token")
        if self.left_context is not None and self.left_context != (own_context if unit == own else 0):
            words.append(f"{self.left_context} word{'' if self.left_context == 1 else 's'} of left context")
        return words + ([f"{self.sentence_share:.0%} to whole sentences first"] if self.sentence_share else [])

    def _budget_words(self, policy: Policy | None) -> list[str]:
        """h and recent, where they differ from their defaults (J/4, the policy's own recent window)."""
        words = []
        if self.chunk_size is not None and self.chunk_size != max(self.cache_size // 4, 1):
            words.append(f"h = {self.chunk_size}")
        if self.recent is not None and (policy is None or self.recent != policy.default_recent(self.cache_size)):
            words.append(f"recent = {self.recent}")
        return words

    def policy_type(self) -> type[Policy] | None:
        """The class of this run's policy when this installation has it (registered, or importable from
        ``policy_class``); None otherwise, as for a trace of a plugin that is not installed here."""
        if self.policy_class is None:
            return POLICIES.get(self.policy)
        try:
            return _import_policy(self.policy_class, self.policy)
        except CcvizError:
            return None

    def describe_budget(self) -> str:
        """The budget in words, next to :meth:`describe`: ``J=64 · h=16 · frozen=3 · recent=0`` (and
        pyramid's beta); a default not yet resolved shows as ``default``."""
        shown = [("J", self.cache_size), ("h", self.chunk_size), ("frozen", self.frozen), ("recent", self.recent)]
        if self.allocation == "pyramid":
            shown.append(("beta", f"{self.pyramid_beta:g}"))
        return " · ".join(f"{name}={'default' if value is None else value}" for name, value in shown)

    @property
    def decoding(self) -> Options:
        """The settings that decide the answer whatever is evicted (the prompt's form and the decoding), as
        sorted (name, value) pairs: what a full-cache run beside this one shares with it."""
        return tuple((name, getattr(self, name)) for name in DECODING)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes``, validated like a new one."""
        return dataclasses.replace(self, **changes)

    def resolved(
        self, policy: Policy | None = None, *, template_prefix: int = 0, prompt_tokens: int | None = None
    ) -> RunConfig:
        """The same run with every default made concrete: h, frozen, recent, the prefill step and every
        policy option. This is what a trace records; resolving it again changes nothing.

        ``template_prefix`` is what ``frozen="auto"`` freezes; ``prompt_tokens`` (when known) bounds
        the frozen prefix and the policy's attention sinks.
        """
        policy = policy or self.build_policy()
        h = self.chunk_size if self.chunk_size is not None else max(self.cache_size // 4, 1)
        frozen = self.frozen if isinstance(self.frozen, int) else template_prefix  # "auto" otherwise
        if prompt_tokens is not None and self.frozen != "auto" and frozen > prompt_tokens:
            raise CcvizError(f"frozen ({frozen}) is larger than the prompt ({prompt_tokens} tokens)")
        sinks = policy.sinks if prompt_tokens is None else min(policy.sinks, prompt_tokens)
        recent = policy.default_recent(self.cache_size) if self.recent is None else self.recent
        granularity, left_context = run_unit(policy, self.granularity, self.allocation, self.left_context)
        if (left_context or self.sentence_share) and granularity != "word":
            raise CcvizError(
                f"left context and sentence share shape word units: use granularity 'word', not {granularity!r}"
            )
        if self.allocation != "uniform" and granularity != "token":
            raise CcvizError(
                f"allocation {self.allocation!r} keeps single tokens per layer: use granularity 'token', "
                f"or allocation 'uniform' for {granularity} units"
            )
        check_allocation(self.allocation, policy)
        return dataclasses.replace(  # the policy is at hand: it is not built again (its class may not be importable)
            self,
            policy_options=_options(policy.options()),
            chunk_size=h,
            frozen=max(frozen, sinks),
            recent=recent,
            granularity=granularity,
            left_context=left_context,
            prefill_step=h if self.prefill_step is None else self.prefill_step,
            check_policy=False,
        )

    # ----- serialisation: the trace's config, JSON files, the app's widgets ----------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, ``policy_options`` as an object, ``pin`` and ``drop`` as lists;
        ``policy_class`` only when set."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["policy_options"] = self.options
        data["pin"], data["drop"] = list(self.pin), list(self.drop)  # as JSON gives them back
        if self.policy_class is None:
            del data["policy_class"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, check_policy: bool = True) -> RunConfig:
        """The inverse of :meth:`to_dict`; other keys (a trace config's ``model``, ``prompt_tokens``...) are
        ignored, and a missing field takes its default (traces written before it existed)."""
        if not isinstance(data, Mapping):
            raise CcvizError(f"a run config must be an object, got {type(data).__name__}")
        missing = [name for name in ("policy", "cache_size") if name not in data]
        if missing:
            raise CcvizError(f"a run config needs {' and '.join(missing)}")
        names = settings_names()
        return cls(**{key: value for key, value in data.items() if key in names}, check_policy=check_policy)

    @classmethod
    def from_trace(cls, trace: Recorded) -> RunConfig:
        """The resolved config a trace was produced with: running it on the same prompt reproduces the trace.

        Its policy is taken as recorded, not built: a trace of a policy this installation lacks still
        describes itself, and running it names the missing policy in one line. A trace records its
        config resolved, so one without a unit or a left context predates them: it kept single tokens
        (not today's policy's own unit); one without an option whose default has changed since ran at the
        former default (:mod:`ccviz.policies.former`)."""
        config = {**_BEFORE_UNITS, **trace.config}
        former = former_defaults(str(config.get("policy")))
        if former:
            config["policy_options"] = {**former, **(config.get("policy_options") or {})}
        return cls.from_dict(config, check_policy=False)


_BEFORE_UNITS = {"granularity": "token", "left_context": 0}  # what a trace from before they were recorded ran
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(RunConfig)}


def _built(kind: type[Policy] | None, options: Mapping[str, Any]) -> Policy | None:
    """The policy with ``options``, for its own unit and recent window; None when it cannot be built here."""
    try:
        return None if kind is None else make_policy(kind, **options)
    except CcvizError:
        return None


def _option_words(kind: type[Policy] | None, options: Mapping[str, Any]) -> list[str]:
    """``smooth = 3``, ``paper``, ``history off``: the options off their dataclass default, less those the others
    imply (``paper`` sets the score it fixes). Without the class, whose defaults are unknown here: every option."""
    fields = {f.name: f.default for f in dataclasses.fields(kind)} if kind is not None else {}
    changed = {k: v for k, v in options.items() if kind is None or fields.get(k, dataclasses.MISSING) != v}
    implied = {k for k, v in changed.items() if _option_of(kind, {n: w for n, w in changed.items() if n != k}, k) == v}
    shown = {k: v for k, v in changed.items() if k not in implied}
    if implied and any(_option_of(kind, shown, k) != v for k, v in changed.items()):
        shown = changed  # the options left do not rebuild the run's: name every changed one
    return [k if v is True else f"{k} off" if v is False else f"{k} = {v}" for k, v in shown.items()]


def _option_of(kind: type[Policy] | None, options: Mapping[str, Any], name: str) -> Any:
    """Option ``name`` of the policy built with ``options`` (a sentinel when it cannot be built)."""
    policy = _built(kind, options)
    return dataclasses.MISSING if policy is None else getattr(policy, name, dataclasses.MISSING)


def settings_names() -> tuple[str, ...]:
    """The settings of a run: :class:`RunConfig`'s fields, in declaration order (``generate``'s keywords)."""
    return tuple(f.name for f in dataclasses.fields(RunConfig))


def _import_policy(reference: str, name: str) -> type[Policy]:
    """The policy class a ``module:QualName`` reference names, or a one-line error."""
    try:
        found = import_ref(reference)
    except Exception as err:  # an ImportError, a missing attribute or the module's own failure
        why = f"{type(err).__name__}: {err}"
        raise CcvizError(f"cannot import the policy class {reference!r} of policy {name!r}: {why}") from None
    if not (isinstance(found, type) and issubclass(found, Policy)) or getattr(found, "name", None) != name:
        raise CcvizError(f"{reference!r} is not the Policy subclass named {name!r}")
    return found


def _phrases(raw: Any, name: str) -> tuple[str, ...]:
    """Pinned or dropped phrases as a tuple (hashable, as the frozen config must be), each a non-blank string."""
    phrases = (raw,) if isinstance(raw, str) else tuple(raw) if isinstance(raw, (list, tuple)) else None
    if phrases is None or not all(isinstance(p, str) and p.strip() for p in phrases):
        raise CcvizError(f"{name} takes phrases of the prompt (non-empty strings), got {raw!r}")
    return phrases


def _options(raw: Any) -> Options:
    """Policy options as sorted (name, value) pairs, from a dict or pairs."""
    if raw is None:
        return ()
    items = raw.items() if isinstance(raw, Mapping) else raw
    try:
        pairs = [(key, value) for key, value in items]
    except (TypeError, ValueError):
        raise CcvizError(f"policy_options must be a mapping of option names to values, got {raw!r}") from None
    if not all(isinstance(key, str) for key, _ in pairs):
        raise CcvizError(f"policy option names must be strings, got {[key for key, _ in pairs]!r}")
    if len({key for key, _ in pairs}) != len(pairs):
        raise CcvizError(f"policy_options names an option twice: {raw!r}")
    return tuple(sorted(pairs))
