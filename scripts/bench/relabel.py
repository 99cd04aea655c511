"""After a policy's defaults change: relabel every result row so that each label means what was measured.

A result file's ``.json`` pins what each policy label meant when its rows were measured (its resolved
options, :meth:`ccviz_bench.specs.PolicySpec.meaning`), and the harness refuses to add rows to a label
whose meaning has changed since. When a default changes (``counter_causal_fast`` by clause, say), the
rows measured under the old default are still right, only their label is not. This script gives each
such label the shortest spec that means today what was measured then: the paper's form
(``counter_causal_fast:paper=True``), the bare name when the old spec is the new default, else the
name with every option that differs from today's defaults written out. Then it pins the new meanings
and writes every summary again from the relabelled rows. Nothing is measured and no row is dropped.

The question's protocol is such a default: rows of a task that asks a question apart from its document
(a survival task's, :mod:`ccviz_bench.tasks.survival`, or ``question_kept.py``'s) whose meaning does not say
it were measured with the question evictable, before ``protect_question`` existed, so they take
``protect_question=False`` after their label (``sliding:protect_question=False``); the full cache, which
never evicts, keeps its label.

Run: ``python scripts/bench/relabel.py [FOLDER]`` (default: the published ``bench/results`` and the
folders in it); ``--dry-run`` prints the renames only. Then ``python -m ccviz bench report``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's ccviz

from ccviz.engine import RunConfig  # noqa: E402
from ccviz.policies import POLICIES  # noqa: E402
from ccviz.policies.former import former_defaults  # noqa: E402
from ccviz_bench.registry import all_tasks  # noqa: E402
from ccviz_bench.results import write_summary  # noqa: E402
from ccviz_bench.specs import ENGINE_KEYS, PAPER_FORMS, QUESTION_KEY, PolicySpec, parse_spec  # noqa: E402

# A run setting a pinned meaning leaves out has the value it had when every meaning was first pinned.
UNSAID = {
    "granularity": "token",
    "left_context": 0,
    "sentence_share": 0.0,
    "allocation": "uniform",
    "recent_share": None,
    "pyramid_beta": RunConfig.__dataclass_fields__["pyramid_beta"].default,
    QUESTION_KEY: False,  # the question streamed through the refreshes (pinned only where a question is asked)
}
# Columns of rows whose runs asked a question apart: a survival task's, and scripts/bench/question_kept.py's.
QUESTION_COLUMNS = {"question_start", "question_tokens"}


def filled(name: str, meaning: dict[str, Any]) -> dict[str, Any]:
    """``meaning`` with every unsaid option at its value (policy options at their field default, as an
    option added later was before it existed, or at its former default when that has changed since)."""
    policy = POLICIES[name]
    return {**UNSAID, **{f.name: f.default for f in fields(policy)}, **former_defaults(policy.name), **meaning}


def normal(name: str, meaning: dict[str, Any], asked: bool) -> dict[str, Any]:
    """:func:`filled` less what does not change the run: two meanings are the same run exactly when these
    are equal. ``paper`` is left out: it only stands for the options it sets, which are in the meaning; the
    question's protocol too where no question was ``asked``."""
    full = filled(name, meaning)
    full.pop("paper", None)
    if not asked:
        full.pop(QUESTION_KEY)
    if full["granularity"] == "token":
        full.pop("pool", None)
    if full["granularity"] != "word":  # they shape word units only
        full.pop("left_context"), full.pop("sentence_share")
    return full


def shortest_label(label: str, meaning: dict[str, Any], own: list[PolicySpec], asked: bool) -> str:
    """The label of ``label``'s policy that means ``meaning`` today: one of the task's ``own`` specs (so a run
    of the task finds its rows), else the bare name, the paper's form or ``label`` itself, each under the
    question protocol measured, else the name with what differs written out."""
    name = label.partition(":")[0]
    target = normal(name, meaning, asked)
    bases = [spec for spec in own if spec.name == name] + [PolicySpec(name)]
    if name in PAPER_FORMS:
        bases.append(PAPER_FORMS[name])
    bases.append(parse_spec(label))
    tries = bases + [spec.in_protocol(target.get(QUESTION_KEY, True)) for spec in bases]
    default = filled(name, PolicySpec(name).meaning(asked))
    order = [f.name for f in fields(POLICIES[name])] + list(ENGINE_KEYS)
    tries.append(PolicySpec(name, tuple((k, target[k]) for k in order if k in target and target[k] != default.get(k))))
    for spec in tries:
        if normal(name, spec.meaning(asked), asked) == target:
            return spec.label
    raise SystemExit(f"no spec of {name} means {meaning}: relabel by hand")


