"""Result files: one CSV of measured rows per task, written row by row, plus a JSON of metadata.

Long runs die (a laptop sleeps, a job is killed): every row is appended and flushed as soon as it is
measured, and a rerun with the same settings skips the rows already there. The JSON records where
the numbers come from (commit, date, machine, library versions, settings), so a table in
docs/benchmarks.md#where-the-results-are or on the app page can always say what it was measured on.

Where results go is the caller's choice, never where this file is: ``--out``, else
``$CCVIZ_BENCH_RESULTS``, else ``bench/results`` under the working directory (:func:`results_dir`).
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ccviz.errors import CcvizError
from ccviz.version import __version__

from .specs import in_policy_order
from .timing import cpu_name, git, source_commit

RESULTS_ENV = "CCVIZ_BENCH_RESULTS"
PUBLISHED = (
    Path("bench") / "results"
)  # under the working directory: the app and the harness run from the repository root


def results_dir(quick: bool = False, *, environ: Mapping[str, str] | None = None, default: Path | None = None) -> Path:
    """The results folder when ``--out`` names none: ``$CCVIZ_BENCH_RESULTS``, else ``default`` (the app:
    the results published with it), else ``bench/results`` under the working directory; with ``quick``,
    its ``quick`` folder. ``environ``: read instead of ``os.environ`` (``{}``: the folder a plain command
    writes to in a shell that sets nothing)."""
    raw = (os.environ if environ is None else environ).get(RESULTS_ENV, "").strip()
    base = Path(raw).expanduser() if raw else default or Path.cwd() / PUBLISHED
    return base / "quick" if quick else base


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def provenance() -> dict[str, Any]:
    """Commit, date and machine: what every published figure must state."""
    import torch
    import transformers

    return {
        "commit": source_commit(),
        # Code only: result files being written (this run's, or another's) and prose do not change what is measured.
        "dirty": bool(
            git(
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ":/",
                ":(top,exclude)bench/results",
                ":(top,exclude)*.md",
            )
        ),
        "date": _now(),
        "machine": f"{cpu_name()}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}",
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "ccviz": __version__,
    }


class ResultTable:
    """The rows of one task in ``<dir>/<name>.csv`` (+ ``<name>.json``), appended as they are measured.

    ``key`` names the columns that identify a row; :meth:`has` tells a rerun what is already done, and
    :meth:`lacks` which done rows left a column blank (an answer not asked for then): adding a row with
    the same key replaces that row. Settings that change what a row means (document length, model, ...)
    go in ``settings``: a rerun with other settings is refused instead of silently mixing incomparable
    rows. Settings named in ``extent`` only say how many rows to measure (``cases``): they may change
    between runs. A file written before this version added columns gains them, blank.
    """

    def __init__(
        self,
        directory: Path,
        name: str,
        columns: list[str],
        key: list[str],
        settings: dict[str, Any],
        *,
        fresh: bool = False,
        extent: tuple[str, ...] = (),
    ):
        self.path = Path(directory) / f"{name}.csv"
        self.meta_path = self.path.with_suffix(".json")
        self.columns, self.key, self.settings, self.extent = columns, key, settings, extent
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if fresh:
            self.path.unlink(missing_ok=True)
            self.meta_path.unlink(missing_ok=True)
        old = json.loads(self.meta_path.read_text()) if self.meta_path.exists() else {}
        self._done: dict[tuple[str, ...], frozenset[str]] = {}  # key -> the columns its row left blank
        if self.path.exists():
            self._resume(old)
        if self._done:  # what the file holds: the extent of every run that wrote it
            settings = {**settings, **_grown(old.get("settings", {}), settings, extent)}
        self.meta = provenance() | {"task": name, "settings": settings, "rows": len(self._done)}
        self.meta["started"] = old.get("started", self.meta["date"])
        self.meta["policies"] = old.get("policies", {})
        self.meta["runs"] = old.get("runs", _unrecorded(old, len(self._done)))  # each run that wrote rows
        self._run: dict[str, Any] | None = None  # this run's entry, from its first row
        self._opened = self.meta["date"]
        self._write_meta()

    def _meaning(self, settings: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in json.loads(json.dumps(settings)).items() if k not in self.extent}

    def _resume(self, old_meta: dict[str, Any]) -> None:
        if self._meaning(old_meta.get("settings", {})) != self._meaning(self.settings):
            raise CcvizError(
                f"{self.path} was measured with other settings: pass --fresh to start over, or --out another folder"
            )
        with self.path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            fields, rows = list(reader.fieldnames or []), list(reader)
        if fields != self.columns:
            if not set(fields) <= set(self.columns):
                raise CcvizError(f"{self.path} has other columns than this version writes: pass --fresh to start over")
            rows = [{c: row.get(c, "") for c in self.columns} for row in rows]
            self._rewrite(rows)  # an older file: the columns added since, blank
        self._done = {self._row_key(row): self._blanks(row) for row in rows}

    def _row_key(self, row: dict[str, Any]) -> tuple[str, ...]:
        return tuple(str(row[k]) for k in self.key)

    @staticmethod
    def _blanks(row: dict[str, Any]) -> frozenset[str]:
        return frozenset(c for c, v in row.items() if v is None or str(v) == "")

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        """Write the whole file anew (through a temporary file, so a kill never leaves half of it)."""
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)
        tmp.replace(self.path)

    def _write_meta(self) -> None:
        tmp = self.meta_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.meta, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.meta_path)

    def pin_policies(self, specs: Iterable[Any], *, asked: bool = False) -> None:
        """Record what each policy label meant (its resolved options) and refuse a label whose meaning
        changed since its rows were measured, e.g. after a policy's default options were changed.
        ``asked``: the rows ask a question apart from their document, so a meaning also says its protocol."""
        pinned = self.meta.setdefault("policies", {})
        for spec in specs:
            options = json.loads(json.dumps(spec.meaning(asked)))
            if not spec.means(pinned.setdefault(spec.label, options), asked):
                raise CcvizError(
                    f"{self.path}: {spec.label!r} now means {options} but was measured as {pinned[spec.label]}: "
                    "write the options out in the spec, or pass --fresh"
                )
        self._write_meta()

    def has(self, **key: Any) -> bool:
        return self._row_key(key) in self._done

    def lacks(self, column: str, **key: Any) -> bool:
        """Whether the row of ``key`` was measured but left ``column`` blank (False when there is no row)."""
        return column in self._done.get(self._row_key(key), ())

    def add(self, row: dict[str, Any]) -> None:
        """Append one row and flush it to disk at once; a row whose key is already there replaces it."""
        missing = set(self.columns) - set(row)
        if missing:
            raise KeyError(f"row lacks {sorted(missing)}")
        row = {c: row[c] for c in self.columns}
        key = self._row_key(row)
        if key in self._done:
            with self.path.open(newline="", encoding="utf-8") as handle:
                kept = [old for old in csv.DictReader(handle) if self._row_key(old) != key]
            self._rewrite([*kept, row])
        else:
            new_file = not self.path.exists()
            with self.path.open("a", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=self.columns)
                if new_file:
                    writer.writeheader()
                writer.writerow(row)
        self._done[key] = self._blanks(row)
        self.meta.update(date=_now(), rows=len(self._done))
        self._record_run(row)
        self._write_meta()

    def _record_run(self, row: dict[str, Any]) -> None:
        """Count a row in this run's entry of ``meta["runs"]``: a file grows over many runs and commits, and
        the header's commit and machine name only the latest."""
        if self._run is None:
            self._run = {"commit": self.meta["commit"], "dirty": self.meta["dirty"], "started": self._opened}
            self._run |= {"ended": "", "rows": 0, "policies": [], "machine": self.meta["machine"]}
            self.meta["runs"].append(self._run)
        self._run.update(ended=self.meta["date"], rows=self._run["rows"] + 1)
        policy = row.get("policy")
        if policy not in (None, "") and policy not in self._run["policies"]:
            self._run["policies"].append(policy)

    def frame(self) -> pd.DataFrame:
        return read_frame(self.path, self.columns)


