"""The app under bad input, concurrent sessions and interrupted runs.

AppTest with the tiny random model drives the pages; upload handling and the job watchdog are also
tested directly, and the rendering of any trace the loader accepts is checked property-based.
End to end in chromium (Streamlit's own number-range message, a real upload, a closed tab): test_browser.py.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import sys
import threading
import time

import pytest
from app_support import DOC, ROOT, charts, every_view, set_document, settle
from engine_support import traces, without_timings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hst
from streamlit.testing.v1 import AppTest

from ccviz import POLICIES, CcvizError, RunConfig, Trace, generate
from ccviz.ui.limits import MAX_UPLOAD_ENV, max_upload_bytes
from ccviz.ui.state import result_store
from ccviz.ui.uploads import decode_document, read_trace
from ccviz.worker.jobs import Job, ResultStore
from ccviz.worker.limits import ABANDON_ENV, RESULT_CACHE_ENV, abandon_seconds, result_cache_size
from ccviz.worker.tasks import RunTask

HOSTILE = (
    "Tag test <script>window.pwned=1</script> and <img src=x onerror=alert(2)> "
    "with a bell \x07 and \x1b[31mred\x1b[0m. Done."
)
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))


def _small_run(at: AppTest, policy: str = "sliding", J: int = 16, h: int = 4, new: int = 8) -> AppTest:
    at.selectbox(key="run.policy").set_value(policy)
    at.number_input(key="run.J").set_value(J)
    at.number_input(key="run.h").set_value(h)
    at.number_input(key="run.max_new").set_value(new)
    return at


def _wait_for(predicate, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ----- uploads --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data, message",
    [
        (PNG, "not UTF-8 text"),
        ("café au lait".encode("latin-1"), "not UTF-8 text"),
        (b"text\x00with a NUL", "looks like a binary file"),
        (b"x" * (5 * 2**20), "is 5120 KB: documents are limited to 512 KB (CCVIZ_MAX_UPLOAD_KB)"),
        (b" \n\t ", "is empty"),
    ],
)
def test_bad_documents_are_refused_with_a_reason(data, message):
    with pytest.raises(CcvizError) as err:
        decode_document("notes.txt", data, max_upload_bytes())
    assert message in str(err.value) and str(err.value).startswith("notes.txt ")


def test_markup_and_control_characters_in_a_document_are_kept_verbatim():
    assert decode_document("a.md", HOSTILE.encode(), max_upload_bytes()) == HOSTILE


@pytest.mark.parametrize(
    "env, value, expected",
    [
        (MAX_UPLOAD_ENV, "8", lambda: max_upload_bytes() == 8192),
        (MAX_UPLOAD_ENV, "-1", "CCVIZ_MAX_UPLOAD_KB must be at least 1"),
        (MAX_UPLOAD_ENV, "1.5", "CCVIZ_MAX_UPLOAD_KB must be a whole number"),
        (RESULT_CACHE_ENV, "0", "CCVIZ_RESULT_CACHE must be at least 1"),
        (RESULT_CACHE_ENV, "3", lambda: result_cache_size() == 3),
        (ABANDON_ENV, "0", lambda: abandon_seconds() == 0),
        (ABANDON_ENV, "soon", "CCVIZ_ABANDON_SECONDS must be a whole number"),
    ],
)
def test_limit_variables_are_validated(monkeypatch, env, value, expected):
    monkeypatch.setenv(env, value)
    if callable(expected):
        assert expected()
    else:
        reader = {MAX_UPLOAD_ENV: max_upload_bytes, RESULT_CACHE_ENV: result_cache_size, ABANDON_ENV: abandon_seconds}[
            env
        ]
        with pytest.raises(CcvizError, match=re.escape(expected)):
            reader()


@pytest.fixture(scope="module")
def good_trace(tiny) -> Trace:
    return generate(tiny, DOC, policy="counter_causal_fast", cache_size=16, chunk_size=4, max_new_tokens=4)


def _edit(trace: Trace, change) -> bytes:
    data = json.loads(trace.to_json())
    change(data)
    return json.dumps(data).encode()


BAD_TRACES = {
    "truncated.json": (lambda t: t.to_json().encode()[:-40], "invalid JSON"),
    "schema.json": (
        lambda t: _edit(t, lambda d: d.update(schema_version=3)),
        "schema_version is 3, this ccviz reads versions 1 and 2",
    ),
    "types.json": (lambda t: _edit(t, lambda d: d["tokens"][0].update(t="zero")), "tokens"),
    "length.json": (lambda t: _edit(t, lambda d: d["cycles"][-1]["scores"]["surprise"].pop()), "cycles"),
    "nan.json": (lambda t: t.to_json().replace('"seconds":', '"seconds":NaN,"x":', 1).encode(), "invalid JSON"),
    "random.json": (lambda t: bytes(range(256)) * 8, "invalid JSON"),
    "huge.json": (lambda t: b" " * (100 * 2**20), "larger than 64 MB"),
    "surrogate.json": (lambda t: _edit(t, lambda d: d["tokens"][1].update(text="\ud800")), "unpaired UTF-16 surrogate"),
}


@pytest.mark.parametrize("name", list(BAD_TRACES))
def test_bad_trace_files_are_refused_with_a_reason(good_trace, name):
    make, message = BAD_TRACES[name]
    with pytest.raises(CcvizError) as err:
        read_trace(name, make(good_trace))
    assert str(err.value).startswith(f"{name}: ") and message in str(err.value) and "\n" not in str(err.value)


def test_paired_surrogate_escapes_are_ordinary_text(good_trace):
    data = _edit(good_trace, lambda d: d["tokens"][1].update(text="\U0001f600"))  # json.dumps writes "\ud83d\ude00"
    assert b"\\ud83d\\ude00" in data and read_trace("emoji.json", data).tokens[1].text == "\U0001f600"


HOSTILE_TEXT = hst.one_of(
    hst.text(hst.characters(codec=None, categories=["Cc", "Cs", "Lu", "Po", "Sm", "Zs"]), max_size=6),
    hst.sampled_from(
        ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "</span></div>", "&amp;", "\"'>", "\x00"]
    ),
)
TAG = re.compile(r"<\s*/?\s*([A-Za-z][\w-]*)")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traces(), hst.data())
def test_any_accepted_trace_renders_completely_and_as_text(trace, data):
    """Whatever a file holds, it is either refused or every view draws it, with its text as text."""
    for tok in trace.tokens:
        tok.text = data.draw(HOSTILE_TEXT)
    trace.config["policy"] = data.draw(HOSTILE_TEXT)
    try:
        loaded = read_trace("t.json", trace.to_json().encode())
    except CcvizError as err:
        assert "surrogate" in str(err)
        return
    for shown in every_view(loaded):
        shown.encode("utf-8")  # a lone surrogate here would crash the page
        assert set(TAG.findall(shown)) <= {"span", "div", "br", "sup", "extra"}, shown[:300]  # the views' own tags only


# ----- the pages ------------------------------------------------------------------------------------


def _shown_as_text(body: str) -> bool:
    """The document's markup is in the page as text (escaped), and the only tags are the view's own."""
    text = html.unescape(re.sub(r"<[^>]*>", "", body))
    return (
        "<script>window.pwned=1</script>" in text
        and "<img src=x onerror=alert(2)>" in text
        and set(TAG.findall(body)) <= {"span", "div"}
    )


def test_run_page_refuses_bad_uploads_and_stays_usable(app):
    set_document(app, DOC)
    app.run()
    for name, data, message in [("big.txt", b"word " * (2**20), "limited to 512 KB"), ("photo.txt", PNG, "not UTF-8")]:
        app.file_uploader(key="up.doc").set_value((name, data, "text/plain")).run()
        assert not app.exception and name in app.error[0].value and message in app.error[0].value
        assert app.text_area(key="doc.text").value == DOC  # what the user had is kept
        assert "job.run" not in app.session_state  # nothing runs
    settle(_small_run(app).button(key="btn.run").click().run())
    assert not app.exception and not app.error and charts(app)


def test_traces_page_refuses_bad_files_without_drawing_them(app, good_trace):
    app.switch_page("pages/traces.py").run()
    bad = [(name, make(good_trace), "application/json") for name, (make, _) in BAD_TRACES.items()]
    app.file_uploader(key="up.traces").set_value(bad).run()
    assert not app.exception
    errors = [e.value for e in app.error]
    assert len(errors) == len(bad) and all(e.startswith(f"{name}: ") for e, (name, _, _) in zip(errors, bad))
    views = [
        group for group in app.get("button_group") if group.key != "charts.format"
    ]  # the sidebar's own setting aside
    assert not charts(app) and not app.html and not views  # nothing partly drawn
    # The good file among the bad ones is drawn in full; the page keeps working.
    app.file_uploader(key="up.traces").set_value(
        [("good.json", good_trace.to_json().encode(), "application/json"), bad[0]]
    ).run()
    assert not app.exception and len(app.error) == 1 and len(charts(app)) == 1 and len(app.html) == 1


def test_markup_and_control_characters_render_as_text(app):
    set_document(app, HOSTILE)
    settle(_small_run(app, policy="counter_causal_fast").button(key="btn.run").click().run())
    assert not app.exception and not app.error
    body = app.html[0].proto.body
    assert _shown_as_text(body) and "␇" in body and "␛" in body and "\x1b" not in body  # controls shown as symbols
    assert _escaped_hover(charts(app)[0])
    app.switch_page("pages/surprise.py").run()
    settle(app.button(key="btn.surprise").click().run())
    assert not app.exception and not app.error
    for mode in ["Highlight", "What survives", "Sentences"]:
        app.button_group(key="surprise.mode").set_value(mode).run()
        assert _shown_as_text(app.html[0].proto.body), mode
    app.switch_page("pages/compare.py").run()
    for key, value in [("cmp.J", 16), ("cmp.h", 4), ("cmp.max_new", 6)]:
        app.number_input(key=key).set_value(value)
    settle(app.button(key="btn.compare").click().run())
    assert not app.exception and not app.error and _escaped_hover(charts(app)[0])


def _escaped_hover(chart) -> bool:
    """Every heatmap's cell labels (token text) reach Plotly escaped: a raw "<" would be read as markup."""
    cells = json.dumps([panel["text"] for panel in json.loads(chart.proto.spec)["data"]])
    return "&lt;" in cells and "<" not in cells


def test_widgets_take_their_bounds_from_the_rules_the_engine_checks(app):
    """One declaration (ccviz.fields): a policy option's rule and RunConfig's bound the widgets, so they refuse
    what the engine would."""
    from ccviz.engine import RunConfig
    from ccviz.fields import rule_of
    from ccviz.policies import POLICIES

    policy = POLICIES["counter_causal_fast"]
    for option in ("min_gap", "smooth", "recent"):
        assert (
            app.number_input(key=f"run.policy.counter_causal_fast.{option}").min == rule_of(policy, option).minimum == 0
        )
    for key, field in (
        ("run.J", "cache_size"),
        ("run.h", "chunk_size"),
        ("run.frozen", "frozen"),
        ("run.recent", "recent"),
        ("run.max_new", "max_new_tokens"),
    ):
        assert app.number_input(key=key).min == rule_of(RunConfig, field).minimum


@pytest.mark.parametrize(
    "prepare, message",
    [
        (lambda at: at.number_input(key="run.frozen").set_value(3000), "larger than the prompt"),
        (lambda at: at.number_input(key="run.recent").set_value(200), "must not exceed the cache size"),
        (lambda at: set_document(at, "word " * 9000), "exceeds the model's 8192 positions"),
        (lambda at: at.number_input(key="run.max_new").set_value(4096), "over this app's limit of 4096 tokens"),
    ],
)
def test_bad_numbers_get_a_message_and_nothing_runs(app, prepare, message):
    prepare(app)
    app.button(key="btn.run").click().run()
    assert not app.exception and message in app.error[0].value
    assert "job.run" not in app.session_state and "done.run" not in app.session_state
    set_document(app, DOC)  # fixing the input is enough: the page works as before
    app.number_input(key="run.frozen").set_value(None)
    app.number_input(key="run.recent").set_value(None)
    settle(_small_run(app, policy="sliding").button(key="btn.run").click().run())
    assert not app.exception and not app.error and charts(app)


def test_number_widgets_are_bounded_by_the_token_limit(app, monkeypatch):
    widget = app.number_input(key="run.J")
    assert (widget.min, widget.max, widget.value) == (1, 4096, 128)
    for bad in (-3, 0, 10**9):  # the browser says "outside the allowed range"; the server keeps the last good value
        app.number_input(key="run.J").set_value(bad).run()
        assert not app.exception and app.number_input(key="run.J").value == 128
    monkeypatch.setenv("CCVIZ_MAX_TOKENS", "100")
    app.run()
    assert not app.exception and app.number_input(key="run.max_new").max == 100
    monkeypatch.setenv("CCVIZ_MAX_TOKENS", "lots")
    app.run()
    app.button(key="btn.run").click().run()
    assert not app.exception and "CCVIZ_MAX_TOKENS must be a whole number" in app.error[0].value


# ----- concurrency ----------------------------------------------------------------------------------

SESSIONS = [
    dict(policy="sliding", J=16, h=4, new=16),
    dict(policy="counter_causal_fast", J=12, h=3, new=12),
    dict(policy="h2o", J=20, h=5, new=14),
]


def test_three_sessions_running_at_once_get_what_each_gets_alone(monkeypatch, tiny, tiny_worker, direct_run):
    monkeypatch.setenv("CCVIZ_MODEL", "tiny-random")
    result_store.clear()  # nothing may come from an earlier test's cache: every run computes
    sessions = [AppTest.from_file(str(ROOT / "app.py"), default_timeout=120) for _ in SESSIONS]
    for at, config in zip(sessions, SESSIONS):
        set_document(at.run(), DOC)
        _small_run(at, **config).run()
    barrier = threading.Barrier(len(sessions))
    # AppTest swaps a process-global mock Runtime in and out around each script run, so two AppTest
    # runs at once in one process break each other (a real server has one Runtime for all sessions).
    # The script runs take turns; the three jobs they start are in the shared worker at once.
    script_run = threading.Lock()
    failures: list[BaseException] = []

    def click(at: AppTest) -> None:
        try:
            barrier.wait()
            with script_run:
                at.button(key="btn.run").click().run()
            _wait_for(lambda: not at.session_state["job.run"].running, timeout=120)
            with script_run:
                at.run()
        except BaseException as err:  # surfaced below: a thread's assertion would otherwise vanish
            failures.append(err)

    threads = [threading.Thread(target=click, args=(at,)) for at in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not failures, failures
    jobs = [at.session_state["done.run"] for at in sessions]
    assert all(job.worker is tiny_worker for job in jobs)  # one shared model worker
    for at, job, config in zip(sessions, jobs, SESSIONS):
        assert not at.exception and not at.error and charts(at)
        trace = job.results[0]
        assert trace.status == "complete" and trace.config["policy"] == config["policy"]
        task = job.tasks[0]
        assert without_timings(trace) == without_timings(direct_run(task.prompt, task.config))


# ----- interruption ---------------------------------------------------------------------------------


def test_cancel_keeps_partial_refreshes_viewable_and_the_app_usable(app, monkeypatch):
    monkeypatch.setenv("CCVIZ_MAX_TOKENS", "9000")  # a run long enough to be caught mid-way
    set_document(app.run(), DOC)
    _small_run(app, J=16, h=4, new=8000).button(key="btn.run").click().run()
    job = app.session_state["job.run"]
    assert app.button(key="btn.run").disabled  # no second job from a second click while this one runs
    _wait_for(lambda: job.progress.refreshes >= 5 or not job.running)
    assert job.running, "the run ended before it could be cancelled"
    app.run().button(key="cancel.run").click().run()
    settle(app)
    trace = app.session_state["done.run"].results[0]
    assert trace.status == "cancelled" and len(trace.cycles) >= 5
    assert not app.exception and "cancelled after" in app.warning[0].value
    assert charts(app) and app.slider(key="run.cycle").max == len(trace.cycles) - 1
    settle(_small_run(app, J=16, h=4, new=8).button(key="btn.run").click().run())
    assert not app.exception and app.session_state["done.run"].results[0].status == "complete"


def test_a_run_that_fails_part_way_reports_it_and_keeps_its_refreshes(monkeypatch):
    """The policy raises in the worker process (a plugin, since a monkeypatch here cannot reach it)."""
    from ccviz.ui.model import app_worker

    monkeypatch.setenv("CCVIZ_MODEL", "tiny-random")
    monkeypatch.setenv("CCVIZ_PLUGINS", "failing_policy")
    try:
        app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        app.run()
        assert app_worker().wait_ready(300).ready
        set_document(app.run(), DOC)
        _small_run(app, policy="breaks_at_refresh", J=16, h=4, new=20).run()
        settle(app.button(key="btn.run").click().run())
        before = app.session_state["done.run"].results[0]
        assert before.status == "complete"

        prefill_refreshes = before.prompt_length // 4
        for phase, fail_at in (("prefill", 3), ("decode", prefill_refreshes + 2)):
            result_store.clear()
            app.number_input(key="run.policy.breaks_at_refresh.fail_at").set_value(fail_at).run()
            settle(app.button(key="btn.run").click().run())
            failed = app.session_state["done.run"].results[0]
            done = fail_at - 1
            assert failed.status == "error" and len(failed.cycles) == done and "injected failure" in failed.error
            assert failed.cycles[-1].phase == phase and (len(failed.tokens) > failed.prompt_length) == (
                phase == "decode"
            )
            assert failed.tokens == before.tokens[: len(failed.tokens)]  # every token up to the failure
            assert Trace.from_json(failed.to_json()).cycles == failed.cycles  # its download loads back
            errors = [e.value for e in app.error]
            assert not app.exception and any("failed part-way" in e for e in errors)
            assert charts(app) and app.slider(key="run.cycle").max == done - 1  # the completed refreshes are viewable

            app.switch_page("pages/traces.py").run()  # listed with the session's runs, and its download opens
            assert any(f"· error · {done} refreshes" in md.value for md in app.markdown)
            upload = [(f"failed-{phase}.json", failed.to_json().encode(), "application/json")]
            app.file_uploader(key="up.traces").set_value(upload).run()
            assert not app.exception and charts(app)
            assert [e.value for e in app.error] == [
                f"The run failed part-way: {failed.error}. The refreshes completed before it are shown."
            ]
            app.switch_page("pages/run.py").run()

        app.number_input(key="run.policy.breaks_at_refresh.fail_at").set_value(0).run()
        result_store.clear()
        settle(app.button(key="btn.run").click().run())
        after = app.session_state["done.run"].results[0]
        assert without_timings(after) == without_timings(before)  # the worker's model is intact
    finally:  # the plugin's policy must not leak into later tests' registry, nor its worker keep running
        POLICIES.pop("breaks_at_refresh", None)
        sys.modules.pop("failing_policy", None)
        app_worker().close()


@pytest.mark.parametrize(
    "model, plugins, reason",
    [
        ("/no/such/checkpoint", "", "/no/such/checkpoint"),
        ("tiny-random", "no_such_module", "cannot load the plugin 'no_such_module' from CCVIZ_PLUGINS"),
    ],
)
def test_a_model_that_cannot_load_is_one_line_on_the_page_and_nothing_runs(monkeypatch, model, plugins, reason):
    from ccviz.ui.model import app_worker

    monkeypatch.setenv("CCVIZ_MODEL", model)
    monkeypatch.setenv("CCVIZ_PLUGINS", plugins)
    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    try:
        assert app_worker().wait_ready(300).state == "failed"
        app.run()
        status = [e.value for e in app.sidebar.error]
        assert len(status) == 1 and status[0].startswith("The model could not be loaded: ") and reason in status[0], (
            status
        )
        assert "\n" not in status[0] and app.button(key="btn.run").disabled and not app.exception
    finally:
        app_worker().close()


def test_a_killed_worker_is_reported_restarted_and_the_next_run_works(app, monkeypatch, tiny_worker):
    """Killed mid-run (out of memory looks the same): the page says so, the refreshes streamed so far
    stay viewable and loadable, a run queued behind it says the worker is restarting and then
    completes, and so does the page's next run."""
    monkeypatch.setenv("CCVIZ_MAX_TOKENS", "9000")
    set_document(app.run(), DOC)
    _small_run(app, J=16, h=4, new=8000).button(key="btn.run").click().run()
    job = app.session_state["job.run"]
    _wait_for(lambda: job.progress.refreshes >= 5 or not job.running)
    assert job.running, "the run ended before the worker could be killed"
    queued = Job(
        [_long_task(tiny_worker.status().model, max_new_tokens=8)], tiny_worker, ResultStore()
    ).start()  # another session
    _wait_for(lambda: queued.progress.waiting == "another run")
    os.kill(tiny_worker.pid, signal.SIGKILL)
    _wait_for(lambda: queued.progress.waiting == "the model" or not queued.running)
    assert "The model worker stopped (killed by SIGKILL" in queued.progress_line()[1]  # the waiting page says so
    assert queued.wait(300) and queued.results[0].status == "complete" and not queued.errors
    settle(app)
    trace = app.session_state["done.run"].results[0]
    assert trace.status == "error" and len(trace.cycles) >= 5 and "killed by SIGKILL" in trace.error
    loaded = Trace.from_json(trace.to_json())
    assert loaded.cycles == trace.cycles and len(loaded.tokens) >= loaded.cycles[-1].step
    errors = [e.value for e in app.error]
    assert not app.exception and any(
        "the model worker stopped during this run (killed by SIGKILL" in e for e in errors
    ), errors
    assert charts(app) and app.slider(key="run.cycle").max == len(trace.cycles) - 1
    assert tiny_worker.status().state in ("restarting", "ready") and tiny_worker.restarts >= 1
    assert tiny_worker.wait_ready(300).ready
    settle(_small_run(app.run(), J=16, h=4, new=8).button(key="btn.run").click().run())
    assert not app.exception and app.session_state["done.run"].results[0].status == "complete"


# ----- a closed tab (the job watchdog) ---------------------------------------------------------------


def _long_task(tiny, max_new_tokens: int = 3000) -> RunTask:
    return RunTask(
        tiny.name, DOC, RunConfig(policy="sliding", cache_size=16, chunk_size=4, max_new_tokens=max_new_tokens)
    )


def test_a_run_whose_session_is_gone_stops_and_frees_the_model(tiny, tiny_worker):
    connected = threading.Event()
    connected.set()
    orphan = Job(
        [_long_task(tiny)], tiny_worker, ResultStore(), owner_connected=connected.is_set, abandon_after=0.3
    ).start()
    _wait_for(lambda: orphan.progress.refreshes >= 3)
    connected.clear()  # the tab is closed
    queued = Job([_long_task(tiny, max_new_tokens=8)], tiny_worker, ResultStore()).start()
    assert orphan.wait(30) and queued.wait(30)
    assert orphan.abandoned and orphan.results[0].status == "cancelled" and len(orphan.results[0].cycles) < 700
    assert queued.results[0].status == "complete" and not queued.errors


def test_a_short_disconnection_does_not_stop_a_run(tiny, tiny_worker):
    blips = iter([True] * 5 + [False] * 5 + [True] * 10**6)  # gone for 5 polls, then back
    job = Job(
        [_long_task(tiny, max_new_tokens=200)],
        tiny_worker,
        ResultStore(),
        owner_connected=lambda: next(blips),
        abandon_after=30,
    ).start()
    assert job.wait(60) and not job.abandoned and job.results[0].status == "complete"


def test_a_queued_run_of_a_vanished_session_leaves_the_queue(tiny, tiny_worker):
    first = Job([_long_task(tiny)], tiny_worker, ResultStore()).start()
    _wait_for(lambda: first.progress.refreshes >= 1)
    connected = threading.Event()
    connected.set()
    gone = Job(
        [_long_task(tiny, max_new_tokens=8)],
        tiny_worker,
        ResultStore(),
        owner_connected=connected.is_set,
        abandon_after=0,
    ).start()
    _wait_for(lambda: gone.progress.waiting)
    connected.clear()
    assert gone.wait(10) and gone.abandoned and gone.results == [None]  # left while still waiting its turn
    assert first.running  # the run holding the model is not disturbed
    first.cancel()
    assert first.wait(30)


def test_sessions_outside_a_server_never_count_as_gone():
    from ccviz.ui.state import session_connected

    assert session_connected()()
