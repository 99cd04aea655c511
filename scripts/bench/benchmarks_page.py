"""The Benchmarks page in a real browser: from opening it to its last chart drawn, cold and warm.

Starts ``streamlit run app.py`` (the tiny random model: the page needs none) on the published results
(``bench/results``, or ``$CCVIZ_BENCH_RESULTS``) and opens ``/benchmarks`` in headless chromium
(needs the test requirements: ``bash scripts/install.sh --test``). Each repetition:

1. cold: a fresh server and a fresh browser profile, its first visit (Python imports, reading and
   summarising every result file, building every figure, loading the app's scripts, drawing);
2. warm: a second visit in a new tab of the same browser (a new session) on the same server, whose
   summaries and figures are cached (:func:`ccviz_bench.browse.cached_sections`) until the folder's
   files change, and whose scripts the browser has cached (but parses and runs again: a new tab);
3. in the app: a reader already on another page of the app (the Traces page, opened in a new tab)
   clicks Benchmarks in the sidebar: the same server and session, the app's scripts already running.

"Drawn" is every Plotly chart of the page laid out by plotly.js: the page draws only its open tab, the
first on a visit, so as many as the first section has figures (plus the needle map); the time to the page's
title is printed too (the app's own scripts). Prints the medians over the repetitions. Target (issue
29): warm <= 3 s. The machine's load shows in every number: quote it with them.
Run: ``python scripts/bench/benchmarks_page.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's ccviz (as the server runs it), the browser helpers

from browser_support import CHROMIUM, CHROMIUM_ARGS, serve_app  # noqa: E402

from ccviz_bench.browse import command_for_all, load_sections  # noqa: E402
from ccviz_bench.results import PUBLISHED, results_dir  # noqa: E402
from ccviz_bench.timing import header  # noqa: E402

TIMEOUT_MS = 300_000
DRAWN = """(expected) => {
  const charts = [...document.querySelectorAll('.js-plotly-plot')];
  return charts.length >= expected && charts.every(chart => chart._fullLayout && chart.querySelector('svg.main-svg'));
}"""


def expected_charts(folder: Path) -> int:
    """How many charts the page draws for ``folder`` on a visit: its first tab's figures (and the needle map)."""
    sections = load_sections(folder)
    if command_for_all(sections, folder) is None:  # a follow-up folder: a tab per measured task only, as the page
        sections = [s for s in sections if s.meta or s.measured or s.error]
    first = sections[0]
    return len(first.figures) + (first.task == "needle" and bool(first.measured))


def visit(context, url: str, charts: int) -> tuple[float, float]:
    """Seconds from opening ``url`` in a new tab of ``context`` (a browser profile: its HTTP cache) to the
    page's title shown, and to its ``charts`` charts drawn."""
    page = context.new_page()
    try:
        start = time.perf_counter()
        page.goto(f"{url}/benchmarks")
        page.wait_for_selector("h1:has-text('Benchmarks')", timeout=TIMEOUT_MS)
        titled = time.perf_counter() - start
        page.wait_for_function(DRAWN, arg=charts, timeout=TIMEOUT_MS, polling=100)
        return titled, time.perf_counter() - start
    finally:
        page.close()


def from_another_page(context, url: str, charts: int) -> float:
    """Seconds from clicking Benchmarks in the sidebar of the app's Traces page (open in a new tab of
    ``context``) to the Benchmarks page's ``charts`` charts drawn."""
    page = context.new_page()
    try:
        page.goto(f"{url}/traces")
        page.wait_for_selector("h1:has-text('Traces')", timeout=TIMEOUT_MS)
        page.wait_for_load_state("networkidle")
        start = time.perf_counter()
        page.get_by_role("link", name="Benchmarks").click()
        page.wait_for_function(DRAWN, arg=charts, timeout=TIMEOUT_MS, polling=100)
        return time.perf_counter() - start
    finally:
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    folder = results_dir(default=ROOT / PUBLISHED)
    charts = expected_charts(folder)
    env = {**os.environ, "CCVIZ_MODEL": "tiny-random", "CCVIZ_BENCH_RESULTS": str(folder)}
    cold, warm = [], []  # (title shown, last chart drawn) per repetition
    navigated = []  # last chart drawn, from a click in the app's sidebar
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for repeat in range(args.repeats):
                context = browser.new_context(viewport={"width": 1500, "height": 1400})  # a first-time visitor
                with serve_app(env, "streamlit-benchmarks-page.log") as url:
                    cold.append(visit(context, url, charts))
                    warm.append(visit(context, url, charts))  # the same browser's second visit: a new session
                    navigated.append(from_another_page(context, url, charts))
                context.close()
                print(
                    f"repeat {repeat + 1}: cold {cold[-1][1]:.1f} s (title {cold[-1][0]:.1f} s), "
                    f"warm {warm[-1][1]:.1f} s (title {warm[-1][0]:.1f} s), in the app {navigated[-1]:.1f} s",
                    flush=True,
                )
        finally:
            browser.close()
    print(header(f"the Benchmarks page in chromium: {folder}, {charts} charts, median of {args.repeats}"))
    print(f"# load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min) at the end")
    for name, times in (("cold (fresh server, first visit)", cold), ("warm (second visit, new session)", warm)):
        titled, drawn = (statistics.median(t[i] for t in times) for i in (0, 1))
        print(f"{name}: title shown {titled:.1f} s, last chart drawn {drawn:.1f} s")
    print(f"in the app (a click in the sidebar of another page): last chart drawn {statistics.median(navigated):.1f} s")
    print("target: warm <= 3 s to the last chart")


if __name__ == "__main__":
    main()
