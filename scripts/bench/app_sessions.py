"""The app in a real browser: click-to-heatmap time, the first click on a fresh server, three sessions at once.

Starts ``streamlit run app.py`` on the embedded SmolLM2 and drives headless chromium (needs the test
requirements: ``bash scripts/install.sh --test``). Measured, with ratios to baselines of the same run:

1. ``generate`` called directly in this process on the 1,000-token clinical record
   (``counter_causal_fast``, J = 128, h = 32, page defaults), before the server starts;
2. how long the fresh server's status line takes to say the model is ready;
3. on the warm server, the same run from the click on Run to a drawn heatmap, and the engine time the
   page reports (its "Total time"), against 1;
4. three ~350-token documents, each alone, then all three clicked together in three sessions: the time
   from the first click to the last result against the sum of the solo times.

Every measured run is in a new tab (its own session, no earlier result on its page) and changes
"Max new tokens" (64, 63, ...: every run stops at EOS long before) so nothing comes from the result
cache; a warm-up run loads the model first, so the script also measures an app from before the model worker
(copy it, tests/browser_support.py and ccviz_bench/timing.py into an older checkout). Targets: engine time in
the app / direct <= 1.15; three together <= 1.3x the sum of solo times; click to heatmap <= 5 s.
Run: ``python scripts/bench/app_sessions.py [--repeats 3]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from ccviz_bench.timing import header

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))  # the browser helpers the browser tests use too
from browser_support import (  # noqa: E402
    CHROMIUM,
    CHROMIUM_ARGS,
    SESSION_DOCUMENTS,
    idle,
    metric,
    model_ready,
    open_page,
    paste_document,
    serve_app,
    set_number,
)

CLINICAL = (ROOT / "assets" / "samples" / "clinical_record.md").read_text(encoding="utf-8")
TIMEOUT_MS = 300_000


def paste(page, text: str, max_new: int) -> None:
    paste_document(page, text)
    set_number(page, "Max new tokens", max_new)


def click_run(page) -> float:
    page.get_by_role("button", name="Run", exact=True).click()
    return time.perf_counter()


def wait_result(page, clicked: float, timeout_ms: int = TIMEOUT_MS) -> float:
    """Seconds from the click until the result (metrics and heatmap) is drawn on this fresh tab."""
    page.wait_for_selector("[data-testid='stMetric'] >> text=Prompt tokens", timeout=timeout_ms)
    page.wait_for_selector(".js-plotly-plot .nsewdrag", timeout=timeout_ms)
    return time.perf_counter() - clicked


def engine_seconds(page) -> float:
    return float(metric(page, "Total time").split()[0])


def fresh_tab(browser, url: str, text: str, max_new: int):
    """A new session (so no earlier result is on its page) with ``text`` pasted."""
    page = open_page(browser, url)
    paste(page, text, max_new)
    return page


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--together-timeout", type=float, default=300, help="seconds to wait for the three sessions")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    from ccviz import generate, load_model

    lm = load_model()
    direct = []
    for _ in range(args.repeats + 1):  # the first is a warm-up
        direct.append(
            generate(
                lm, CLINICAL, policy="counter_causal_fast", cache_size=128, chunk_size=32, max_new_tokens=64
            ).timings["total_seconds"]
        )
    direct_s = statistics.median(direct[1:])
    del lm

    env = {k: v for k, v in os.environ.items() if k != "CCVIZ_MODEL"}
    max_new = iter(range(64, 0, -1))
    started = time.perf_counter()
    with serve_app(env, "bench-app-sessions.log") as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = open_page(browser, url)
        try:
            model_ready(page, TIMEOUT_MS)
            ready = f"{time.perf_counter() - started:6.2f} s"
        except Exception:  # an app without a status line (before the model worker) loads on the first click
            ready = "   n/a (no status line)"
        paste(page, "Warm-up: say hello.", next(max_new))
        wait_result(page, click_run(page))
        page.close()

        clicks, engine = [], []
        for _ in range(args.repeats):
            page = fresh_tab(browser, url, CLINICAL, next(max_new))
            clicks.append(wait_result(page, click_run(page)))
            idle(page)
            engine.append(engine_seconds(page))
            page.close()

        solo = []
        for doc in SESSION_DOCUMENTS:
            page = fresh_tab(browser, url, doc, next(max_new))
            solo.append(wait_result(page, click_run(page)))
            page.close()
        pages = [fresh_tab(browser, url, doc, next(max_new)) for doc in SESSION_DOCUMENTS]
        first = time.perf_counter()
        clicked = [click_run(tab) for tab in pages]
        try:
            together = [
                wait_result(tab, at, timeout_ms=int(1000 * args.together_timeout)) for tab, at in zip(pages, clicked)
            ]
            last = f"{max(at + seconds for at, seconds in zip(clicked, together)) - first:.2f} s"
            ratio = f"{(max(at + seconds for at, seconds in zip(clicked, together)) - first) / sum(solo):.2f}"
        except Exception:
            together, last, ratio = [], f"not finished after {args.together_timeout:.0f} s", "n/a"
        browser.close()

    click_s, engine_s = statistics.median(clicks), statistics.median(engine)
    print(header(f"the app in chromium: SmolLM2, counter_causal_fast J=128 h=32, median of {args.repeats}"))
    print(f"fresh server to 'model ready' in the status line: {ready}")
    print(f"1,000-token record, direct generate:              {direct_s:6.2f} s")
    print(
        f"  same run in the app, engine time (Total time):  {engine_s:6.2f} s   "
        f"ratio {engine_s / direct_s:.2f}   target <= 1.15"
    )
    print(
        f"  same run in the app, click to heatmap:          {click_s:6.2f} s   "
        f"ratio {click_s / direct_s:.2f}   target <= 5 s"
    )
    print(f"  the app's own share of it (click to heatmap - engine time): {click_s - engine_s:.2f} s")
    print(f"three ~350-token documents, solo: {', '.join(f'{s:.2f}' for s in solo)} s (sum {sum(solo):.2f} s)")
    print(
        f"  clicked together, each: {', '.join(f'{s:.2f}' for s in together) or '-'} s; "
        f"first click to last result {last}"
    )
    print(f"  together / sum of solo: {ratio}   target <= 1.3")


if __name__ == "__main__":
    main()
