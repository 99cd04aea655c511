"""The worker's side: load the model once, then run the tasks the server sends, one at a time.

Runs as ``python -m ccviz.worker`` (:class:`ccviz.worker.ModelWorker` starts it with three socket
pipes: jobs, checks and stop). Not a ``multiprocessing`` child: that would re-import the server's
main module, which under Streamlit is the app script itself. Everything the server needs
to follow a run is streamed back as it happens: progress after every forward pass and each refresh
with the tokens it covers, so a worker that dies mid-run still leaves the server a loadable partial
trace. A second thread answers validation requests while a run goes on, so a click is checked at once
even when another session's run holds the model.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from ..engine import GenerationFailed, Listeners
from ..errors import CcvizError
from ..models import LoadedModel, load_model
from ..plugins import load_plugins
from ..trace import Trace
from .protocol import CONFIG, DONE, ERROR, FAILED, LOAD_FAILED, PROGRESS, READY, REFRESH, ModelInfo

DEVICE_ENV = "CCVIZ_DEVICE"  # where the worker loads the model: cpu (default), cuda or auto


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m ccviz.worker --fds JOBS,CHECKS,STOP [--model M] [--plugins a,b]``."""
    parser = argparse.ArgumentParser(
        prog="python -m ccviz.worker", description="ccviz's model worker (started by the app)"
    )
    parser.add_argument("--fds", required=True, help="inherited socket descriptors: jobs,checks,stop")
    parser.add_argument("--model", default="", help="checkpoint folder or tiny-random (default: the embedded model)")
    parser.add_argument("--plugins", default="", help="comma-separated plugin modules")
    args = parser.parse_args(argv)
    jobs, checks, stop = (Connection(int(fd)) for fd in args.fds.split(","))
    try:
        serve(args.model or None, tuple(filter(None, args.plugins.split(","))), jobs, checks, stop)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server went away mid-answer: nothing is left to answer to


def serve(model: str | None, plugins: tuple[str, ...], jobs: Connection, checks: Connection, stop: Connection) -> None:
    """Load, then answer tasks until the server goes (its end of ``jobs`` closes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C in the server's terminal is the server's to handle
    try:
        load_plugins(plugins)
        lm = load_model(model, device=os.environ.get(DEVICE_ENV) or "cpu")
    except Exception as err:  # CcvizError, or anything torch raises on a broken checkpoint
        jobs.send((LOAD_FAILED, str(err) if isinstance(err, CcvizError) else f"{type(err).__name__}: {err}"))
        return
    gc.collect()
    gc.freeze()  # the model's objects never change: no later collection walks them
    server = os.getppid()
    stopped = False

    def should_stop() -> bool:  # polled after every forward pass: a select() call, microseconds
        nonlocal stopped
        if stop.poll():
            stopped = True
            _drain(stop)
        return stopped or os.getppid() != server  # cancelled, or the server is gone

    threading.Thread(target=_answer_checks, args=(lm, checks), name="ccviz-checks", daemon=True).start()
    jobs.send((READY, ModelInfo(name=lm.name, max_positions=lm.max_positions)))
    while True:
        try:
            task = jobs.recv()
        except (EOFError, OSError):
            return
        _drain(stop)  # a stop that arrived after the last task ended is not for this one
        stopped = False
        jobs.send(_execute(task, lm, jobs, should_stop))


def _drain(stop: Connection) -> None:
    try:
        while stop.poll():
            stop.recv_bytes()
    except (EOFError, OSError):
        pass  # the server is gone; should_stop sees it too


def _execute(task: Any, lm: LoadedModel, jobs: Connection, should_stop) -> tuple:
    sent = {"cycles": 0, "tokens": 0}

    def progress(refreshes: int, processed: int, total: int) -> None:
        jobs.send((PROGRESS, refreshes, processed, total))

    def on_refresh(trace: Trace) -> None:
        if not sent["cycles"]:
            jobs.send((CONFIG, trace.config))
        cycles, tokens = trace.cycles[sent["cycles"] :], trace.tokens[sent["tokens"] :]
        sent["cycles"], sent["tokens"] = len(trace.cycles), len(trace.tokens)
        jobs.send((REFRESH, cycles, tokens, trace.peak_cache_length))

    try:
        return DONE, task.execute(lm, Listeners(progress, should_stop, on_refresh))
    except GenerationFailed as err:
        return FAILED, str(err), err.trace
    except Exception as err:  # never let the worker die of one task: the page shows the message
        return ERROR, _error_line(err)


def _answer_checks(lm: LoadedModel, checks: Connection) -> None:
    """Validate tasks without running them: ``task.check(lm)`` or an error line."""
    while True:
        try:
            task = checks.recv()
        except (EOFError, OSError):
            return
        try:
            answer = ("ok", task.check(lm))
        except Exception as err:
            answer = ("error", _error_line(err))
        checks.send(answer)


def _error_line(err: Exception) -> str:
    """A user's mistake says itself; anything else is named as unexpected, with its type."""
    return str(err) if isinstance(err, CcvizError) else f"unexpected {type(err).__name__}: {err}"
