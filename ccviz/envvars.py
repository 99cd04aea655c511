"""Limits read from environment variables, so a lab can size them to its machine.

A badly set variable is reported as a one-line :class:`CcvizError` where the limit is used, never as
a crash at import.
"""

from __future__ import annotations

import os

from .errors import CcvizError


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """The whole number in ``$name`` (``default`` if unset), at least ``minimum``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise CcvizError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise CcvizError(f"{name} must be at least {minimum}, got {value}")
    return value
