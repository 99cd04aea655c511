"""Eviction policies. Adding one = one file with a :class:`Policy` subclass + one line in ``_CLASSES``."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..errors import CcvizError
from .base import Policy, select_survivors
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


__all__ = ["POLICIES", "Policy", "make_policy", "select_survivors"]
