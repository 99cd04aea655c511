"""Limits read from environment variables, so a lab can size them to its machine.

A badly set variable is reported as a one-line :class:`CcvizError` where the limit is used, never as
a crash at import.
"""

from __future__ import annotations

import os

from .fields import check_whole, parse_value


def env_int(name: str, default: int, minimum: int = 1) -> int:
    """The whole number in ``$name`` (``default`` if unset), at least ``minimum``."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    value = parse_value(raw)
    return check_whole(name, value, minimum)
