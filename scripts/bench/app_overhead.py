"""App overhead: one run through the app's job path (the model worker process) against ``generate`` directly.

The same configuration as a user's first run on the Run page: the clinical-record sample (~1,000
tokens), ``counter_causal_fast`` at J = 128, h = 32, up to 64 new tokens, stopping at EOS. Each row
is the median wall time from start to finished trace, and its ratio to the direct call measured in
the same run:

- direct: ``generate`` in this process's main thread (the baseline);
- before the model worker: ``generate`` in a thread of the process that holds the model, while the main
  thread does what the old server did for one watching session: ``gc.collect(2)`` after each rerun
  of the polling fragment, twice a second (Streamlit's ``runner.postScriptGC``);
- job path: a :class:`ccviz.worker.jobs.Job` handed to a :class:`ccviz.worker.ModelWorker`, once this
  process has dropped its model and frozen its objects as the server does (``gc.freeze()``): with an
  idle server, with 20 ms of Python every 0.5 s (a session's polling rerun), and with
  ``gc.collect(2)`` every 0.5 s too (as if ``runner.postScriptGC`` were left on).

The time of one ``gc.collect(2)`` in this process is printed for both states. On 2 cores whatever
CPU the server takes is taken from the worker's two torch threads, so a busy server still slows a
run: by competing for a core, no longer by holding the GIL.

Target: job path / direct <= 1.15. Run: ``python scripts/bench/app_overhead.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ccviz import LoadedModel, RunConfig, Trace, load_model, run_generation
from ccviz.worker import ModelWorker
from ccviz.worker.jobs import Job, ResultStore
from ccviz.worker.tasks import RunTask
from ccviz_bench.timing import header

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "assets" / "samples" / "clinical_record.md"


Load = tuple[bool, float] | None
"""What this process does twice a second while a run goes on: (a full collection?, ms of pure Python)."""


def busy_server(stop: threading.Event, collect: bool, python_ms: float) -> None:
    """Twice a second: a full collection and/or some pure-Python work, as a polling page's rerun does."""
    while not stop.wait(0.5):
        if collect:
            gc.collect(2)
        end = time.perf_counter() + python_ms / 1000
        while time.perf_counter() < end:
            pass


def collect_ms() -> float:
    start = time.perf_counter()
    gc.collect(2)
    return 1000 * (time.perf_counter() - start)


def timed(fn: Callable[[], object], load: Load) -> float:
    """Wall time of ``fn``, optionally while this process plays a busy server in another thread."""
    stop = threading.Event()
    load = threading.Thread(target=busy_server, args=(stop, *load)) if load is not None else None
    if load is not None:
        load.start()
    start = time.perf_counter()
    try:
        fn()
    finally:
        stop.set()
        if load is not None:
            load.join()
    return time.perf_counter() - start


def in_a_thread(fn: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        thread = threading.Thread(target=fn)
        thread.start()
        thread.join()

    return run


def in_process(lm: LoadedModel, task: RunTask, config: RunConfig, repeats: int) -> tuple[dict[str, float], Trace]:
    """The run called in the process that holds the model: directly, then in a thread under a collecting server."""

    def direct() -> None:
        run_generation(lm, task.prompt, config)

    direct()  # warm-up
    runs = [
        ("direct generate, main thread", direct, None),
        ("before: in-process thread, gc.collect(2) every 0.5 s", in_a_thread(direct), (True, 0.0)),
    ]
    medians = {label: statistics.median(timed(fn, load) for _ in range(repeats)) for label, fn, load in runs}
    return medians, run_generation(lm, task.prompt, config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lm = load_model()
    worker = ModelWorker()
    config = RunConfig(policy="counter_causal_fast", cache_size=128, chunk_size=32, max_new_tokens=64)
    task = RunTask(lm.name, DOCUMENT.read_text(encoding="utf-8"), config)
    assert worker.wait_ready(600).ready, worker.status().message

    def job_path() -> None:
        job = Job([task], worker, ResultStore()).start()  # a fresh store: nothing comes from a cache
        job.wait()
        assert job.results[0] is not None and job.results[0].status == "complete", job.errors

    through_worker = [
        ("job path, idle server", job_path, None),
        ("job path, 20 ms Python every 0.5 s", job_path, (False, 20.0)),
        ("job path, 20 ms Python + gc.collect(2) every 0.5 s", job_path, (True, 20.0)),
    ]
    job_path()  # warm-up of the worker
    medians, trace = in_process(lm, task, config, args.repeats)
    collect_before = collect_ms()
    del lm  # the server holds no model, and freezes what it has imported (ccviz.ui.model.shared_worker)
    gc.collect()
    gc.freeze()
    collect_after = collect_ms()
    for label, fn, load in through_worker:
        medians[label] = statistics.median(timed(fn, load) for _ in range(args.repeats))
    worker.close()
    print(
        header(
            f"app overhead: {trace.prompt_length}-token clinical record, counter_causal_fast J=128 h=32, "
            f"{len(trace.tokens) - trace.prompt_length} new tokens, median of {args.repeats}"
        )
    )
    baseline = next(iter(medians.values()))
    print(f"{'how the run is called':55s} {'seconds':>8s} {'ratio':>7s}")
    for label, seconds in medians.items():
        print(f"{label:55s} {seconds:8.2f} {seconds / baseline:7.2f}")
    print(
        f"one gc.collect(2) here: {collect_before:.0f} ms with the model loaded, "
        f"{collect_after:.0f} ms without it after gc.freeze()"
    )
    print("target: job path / direct <= 1.15")


if __name__ == "__main__":
    main()
