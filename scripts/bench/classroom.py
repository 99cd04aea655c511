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
Targets (issue 27, not asserted): the identical sessions finish within 1.2x of one solo run; no session waits more
than its bound plus 20%. On a small machine the browsers share the server's cores: the CPU split says how much.
Run: ``python scripts/bench/classroom.py [--sessions 8] [--shared 4]``; ``--sessions 2 --model tiny-random`` checks
the script in a minute.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ccviz.bench.timing import header

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

TIMEOUT_MS = 300_000
SAMPLES = ("clinical_record.md", "multi_session_chat.md", "prose.md", "reasoning_prompt.md")
SHARED = excerpt("clinical_record.md", 240, "Question S: which drug must this patient never be given?")
RESULT = "[data-testid='stMetric'] >> text=Prompt tokens"
ERRORS = "[data-testid='stException'], [data-testid='stAlertContentError']"


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


def fresh_tab(browser, url: str, text: str, max_new: int, live: bool = True):
    """A new session (its own browser context) with ``text`` pasted and ``max_new`` set; ``live``: the
    sidebar's "Draw runs live" (set through the page's link)."""
    page = open_page(browser, url if live else f"{url}/?charts.live=0")
    paste_document(page, text)
    set_number(page, "Max new tokens", max_new)
    return page


def click_run(page) -> float:
    """Click Run; return when, once the server has started the run (so runs queue in the order clicked)."""
    page.get_by_role("button", name="Run", exact=True).click()
    at = time.perf_counter()
    page.wait_for_selector("[data-testid='stProgress'], [data-testid='stMetric']", timeout=TIMEOUT_MS)
    return at


def read_result(page, seconds: float) -> Seen:
    idle(page)
    output = page.locator("[data-testid='stCode']").first.inner_text()
    errors = [page.locator(ERRORS).nth(i).inner_text() for i in range(page.locator(ERRORS).count())]
    return Seen(seconds, metric(page, "Prompt tokens"), output, float(metric(page, "Total time").split()[0]), errors)


def watch(pages: list, clicked: list[float], timeout_s: float, nice: bool = False) -> list[float | None]:
    """Each page's click-to-result seconds, watching every page at once (None: not done in ``timeout_s``);
    ``nice``: keep every chromium process at the lowest CPU priority meanwhile (see ``--nice-browsers``)."""
    done: list[float | None] = [None] * len(pages)
    deadline = time.perf_counter() + timeout_s
    polls = 0
    while any(seconds is None for seconds in done) and time.perf_counter() < deadline:
        if nice and polls % 10 == 0:  # a new tab's renderer is a new process: renice once a second
            lowest_priority_browsers()
        polls += 1
        for i, page in enumerate(pages):
            if done[i] is None and page.locator(RESULT).count() and page.locator(".js-plotly-plot .nsewdrag").count():
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
    """User + system CPU seconds of the server, its model worker and the browsers, over a phase."""

    def __init__(self, server: psutil.Process):
        self.server = server

    def trees(self) -> dict[str, list[psutil.Process]]:
        children = self.server.children(recursive=True)
        ours = psutil.Process().children(recursive=True)
        return {
            "server": [self.server],
            "worker": [p for p in children if "ccviz.worker" in " ".join(_cmdline(p))],
            "browsers": [p for p in ours if "chrom" in p.name().lower()],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help="browser sessions clicking Run together")
    parser.add_argument("--shared", type=int, help="of which on the same sample and settings (default: half)")
    parser.add_argument("--max-new", type=int, default=64, help="max new tokens of the classroom's runs")
    parser.add_argument("--model", help="CCVIZ_MODEL for the server (default: the embedded SmolLM2)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds to wait for every session")
    parser.add_argument("--live-off", action="store_true", help='every session with "Draw runs live" off')
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
    from playwright.sync_api import sync_playwright

    documents = [SHARED] * shared + own_documents(args.sessions - shared)
    distinct = list(dict.fromkeys(documents))
    env = {k: v for k, v in os.environ.items() if k != "CCVIZ_MODEL"} | (
        {"CCVIZ_MODEL": args.model} if args.model else {}
    )
    with serve_app(env, "bench-classroom.log") as url, sync_playwright() as p, chromium(p) as browser:
        cpu = Cpu(streamlit_process())
        warm = open_page(browser, url)
        model_ready(warm, TIMEOUT_MS)
        paste_document(warm, "Warm-up: say hello.")
        click_run(warm)
        warm.wait_for_selector(RESULT, timeout=TIMEOUT_MS)
        warm.close()

        before = cpu.snapshot()
        solo: dict[str, Seen] = {}
        for text in distinct:
            page = fresh_tab(browser, url, text, args.max_new - 1, not args.live_off)
            seconds = watch([page], [click_run(page)], args.timeout, args.nice_browsers)[0]
            if seconds is None:
                raise SystemExit("classroom: a solo run did not finish")
            solo[text] = read_result(page, seconds)
            page.close()
        solo_cpu = Cpu.spent(before, cpu.snapshot())

        pages = [fresh_tab(browser, url, text, args.max_new, not args.live_off) for text in documents]
        before = cpu.snapshot()
        first = time.perf_counter()
        clicked = [click_run(page) for page in pages]  # each waits for its run to be queued: clicks keep their order
        times = watch(pages, clicked, args.timeout, args.nice_browsers)
        last = max((at + s for at, s in zip(clicked, times) if s is not None), default=first) - first
        together_cpu = Cpu.spent(before, cpu.snapshot())
        seen = [read_result(page, s) if s is not None else None for page, s in zip(pages, times)]

    print(
        header(
            f"a classroom: {args.sessions} chromium sessions on one server ({shared} on the same sample), "
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
