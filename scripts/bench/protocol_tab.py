"""A Streamlit session without a browser: the websocket protocol one tab speaks, for the classroom benchmark.

A browser tab costs the server what its messages cost: the script reruns it asks for (a widget changed, a
fragment's timer fired), the deltas those reruns build and send. :class:`ProtocolTab` asks for exactly those,
as Streamlit's frontend does, and draws nothing: so a classroom driven by these tabs measures the server and
its model worker alone, as if every student's browser ran on their own machine.

What it does as the frontend does:
- it connects to ``/_stcore/stream`` and asks for a full run with the page's query string;
- it keeps every widget value it set and sends them all with every rerun (a button's trigger only once);
- it follows the app's link: a ``page_info_changed`` query string is sent with the next rerun;
- it reruns each fragment that announced ``auto_rerun`` at its interval, until a full run or
  ``stop_auto_rerun`` cancels it (the Run page's progress poll, the sidebar's model status line);
- it keeps the elements of the newest full run by delta path, fragment deltas replacing theirs.

One thread per tab reads its messages and fires its timers; the caller's thread sends the interactions.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

FINISHED = ForwardMsg.ScriptFinishedStatus.FINISHED_SUCCESSFULLY
INT = 1  # NumberInput.DataType.INT


@dataclass
class RunState:
    """What the tab has seen: elements of the newest full run by delta path, and how many full runs ended."""

    elements: dict[tuple[int, ...], Any] = field(default_factory=dict)
    full_runs: int = 0
    running_full: bool = False


class ProtocolTab:
    """One session of the app at ``url``, driven over the websocket as a browser tab would drive it."""

    def __init__(self, url: str, query: str = ""):
        parts = urlsplit(url)
        self.query = query
        self.socket = connect(f"ws://{parts.netloc}/_stcore/stream", subprotocols=["streamlit"], max_size=None)
        self.states: dict[str, WidgetState] = {}  # widget id -> the value this tab set, sent with every rerun
        self.timers: dict[str, tuple[float, float]] = {}  # fragment id -> (interval, next due)
        self.seen = RunState()
        self.closed = False
        self._send_lock = threading.Lock()
        self._changed = threading.Condition(threading.RLock())  # a wait condition may call shown()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.rerun()

    # ----- what the user does ------------------------------------------------------------------
    def rerun(self, fragment: str = "", trigger: str | None = None) -> int:
        """Ask for a run (of one fragment when given) with every value set so far (plus ``trigger``, a button
        id, pressed); return the number of full runs ended before it, for :meth:`wait_run`."""
        states = list(self.states.values())
        if trigger is not None:
            states.append(WidgetState(id=trigger, trigger_value=True))
        message = BackMsg()
        message.rerun_script.query_string = self.query
        message.rerun_script.widget_states.widgets.extend(states)
        message.rerun_script.fragment_id = fragment
        message.rerun_script.is_auto_rerun = bool(fragment)
        with self._changed:
            before = self.seen.full_runs
        with self._send_lock:
            self.socket.send(message.SerializeToString())
        return before

    def wait_run(self, before: int, timeout: float) -> None:
        """Until a full run ends after the ``before``-th (the one :meth:`rerun` asked for, or a later one)."""
        self.wait(lambda seen: seen.full_runs > before and not seen.running_full, timeout)

    def wait(self, ready, timeout: float) -> None:
        """Until ``ready(self.seen)`` holds; raises TimeoutError after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not ready(self.seen):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    raise TimeoutError("the app did not answer in time" if not self.closed else "the socket closed")
                self._changed.wait(left)

    def set_value(self, kind: str, label: str, value: Any, timeout: float) -> None:
        """Give the widget ``kind`` (``text_area``, ``number_input``) labelled ``label`` a value, and wait for
        the full run that follows."""
        element = self.widget(kind, label, timeout)
        state = WidgetState(id=element.id)
        if kind == "number_input":
            if element.data_type == INT:
                state.int_value = int(value)
            else:
                state.double_value = float(value)
        else:
            state.string_value = str(value)
        self.states[element.id] = state
        self.wait_run(self.rerun(), timeout)

    def press(self, label: str, timeout: float = 60.0) -> None:
        """Press the button labelled ``label`` (its trigger is sent once, as the frontend does)."""
        self.rerun(trigger=self.widget("button", label, timeout).id)

    def close(self) -> None:
        self.closed = True
        self.socket.close()

    # ----- what the page shows -----------------------------------------------------------------
    def shown(self, kind: str) -> list[Any]:
        """Every element of ``kind`` (an Element oneof name: ``metric``, ``code``, ``progress``, ...) on the
        newest full run's page, in page order (callable from a :meth:`wait` condition: the lock is reentrant)."""
        with self._changed:
            items = sorted(self.seen.elements.items())
        return [getattr(element, kind) for _, element in items if element.WhichOneof("type") == kind]

    def widget(self, kind: str, label: str, timeout: float = 60.0) -> Any:
        """The enabled widget ``kind`` labelled ``label`` once a full run has drawn it and ended (a page being
        rebuilt has not drawn it yet, and a user cannot use a disabled one: the Run button waits for the
        model); raises TimeoutError if it never shows."""
        found: list[Any] = []

        def drawn(seen: RunState) -> bool:
            found[:] = [widget for widget in self.shown(kind) if widget.label == label and not widget.disabled]
            return bool(found) and not seen.running_full

        self.wait(drawn, timeout)
        return found[0]

    def metric(self, label: str) -> str | None:
        return next((m.body for m in self.shown("metric") if m.label == label), None)

    def errors(self) -> list[str]:
        """The page's exceptions and error boxes, as text."""
        texts = [f"{e.type}: {e.message}" for e in self.shown("exception")]
        return texts + [a.body for a in self.shown("alert") if a.format == a.ERROR]

    # ----- the tab's own thread ----------------------------------------------------------------
    def _read(self) -> None:
        while not self.closed:
            due = min((at for _, at in self.timers.values()), default=None)
            try:
                raw = self.socket.recv(timeout=None if due is None else max(0.0, due - time.monotonic()))
            except TimeoutError:
                self._fire_timers()
                continue
            except ConnectionClosed:
                break
            message = ForwardMsg()
            message.ParseFromString(raw if isinstance(raw, bytes) else raw.encode())
            self._handle(message)
        with self._changed:
            self.closed = True
            self._changed.notify_all()

    def _fire_timers(self) -> None:
        now = time.monotonic()
        for fragment, (interval, at) in list(self.timers.items()):
            if at <= now:
                self.timers[fragment] = (interval, now + interval)
                self.rerun(fragment=fragment)

    def _handle(self, message: ForwardMsg) -> None:
        kind = message.WhichOneof("type")
        with self._changed:
            if kind == "new_session" and not message.metadata.run.fragment_ids:  # a full run starts: the page
                # is built again and its fragments announce their timers again
                self.seen.elements, self.seen.running_full = {}, True
                self.timers.clear()
            elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
                path = tuple(message.metadata.delta_path)
                self.seen.elements[path] = message.delta.new_element
            elif kind == "auto_rerun":
                interval = message.auto_rerun.interval
                self.timers[message.auto_rerun.fragment_id] = (interval, time.monotonic() + interval)
            elif kind == "stop_auto_rerun":
                for fragment in message.stop_auto_rerun.fragment_ids:
                    self.timers.pop(fragment, None)
            elif kind == "page_info_changed":  # the app rewrote its link: the next rerun sends it
                self.query = message.page_info_changed.query_string
            elif kind == "script_finished" and message.script_finished == FINISHED and self.seen.running_full:
                self.seen.full_runs += 1
                self.seen.running_full = False
            self._changed.notify_all()
