"""Eviction policies. Adding one = one file with a :class:`Policy` subclass + one line in ``_CLASSES``.

A policy kept outside ccviz joins with :func:`register_policy` from a module named in ``CCVIZ_PLUGINS``
(:mod:`ccviz.plugins`), so the app, its worker process and the CLI all list it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..errors import CcvizError
from .base import Policy
from .counter_causal import CounterCausal, CounterCausalFast
from .full import Full
from .h2o import H2O
from .importance_keyproxy import ImportanceKeyProxy
from .snapkv import SnapKV
from .sliding import Sliding
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
    CounterCausal,
    CounterCausalFast,
)
POLICIES: dict[str, type[Policy]] = {cls.name: cls for cls in _CLASSES}


def register_policy(cls: type[Policy]) -> type[Policy]:
    """Add a policy class to the registry (usable as a class decorator); its ``name`` must be new."""
    if not (isinstance(cls, type) and issubclass(cls, Policy)) or not isinstance(getattr(cls, "name", None), str):
        raise CcvizError(f"{cls!r} is not a Policy subclass with a name")
    if POLICIES.get(cls.name, cls) is not cls:
        raise CcvizError(f"a policy named {cls.name!r} is already registered")
    POLICIES[cls.name] = cls
    return cls


def make_policy(name: str, **options: Any) -> Policy:
    """Build a registered policy from its name and options, with a one-line error for bad input."""
    if name not in POLICIES:
        raise CcvizError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)} (see `python -m ccviz policies`)")
    cls = POLICIES[name]
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
