"""``module:qualified.name`` references: how a trace names a plugin policy's class and how the benchmark registry
names each task's functions, resolved in one place."""

from __future__ import annotations

import importlib
from typing import Any


def is_reference(text: str) -> bool:
    """Whether ``text`` has the form ``module:qualified.name`` (both parts present)."""
    module, colon, qualname = text.partition(":")
    return bool(colon and module and qualname)


def import_ref(reference: str) -> Any:
    """The object ``reference`` (``module:qualified.name``) names: the module imported, then each attribute of
    the dotted name looked up in turn. Whatever the import or a lookup raises propagates, for the caller to
    say which reference failed."""
    module, _, qualname = reference.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found
