"""Policies kept outside ccviz, loaded before anything runs: modules named in ``CCVIZ_PLUGINS``, and the
entry points of installed distributions in the ``ccviz.policies`` group.

A ``CCVIZ_PLUGINS`` module registers its policies with :func:`ccviz.register_policy` when imported. An
entry point names a module that does the same, or a :class:`ccviz.Policy` subclass, which is registered
here (``[project.entry-points."ccviz.policies"]`` with ``my_policy = "my_package.policies:MyPolicy"``).
The app loads them in the server (so the menus list the policy) and in its model worker (so runs can use
it); the CLI loads them too. A module must be importable (on ``PYTHONPATH`` or installed).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from importlib.metadata import EntryPoint, entry_points

from .errors import CcvizError
from .policies import Policy, register_policy

PLUGINS_ENV = "CCVIZ_PLUGINS"
ENTRY_POINT_GROUP = "ccviz.policies"


def plugin_modules() -> tuple[str, ...]:
    """The module names in ``$CCVIZ_PLUGINS`` (comma-separated), in order."""
    return tuple(name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip())


def load_plugins(modules: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Import every plugin module (default: ``$CCVIZ_PLUGINS``), then load every ``ccviz.policies`` entry
    point; a broken one is a one-line error naming it. Returns the modules."""
    modules = plugin_modules() if modules is None else modules
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # an ImportError or the module's own failure: say which module
            raise CcvizError(
                f"cannot load the plugin {name!r} from {PLUGINS_ENV}: {type(err).__name__}: {err}"
            ) from None
    for entry in _entry_points(tuple(sys.path)):
        _load_entry_point(entry)
    return modules


@functools.lru_cache(maxsize=1)
def _entry_points(path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    """The group's entry points, found once per import path (a scan of every installed distribution takes
    tens of milliseconds, and the app loads plugins on every page run)."""
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _load_entry_point(entry: EntryPoint) -> None:
    where = f"the plugin entry point {entry.name!r} ({entry.value}) of the {ENTRY_POINT_GROUP!r} group"
    try:
        loaded = entry.load()
    except Exception as err:
        raise CcvizError(f"cannot load {where}: {type(err).__name__}: {err}") from None
    if isinstance(loaded, type) and issubclass(loaded, Policy):
        try:
            register_policy(loaded)
        except CcvizError as err:
            raise CcvizError(f"cannot register {where}: {err}") from None
    elif not isinstance(loaded, type(sys)):
        raise CcvizError(f"{where} must name a module or a Policy subclass, got {type(loaded).__name__}")
