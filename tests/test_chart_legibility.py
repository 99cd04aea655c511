"""Every Plotly chart legible in a real browser: labels inside the chart, none over another.

Opens the Benchmarks page on the published results (every tab) at a wide and a narrow window (each
follow-up folder at the wide one under ``-m slow``), then a finished run on Run, Surprise and Compare
(four runs side by side) on the tiny random model, and in each chart measures the boxes chromium draws
for tick labels, axis titles, legend entries, annotations (subplot titles, reference lines) and the
title: each must lie inside the chart's SVG and overlap no other. Fixed margins failed exactly this
(y ticks cut at the left, axis titles over the ticks); :func:`ccviz.figures.layout.legible` is what passes it.
"""

from __future__ import annotations

import contextlib
import os

import pytest
from browser_support import (
    ARTIFACTS,
    ROOT,
    RUN_TIMEOUT_MS,
    browser_marks,
    chromium,
    idle,
    model_ready,
    open_page,
    paste_document,
    photographed_on_failure,
    serve_app,
    set_number,
)

pytestmark = browser_marks()

WIDE, NARROW = 1500, 1000  # window widths: a wide screen's, and a laptop's with the sidebar open
LABELS = {  # what a reader must be able to read, by kind (plotly.js's class names)
    "x tick": ".xtick text",
    "y tick": ".ytick text",
    "axis title": "text[class^='x'][class$='title'], text[class^='y'][class$='title']",
    "legend entry": ".legendtext",
    "legend title": ".legendtitletext",
    "annotation": ".annotation-text",
    "title": ".gtitle",
}
# Each visible chart's labels, as boxes in page pixels; a label outside its chart's SVG or over another is a problem.
CHECK = """(labels) => {
  const problems = [];
  const charts = [...document.querySelectorAll('.js-plotly-plot')].filter(chart => chart.offsetParent !== null);
  charts.forEach((chart, i) => {
    const frame = chart.querySelector('svg.main-svg').getBoundingClientRect();
    const name = (chart.querySelector('.gtitle') || {}).textContent || `chart ${i + 1} (${Math.round(frame.width)} px)`;
    const boxes = [], seen = new Set();
    for (const [kind, selector] of Object.entries(labels)) {
      for (const el of chart.querySelectorAll(selector)) {
        const box = el.getBoundingClientRect(), style = getComputedStyle(el);
        if (seen.has(el) || !el.textContent.trim() || !box.width || !box.height || style.display === 'none'
            || style.visibility === 'hidden' || style.opacity === '0') continue;
        seen.add(el);
        boxes.push({what: `${kind} "${el.textContent.trim()}"`, box});
      }
    }
    const slack = 1;  // pixels: anti-aliased edges touch
    for (const {what, box} of boxes) {
      if (box.left < frame.left - slack || box.right > frame.right + slack || box.top < frame.top - slack
          || box.bottom > frame.bottom + slack) problems.push(`${name}: ${what} is cut off (outside the chart)`);
    }
    boxes.forEach((a, j) => boxes.slice(j + 1).forEach(b => {
      const w = Math.min(a.box.right, b.box.right) - Math.max(a.box.left, b.box.left);
      const h = Math.min(a.box.bottom, b.box.bottom) - Math.max(a.box.top, b.box.top);
      if (w > slack && h > slack) problems.push(`${name}: ${a.what} overlaps ${b.what}`);
    }));
  });
  return {charts: charts.length, problems};
}"""


# Every chart element shown has been drawn by plotly.js (its SVG is there).
DRAWN = """() => [...document.querySelectorAll("[data-testid='stPlotlyChart']")]
  .filter(el => el.offsetParent !== null).every(el => el.querySelector('.js-plotly-plot svg.main-svg'))"""


def illegible(page, where: str) -> tuple[int, list[str]]:
    """How many charts ``page`` shows, and what in them cannot be read (each problem prefixed by ``where``)."""
    page.wait_for_timeout(600)  # a chart that has just been shown (a tab, a new width) redraws at its size
    found = page.evaluate(CHECK, LABELS)
    return found["charts"], [f"{where}: {problem}" for problem in found["problems"]]


@pytest.fixture(scope="module")
def tiny_url():
    env = {**os.environ, "CCVIZ_MODEL": "tiny-random"}
    env.pop("CCVIZ_BENCH_RESULTS", None)  # the published results
    with serve_app(env, "streamlit-legibility.log") as url:
        yield url


