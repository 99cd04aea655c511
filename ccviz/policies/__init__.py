"""Eviction policies. Adding one = one file with a :class:`Policy` subclass + one line in ``_CLASSES``.

A policy kept outside ccviz joins with :func:`register_policy` from a module named in ``CCVIZ_PLUGINS``
or in the ``ccviz.policies`` entry-point group (:mod:`ccviz.plugins`), so the app, its worker process
and the CLI all list it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..errors import CcvizError
from .base import Policy
from .counter_causal import CounterCausal, CounterCausalFast
from .expected_attention import ExpectedAttention
from .full import Full
from .h2o import H2O
from .importance_keyproxy import ImportanceKeyProxy
from .keydiff import KeyDiff
from .kvzip import KVzip
from .presses import is_scorer_spec, press_policies, scorer_policy
from .sliding import Sliding
from .snapkv import SnapKV
from .streaming_llm import StreamingLLM
from .tova import Tova

_CLASSES: tuple[type[Policy], ...] = (
    Full,
    Sliding,
    StreamingLLM,
    Tova,
    H2O,
    SnapKV,
    ImportanceKeyProxy,
    KVzip,
    ExpectedAttention,
    KeyDiff,
    CounterCausal,
    CounterCausalFast,
)
POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in _CLASSES}


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Add a policy class to the registry (usable as a class decorator); its ``name`` must be new.

    Refused in one line: a class that is not itself a ``@dataclass`` (its own options would silently be
    ignored), one without a ``summary`` (the menus and ``ccviz policies`` show it), and an evicting one
    without a ``signal`` (the trace records its scores under that name).
    """
    if not (isinstance(cls, type) and issubclass(cls, Policy)) or not isinstance(getattr(cls, "name", None), str):
        raise CcvizError(f"{cls!r} is not a Policy subclass with a name")
    if "__dataclass_fields__" not in cls.__dict__:
        raise CcvizError(f"policy {cls.name!r} must be a @dataclass (its fields are its options): decorate the class")
    if not isinstance(getattr(cls, "summary", None), str) or not cls.summary.strip():
        raise CcvizError(f"policy {cls.name!r} needs a summary: one line saying what it keeps")
    if cls.evicts and not isinstance(cls.signal, str):
        raise CcvizError(f"policy {cls.name!r} evicts, so it needs a signal: the name its scores are recorded under")
    if POLICIES.get(cls.name, cls) is not cls:
        raise CcvizError(f"a policy named {cls.name!r} is already registered")
    POLICIES[cls.name] = cls
    return cls


def make_policy(name: str | type[Policy], **options: Any) -> Policy:
    """Build a registered policy from its name (or any policy from its class) and options, with a one-line
    error for bad input."""
    if isinstance(name, type):
        cls, name = name, name.name
    else:
        cls = policy_class(name)
    allowed = {f.name for f in fields(cls)}
    unknown = sorted(set(options) - allowed)
    if unknown:
        hint = f"its options are {', '.join(sorted(allowed))}" if allowed else "it takes no options"
        raise CcvizError(f"policy {name!r} has no option {unknown[0]!r}: {hint}")
    try:
        return cls(**options)
    except (TypeError, ValueError) as err:
        raise CcvizError(f"bad option for policy {name!r}: {err}") from None


__all__ = ["POLICIES", "Policy", "make_policy", "register_policy"]


def policy_class(name: str) -> type[Policy]:
    """The class of a registered policy or of a bridged scorer (``kvpress:SnapKVPress``); a one-line error otherwise."""
    if name in POLICIES:
        return POLICIES[name]
    if is_scorer_spec(name):
        return scorer_policy(name)
    raise CcvizError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)} (see `python -m ccviz policies`)")


def policy_names() -> list[str]:
    """Every policy a menu offers: ccviz's own, then the installed kvpress scorers that run here."""
    return [*POLICIES, *press_policies()]
