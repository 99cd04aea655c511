"""Policies kept outside ccviz: modules named in ``CCVIZ_PLUGINS`` are imported before anything runs.

Such a module registers its policies with :func:`ccviz.policies.register_policy`. The app imports it
in the server (so the menus list the policy) and in its model worker (so runs can use it); the CLI
imports it too. The module must be importable (on ``PYTHONPATH`` or installed).
"""

from __future__ import annotations

import importlib
import os

from .errors import CcvizError

PLUGINS_ENV = "CCVIZ_PLUGINS"


def plugin_modules() -> tuple[str, ...]:
    """The module names in ``$CCVIZ_PLUGINS`` (comma-separated), in order."""
    return tuple(name.strip() for name in os.environ.get(PLUGINS_ENV, "").split(",") if name.strip())


def load_plugins(modules: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Import every plugin module (default: ``$CCVIZ_PLUGINS``); a broken one is a one-line error."""
    modules = plugin_modules() if modules is None else modules
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # an ImportError or the module's own failure: say which module
            raise CcvizError(f"cannot load the plugin {name!r} from {PLUGINS_ENV}: {type(err).__name__}: {err}") from None
    return modules
