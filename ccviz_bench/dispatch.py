"""Measure independent cells here, in worker processes on this machine, or on a Ray cluster.

A benchmark whose rows do not depend on each other (a needle map's cells, a retention case under one
policy and budget) hands its cells and one
top-level ``measure(lm, cell) -> row`` function here. However they run, finished rows come back to
this process, which alone writes them (``add``: :meth:`.results.ResultTable.add`, flushed at once), so
a killed run, a crashed worker or a failed cell loses nothing but the cells still in flight, and a
rerun of the same command measures only what is missing.

- one worker: in this process, with the model already loaded;
- ``--workers N``: N processes (forkserver, the model loaded once in each), each with its torch
  threads capped so that N x threads never exceeds the machine's cores;
- ``--ray ADDRESS``: N Ray actors (``ray.init(address=ADDRESS)``; ``local`` starts a Ray instance
  here), each loading the model once. Ray is an optional extra: ``pip install 'ccviz[cluster]'``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

from ccviz.errors import CcvizError
from ccviz.models import LoadedModel

from .processes import MODEL_MODULES
from .results import ResultTable

Measure = Callable[[LoadedModel, Any], dict]  # a module-level function: it travels to the workers by name


@dataclass(frozen=True)
class Workers:
    """Where cells run: ``count`` workers (None with Ray: one per CPU of the cluster) of ``threads`` torch threads."""

    count: int | None = 1
    threads: int = 1
    ray: str | None = None  # a Ray cluster address ("local": start one here); None: this machine

    @property
    def local(self) -> bool:
        return self.ray is None and (self.count or 1) == 1


def threads_per_worker(threads: int, workers: int, cores: int | None = None) -> int:
    """``threads`` torch threads per worker, fewer if ``workers`` of them would oversubscribe ``cores``."""
    cores = cores or os.cpu_count() or 1
    return max(1, min(threads, cores // max(workers, 1)))


def measure_cells(
    cells: Sequence[Any],
    measure: Measure,
    add: Callable[[dict], None],
    *,
    lm: LoadedModel | None,
    model_args: dict[str, Any],
    workers: Workers,
    log: Callable[[str], None],
) -> None:
    """Measure every cell and ``add`` its row as it finishes (in completion order).

    A cell that fails is reported and skipped; the others still run. At the end a one-line error says
    how many failed, so the command can be rerun to measure just those.
    """
    if not cells:
        return
    if workers.ray is not None:
        results = _on_ray(cells, measure, model_args, workers, log)
    elif workers.local:
        if lm is None:
            raise ValueError("measuring in this process needs the loaded model")
        results = ((cell, _attempt(measure, lm, cell)) for cell in cells)
    else:
        results = _in_processes(cells, measure, model_args, workers, log)
    failed: list[str] = []
    for cell, (row, error) in results:
        if error is None:
            add(row)
        else:
            failed.append(f"{cell}: {error}")
            log(f"failed: {failed[-1]}")
    if failed:
        raise CcvizError(
            f"{len(failed)} of {len(cells)} cells failed (first: {failed[0]}); the other rows are saved: "
            "rerun the same command to measure the rest"
        )


def measure_into(
    table: ResultTable,
    cells: Sequence[Any],
    total: int,
    measure: Measure,
    *,
    lm: LoadedModel | None,
    model_args: dict[str, Any],
    workers: Workers,
    log: Callable[[str], None],
) -> None:
    """:func:`measure_cells` into ``table`` (every row flushed as it comes): ``cells`` are the missing ones
    of the task's ``total``; says how far it got every 10 rows."""
    name, done = table.path.stem, 0
    log(f"{name}: {len(cells)} of {total} cells to measure")

    def add(row: dict) -> None:
        nonlocal done
        table.add(row)
        done += 1
        if done % 10 == 0 or done == len(cells):
            log(f"{name}: {done}/{len(cells)} cells measured")

    measure_cells(cells, measure, add, lm=lm, model_args=model_args, workers=workers, log=log)


