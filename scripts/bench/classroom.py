"""A classroom on one server: N browser sessions click Run together; each one's time against its solo time, and the CPU.

Starts ``streamlit run app.py`` (the embedded SmolLM2 unless ``--model``) and drives headless chromium (needs the
test requirements: ``bash scripts/install.sh --test``). Half of the sessions (``--shared``) paste the same ~350-token
excerpt of the clinical record with the same settings, as a class told "everyone click Run" does; the others each
paste their own document (an excerpt of another sample, each with its own question and length). All on the Run
page's defaults (``counter_causal_fast``, J = 128, h = 32) with the live view on (``--live-off``: off).

1. Solo, in the same run: every distinct document alone in a fresh tab, click to result (the final heatmap drawn),
   with "Max new tokens" one below the classroom's so nothing comes from the result cache.
2. Together: N fresh tabs, the shared sessions clicked first, then the others, each as soon as the server has
   started the one before (a progress bar shows), so the queue follows the order clicked; every tab is then watched
   at once (round robin every 0.1 s), so each session's click-to-result time is its own.

Printed: each session's time against its solo time and against its bound (the solo times of the distinct runs
clicked before it plus its own: the queue's best case); the CPU seconds of the server, the model worker and the
browsers (psutil, user + system, over each phase, every process of each tree); and whether every session ended
without an error showing its own document's result (its prompt's token count and the start of its solo output).
Targets (not asserted): the identical sessions finish within 1.2x of one solo run; no session waits more
than its bound plus 20%. On a small machine the browsers share the server's cores: the CPU split says how much.
``--protocol`` replaces chromium with websocket clients of Streamlit's own protocol (``protocol_tab.py``): each asks
the server for every rerun and fragment poll a tab asks for and receives every delta, but draws nothing, so the
classroom measures the server and its worker alone, as when each student's browser runs on its own machine.
Run: ``python scripts/bench/classroom.py [--sessions 8] [--shared 4]``; ``--sessions 2 --model tiny-random`` checks
the script in a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ccviz_bench.timing import header

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the browser helpers the browser tests use too
from browser_support import (  # noqa: E402
    chromium,
    excerpt,
    idle,
    metric,
    model_ready,
    open_page,
    paste_document,
    serve_app,
    set_number,
)
from protocol_tab import ProtocolTab  # noqa: E402  (scripts/bench, this script's own folder, is on the path)

TIMEOUT_MS = 300_000
SAMPLES = ("clinical_record.md", "multi_session_chat.md", "prose.md", "reasoning_prompt.md")
SHARED = excerpt("clinical_record.md", 240, "Question S: which drug must this patient never be given?")
RESULT = "[data-testid='stMetric'] >> text=Prompt tokens"
ERRORS = "[data-testid='stException'], [data-testid='stAlertContentError']"
MODEL_READY = re.compile(r"Model: .* · ready")  # the sidebar's status line, as ``model_ready`` reads it


def own_documents(count: int) -> list[str]:
    """``count`` distinct documents, none equal to :data:`SHARED`: each sample in turn, each with its own length."""
    return [
        excerpt(SAMPLES[i % len(SAMPLES)], 220 + 10 * i, f"Question {i + 1}: what is the one fact to remember here?")
        for i in range(count)
    ]


@dataclass
class Seen:
    """What a session's page shows once its run ended."""

    seconds: float
    prompt_tokens: str
    output: str
    engine: float
    errors: list[str] = field(default_factory=list)


