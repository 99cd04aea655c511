"""Settings declared once: each field's label and bounds live in its dataclass metadata.

:class:`ccviz.RunConfig`, every policy's options and the benchmark settings declare their fields
with :func:`whole`, :func:`number`, :func:`flag` and :func:`choice`. The one declaration then
validates values (a one-line :class:`CcvizError` naming the field), and gives the CLI and the app's
widgets their bounds and menus, so no caller writes its own check.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import MISSING, dataclass
from typing import Any, Literal

from .errors import CcvizError

RULE = "ccviz.rule"  # the metadata key


@dataclass(frozen=True)
class Rule:
    """What a field accepts. ``optional``: None is allowed (a default resolved later, e.g. h = J/4);
    ``words``: strings accepted besides numbers (e.g. ``frozen="auto"``); ``each``: a tuple of such values."""

    label: str
    kind: Literal["whole", "number", "flag", "choice"]
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[Any, ...] = ()
    optional: bool = False
    words: tuple[str, ...] = ()
    odd: bool = False
    each: bool = False  # the value is a tuple, and the rule applies to each of its items

    def check(self, value: Any) -> Any:
        """Return ``value`` if the field accepts it; raise a one-line :class:`CcvizError` otherwise."""
        if self.each:
            if not isinstance(value, tuple) or not value:
                raise CcvizError(f"{self.label} must be a list of one or more values, got {value!r}")
            single = dataclasses.replace(self, each=False)
            return tuple(single.check(item) for item in value)
        if value is None and self.optional or value in self.words:
            return value
        if self.kind == "flag":
            if not isinstance(value, bool):
                raise CcvizError(f"{self.label} must be true or false, got {value!r}")
            return value
        if self.kind == "choice":
            if value not in self.choices:
                raise CcvizError(f"{self.label} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
            return value
        if self.kind == "whole" and not is_whole(value):
            also = "".join(f" or {word!r}" for word in self.words)
            raise CcvizError(f"{self.label} must be a whole number{also}, got {value!r}")
        if self.kind == "number" and not (is_number(value) and math.isfinite(value)):
            raise CcvizError(f"{self.label} must be a finite number, got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise CcvizError(f"{self.label} must be at least {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise CcvizError(f"{self.label} must be at most {self.maximum}, got {value}")
        if self.odd and value % 2 == 0:
            raise CcvizError(f"{self.label} must be odd, got {value}")
        return value


def is_whole(value: Any) -> bool:
    """A whole number, and not a bool (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or float, and not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _field(rule: Rule, default: Any) -> Any:
    if default is MISSING:
        return dataclasses.field(metadata={RULE: rule})
    return dataclasses.field(default=default, metadata={RULE: rule})


def whole(
    label: str,
    minimum: int | None = 0,
    *,
    default: Any = MISSING,
    maximum: int | None = None,
    optional: bool = False,
    words: tuple[str, ...] = (),
    odd: bool = False,
    each: bool = False,
) -> Any:
    """A whole-number field of at least ``minimum`` (``each``: a tuple of them)."""
    return _field(Rule(label, "whole", minimum, maximum, optional=optional, words=words, odd=odd, each=each), default)


def number(
    label: str,
    minimum: float | None = None,
    maximum: float | None = None,
    *,
    default: Any = MISSING,
    each: bool = False,
) -> Any:
    """A finite real-number field, whole numbers accepted too (``each``: a tuple of them)."""
    return _field(Rule(label, "number", minimum, maximum, each=each), default)


def flag(label: str, *, default: bool) -> Any:
    """A true/false field."""
    return _field(Rule(label, "flag"), default)


def choice(
    label: str, choices: tuple[Any, ...], *, default: Any = MISSING, optional: bool = False, each: bool = False
) -> Any:
    """A field taking one of ``choices`` (see :mod:`ccviz.choices`); ``optional``: None too (a default resolved
    later); ``each``: a tuple of them."""
    return _field(Rule(label, "choice", choices=tuple(choices), optional=optional, each=each), default)


def rule_of(cls: type, name: str) -> Rule | None:
    """The rule declared for field ``name`` of dataclass ``cls`` (None if it declares none)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get(RULE)
    raise KeyError(name)


class Validated:
    """Base of a dataclass whose field rules are checked whenever one is made (``dataclasses.replace`` too)."""

    def __post_init__(self) -> None:
        check_fields(self)


def check_fields(obj: Any) -> None:
    """Check every declared field of a dataclass instance, in declaration order."""
    for f in dataclasses.fields(obj):
        rule = f.metadata.get(RULE)
        if rule is not None:
            rule.check(getattr(obj, f.name))


def check_whole(label: str, value: Any, minimum: int = 0) -> int:
    """The whole-number check for a value that is not a dataclass field (an environment variable, a flag)."""
    return Rule(label, "whole", minimum).check(value)


def parse_value(raw: str) -> bool | int | float | str:
    """Command-line text to the value it spells: true/false, a whole number, a real number, or the text itself."""
    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw
