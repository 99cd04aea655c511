"""Choosing the model in the app: the sidebar's menu, the one worker switching between models in the runs'
turns, results that never mix two models, and a model that cannot load (AppTest; the browser's check is
in test_browser.py)."""

import time
from pathlib import Path

import pytest
from app_support import every_view
from hold_task import Hold
from streamlit.testing.v1 import AppTest

from ccviz import RunConfig, Trace
from ccviz.models import DEFAULT_MODEL, GEMMA_MODEL, TINY_MODEL, installed_models
from ccviz.worker.eta import Ahead, RunSpeeds, estimate_wait
from ccviz.worker.jobs import Job, ResultStore
from ccviz.worker.tasks import RunTask

ROOT = Path(__file__).resolve().parents[1]
DOC = "The lighthouse on Gull Rock was built in 1852. Its keeper, Ada Brenn, logged the weather. Who kept the light?"


def _app() -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    assert not at.exception
    return at


def _configure(at: AppTest, new_tokens: int, cache_size: int = 16, policy: str = "sliding") -> AppTest:
    """DOC (~60 tokens as a chat) under ``policy``: J=32 refreshes a few times, J=128 never (SmolLM2 quick)."""
    at.text_area(key="doc.text").set_value(DOC)
    at.selectbox(key="run.policy").set_value(policy)
    at.number_input(key="run.J").set_value(cache_size)
    at.number_input(key="run.h").set_value(cache_size // 4)
    at.number_input(key="run.max_new").set_value(new_tokens)
    return at.run()


def _run(at: AppTest, timeout: float = 300) -> list[str]:
    """Click Run and rerun until the job ends; every distinct progress line seen while it ran."""
    at.button(key="btn.run").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    job = at.session_state["job.run"] if "job.run" in at.session_state else at.session_state["done.run"]  # quick
    lines, deadline = [], time.monotonic() + timeout
    while job.running:
        assert time.monotonic() < deadline, "the run did not finish"
        line = job.progress_line()[1]
        if not lines or lines[-1] != line:
            lines.append(line)
        time.sleep(0.05)
    at.run()
    return lines


def _sidebar_text(at: AppTest) -> str:
    return " ".join(e.value for kind in ("caption", "info", "warning", "error") for e in getattr(at.sidebar, kind))


def test_the_sidebar_offers_every_installed_model_and_a_switch_runs_on_the_chosen_one(monkeypatch, tiny_worker):
    monkeypatch.setenv("CCVIZ_MODEL", TINY_MODEL)
    app = _app()
    menu = app.sidebar.selectbox(key="model")
    assert menu.label == "Model" and menu.value == TINY_MODEL  # the server's model is the first choice
    assert menu.options == [f"{TINY_MODEL} (random weights, for tests)", *installed_models()]
    assert DEFAULT_MODEL in installed_models()

    # A run on the server's model, then the same settings on SmolLM2: the worker switches in the run's turn.
    _run(_configure(app, 4, 32))
    tiny_trace = app.session_state["done.run"].results[0]
    assert tiny_trace.status == "complete" and tiny_trace.config["model"] == TINY_MODEL
    app.sidebar.selectbox(key="model").set_value(DEFAULT_MODEL).run()
    assert f"Your runs use {DEFAULT_MODEL}" in _sidebar_text(app)  # the worker still holds the tiny model
    assert not app.button(key="btn.run").disabled
    lines = _run(app)
    switching = [line for line in lines if f"Switching to {DEFAULT_MODEL}: the model loads" in line]
    assert switching and "runs of other models wait" in switching[0], lines
    done = app.session_state["done.run"]
    smol_trace = done.results[0]
    assert not done.errors and smol_trace.status == "complete" and smol_trace.config["model"] == DEFAULT_MODEL
    assert tiny_worker.name == DEFAULT_MODEL and f"Model: {DEFAULT_MODEL}" in _sidebar_text(app)
    assert app.get("plotly_chart") and not app.exception  # the page draws SmolLM2's run

    # The result store keys each run by its model: the two same-settings runs are two entries, never mixed.
    store = done.store
    smol_task = done.tasks[0]
    tiny_task = RunTask(TINY_MODEL, smol_task.prompt, smol_task.config)
    assert store.get(smol_task) is smol_trace and store.get(tiny_task) is tiny_trace
    assert smol_trace.output_text != tiny_trace.output_text

    # Back to the tiny model: the cached run comes back at once (no switch), a new one switches back.
    app.sidebar.selectbox(key="model").set_value(TINY_MODEL).run()
    assert not _run(app) and app.session_state["done.run"].results[0] is tiny_trace
    assert tiny_worker.name == DEFAULT_MODEL
    lines = _run(_configure(app, 5, 32))
    assert any(f"Switching to {TINY_MODEL}: the model loads, ~" in line for line in lines), lines  # measured now
    assert app.session_state["done.run"].results[0].config["model"] == TINY_MODEL
    assert tiny_worker.name == TINY_MODEL and tiny_worker.status().ready  # as the other tests expect it


def test_a_link_keeps_the_sessions_model(monkeypatch, tiny_worker):
    monkeypatch.setenv("CCVIZ_MODEL", TINY_MODEL)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["model"] = DEFAULT_MODEL
    at.run()
    assert not at.exception and at.sidebar.selectbox(key="model").value == DEFAULT_MODEL
    at.sidebar.selectbox(key="model").set_value(TINY_MODEL).run()
    assert "model" not in at.query_params  # the server's model is the default: no need to say it
    at.sidebar.selectbox(key="model").set_value(DEFAULT_MODEL).run()
    assert DEFAULT_MODEL in str(at.query_params["model"])
    unknown = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    unknown.query_params["model"] = "no-such-model"
    unknown.run()
    assert unknown.sidebar.selectbox(key="model").value == TINY_MODEL
    assert any("model='no-such-model'" in w.value for w in unknown.warning)  # said, not silently dropped


def _until(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_a_queued_runs_wait_counts_each_switch_of_model_ahead_of_it(monkeypatch, tiny_worker):
    """Behind a run holding the tiny model: a SmolLM2 run (a switch), a tiny run (a switch back), then ours."""
    monkeypatch.setitem(tiny_worker.load_seconds, DEFAULT_MODEL, 8.0)
    monkeypatch.setitem(tiny_worker.load_seconds, TINY_MODEL, 3.0)
    store = ResultStore()
    hold = Job([Hold()], tiny_worker, store).start()
    _until(lambda: hold.progress.processed == 1, "the hold to take the model")
    config = RunConfig(policy="sliding", cache_size=16, chunk_size=4, max_new_tokens=2)
    queued: list[Job] = []
    try:
        for model, n in ((DEFAULT_MODEL, 2), (TINY_MODEL, 3), (TINY_MODEL, 4)):  # queued one after the other:
            job = Job([RunTask(model, DOC, config.replace(max_new_tokens=n))], tiny_worker, store, sizes=[100])
            queued.append(job.start())  # each job's thread joins the queue, so two started at once may swap
            _until(lambda job=job: job._flight is not None and job.progress.waiting, f"run {len(queued)} to queue")
        assert queued[2]._flight.ahead() == [Ahead(None, 1), Ahead(100, 0, 8.0), Ahead(100, 0, 3.0)]
        speeds = RunSpeeds()
        speeds.record(100, 1.0)
        assert estimate_wait(queued[2]._flight.ahead(), speeds) == pytest.approx(1 + 8 + 1 + 3 + 1)
    finally:
        for job in (*reversed(queued), hold):  # none reaches the model: nothing switches
            job.cancel()
            assert job.wait(30)
    assert tiny_worker.name == TINY_MODEL


@pytest.fixture
def broken_checkpoint(tmp_path: Path) -> Path:
    """A folder that passes the name check (a Llama config.json) but has no weights: its load fails."""
    folder = tmp_path / "no-weights"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    return folder


@pytest.mark.slow  # ~45 s of four model loads; the default run has a failed first load (test_app_reliability.py)
def test_a_model_that_cannot_load_says_so_and_the_other_model_stays_usable(monkeypatch, broken_checkpoint):
    from ccviz.ui.model import app_worker

    monkeypatch.setenv("CCVIZ_MODEL", str(broken_checkpoint))
    app = _app()
    worker = app_worker()
    try:
        assert worker.wait_ready(300).state == "failed"
        app.run()
        menu = app.sidebar.selectbox(key="model")
        assert menu.value == "no-weights" and menu.options[0] == f"no-weights ({broken_checkpoint})"
        assert app.sidebar.error[0].value.startswith("The model could not be loaded: ")
        assert app.button(key="btn.run").disabled  # its own model failed: nothing to run it on

        # SmolLM2 runs: the failed worker switches to it.
        menu.set_value(DEFAULT_MODEL).run()
        assert not app.button(key="btn.run").disabled
        lines = _run(_configure(app, 3, 128))
        assert any(f"Switching to {DEFAULT_MODEL}" in line for line in lines), lines
        assert app.session_state["done.run"].results[0].config["model"] == DEFAULT_MODEL

        # Back to the broken folder: the run tries it again, and fails in one visible line.
        app.sidebar.selectbox(key="model").set_value("no-weights").run()
        app.button(key="btn.run").click().run()
        job = app.session_state["job.run"]
        assert job.wait(300)
        app.run()
        errors = [e.value for e in app.error]
        assert any("The model could not be loaded: " in e and "\n" not in e for e in errors), errors
        assert not app.exception and worker.status().state == "failed"

        # And SmolLM2 again: the worker switches back, and the run works.
        app.sidebar.selectbox(key="model").set_value(DEFAULT_MODEL).run()
        lines = _run(_configure(app, 6, 128))  # settings of no other test: the result store is the process's
        assert any(f"Switching to {DEFAULT_MODEL}: the model loads, ~" in line for line in lines), lines
        done = app.session_state["done.run"]
        assert not done.errors and done.results[0].status == "complete" and worker.status().ready
    finally:
        worker.close()


def test_a_task_for_a_model_the_app_does_not_have_is_refused_in_one_line(tiny_worker):
    """An uploaded trace's model, say, explained on a server without it."""
    config = RunConfig(policy="sliding", cache_size=16, chunk_size=4, max_new_tokens=2)
    job = Job([RunTask("no-such-model", DOC, config)], tiny_worker, ResultStore()).start()
    assert job.wait(30) and job.results == [None]
    assert len(job.errors) == 1 and "the model 'no-such-model' is not installed here" in job.errors[0]


@pytest.mark.slow  # a real Gemma switch and run, 15-40 s: the default run switches models on the tiny one
@pytest.mark.skipif(GEMMA_MODEL not in installed_models(), reason="the extra gemma is not installed")
def test_a_gemma_run_records_its_model_and_the_traces_page_draws_it_beside_another_models(monkeypatch, tiny_worker):
    monkeypatch.setenv("CCVIZ_MODEL", TINY_MODEL)
    app = _app()
    try:
        _run(_configure(app, 2, 32, "counter_causal_fast"))  # its signal recorded: the Signals view has one
        tiny_trace = app.session_state["done.run"].results[0]
        app.sidebar.selectbox(key="model").set_value(GEMMA_MODEL).run()
        lines = _run(app)
        assert any(f"Switching to {GEMMA_MODEL}" in line for line in lines), lines
        done = app.session_state["done.run"]
        gemma_trace = done.results[0]
        assert not done.errors and gemma_trace.config["model"] == GEMMA_MODEL and gemma_trace.cycles
        assert gemma_trace.tokens[0].text == "<bos>"  # Gemma's own tokens (its plain format), not SmolLM2's
        for shown in every_view(Trace.from_json(gemma_trace.to_json())):  # every figure a page draws of it
            shown.encode("utf-8")

        # The Traces page opens either model's file, alone and compared.
        app.switch_page("pages/traces.py").run()
        files = [
            (f"{t.config['model']}.json", t.to_json().encode(), "application/json") for t in (tiny_trace, gemma_trace)
        ]
        app.file_uploader(key="up.traces").set_value(files).run()
        assert not app.exception and not app.error
        for pick in (0, 1):
            app.selectbox(key="traces.pick").set_value(pick).run()
            assert not app.exception and app.get("plotly_chart") and app.html
        app.segmented_control(key="traces.view").set_value("Signals").run()
        for mode in ("Highlight", "What survives", "Sentences"):
            app.segmented_control(key="traces.signals.mode").set_value(mode).run()
            assert not app.exception and not app.error and not app.info and app.html, mode
        app.segmented_control(key="traces.view").set_value("Compare").run()
        assert not app.exception and not app.error and len(app.get("plotly_chart")) >= 2
    finally:
        with tiny_worker.turn(lambda: False, lambda _: None, model=TINY_MODEL):  # the other tests' model again
            pass
