"""The Lesson page in a real browser: walk it step by step, follow each Try it once (the page it opens holds the
step's document), draw it at 1000 and 1500 px wide with no exception, time each step's figure warm (at most
3 s from the click on Next), and fold the sidebar away in the presenter view.

The lesson draws recorded traces, so the server runs the tiny model: nothing here waits for SmolLM2.
"""

from __future__ import annotations

import os
import time

import pytest
from browser_support import ARTIFACTS, browser_marks, chromium, idle, open_page, photographed_on_failure, serve_app

from ccviz.ui.lesson import STEPS, Step, load_lesson

pytestmark = browser_marks()
WARM_SECONDS = 3.0
PAGE_TITLES = {"run": "Run & retention", "compare": "Compare policies", "surprise": "Surprise"}


@pytest.fixture(scope="module")
def lesson_url():
    with serve_app({**os.environ, "CCVIZ_MODEL": "tiny-random"}, "streamlit_lesson.log") as url:
        yield f"{url}/lesson"


def _no_exception(page) -> None:
    boxes = page.locator("[data-testid='stException']")
    assert boxes.count() == 0, boxes.first.inner_text()


def _figure(page, step: Step, policy: str):
    """The locator of ``step``'s figure once drawn: a chart or a token view holding its own words."""
    words = {
        "cache": "The cache's size",
        "answer": "The generated text",
        "surprise": "Shade =",
        "context": "evicted now",
        "pinned": "pinning",
        "retention": policy,
    }[step.figure]
    where = "[data-testid='stHtml']" if step.figure in ("answer", "surprise", "context") else ".js-plotly-plot"
    return page.locator(f"[data-testid='stMain'] {where}").filter(has_text=words).first


def _walk(page, lesson, timed: bool, try_it: bool = False) -> list[float]:
    """From step 1 to the last by Next: each step's heading and figure, no exception; the seconds from each click
    to its figure (``timed``); with ``try_it``, each Try it followed once in the tab it opens."""
    started = time.monotonic()
    page.goto(page.url.split("?")[0])  # a new session of the warm server, on step 1
    seconds = []
    for number, step in enumerate(STEPS, start=1):
        policy = lesson.traces[step.runs[-1]].config["policy"]
        page.get_by_role("heading", name=f"{number}. {step.title}").wait_for(timeout=30_000)
        _figure(page, step, policy).wait_for(state="visible", timeout=30_000)
        seconds.append(time.monotonic() - started)
        idle(page)
        _no_exception(page)
        if try_it:
            _follow_try_it(page, lesson, step)
        if number < len(STEPS):
            started = time.monotonic()
            page.get_by_role("button", name="Next").click()
    if timed:  # step 1 again from the picker: the first visit above was a page load, not a step's
        started = time.monotonic()
        page.get_by_role("radiogroup", name="Step").get_by_role("radio", name="1", exact=True).click()
        page.get_by_role("heading", name=f"1. {STEPS[0].title}").wait_for(timeout=30_000)
        _figure(page, STEPS[0], "").wait_for(state="visible", timeout=30_000)
        seconds[0] = time.monotonic() - started
    return seconds if timed else []


def _follow_try_it(page, lesson, step: Step) -> None:
    """Click the step's Try it: a new tab on its page, holding the step's document."""
    from playwright.sync_api import expect

    with page.context.expect_page() as opened:
        page.get_by_role("link", name="Try it on").click()
    tab = opened.value
    try:
        tab.wait_for_selector("[data-testid='stApp']", timeout=60_000)
        tab.get_by_role("heading", name=PAGE_TITLES[step.try_page], exact=True).wait_for(timeout=60_000)
        box = tab.get_by_role("textbox", name="Document or prompt")
        expect(box).to_have_value(lesson.document(step.tried[0]).text, timeout=30_000)  # the page's first run ends
        idle(tab)
        _no_exception(tab)
    finally:
        tab.close()


def test_walk_the_lesson_follow_each_try_it_at_two_widths_and_time_each_figure(lesson_url):
    from playwright.sync_api import sync_playwright

    lesson = load_lesson()
    with sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, lesson_url)
        with photographed_on_failure({"lesson_failure.png": page}):
            page.set_viewport_size({"width": 1500, "height": 1400})
            _walk(page, lesson, timed=False, try_it=True)  # cold: every figure's first drawing
            page.screenshot(path=str(ARTIFACTS / "lesson_1500.png"))
            for width in (1000, 1500):
                page.set_viewport_size({"width": width, "height": 1400})
                seconds = _walk(page, lesson, timed=True)
                slow = {n: round(s, 2) for n, s in enumerate(seconds, start=1) if s > WARM_SECONDS}
                assert not slow, f"at {width} px, steps whose figure took over {WARM_SECONDS} s: {slow}"
            page.screenshot(path=str(ARTIFACTS / "lesson_1000.png"))


def test_a_step_link_and_the_presenter_view(lesson_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, f"{lesson_url}?step=3")
        with photographed_on_failure({"lesson_presenter_failure.png": page}):
            page.get_by_role("heading", name=f"3. {STEPS[2].title}").wait_for(timeout=30_000)
            sidebar = page.locator("[data-testid='stSidebar']")
            assert sidebar.bounding_box()["width"] > 100
            page.get_by_text("Presenter view", exact=True).click()
            idle(page)
            page.wait_for_function(
                "() => document.querySelector(\"[data-testid='stSidebar']\").getBoundingClientRect().width < 10"
            )
            paragraph = page.locator("[data-testid='stMain'] [data-testid='stMarkdownContainer'] p").first
            assert paragraph.evaluate("p => parseFloat(getComputedStyle(p).fontSize)") > 20
            assert "presenter=1" in page.url and "step=3" in page.url
            page.screenshot(path=str(ARTIFACTS / "lesson_presenter.png"))
            page.get_by_text("Presenter view", exact=True).click()
            idle(page)
            page.wait_for_function(
                "() => document.querySelector(\"[data-testid='stSidebar']\").getBoundingClientRect().width > 100"
            )
            _no_exception(page)
