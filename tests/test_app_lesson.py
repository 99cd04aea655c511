"""The Lesson page through AppTest: every step of the shipped lesson draws without a run, a link opens a step,
Previous and Next move, the presenter view toggles, a Try it link restores its document and settings on the
page it opens, and Run it live (on a lesson recorded with the tiny model) lands on the recorded kept sets.
"""

from __future__ import annotations

import subprocess
import sys
from urllib.parse import parse_qsl, urlsplit

import plotly.io
import pytest
from app_support import ROOT, fresh_session, settle

from ccviz.ui import lesson as content
from ccviz.ui.lesson import STEPS, load_lesson
from ccviz.ui.lesson_view import PRESENTER_CSS

LESSON_PAGE = "pages/lesson.py"


def open_lesson(at):
    at.switch_page(LESSON_PAGE).run()
    assert not at.exception, at.exception
    return at


def heading(at) -> str:
    return next(h.value for h in at.subheader)


def link_of(at) -> tuple[str, dict[str, str]]:
    """The page and the query parameters of the step's Try it."""
    url = urlsplit(next(b.proto.url for b in at.get("link_button")))
    return url.path, dict(parse_qsl(url.query))


def test_every_step_draws_from_the_recording_and_next_and_previous_move(app):
    open_lesson(app)
    for number, step in enumerate(STEPS, start=1):
        assert heading(app) == f"{number}. {step.title}"
        assert not app.exception and not app.warning and not app.error
        assert app.get("plotly_chart") or app.html, f"step {number} drew no figure"
        for chart in app.get("plotly_chart"):  # side by side, each column says which run it is
            titles = [a.text for a in plotly.io.from_json(chart.proto.spec).layout.annotations]
            assert len(set(titles)) == len(titles), titles
        assert not any(key.startswith("job.") for key in app.session_state)  # nothing ran
        if number < len(STEPS):
            app.button(key="lesson.next").click().run()
    assert app.button(key="lesson.next").disabled
    app.button(key="lesson.previous").click().run()
    assert heading(app) == f"{len(STEPS) - 1}. {STEPS[-2].title}"
    assert app.query_params["step"] in (str(len(STEPS) - 1), [str(len(STEPS) - 1)])  # the link follows


def test_a_link_opens_its_step(monkeypatch, tiny_worker):
    at = fresh_session(monkeypatch, {"step": "3"})
    open_lesson(at)
    assert heading(at) == f"3. {STEPS[2].title}"
    assert at.segmented_control(key="step").value == 3


def test_the_presenter_view_toggles(app):
    open_lesson(app)
    assert not any(PRESENTER_CSS in h.proto.body for h in app.html)
    app.toggle(key="presenter").set_value(True).run()
    assert any(PRESENTER_CSS in h.proto.body for h in app.html) and not app.exception
    assert app.query_params["presenter"] in ("1", ["1"])
    app.toggle(key="presenter").set_value(False).run()
    assert not any(PRESENTER_CSS in h.proto.body for h in app.html)


def test_try_it_opens_its_page_with_the_steps_document_and_settings(app, monkeypatch):
    open_lesson(app)
    lesson = load_lesson()
    app.segmented_control(key="step").set_value(3).run()
    page, params = link_of(app)
    assert page == "run" and params["run.policy"] == "sliding"
    again = fresh_session(monkeypatch, params)  # a new tab: a new session opened on the link
    document = lesson.document("sliding")
    assert not again.exception and not again.warning
    assert again.text_area(key="doc.text").value == document.text
    assert again.text_area(key="doc.question").value == document.question
    assert again.text_input(key="doc.expect").value == document.answer
    assert again.selectbox(key="run.policy").value == "sliding"
    assert again.number_input(key="run.J").value == document.cache_size
    app.segmented_control(key="step").set_value(6).run()  # the kept fact: what the answer read, the full cache's
    again = fresh_session(monkeypatch, link_of(app)[1])
    assert again.checkbox(key="run.record_reads").value and again.checkbox(key="run.full_cache").value
    assert again.text_input(key="doc.expect").value == lesson.document("case").answer
    app.segmented_control(key="step").set_value(4).run()
    page, params = link_of(app)
    assert page == "compare" and [params[f"cmp.p{i}"] for i in range(3)] == ["sliding", "h2o", "counter_causal_fast"]


@pytest.fixture(scope="module")
def tiny_lesson(tmp_path_factory):
    """Step 3's runs recorded with the tiny model, by the lesson's own script."""
    folder = tmp_path_factory.mktemp("lesson")
    command = [sys.executable, "scripts/lesson.py", "--model", "tiny-random", "--step", "3", "--out", str(folder)]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=600)
    return folder


def test_run_it_live_lands_on_the_recorded_kept_sets(app, monkeypatch, tiny_lesson):
    monkeypatch.setattr(content, "LESSON_DIR", tiny_lesson)
    open_lesson(app)
    app.segmented_control(key="step").set_value(3).run()
    settle(app.button(key="btn.lesson").click().run())
    assert not app.exception and not app.error
    assert any("the same kept sets as the recording" in box.value for box in app.info)
    assert app.get("plotly_chart")