def _attempt(measure: Measure, lm: LoadedModel, cell: Any) -> tuple[dict | None, str | None]:
    try:
        return measure(lm, cell), None
    except Exception as err:  # noqa: BLE001 - one cell's failure must not stop the others
        return None, f"{type(err).__name__}: {err}"


# ----- worker processes on this machine --------------------------------------------------------
_MODEL: LoadedModel | None = None  # a worker process's model, loaded once by its initializer


def _start_worker(model_args: dict[str, Any], threads: int) -> None:
    global _MODEL
    import torch

    from ccviz.models import load_model

    torch.set_num_threads(threads)
    _MODEL = load_model(**model_args)


def _in_worker(measure: Measure, cell: Any) -> tuple[dict | None, str | None]:
    assert _MODEL is not None, "the worker's initializer loads the model"
    return _attempt(measure, _MODEL, cell)


def _in_processes(
    cells: Sequence[Any], measure: Measure, model_args: dict[str, Any], workers: Workers, log: Callable[[str], None]
) -> Iterable[tuple[Any, tuple[dict | None, str | None]]]:
    count = min(workers.count or 1, len(cells))
    threads = threads_per_worker(workers.threads, count)
    log(f"{count} worker processes x {threads} torch thread{'s' * (threads > 1)} on {os.cpu_count()} cores")
    context = get_context("forkserver")
    context.set_forkserver_preload([__name__, *MODEL_MODULES])
    with ProcessPoolExecutor(
        max_workers=count, mp_context=context, initializer=_start_worker, initargs=(model_args, threads)
    ) as pool:
        futures = {pool.submit(_in_worker, measure, cell): cell for cell in cells}
        try:
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except Exception as err:  # noqa: BLE001 - a worker that died (killed, out of memory)
                    outcome = (None, f"worker lost: {type(err).__name__}: {err}")
                yield futures[future], outcome
        except BaseException:  # interrupted: cancel what has not started, keep what is saved
            for future in futures:
                future.cancel()
            raise


# ----- a Ray cluster -----------------------------------------------------------------------------
class _RayWorker:
    """One Ray actor: the model loaded once, then one cell per call."""

    def __init__(self, model_args: dict[str, Any], threads: int):
        _start_worker(model_args, threads)

    def measure(self, measure: Measure, cell: Any) -> tuple[dict | None, str | None]:
        return _in_worker(measure, cell)


def _on_ray(
    cells: Sequence[Any], measure: Measure, model_args: dict[str, Any], workers: Workers, log: Callable[[str], None]
) -> Iterable[tuple[Any, tuple[dict | None, str | None]]]:
    try:
        import ray
    except ImportError:
        raise CcvizError("--ray needs Ray, an optional extra: pip install 'ccviz[cluster]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=workers.ray, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, ValueError, RuntimeError) as err:
            raise CcvizError(f"could not reach the Ray cluster at {workers.ray!r}: {err}") from None
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        threads = max(1, min(workers.threads, cpus))
        count = min(workers.count or max(1, cpus // threads), len(cells))
        log(f"{count} Ray actors x {threads} torch thread{'s' * (threads > 1)} on a cluster of {cpus} CPUs")
        actor = ray.remote(num_cpus=threads)(_RayWorker)
        actors = [actor.remote(model_args, threads) for _ in range(count)]
        queue, pending = list(cells), {}
        for worker in actors:  # one cell in flight per actor: finished rows come back as soon as they are done
            if queue:
                cell = queue.pop(0)
                pending[worker.measure.remote(measure, cell)] = (worker, cell)
        while pending:
            (done,), _ = ray.wait(list(pending), num_returns=1)
            worker, cell = pending.pop(done)
            try:
                outcome = ray.get(done)
            except ray.exceptions.RayError as err:
                outcome = (None, f"Ray worker lost: {type(err).__name__}: {str(err).splitlines()[0]}")
            if queue:
                following = queue.pop(0)
                pending[worker.measure.remote(measure, following)] = (worker, following)
            yield cell, outcome
    finally:
        if started_here:
            ray.shutdown()
