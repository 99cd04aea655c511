"""The one command that reproduces a benchmark result, rebuilt from what the harness recorded.

A figure is only reproducible if the command shown under it is the one that measured it: the
settings come from the metadata (as ``--quick`` and ``--set`` against the task's own defaults), the
policies from the rows, the model and thread count from the provenance, the folder from where the
files are. Run again, the same command also finishes a partial result (the harness resumes).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ccviz.models import DEFAULT_MODEL

from .registry import BenchTask, find_task, part_of
from .results import results_dir
from .specs import FULL


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value))  # tuples -> lists, as in the metadata files


def _cli_value(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def settings_flags(measured: dict[str, Any], settings_class: type, *, allow_set: bool = True) -> list[str]:
    """``--quick`` and ``--set`` flags that rebuild ``measured`` from the task's defaults (the fewest).

    Without ``allow_set`` (the ablation and the allocation task: they take no --set and pick their own
    budgets and answered cases) only ``--quick`` or nothing, whichever matches.
    """
    ignored = {"model", "threads"} | (set() if allow_set else {"budgets", "accuracy_cases", "frozen"})
    measured = {k: v for k, v in measured.items() if k not in ignored}
    choices = []
    for flags, base in (([], settings_class()), (["--quick"], settings_class.quick())):
        base = _plain(asdict(base))
        changed = {k: v for k, v in measured.items() if base.get(k) != v}
        sets = [f"--set {shlex.quote(f'{k}={_cli_value(v)}')}" for k, v in changed.items()]
        choices.append((len(changed), flags + sets if allow_set else flags))
    return min(choices, key=lambda choice: choice[0])[1]


def _policy_flags(entry: BenchTask, measured: set[str], complete: bool, quick: bool) -> list[str]:
    """``--policy`` flags unless the rows hold the task's default policies (or, while partial, a part of them)."""
    measured = measured - {FULL}
    default = entry.default_labels(measured, quick)
    complete = complete and not (quick and entry.quick_subset)  # quick measures a part of their default set
    if measured - default or (complete and measured and measured != default):
        return [f"--policy {shlex.quote(label)}" for label in sorted(measured)]
    return []


def run_flags(meta: dict[str, Any]) -> list[str]:
    """``--model`` and ``--threads`` as the metadata records them, where they are not the defaults."""
    flags = []
    model = meta.get("settings", {}).get("model")
    if model and model != DEFAULT_MODEL:
        flags.append(f"--model {shlex.quote(str(model))}")
    threads = meta.get("torch_threads", 1)
    if threads != 1:
        flags.append(f"--threads {threads}")
    return flags


def display_path(directory: Path) -> str:
    """A folder as a user types it: relative to the working directory (the repository, for the app) when inside it."""
    path, here = Path(directory).resolve(), Path.cwd().resolve()
    return str(path.relative_to(here)) if path.is_relative_to(here) else str(path)


def out_flag(directory: Path, quick: bool) -> list[str]:
    """``--out DIR`` unless ``directory`` is where the harness writes by default from here in a shell that
    sets no ``CCVIZ_BENCH_RESULTS`` (the page may be reading another folder through it)."""
    if Path(directory).resolve() == results_dir(quick, environ={}).resolve():
        return []
    return [f"--out {shlex.quote(display_path(directory))}"]


def reproduce_command(
    task: str, meta: dict[str, dict[str, Any]], policies: set[str], directory: Path, *, complete: bool
) -> str:
    """The command that measured ``task`` into ``directory`` (and finishes it if it is partial).

    ``meta``: the task's metadata per result file; ``policies``: the labels in its rows. ``--model``
    is the name the harness recorded (``tiny-random``, or a checkpoint folder's name).
    """
    part, first = next(((part_of(n), m) for n, m in meta.items() if part_of(n)), (None, {}))
    if part is None or not first.get("settings"):
        return plain_command(task, False, first, directory)
    entry = find_task(task)
    flags = settings_flags(first["settings"], part.settings, allow_set=entry.takes_set)
    quick = "--quick" in flags
    parts = ["python -m ccviz bench", task, *flags, *_policy_flags(entry, policies, complete, quick)]
    return " ".join(parts + run_flags(first) + out_flag(directory, quick))


def plain_command(task: str, quick: bool, meta: dict[str, Any], directory: Path) -> str:
    """``task`` (or ``all``) with default or quick settings, the model and threads of ``meta`` (another
    task's metadata from the same folder) and the folder: for what has not been measured yet."""
    parts = ["python -m ccviz bench", task, *["--quick"] * quick]
    return " ".join(parts + run_flags(meta) + out_flag(directory, quick))
