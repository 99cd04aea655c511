"""``python -m ccviz bench TASK``: run a benchmark task (or all of them) and write its result files.

Every published figure is one command: ``python -m ccviz bench all`` (hours on a CPU; resumable),
``python -m ccviz bench report`` prints the tables. ``--quick`` shrinks every task to a CI-sized run
(its numbers mean nothing). Results go to ``--out``, else ``$CCVIZ_BENCH_RESULTS``, else
``bench/results`` under the working directory (``.../quick`` with ``--quick``).

The probes (``overhead``, ``memory``, ``cost``, ``attention``) measure the engine itself: each prints
a report of ratios against a baseline timed in the same run and saves it as ``<out>/<name>.txt``.
They are not part of ``all``, which runs the quality tasks.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

from ccviz.choices import DEVICES, DTYPES
from ccviz.errors import CcvizError
from ccviz.fields import check_whole, parse_value
from ccviz.references import import_ref

from . import registry

TASKS = registry.NAMES  # in the order ``all`` runs them
PROBES = tuple(probe.name for probe in registry.PROBES)  # engine probes: a text report each, never part of ``all``
# Tasks whose cells --workers and --ray spread, those that need no model here first.
WORKER_TASKS = tuple(
    e.name for e in sorted((e for e in registry.LISTINGS if e.spreads), key=lambda e: not e.dispatched)
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="measure the policies and the engine (results under bench/results/)")
    bench.add_argument(
        "task",
        choices=(*TASKS, "all", "report", *PROBES),
        help="a quality task, 'all' of them, 'report' to print their tables, or a probe of the engine "
        "(overhead: decode speed against model.generate; memory: peak RSS against length; "
        "cost: counter-causal refresh cost; attention: the attention policies' costs), which "
        "prints a report and saves it as OUT/NAME.txt (not part of 'all')",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="tiny settings, for CI (well under 3 minutes; needle and ruler "
        "measure the first four registered policies)",
    )
    bench.add_argument(
        "--out",
        type=Path,
        help="results folder (default $CCVIZ_BENCH_RESULTS, else bench/results here; its quick/ folder with --quick)",
    )
    bench.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="SPEC",
        help="policy spec NAME[:KEY=VALUE,...], repeatable (default: every registered policy; "
        "for ablation, the 24-variant grid; for allocation, each policy under each allocation; "
        "for ruler, also counter_causal_fast by words and with a recent window of J/4)",
    )
    bench.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a setting of the task (lists: comma-separated), e.g. cases=20 or budgets=0.1,0.5",
    )
    bench.add_argument("--fresh", action="store_true", help="discard this task's earlier rows instead of resuming")
    bench.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (default 1: shared machines stay usable); "
        "with --workers, per worker, capped at cores / workers",
    )
    bench.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="needle, ruler and the retention rows (of retention, ablation and allocation): measure "
        "cells in N worker processes (with --ray: N Ray actors, default one per CPU of the "
        "cluster); rows are still written here, as each cell finishes",
    )
    bench.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="the same tasks: dispatch the cells to the Ray cluster at ADDRESS "
        "('local' starts one here); needs pip install 'ccviz[cluster]'",
    )
    bench.add_argument(
        "--model",
        help="local checkpoint folder, or gemma-3-270m (the extra gemma) (default: embedded SmolLM2-135M-Instruct)",
    )
    bench.add_argument("--device", default="cpu", choices=DEVICES)
    bench.add_argument("--dtype", default="float32", choices=DTYPES)


def _override(settings: object, pairs: list[str]) -> object:
    fields = {f.name: f for f in dataclasses.fields(settings)}
    changes = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in fields:
            raise CcvizError(f"--set takes FIELD=VALUE with FIELD one of {', '.join(fields)}, got {pair!r}")
        current = getattr(settings, key)
        value = tuple(parse_value(v) for v in raw.split(",")) if isinstance(current, tuple) else parse_value(raw)
        if isinstance(current, int) and not isinstance(current, bool):
            value = check_whole(f"--set {key}", value)
        changes[key] = value
    return dataclasses.replace(settings, **changes)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _either(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1]


def main(args: argparse.Namespace) -> None:
    # Imported here: building the CLI parser must stay cheap for every other subcommand.
    from .dispatch import Workers
    from .results import results_dir
    from .specs import PolicySpec, parse_spec

    out = args.out or results_dir(args.quick)
    if args.task == "report":
        _publish(out)
        return
    entries = (
        registry.all_tasks() if args.task == "all" else () if args.task in PROBES else (registry.find_task(args.task),)
    )
    if args.set and (args.task == "all" or (args.task not in PROBES and not entries[0].settings)):
        tunable = [entry.name for entry in registry.all_tasks() if entry.takes_set]
        raise CcvizError(f"--set works with one task ({_either(tunable)}) or one probe")
    if args.task in PROBES and (args.policy or args.fresh):
        raise CcvizError(f"--policy and --fresh are for the quality tasks; the {args.task} probe takes --set")
    check_whole("--threads", args.threads, 1)
    if args.workers is not None:
        check_whole("--workers", args.workers, 1)
    if (args.workers is not None or args.ray) and args.task not in (*WORKER_TASKS, "all"):
        raise CcvizError(
            f"--workers and --ray spread the cells of the {', '.join(WORKER_TASKS)} tasks, not {args.task}"
        )
    workers = Workers(count=args.workers if args.ray or args.workers else 1, threads=args.threads, ray=args.ray)
    specs: list[PolicySpec] = [parse_spec(s) for s in args.policy]  # fail fast, before loading the model
    classes = {e.name: e.settings for e in entries if e.settings}
    if args.task in PROBES:
        classes[args.task] = import_ref(registry.find_probe(args.task).settings)
    settings = {name: _override(kind.quick() if args.quick else kind(), args.set) for name, kind in classes.items()}

    import torch

    from ccviz.models import load_model

    torch.set_num_threads(args.threads)
    model_args = {"name_or_path": args.model, "device": args.device, "dtype": args.dtype}
    if args.task in PROBES:
        probe = importlib.import_module(registry.find_probe(args.task).module)
        _probe(args.task, probe, settings[args.task], model_args, Path(out))
        return
    dispatched = {listing.name for listing in registry.LISTINGS if listing.dispatched}
    in_process = any(entry.name not in dispatched for entry in entries) or workers.local
    lm = load_model(**model_args) if in_process else None  # workers load their own
    for entry in entries:
        run = registry.TaskRun(
            lm, specs, settings.get(entry.name), out, args.quick, workers, model_args, args.fresh, _log
        )
        entry.run(run)
        _log(f"{entry.name}: results in {out}")
    _publish(out)


def _probe(name: str, probe: Any, settings: object, model_args: dict[str, Any], out: Path) -> None:
    """Run one probe (a module with ``title(settings)`` and ``run(model_args, settings, emit)``): its report,
    under a header saying when, on what and with which settings, is printed as it comes and saved as
    ``<out>/<name>.txt``."""
    from ccviz.models import DEFAULT_MODEL

    from .timing import header

    lines: list[str] = []

    def emit(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    model = f"{model_args['name_or_path'] or DEFAULT_MODEL} ({model_args['device']}, {model_args['dtype']})"
    described = ", ".join(f"{f.name}={getattr(settings, f.name)}" for f in dataclasses.fields(settings))
    emit(header(probe.title(settings)))
    emit(f"# model {model}; {described}")
    probe.run(model_args, settings, emit)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _log(f"{name}: report in {path}")


def _publish(out: Path) -> None:
    """Print the markdown tables and (re)draw the SVG charts of whatever ``out`` holds."""
    from .digest import answers_by_cost
    from .plots import write_plots
    from .progress import current_results, read_tasks
    from .report import report_results
    from .results import load_results

    results = load_results(out)
    tasks = read_tasks(results)  # summarised once, for the tables and the charts
    print(report_results(results, tasks))
    current = current_results(results, tasks)
    for path in write_plots(current, out):
        _log(f"chart: {path}")
    frontier = answers_by_cost(current, out)
    if frontier is not None:
        _log(f"chart: {frontier}")