class Chromium:
    """Sessions as real headless chromium tabs: what a classroom on this machine costs, browsers included."""

    kind = "chromium"

    def __init__(self, browser, url: str, nice: bool = False):
        self.browser, self.url, self.nice = browser, url, nice

    def open(self, text: str, max_new: int, live: bool = True):
        """A new session (its own browser context) with ``text`` pasted and ``max_new`` set; ``live``: the
        sidebar's "Draw runs live" (set through the page's link)."""
        page = open_page(self.browser, self.url if live else f"{self.url}/?charts.live=0")
        paste_document(page, text)
        set_number(page, "Max new tokens", max_new)
        return page

    def warm_up(self) -> None:
        page = open_page(self.browser, self.url)
        model_ready(page, TIMEOUT_MS)
        paste_document(page, "Warm-up: say hello.")
        self.click_run(page)
        page.wait_for_selector(RESULT, timeout=TIMEOUT_MS)
        page.close()

    def click_run(self, page) -> float:
        """Click Run; return when, once the server has started the run (so runs queue in the order clicked)."""
        page.get_by_role("button", name="Run", exact=True).click()
        at = time.perf_counter()
        page.wait_for_selector("[data-testid='stProgress'], [data-testid='stMetric']", timeout=TIMEOUT_MS)
        return at

    def finished(self, page) -> bool:
        return bool(page.locator(RESULT).count() and page.locator(".js-plotly-plot .nsewdrag").count())

    def result(self, page, seconds: float) -> Seen:
        idle(page)
        output = page.locator("[data-testid='stCode']").first.inner_text()
        errors = [page.locator(ERRORS).nth(i).inner_text() for i in range(page.locator(ERRORS).count())]
        return Seen(
            seconds, metric(page, "Prompt tokens"), output, float(metric(page, "Total time").split()[0]), errors
        )

    def between_polls(self, polls: int) -> None:
        if self.nice and polls % 10 == 0:  # a new tab's renderer is a new process: renice once a second
            lowest_priority_browsers()

    def clients(self) -> list[psutil.Process]:
        return [p for p in psutil.Process().children(recursive=True) if "chrom" in p.name().lower()]


class Protocol:
    """Sessions as websocket clients speaking Streamlit's protocol (:class:`ProtocolTab`): every rerun, poll
    and delta a tab costs the server, nothing drawn, as if each student's browser ran on its own machine."""

    kind = "protocol"

    def __init__(self, url: str):
        self.url = url

    def open(self, text: str, max_new: int, live: bool = True) -> ProtocolTab:
        tab = ProtocolTab(self.url, "" if live else "charts.live=0")
        tab.set_value("text_area", "Document or prompt", text, TIMEOUT_MS / 1000)
        tab.set_value("number_input", "Max new tokens", max_new, TIMEOUT_MS / 1000)
        return tab

    def warm_up(self) -> None:
        tab = ProtocolTab(self.url)
        tab.wait(lambda seen: _model_ready(tab), TIMEOUT_MS / 1000)
        tab.set_value("text_area", "Document or prompt", "Warm-up: say hello.", TIMEOUT_MS / 1000)
        self.click_run(tab)
        tab.wait(lambda seen: self.finished(tab), TIMEOUT_MS / 1000)
        tab.close()

    def click_run(self, tab: ProtocolTab) -> float:
        tab.press("Run", TIMEOUT_MS / 1000)
        at = time.perf_counter()
        tab.wait(lambda seen: bool(tab.shown("progress") or tab.shown("metric")), TIMEOUT_MS / 1000)
        return at

    def finished(self, tab: ProtocolTab) -> bool:
        """The result's page is built and sent: its metrics and its heatmap, the run that drew them ended."""
        done = tab.metric("Prompt tokens") is not None and bool(tab.shown("plotly_chart"))
        return done and not tab.seen.running_full

    def result(self, tab: ProtocolTab, seconds: float) -> Seen:
        output = next((code.code_text for code in tab.shown("code")), "")
        engine = float((tab.metric("Total time") or "nan").split()[0])
        return Seen(seconds, tab.metric("Prompt tokens") or "", output, engine, tab.errors())

    def between_polls(self, polls: int) -> None:
        pass

    def clients(self) -> list[psutil.Process]:
        return [psutil.Process()]  # every tab is a thread of this script


def _model_ready(tab: ProtocolTab) -> bool:
    """The sidebar's status line says the model worker has loaded, on a page whose run ended."""
    captions = [m.body for m in tab.shown("markdown")]
    return not tab.seen.running_full and any(MODEL_READY.search(body) for body in captions)


def watch(driver, tabs: list, clicked: list[float], timeout_s: float) -> list[float | None]:
    """Each tab's click-to-result seconds, watching every tab at once (None: not done in ``timeout_s``)."""
    done: list[float | None] = [None] * len(tabs)
    deadline = time.perf_counter() + timeout_s
    polls = 0
    while any(seconds is None for seconds in done) and time.perf_counter() < deadline:
        driver.between_polls(polls)
        polls += 1
        for i, tab in enumerate(tabs):
            if done[i] is None and driver.finished(tab):
                done[i] = time.perf_counter() - clicked[i]
        time.sleep(0.1)
    return done


