"""The Lesson's content and its recording: the steps' words, the shipped traces (loaded and drawn without a model,
small, one per recording), the Try it links, and a slow check that ``scripts/lesson.py`` records the same kept
sets again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from ccviz.explain import run_verdict
from ccviz.figures import retention_heatmap
from ccviz.figures.budget import cache_growth
from ccviz.ui.documents import document_hash
from ccviz.ui.lesson import LESSON_DIR, RECORDINGS, STEPS, load_lesson, try_link

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 80
MAX_FOLDER_BYTES = 4 * 2**20


@pytest.fixture(scope="module")
def lesson():
    return load_lesson()


def test_six_to_nine_steps_each_one_short_paragraph_with_every_placeholder_filled(lesson):
    assert 6 <= len(STEPS) <= 9
    for step in STEPS:
        text = lesson.text(step)
        assert len(text.split()) <= MAX_WORDS, f"{step.title}: {len(text.split())} words"
        assert "…" not in text and "{" not in text, step.title
        assert set(step.runs) | set(step.tried) <= {r.name for r in RECORDINGS}


def test_every_recording_is_shipped_small_and_loads_without_a_model(lesson):  # the fixture reads JSON alone
    assert set(lesson.traces) == {r.name for r in RECORDINGS}
    size = sum(path.stat().st_size for path in LESSON_DIR.iterdir())
    assert size < MAX_FOLDER_BYTES, f"assets/lesson is {size / 2**20:.1f} MB"
    for name, trace in lesson.traces.items():
        assert trace.status == "complete" and trace.run_config.record == "policy", name
        assert trace.question_start is not None and trace.kept_question, f"{name}: its question is asked apart, kept"
        assert trace.config["model"] == lesson.model
    pinned = lesson.traces["pinned"].run_config
    assert pinned.pin == (lesson.document("pinned").answer,)


def test_every_trace_draws_and_gets_its_verdict(lesson):
    for name, trace in lesson.traces.items():
        document = lesson.document(name)
        assert run_verdict(trace, document.answer) is not None
        if trace.cycles:
            assert retention_heatmap(trace).data[0].type == "heatmap"
    full, sliding = lesson.traces["full"], lesson.traces["sliding"]
    fig = cache_growth([("the full cache", full), ("window", sliding)], lesson.document("sliding").cache_size)
    assert max(fig.data[0].y) == len(full.tokens)  # the full cache holds every token it processed
    assert max(fig.data[1].y) < len(full.tokens) / 2  # under J: a small part of it, whatever the length


def test_the_case_is_the_harness_run_the_steps_words_describe(lesson):
    case, full = lesson.traces["case"], lesson.traces["case_full"]
    answer = lesson.document("case").answer
    assert run_verdict(full, answer).answered
    verdict = run_verdict(case, answer, full)
    assert verdict.fate == "kept" and not verdict.answered


def test_each_try_it_link_names_the_steps_document_and_settings(lesson):
    for step in STEPS:
        url = urlsplit(try_link(step, lesson))
        params = dict(parse_qsl(url.query))
        document = lesson.document(step.tried[0])
        assert url.path == step.try_page and params["doc"] == document_hash(document.text)
        assert params["model"] == lesson.model
        if step.try_page != "surprise":
            assert params["question"] == document_hash(document.question) and params["doc.expect"] == document.answer


@pytest.mark.slow
def test_recording_a_step_again_gives_the_shipped_kept_sets(tmp_path, lesson):
    """Step 5 (the full cache and counter-causal surprise) recorded again by the script, on the shipped model."""
    command = [sys.executable, "scripts/lesson.py", "--step", "5", "--out", str(tmp_path)]
    subprocess.run(command, cwd=ROOT, check=True, timeout=1800)
    again = load_lesson(tmp_path)
    assert set(again.traces) == {"full", "surprise"}
    for name, trace in again.traces.items():
        shipped = lesson.traces[name]
        assert [c.kept for c in trace.cycles] == [c.kept for c in shipped.cycles], name
        assert trace.output_text == shipped.output_text, name
