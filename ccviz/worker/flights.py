"""Runs in flight, shared: identical tasks started by several sessions are computed once.

A teacher says "everyone click Run": twenty sessions ask for the same task (same model, document and
config, so equal frozen dataclasses) within seconds. A :class:`Flight` is one computation of one task in
the model worker, followed by every session's job that asked for it while it was queued or running: each
follower gets the same progress, the same live snapshots and the same result, and the worker runs the
task once. A follower that stops (Cancel, or its tab closed for ``CCVIZ_ABANDON_SECONDS``) leaves with the
refreshes streamed so far while others still wait; the run itself stops only when no follower wants it,
and so leaves the queue if it had not started. Finished results go to the :class:`ResultStore`, under
the same lock that ends the flight, so a later request finds either the flight or the result, never
neither. No Streamlit import here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..engine import Listeners, ProgressCallback
from ..trace import Trace
from .client import POLL_SECONDS, ModelWorker, WaitCallback
from .eta import Ahead, RunSpeeds, queue_line


class Store(Protocol):
    """Where finished results go (the app's :class:`~ccviz.worker.jobs.ResultStore`), keyed by task."""

    def get(self, task: Any) -> Any | None: ...

    def put(self, task: Any, result: Any) -> None: ...


@dataclass(frozen=True, eq=False)
class Follower:
    """One job's interest in a flight: whether it still wants it, and where its progress and live trace go."""

    should_stop: Callable[[], bool]
    on_progress: ProgressCallback
    on_wait: WaitCallback
    on_live: Callable[[Trace], None]


class Flight:
    """One task computed once in the worker, for every follower (identity equality: it is a worker ticket).

    The task runs on its own model (``task.model``; the worker switches to it in the flight's turn), after
    ``check(task)`` if given: a run validated only once its model is loaded (:func:`~ccviz.worker.jobs.check_run`)."""

    def __init__(
        self,
        flights: Flights,
        task: Any,
        worker: ModelWorker,
        size: int | None,
        check: Callable[[Any], object] | None = None,
    ):
        self.flights, self.task, self.worker, self.size, self.check = flights, task, worker, size, check
        self.model: str | None = getattr(task, "model", None) or None  # None: it runs on the model loaded
        self.followers: list[Follower] = []
        self.stopping = False  # no follower wanted it at a check: closed to newcomers, it ends
        self.waiting = ""  # the worker's last wait reason ("" once the run holds the model)
        self.progress: tuple[int, int, int] = (0, 0, 0)  # refreshes, processed, total
        self.live: Trace | None = None  # a snapshot after every refresh, shared by every follower
        self.result: Any = None
        self.error: Exception | None = None
        self.done = threading.Event()

    # ----- the flight's own thread -------------------------------------------------------------
    def _fly(self) -> None:
        began = None
        try:
            with self.worker.turn(self._should_stop, self._wait, ticket=self, model=self.model) as ours:
                if ours:
                    if self.check is not None:
                        self.check(self.task)
                    began = time.monotonic()
                    self.waiting = ""
                    self._progress(0, 0, 0)  # the followers stop showing a queue place
                    listeners = Listeners(self._progress, self._should_stop, self._refreshed)
                    self.result = self.worker.execute(self.task, listeners)
        except Exception as err:  # the followers re-raise it, each in its own job
            self.error = err
        self.flights._land(self, None if began is None else time.monotonic() - began)

    def _should_stop(self) -> bool:
        """True once no follower wants the run (polled by the worker while queued and after every forward pass)."""
        with self.flights.lock:
            if not self.stopping and all(follower.should_stop() for follower in self.followers):
                self.stopping = True
                self.flights.close(self)  # a newcomer starts a fresh run rather than join one that stops
            return self.stopping

    def _wait(self, reason: str) -> None:
        self.waiting = reason
        for follower in self._following():
            follower.on_wait(reason)

    def _progress(self, refreshes: int, processed: int, total: int) -> None:
        self.progress = (refreshes, processed, total)
        for follower in self._following():
            follower.on_progress(refreshes, processed, total)

    def _refreshed(self, trace: Trace) -> None:
        """One snapshot for all followers: new lists, so a reader never sees one half-extended."""
        self.live = Trace(
            config=trace.config,
            tokens=list(trace.tokens),
            cycles=list(trace.cycles),
            peak_cache_length=trace.peak_cache_length,
        )
        for follower in self._following():
            follower.on_live(self.live)

    def _following(self) -> list[Follower]:
        with self.flights.lock:
            return list(self.followers)

    # ----- a follower's side -------------------------------------------------------------------
    def follow(self, follower: Follower) -> Any:
        """Block until the result (raising the task's error), or until ``follower`` stops: then, if
        others still follow, leave with the refreshes so far (a cancelled partial trace, None if none yet)."""
        while not self.done.wait(POLL_SECONDS):
            if follower.should_stop() and self._leave(follower):
                return _partial(self.live)
        if self.error is not None:
            raise self.error
        return self.result

    def _leave(self, follower: Follower) -> bool:
        """Drop ``follower`` unless it is the last one: the last stays for the run's own partial trace."""
        with self.flights.lock:
            if self.stopping or len(self.followers) == 1:
                return False
            self.followers.remove(follower)
            return True

    def ahead(self) -> list[Ahead]:
        """The distinct runs queued before this one in the worker, the one holding the model first; each run
        of another model than the one before it counts that model's load (the switch)."""
        queue = self.worker.queued()
        mine = queue.index(self) if self in queue else len(queue)
        ahead, model = [], self.worker.name
        for run in queue[:mine]:
            wanted = run.model if isinstance(run, Flight) else None
            load = self.worker.load_seconds.get(wanted, 0.0) if wanted not in (None, model) else 0.0
            model = wanted or model
            ahead.append(Ahead(run.size, run.progress[1], load) if isinstance(run, Flight) else Ahead(None, 0, load))
        return ahead

    def queue_line(self) -> str:
        """``2 runs ahead, about 15 s``: this run's place and estimated wait."""
        return queue_line(self.ahead(), self.flights.speeds)

    @property
    def sessions(self) -> int:
        return len(self.followers)


class Flights:
    """The runs in flight of one result store, keyed by task, and the speed of the runs that finished."""

    def __init__(self, store: Store):
        self.store = store
        self.speeds = RunSpeeds()
        self.lock = threading.Lock()
        self._flying: dict[Any, Flight] = {}

    def join(
        self,
        task: Any,
        worker: ModelWorker,
        follower: Follower,
        size: int | None = None,
        check: Callable[[Any], object] | None = None,
    ) -> Flight | Any:
        """Follow the flight computing ``task``, starting one if none is (with ``check``, see :class:`Flight`);
        or its finished result, if stored.

        The follower at once gets the flight's progress and live trace so far."""
        with self.lock:
            flight = self._flying.get(task)
            if flight is None:
                cached = self.store.get(task)
                if cached is not None:
                    return cached
                flight = self._flying[task] = Flight(self, task, worker, size, check)
                threading.Thread(target=flight._fly, name="ccviz-flight", daemon=True).start()
            flight.followers.append(follower)
            waiting, progress, live = flight.waiting, flight.progress, flight.live
        if waiting:
            follower.on_wait(waiting)
        elif progress[2]:
            follower.on_progress(*progress)
        if live is not None:
            follower.on_live(live)
        return flight

    def close(self, flight: Flight) -> None:
        """Take ``flight`` off the board (called with the lock held): newcomers no longer join it."""
        if self._flying.get(flight.task) is flight:
            del self._flying[flight.task]

    def _land(self, flight: Flight, seconds: float | None) -> None:
        """The flight ended: keep a complete result, learn the run's speed, then let the followers go."""
        result = flight.result
        cancelled = isinstance(result, Trace) and result.status == "cancelled"
        complete = flight.error is None and result is not None and not cancelled
        if complete and seconds is not None:
            self.speeds.record(flight.progress[1], seconds)
        with self.lock:
            if complete:
                self.store.put(flight.task, result)
            self.close(flight)
        flight.done.set()

    def __len__(self) -> int:
        with self.lock:
            return len(self._flying)


def _partial(live: Trace | None) -> Trace | None:
    """What a follower that left keeps: the refreshes streamed so far, as a cancelled partial trace."""
    if live is None:
        return None
    generated = live.tokens[live.prompt_length :]
    return Trace(
        config=live.config,
        tokens=list(live.tokens),
        cycles=list(live.cycles),
        output_text="".join(token.text for token in generated),
        peak_cache_length=live.peak_cache_length,
        status="cancelled",
        stop_reason="cancelled",
    )