def own_specs(stem: str, measured: set[str]) -> list[PolicySpec]:
    """The specs the task writing ``<stem>.csv`` measures when not told which: the labels the Benchmarks
    page expects its rows under."""
    entry = next((t for t in all_tasks() if stem in t.files), None)
    if entry is None:
        return []
    return [parse_spec(label) for label in sorted(entry.default_labels(measured, False)) if label != "full"]


def means_now(label: str, meaning: dict[str, Any], asked: bool) -> bool:
    """Whether ``label`` means today the run that ``meaning`` (pinned when its rows were measured) says."""
    name = label.partition(":")[0]
    return normal(name, parse_spec(label).meaning(asked), asked) == normal(name, meaning, asked)


def asks_question(rows_path: Path) -> bool:
    """Whether the rows of ``rows_path`` come from runs that asked a question apart from their document."""
    if not rows_path.exists():
        return False
    with rows_path.open(encoding="utf-8") as handle:
        return bool(QUESTION_COLUMNS & set(handle.readline().strip().split(",")))


def relabel_folder(folder: Path, dry_run: bool) -> None:
    for meta_path in sorted(folder.glob("*.json")):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        pinned = meta.get("policies")
        if not isinstance(pinned, dict):
            continue
        own = own_specs(meta_path.stem, set(pinned))
        asked = asks_question(meta_path.with_suffix(".csv"))
        renames = {}
        for label, meaning in pinned.items():
            if label.partition(":")[0] in POLICIES and not means_now(label, meaning, asked):
                renames[label] = shortest_label(label, meaning, own, asked)
        taken = (set(pinned) - set(renames)) | set(renames.values())
        for label, meaning in pinned.items():  # measured under a spec the task no longer names: the one it does
            name = label.partition(":")[0]
            if label in renames or name not in POLICIES or label in {spec.label for spec in own}:
                continue
            better = shortest_label(label, meaning, own, asked)
            if better not in taken and means_now(better, meaning, asked):
                if better != label and (better == name or better in {spec.label for spec in own}):
                    renames[label] = better
                    taken.add(better)
        if not renames:
            continue
        kept = set(pinned) - set(renames)
        clash = (set(renames.values()) & kept) or len(set(renames.values())) < len(renames)
        if clash:
            raise SystemExit(f"{meta_path}: relabelling {renames} would merge labels: relabel by hand")
        for old, new in renames.items():
            print(f"{meta_path.with_suffix('.csv')}: {old} -> {new}")
        if dry_run:
            continue
        rows_path = meta_path.with_suffix(".csv")
        if rows_path.exists():
            rows = pd.read_csv(rows_path, dtype=str, keep_default_na=False)
            rows["policy"] = rows["policy"].replace(renames)
            rows.to_csv(rows_path, index=False, lineterminator="\r\n")  # as the csv module writes them
        meta["policies"] = {
            renames.get(label, label): json.loads(json.dumps(parse_spec(renames.get(label, label)).meaning(asked)))
            if label in renames
            else meaning
            for label, meaning in pinned.items()
        }
        for run in meta.get("runs", []):  # each run's record names its rows by their labels too
            run["policies"] = [renames.get(label, label) for label in run.get("policies", [])]
        meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    if not dry_run:
        summarise_folder(folder)


def summarise_folder(folder: Path) -> None:
    """Every summary of the folder written again from its rows, as the tasks write them."""
    for task in all_tasks():
        for part in task.parts:
            paths = [folder / f"{stem}.csv" for stem in part.files]
            if all(path.exists() for path in paths):
                write_summary(folder, part.name, part.summarise(*(pd.read_csv(path) for path in paths)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    for folder in [args.folder, *sorted(p for p in args.folder.iterdir() if p.is_dir())]:
        relabel_folder(folder, args.dry_run)


if __name__ == "__main__":
    main()
