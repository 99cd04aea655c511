"""What the option widgets of a policy should be, read from its dataclass fields.

The app lists whatever the registry holds, so it never hard-codes a policy's options: a field's type
and default decide the widget (bool: checkbox, int/float: number, Literal: select, str: text), and
its declared rule (:mod:`ccviz.fields`) the number's bounds and the menu's choices. Plain Python,
tested without Streamlit.
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, fields
from typing import Any

from ..fields import RULE
from ..policies import policy_class


@dataclass(frozen=True)
class OptionSpec:
    name: str
    kind: str  # "bool" | "int" | "float" | "choice" | "text"
    default: Any
    choices: tuple[Any, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


def _kind(annotation: Any, default: Any) -> tuple[str, tuple[Any, ...]]:
    if typing.get_origin(annotation) is typing.Literal:
        return "choice", typing.get_args(annotation)
    if annotation is bool or isinstance(default, bool):
        return "bool", ()
    if annotation is int or isinstance(default, int):
        return "int", ()
    if annotation is float or isinstance(default, float):
        return "float", ()
    return "text", ()


def option_specs(policy: str) -> list[OptionSpec]:
    """One spec per dataclass field of the registered policy, in declaration order."""
    cls = policy_class(policy)
    hints = typing.get_type_hints(cls)
    specs = []
    for f in fields(cls):
        default = (
            f.default
            if f.default is not MISSING
            else (f.default_factory() if f.default_factory is not MISSING else None)
        )
        kind, choices = _kind(hints.get(f.name), default)
        rule = f.metadata.get(RULE)
        if rule is not None and rule.choices:
            kind, choices = "choice", rule.choices
        bounds = (rule.minimum, rule.maximum) if rule is not None else (None, None)
        specs.append(
            OptionSpec(name=f.name, kind=kind, default=default, choices=choices, minimum=bounds[0], maximum=bounds[1])
        )
    return specs
