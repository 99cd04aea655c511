"""Spell out ``granularity=token`` in the labels of rows measured before a policy's default unit changed.

A result label means what its pinned options say (``ResultTable.pin_policies``). When a policy's
``default_granularity`` changes from ``token``, its bare labels (``counter_causal_fast``,
``counter_causal_fast:score=contrast``) would come to mean the new unit, though their rows were
measured token by token. This rewrites every CSV's ``policy`` column and every metadata file's
pins under a results folder, so each label says what was measured:
``counter_causal_fast:granularity=token``. Rows are not touched otherwise.

Run: ``python scripts/bench/spell_out_granularity.py bench/results counter_causal_fast``
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def spelled(label: str, policies: set[str]) -> str:
    name, _, options = label.partition(":")
    if name not in policies or "granularity=" in options:
        return label
    return f"{label},granularity=token" if options else f"{label}:granularity=token"


def rewrite_csv(path: Path, policies: set[str]) -> int:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
        fields = list(rows[0].keys()) if rows else []
    if "policy" not in fields:
        return 0
    changed = 0
    for row in rows:
        new = spelled(row["policy"], policies)
        changed += new != row["policy"]
        row["policy"] = new
    if changed:
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return changed


def rewrite_meta(path: Path, policies: set[str]) -> int:
    meta = json.loads(path.read_text(encoding="utf-8"))
    pins = meta.get("policies")
    if not isinstance(pins, dict):
        return 0
    new = {}
    for label, options in pins.items():
        label2 = spelled(label, policies)
        new[label2] = {**options, "granularity": "token"} if label2 != label else options
    if new == pins:
        return 0
    meta["policies"] = new
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return len([label for label in pins if spelled(label, policies) != label])


def main(folder: str, *policies: str) -> None:
    names = set(policies)
    for path in sorted(Path(folder).rglob("*.csv")):
        if count := rewrite_csv(path, names):
            print(f"{path}: {count} rows")
    for path in sorted(Path(folder).rglob("*.json")):
        if count := rewrite_meta(path, names):
            print(f"{path}: {count} labels")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: spell_out_granularity.py RESULTS_FOLDER POLICY...")
    main(sys.argv[1], *sys.argv[2:])