def lowest_priority_browsers() -> None:
    """Every chromium process of this script at nice 19: the server and its worker take the CPU first, as
    when the students' browsers run on their own machines."""
    for process in psutil.Process().children(recursive=True):
        try:
            if "chrom" in process.name().lower() and process.nice() < 19:
                process.nice(19)
        except psutil.Error:  # ended between the listing and the change
            pass


class Cpu:
    """User + system CPU seconds of the server, its model worker and the clients (the browsers, or this
    script's protocol tabs), over a phase."""

    def __init__(self, server: psutil.Process, driver: Chromium | Protocol):
        self.server, self.driver = server, driver

    def trees(self) -> dict[str, list[psutil.Process]]:
        children = self.server.children(recursive=True)
        return {
            "server": [self.server],
            "worker": [p for p in children if "ccviz.worker" in " ".join(_cmdline(p))],
            "browsers" if self.driver.kind == "chromium" else "clients": self.driver.clients(),
        }

    def snapshot(self) -> dict[str, dict[int, float]]:
        out: dict[str, dict[int, float]] = {}
        for name, processes in self.trees().items():
            out[name] = {}
            for process in processes:
                try:
                    times = process.cpu_times()
                    out[name][process.pid] = times.user + times.system
                except psutil.Error:  # ended between the listing and the read
                    pass
        return out

    @staticmethod
    def spent(before: dict[str, dict[int, float]], after: dict[str, dict[int, float]]) -> dict[str, float]:
        """CPU seconds per tree between two snapshots (a process started in between counts whole)."""
        return {
            name: sum(seconds - before.get(name, {}).get(pid, 0.0) for pid, seconds in after[name].items())
            for name in after
        }


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def streamlit_process() -> psutil.Process:
    """The server ``serve_app`` started: our child running ``streamlit run``."""
    for process in psutil.Process().children(recursive=True):
        if "streamlit" in _cmdline(process):
            return process
    raise RuntimeError("classroom: the streamlit server process was not found")


def split(cpu: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in cpu.items())