def _tabs(page, where: str) -> tuple[int, list[str]]:
    charts, problems = 0, []
    tabs = page.get_by_role("tab")
    for i in range(tabs.count()):
        tab = tabs.nth(i)
        tab.click()  # the page draws only the open tab: a click reruns it
        idle(page)
        page.wait_for_function(DRAWN, timeout=RUN_TIMEOUT_MS)
        shown, found = illegible(page, f"{where} · {tab.inner_text()}")
        charts, problems = charts + shown, problems + found
    return charts, problems


@contextlib.contextmanager
def _benchmarks_page(url: str):
    """The Benchmarks page at the wide window: (the page, its results folders, the published one first, and
    a function that opens one of them)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, f"{url}/benchmarks")
        with photographed_on_failure({"legibility-benchmarks.png": page}):
            page.set_viewport_size({"width": WIDE, "height": 1400})
            page.wait_for_selector("h1:has-text('Benchmarks')")
            folders = page.get_by_role("combobox", name="Results folder")
            folders.click()
            names = [option.inner_text() for option in page.get_by_role("option").all()]
            page.keyboard.press("Escape")
            assert len(names) > 1, names  # the published run and its follow-up folders

            def open_folder(name: str) -> None:
                folders.click()
                page.get_by_role("option", name=name, exact=True).click()
                idle(page)

            yield page, names, open_folder


def test_every_chart_of_the_published_benchmarks_is_legible(tiny_url):
    with _benchmarks_page(tiny_url) as (page, names, _):
        charts, problems = _tabs(page, f"{WIDE} px · {names[0]}")
        assert charts >= 10, f"only {charts} charts drawn on the published results"
        page.set_viewport_size({"width": NARROW, "height": 1400})
        problems += _tabs(page, f"{NARROW} px · {names[0]}")[1]
    assert not problems, "\n".join(problems)


@pytest.mark.slow  # 25-30 s more of the same drawing code on other folders' results (-m slow)
def test_every_chart_of_the_follow_up_folders_is_legible(tiny_url):
    charts, problems = 0, []
    with _benchmarks_page(tiny_url) as (page, names, open_folder):
        for name in names[1:]:
            open_folder(name)
            shown, found = _tabs(page, f"{WIDE} px · {name}")
            charts, problems = charts + shown, problems + found
        assert charts >= 5, f"only {charts} charts drawn in the follow-up folders"
    assert not problems, "\n".join(problems)


def test_charts_of_a_finished_run_on_run_surprise_and_compare_are_legible(tiny_url):
    from playwright.sync_api import sync_playwright

    document = (ROOT / "assets" / "samples" / "reasoning_prompt.md").read_text(encoding="utf-8")
    problems = []
    with sync_playwright() as p, chromium(p) as browser:
        for path, button, width in (
            ("", "Run", NARROW),
            ("surprise", "Prefill and score", WIDE),
            ("compare?cmp.count=4", "Run all", WIDE),
        ):
            page = open_page(browser, f"{tiny_url}/{path}")
            name = path.split("?")[0] or "run"
            with photographed_on_failure({f"legibility-{name}.png": page}):
                page.set_viewport_size({"width": width, "height": 1800})
                model_ready(page)
                paste_document(page, document)
                set_number(page, "Cache size J", 64)
                page.get_by_role("button", name=button, exact=True).click()
                if name == "surprise":  # its chart is the explanation of a decision (the default token's, last refresh)
                    page.wait_for_selector(
                        "button:has-text('Explain'), button:has-text('Open refresh')", timeout=RUN_TIMEOUT_MS
                    )
                    idle(page)
                    earlier = page.locator("button:has-text('Open refresh')")
                    if earlier.count():  # the default token went at an earlier refresh: that one decided
                        earlier.first.click()
                        page.wait_for_selector("button:has-text('Explain')", timeout=RUN_TIMEOUT_MS)
                        idle(page)
                    page.get_by_role("button", name="Explain", exact=True).click()
                page.wait_for_selector(".js-plotly-plot", timeout=RUN_TIMEOUT_MS)
                idle(page)
                charts, found = illegible(page, f"{width} px · {name}")
                assert charts >= (2 if name == "compare" else 1), f"{name}: only {charts} charts"
                problems += found
                if name == "compare":  # four heatmaps side by side in a narrow window too
                    page.set_viewport_size({"width": NARROW, "height": 1800})
                    problems += illegible(page, f"{NARROW} px · {name}")[1]
                page.screenshot(path=str(ARTIFACTS / f"legibility-{name}.png"), full_page=True)
                page.close()
    assert not problems, "\n".join(problems)
