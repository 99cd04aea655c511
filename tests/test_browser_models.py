"""A real browser picks another model in the sidebar: the run says the worker switches, then shows its result
on that model (the rest of switching is in test_app_models.py, through AppTest)."""

from __future__ import annotations

import os

import pytest
from browser_support import (
    ARTIFACTS,
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

from ccviz.models import DEFAULT_MODEL, TINY_MODEL

pytestmark = browser_marks()
DOC = "The lighthouse on Gull Rock was built in 1852. Its keeper, Ada Brenn, logged the weather. Who kept the light?"


@pytest.mark.slow  # 30 s, SmolLM2 loaded by a second worker; the default run switches through AppTest
def test_picking_another_model_in_the_sidebar_switches_the_worker_and_runs_on_it():
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "CCVIZ_MODEL": TINY_MODEL}
    with serve_app(env, "streamlit-models.log") as url, sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, url)
        with photographed_on_failure({"models-failure.png": page}):
            model_ready(page)  # the server's model, tiny-random, is loaded
            sidebar = page.locator("[data-testid='stSidebar']")
            sidebar.get_by_role("combobox", name="Model").click()
            page.get_by_role("option", name=DEFAULT_MODEL, exact=True).click()
            idle(page)
            sidebar.get_by_text(f"Your runs use {DEFAULT_MODEL}").wait_for()  # the worker still holds tiny-random

            paste_document(page, DOC)
            set_number(page, "Cache size J", 32)
            set_number(page, "Max new tokens", 4)
            page.get_by_role("button", name="Run", exact=True).click()
            page.get_by_text(f"Switching to {DEFAULT_MODEL}: the model loads").first.wait_for(timeout=RUN_TIMEOUT_MS)
            page.wait_for_selector(".js-plotly-plot", timeout=RUN_TIMEOUT_MS)
            idle(page)
            assert page.locator("[data-testid='stException']").count() == 0
            assert page.get_by_text(f"· {DEFAULT_MODEL} ·").count() >= 1  # the run's caption names its model
            model_ready(page)
            assert f"Model: {DEFAULT_MODEL}" in sidebar.inner_text()
            page.screenshot(path=str(ARTIFACTS / "models_switched.png"))