@contextlib.contextmanager
def sessions(protocol: bool, url: str, nice: bool) -> Iterator[Chromium | Protocol]:
    """The classroom's sessions: protocol tabs, or headless chromium (started here, closed after)."""
    if protocol:
        yield Protocol(url)
        return
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, chromium(p) as browser:
        yield Chromium(browser, url, nice)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help="browser sessions clicking Run together")
    parser.add_argument("--shared", type=int, help="of which on the same sample and settings (default: half)")
    parser.add_argument("--max-new", type=int, default=64, help="max new tokens of the classroom's runs")
    parser.add_argument("--model", help="CCVIZ_MODEL for the server (default: the embedded SmolLM2)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for every session")
    parser.add_argument("--live-off", action="store_true", help='every session with "Draw runs live" off')
    parser.add_argument(
        "--protocol",
        action="store_true",
        help="sessions as websocket clients of Streamlit's protocol instead of chromium: every rerun, poll and "
        "delta a tab asks of the server, nothing drawn (the server and its worker alone, as with remote browsers)",
    )
    parser.add_argument(
        "--nice-browsers",
        action="store_true",
        help="run chromium at the lowest CPU priority, as if the browsers were on other machines (this one's "
        "cores then go to the server and its worker first)",
    )
    args = parser.parse_args()
    shared = args.sessions // 2 if args.shared is None else args.shared
    if not 0 <= shared <= args.sessions or args.sessions < 1:
        parser.error("--shared must lie between 0 and --sessions, and --sessions be at least 1")
    if args.protocol and args.nice_browsers:
        parser.error("--nice-browsers needs the browsers: leave out --protocol")

    documents = [SHARED] * shared + own_documents(args.sessions - shared)
    distinct = list(dict.fromkeys(documents))
    env = {k: v for k, v in os.environ.items() if k != "CCVIZ_MODEL"} | (
        {"CCVIZ_MODEL": args.model} if args.model else {}
    )
    with serve_app(env, "bench-classroom.log") as url, sessions(args.protocol, url, args.nice_browsers) as driver:
        cpu = Cpu(streamlit_process(), driver)
        driver.warm_up()

        before = cpu.snapshot()
        solo: dict[str, Seen] = {}
        for text in distinct:
            tab = driver.open(text, args.max_new - 1, not args.live_off)
            seconds = watch(driver, [tab], [driver.click_run(tab)], args.timeout)[0]
            if seconds is None:
                raise SystemExit("classroom: a solo run did not finish")
            solo[text] = driver.result(tab, seconds)
            tab.close()
        solo_cpu = Cpu.spent(before, cpu.snapshot())

        tabs = [driver.open(text, args.max_new, not args.live_off) for text in documents]
        before = cpu.snapshot()
        first = time.perf_counter()
        clicked = [
            driver.click_run(tab) for tab in tabs
        ]  # each waits for its run to be queued: clicks keep their order
        times = watch(driver, tabs, clicked, args.timeout)
        last = max((at + s for at, s in zip(clicked, times) if s is not None), default=first) - first
        together_cpu = Cpu.spent(before, cpu.snapshot())
        seen = [driver.result(tab, s) if s is not None else None for tab, s in zip(tabs, times)]

    print(
        header(
            f"a classroom: {args.sessions} {'protocol' if args.protocol else 'chromium'} sessions on one server "
            f"({shared} on the same sample), "
            f"{args.model or 'SmolLM2'}, counter_causal_fast J=128 h=32, max new {args.max_new}, "
            + ("live view off" if args.live_off else "live view on")
            + (", browsers at nice 19" if args.nice_browsers else "")
        )
    )
    sum_solo = sum(s.seconds for s in solo.values())
    print(f"solo runs: {', '.join(f'{solo[t].seconds:.2f}' for t in distinct)} s (sum {sum_solo:.2f} s)")
    print(f"  CPU over the solo runs: {split(solo_cpu)}")
    print("together (clicked in this order):")
    problems, bounds = [], []
    for i, (text, s, view) in enumerate(zip(documents, times, seen)):
        alone = solo[text]
        bound = sum(solo[t].seconds for t in dict.fromkeys(documents[:i]) if t != text) + alone.seconds
        kind = "shared" if text == SHARED else "own   "
        if s is None or view is None:
            print(f"  session {i + 1} ({kind}): not finished after {args.timeout:.0f} s")
            problems.append(f"session {i + 1} did not finish")
            continue
        bounds.append(s / bound)
        print(
            f"  session {i + 1} ({kind}): {s:6.2f} s   solo {alone.seconds:6.2f} s   ratio {s / alone.seconds:5.2f}   "
            f"bound {bound:6.2f} s   ratio {s / bound:5.2f}   engine {view.engine:.2f} s (solo {alone.engine:.2f})"
        )
        if view.errors:
            problems.append(f"session {i + 1} shows an error: {view.errors[0]}")
        if view.prompt_tokens != alone.prompt_tokens or not view.output.startswith(alone.output.rstrip()[:40]):
            problems.append(f"session {i + 1} does not show its own document's result")
    print(
        f"  first click to last result {last:.2f} s; sum of the distinct solo runs {sum_solo:.2f} s; "
        f"ratio {last / sum_solo:.2f}"
    )
    shared_times = [s for t, s in zip(documents, times) if t == SHARED and s is not None]
    if shared_times:
        print(
            f"  the {len(shared_times)} identical sessions: slowest {max(shared_times):.2f} s against one solo run "
            f"{solo[SHARED].seconds:.2f} s: ratio {max(shared_times) / solo[SHARED].seconds:.2f}   target <= 1.2"
        )
    print(f"  worst wait against its bound: ratio {max(bounds, default=float('nan')):.2f}   target <= 1.2")
    total = sum(together_cpu.values())
    print(
        f"  CPU over the classroom: {split(together_cpu)}; shares: "
        + ", ".join(f"{name} {100 * seconds / total:.0f}%" for name, seconds in together_cpu.items())
    )
    print(
        "checks: "
        + ("every session finished, without an error, showing its own result" if not problems else "; ".join(problems))
    )
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
