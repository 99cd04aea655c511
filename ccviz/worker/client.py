"""The server's side of the model worker: start it, queue runs in order of arrival, follow and restart.

A :class:`ModelWorker` owns one worker process. Callers (the app's job threads) take a turn with
:meth:`ModelWorker.turn`, which queues them first come, first served and waits until the model is
loaded, then :meth:`ModelWorker.execute` sends the task and pumps its events into the caller's
callbacks. Everything here blocks on pipes, not on Python work, so a waiting server thread costs the
worker nothing. If the process dies, the caller gets :class:`WorkerDied` with the partial trace
streamed so far, and a new process is started at once.

The process holds one model at a time (memory: a classroom shares one server), but a caller may ask
:meth:`ModelWorker.turn` for another of :attr:`ModelWorker.models`: when its turn comes, the process is
replaced by one that loads that model, and the callers queued behind it keep their places; a later
caller of the first model switches back in its own turn.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from ..engine import GenerationFailed, Listeners
from ..errors import CcvizError
from ..models import installed_models, model_name
from ..trace import Trace
from . import protocol as msg
from .protocol import WorkerStatus, describe_exit

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2  # how often a waiting caller looks at its stop flag and at the process
CHECK_SECONDS = 60.0  # a validation answer takes milliseconds; this only bounds a wedged worker
WaitCallback = Callable[[str], None]
"""Called as ``on_wait(reason)`` while a caller waits: "another run" or "the model"."""


class WorkerDied(RuntimeError):
    """The worker process ended mid-task; ``trace`` is the partial trace streamed before (or None)."""

    def __init__(self, message: str, trace: Trace | None):
        super().__init__(message)
        self.trace = trace


class ModelWorker:
    """One model at a time in its own process, shared by every session of the server; runs queue in order
    of arrival, and a run for another model switches the process to it in its turn.

    The process is ``python -m ccviz.worker`` with this interpreter and import path; it ends with the
    server (at exit here, or by itself when its pipes close). ``model`` is what it loads first (a
    checkpoint folder, ``tiny-random``, an embedded model's name; None: the default); it may switch to
    any of :attr:`models`: that one and the installed embedded models.
    """

    def __init__(self, model: str | None = None, plugins: tuple[str, ...] = ()):
        self.model, self.plugins = model, plugins
        self.initial = _name(model)  # what the server was started with: the app's first choice
        self.name = self.initial  # the model of the process now (loaded, loading or failed)
        # name -> what load_model takes
        self.sources = {self.initial: model} | {name: name for name in installed_models() if name != self.initial}
        self.load_seconds: dict[str, float] = {}  # each model's last load here, in seconds (the switch's estimate)
        self.restarts = 0
        self._death = ""  # the last death, in words
        self._lock = threading.Lock()  # guards the process, its pipes and the status
        self._check_lock = threading.Lock()  # one validation at a time on the checks pipe
        self._queue: deque[object] = deque()
        self._turns = threading.Condition()
        self._settled = threading.Event()  # loaded, or failed to load (the status says which)
        self._generation = 0
        self._spawn(WorkerStatus("loading", f"Loading {self.initial} in the model worker…"))
        atexit.register(self.close)

    @property
    def models(self) -> list[str]:
        """The names of the models this worker can load (and so run tasks for), the first one first."""
        return list(self.sources)

    # ----- process life ----------------------------------------------------------------------
    def _spawn(self, status: WorkerStatus) -> None:
        """Start a process and a thread that waits for its ready message (called with the lock held or at init)."""
        pairs = [socket.socketpair() for _ in range(3)]  # jobs, checks, stop
        fds = [child.fileno() for _, child in pairs]
        command = [
            sys.executable,
            "-m",
            "ccviz.worker",
            "--fds",
            ",".join(map(str, fds)),
            "--plugins",
            ",".join(self.plugins),
        ]
        if self.model:
            command += ["--model", self.model]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}  # this process's imports
        process = subprocess.Popen(command, pass_fds=fds, env=env, stdin=subprocess.DEVNULL)
        jobs, checks, stop = (Connection(ours.detach()) for ours, _ in pairs)
        for _, child in pairs:
            child.close()  # only the worker holds these now: its death closes the pipes (EOF here)
        self._generation += 1
        self._process, self._jobs, self._checks, self._stop = process, jobs, checks, stop
        self._status = status
        self._settled.clear()
        threading.Thread(
            target=self._await_ready,
            args=(self._generation, process, jobs, time.monotonic()),
            name="ccviz-worker-start",
            daemon=True,
        ).start()

    def _await_ready(self, generation: int, process, jobs, began: float) -> None:
        try:
            kind, payload = jobs.recv()
        except (EOFError, OSError):
            kind, payload = (
                msg.LOAD_FAILED,
                f"the model worker stopped while loading ({describe_exit(self._exit_code(process))})",
            )
        with self._lock:
            if generation != self._generation:
                return
            if kind == msg.READY:
                self.load_seconds[self.name] = time.monotonic() - began
                self._status = WorkerStatus(
                    "ready", f"Model: {payload.name} ({payload.max_positions:,} positions) · ready", payload
                )
                log.info("ccviz: model worker ready (pid %s, %s)", process.pid, payload.name)
            else:
                said = "" if self.name in payload else f"{self.name}: "  # a folder's error names it already
                self._status = WorkerStatus("failed", f"The model could not be loaded: {said}{payload}")
                log.error("ccviz: %s", self._status.message)
            self._settled.set()
        with self._turns:
            self._turns.notify_all()

    @staticmethod
    def _exit_code(process: subprocess.Popen) -> int | None:
        try:
            return process.wait(5)
        except subprocess.TimeoutExpired:
            return None

    def _restart(self, generation: int) -> str:
        """Replace a dead process (once per death, whoever notices first); return what happened, in words."""
        with self._lock:
            if generation == self._generation:
                how = describe_exit(self._exit_code(self._process))
                log.error("ccviz: the model worker (pid %s) stopped: %s; restarting it", self._process.pid, how)
                self.restarts += 1
                self._close_pipes()
                self._spawn(WorkerStatus("restarting", f"The model worker stopped ({how}) and is restarting…"))
                self._death = how
            return self._death

    def _close_pipes(self) -> None:
        """Close this side of a dead or closed process's pipes (a caller still reading one gets OSError)."""
        for connection in (self._jobs, self._checks, self._stop):
            connection.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def status(self) -> WorkerStatus:
        """The worker's state now; a process found dead while idle is restarted here."""
        with self._lock:
            generation, alive, status = self._generation, self._process.poll() is None, self._status
        if status.ready and not alive:
            self._restart(generation)
            return self._status
        return status

    def wait_ready(self, timeout: float | None = None) -> WorkerStatus:
        """Block until the model is loaded or has failed to load (tests and scripts); the status either way."""
        self._settled.wait(timeout)
        return self.status()

    def close(self) -> None:
        """Stop the process (at exit, and for scripts and tests)."""
        with self._lock:
            self._generation += 1
            self._status = WorkerStatus("failed", "The model worker was closed.")
            self._end_process()

    def _end_process(self) -> None:
        """Terminate the process (killed if it does not go) and close our pipes (called with the lock held)."""
        self._process.terminate()
        if self._exit_code(self._process) is None:
            self._process.kill()
            self._process.wait()
        self._close_pipes()

    def load_estimate(self, name: str) -> str:
        """How long loading ``name`` takes, in words: its last load here, if it has loaded here before."""
        seconds = self.load_seconds.get(name)
        return f"~{seconds:.0f} s" if seconds is not None else "seconds, or minutes on its first load ever (converting)"

    def _switch(self, name: str) -> None:
        """Replace the idle process by one that loads ``name`` (called by the caller whose turn it is)."""
        with self._lock:
            log.info("ccviz: the model worker switches from %s to %s", self.name, name)
            self._end_process()
            self.model, self.name = self.sources[name], name
            line = f"Switching to {name}: the model loads, {self.load_estimate(name)}; runs of other models wait."
            self._spawn(WorkerStatus("loading", line))

    def holds(self, task: Any) -> bool:
        """Whether ``task`` runs on the model this process holds (a task naming no model runs on any)."""
        return getattr(task, "model", None) in (None, "", self.name)

    # ----- validation ------------------------------------------------------------------------
    def check(self, task: Any) -> Any:
        """``task.check(lm)`` in the worker, answered even while a run holds the model; a task of another model
        than the one loaded (a switch came between the caller's look and this) is refused in one line."""
        status = self.status()
        if not status.ready:
            raise CcvizError(status.message)
        if not self.holds(task):
            raise CcvizError(f"the model worker has just switched to {self.name}: click again (your run switches back)")
        with self._check_lock:
            checks = self._checks
            try:
                while checks.poll():  # an answer that came after its caller gave up
                    checks.recv()
                checks.send(task)
                if not checks.poll(CHECK_SECONDS):
                    raise CcvizError("the model worker did not answer: try again in a moment")
                kind, value = checks.recv()
            except (EOFError, OSError):
                raise CcvizError(
                    "the model worker stopped while checking this run; it is restarting: try again in a moment"
                ) from None
        if kind == "error":
            raise CcvizError(value)
        return value

    # ----- runs ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def turn(
        self,
        should_stop: Callable[[], bool],
        on_wait: WaitCallback,
        ticket: object | None = None,
        model: str | None = None,
    ) -> Iterator[bool]:
        """Wait, first come first served, for the model; yields True with it, or False if stopped first.

        ``ticket`` stands for the caller in :meth:`queued` (the app's shared runs pass themselves, so a
        queued run can tell which runs are ahead of it). ``model`` (one of :attr:`models`; None: whichever
        is loaded) is the model the caller needs: if another is loaded when its turn comes, the process
        switches to it first (the callers behind it wait). Raises :class:`CcvizError` if the model cannot
        be loaded, or is not one of :attr:`models`.
        """
        if model is not None and model not in self.sources:
            raise CcvizError(f"the model {model!r} is not installed here: this app runs {', '.join(self.models)}")
        ticket = object() if ticket is None else ticket
        with self._turns:
            self._queue.append(ticket)
        try:
            while True:
                status = self.status()  # also restarts a worker found dead while idle
                other = model is not None and model != self.name
                with self._turns:
                    first = self._queue[0] is ticket
                if model is not None and first and other and status.state in ("ready", "failed"):  # idle now
                    self._switch(model)
                    continue
                if status.state == "failed" and not other:
                    raise CcvizError(status.message)
                with self._turns:
                    if first and status.ready and not other:
                        break
                    self._turns.wait(POLL_SECONDS)
                if should_stop():
                    yield False
                    return
                on_wait("another run" if not first else "the model")
            yield True
        finally:
            with self._turns:
                self._queue.remove(ticket)
                self._turns.notify_all()

    def queued(self) -> list[object]:
        """Every caller of :meth:`turn`, in order, by ticket: the first holds the model (or waits for it to load)."""
        with self._turns:
            return list(self._queue)

    def execute(self, task: Any, listeners: Listeners) -> Any:
        """Run ``task`` in the worker (call inside :meth:`turn`); its result, or the task's own error.

        ``listeners.on_refresh(trace)`` is called after every streamed refresh with the trace so far (one object,
        extended in place: copy what must not change).

        Raises :class:`GenerationFailed` or :class:`CcvizError` as the task did, and
        :class:`WorkerDied` (with the partial trace streamed so far) if the process ended.
        """
        with self._lock:
            generation, jobs, stop, process = self._generation, self._jobs, self._stop, self._process
        live: Trace | None = None
        stopping = False

        def stop_if_asked() -> None:  # one stop message per run is enough
            nonlocal stopping
            if not stopping and listeners.should_stop is not None and listeners.should_stop():
                stopping = True
                stop.send_bytes(b"stop")

        try:
            jobs.send(task)
            while True:
                if not jobs.poll(POLL_SECONDS):
                    stop_if_asked()
                    if process.poll() is not None and not jobs.poll():
                        raise EOFError
                    continue
                kind, *payload = jobs.recv()
                if kind == msg.PROGRESS:
                    if listeners.progress is not None:
                        listeners.progress(*payload)
                    stop_if_asked()
                elif kind == msg.CONFIG:
                    live = Trace(config=payload[0], status="error")
                elif kind == msg.REFRESH:
                    cycles, tokens, peak = payload
                    live.cycles.extend(cycles)
                    live.tokens.extend(tokens)
                    live.peak_cache_length = peak
                    if listeners.on_refresh is not None:
                        listeners.on_refresh(live)
                elif kind == msg.DONE:
                    return payload[0]
                elif kind == msg.FAILED:
                    raise GenerationFailed(payload[0], payload[1])
                else:
                    raise CcvizError(payload[0])
        except (EOFError, OSError):
            how = self._restart(generation)
            message = f"the model worker stopped during this run ({how}); it is restarting by itself"
            if live is not None:
                live.error, live.stop_reason = message, "error"
            raise WorkerDied(message, live) from None


def _name(model: str | None) -> str:
    """A model's name as its runs record it; a folder that cannot be checked keeps its path (its load fails
    and the status says why)."""
    try:
        return model_name(model)
    except CcvizError:
        return str(model)