def _unrecorded(old_meta: dict[str, Any], rows: int) -> list[dict[str, Any]]:
    """The runs of a file written before runs were recorded: one entry for all its rows, under the commit of
    the latest of them (the only one its header kept), marked ``earlier``."""
    if not rows or "commit" not in old_meta:
        return []
    run = {"commit": old_meta["commit"], "dirty": old_meta.get("dirty", False), "earlier": True, "rows": rows}
    run |= {"started": old_meta.get("started", old_meta["date"]), "ended": old_meta["date"]}
    return [run | {"policies": list(old_meta.get("policies", {}))}]  # the labels pinned: those it measured


def _grown(old: dict[str, Any], new: dict[str, Any], extent: Iterable[str]) -> dict[str, Any]:
    """The extent settings of a file written by runs with ``old`` and then ``new`` settings: the larger count,
    the union of lists (in order)."""
    grown = {}
    for key in extent:
        if key not in old or key not in new:
            continue
        before, now = old[key], json.loads(json.dumps(new[key]))
        if isinstance(now, list) and isinstance(before, list):
            grown[key] = sorted(set(before) | set(now))
        elif isinstance(now, int | float) and isinstance(before, int | float):
            grown[key] = max(before, now)
    return grown


def read_frame(path: Path, columns: Iterable[str] = ()) -> pd.DataFrame:
    """A result CSV as a data frame (an empty frame with ``columns`` if nothing was measured yet), its rows
    in the benchmarks' policy order (:func:`.specs.in_policy_order`).

    Missing values are empty cells and ``nan``, which is how :meth:`ResultTable.add` writes a float NaN
    (a cell past the forward baseline, an unmeasured peak); no other text is read as missing."""
    if not Path(path).exists():
        return pd.DataFrame(columns=list(columns))
    return in_policy_order(pd.read_csv(path, keep_default_na=False, na_values=["", "nan"]))


def write_summary(directory: Path, name: str, frame: pd.DataFrame) -> Path:
    """Write a derived table (``<name>_summary.csv``) next to its rows."""
    path = Path(directory) / f"{name}_summary.csv"
    frame.to_csv(path, index=False, float_format="%.6g")
    return path


def load_results(directory: str | Path | None = None) -> dict[str, Any]:
    """Every result file of a folder, for the app and notebooks.

    Returns ``{"<name>": DataFrame}`` for each CSV (``retention``, ``retention_summary``, ...) and
    ``{"meta": {"<task>": dict}}`` with each task's provenance and settings (default folder:
    :func:`results_dir`). Missing folder: no tables.
    """
    folder = Path(directory) if directory is not None else results_dir()
    results: dict[str, Any] = {"meta": {}}
    if not folder.is_dir():
        return results
    for path in sorted(folder.glob("*.csv")):
        results[path.stem] = read_frame(path)
    for path in sorted(folder.glob("*.json")):
        results["meta"][path.stem] = json.loads(path.read_text(encoding="utf-8"))
    return results
