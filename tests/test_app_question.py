"""A question asked apart from the document, in the app: the Question box, the samples that fill it, the hint
that splits it off the document, the "Keep the question" toggle, the page's link, Compare and What if.

AppTest with the tiny random model, as tests/test_app.py (whose fixture and helpers these reuse).
"""

from __future__ import annotations

from app_support import DOC, configure_run, fresh_session, set_document, settle

from ccviz import RunConfig
from ccviz.ui.question import split_question
from ccviz.ui.samples import load_samples
from ccviz.ui.what_if import what_if_config
from ccviz.worker.tasks import FullCacheTask, RunTask

QUESTION = "Which year is carved above the door?"
TURN_END = "<|im_end|>\n<|im_start|>assistant\n"  # the chat template's turn suffix after the user's text


def set_question(at, text: str) -> None:
    at.text_area(key="doc.question").set_value(text)


def _run(at):
    """Click Run, wait for the job, and return the run's task and trace."""
    settle(at.button(key="btn.run").click().run())
    assert not at.exception and not at.error
    done = at.session_state["done.run"]
    return done.tasks[0], done.results[0]


def _asked(trace) -> str:
    return "".join(tok.text for tok in trace.tokens[trace.question_start : trace.prompt_length])


def test_the_question_box_reaches_the_run_kept_and_its_token_is_explained_as_the_question(app):
    configure_run(app, "sliding", 8)
    set_question(app, QUESTION)
    task, trace = _run(app)
    assert task.question == QUESTION and trace.question_start is not None
    assert _asked(trace) == QUESTION + TURN_END
    assert trace.config["protect_question"] is True and trace.kept_question
    n = trace.prompt_length - trace.question_start
    assert any(f"question: {n} tokens with the turn's end, kept" in c.value for c in app.caption)
    assert trace.cycles[-1].step > trace.question_start  # the last refresh has read the question
    app.text_input(key="run.find").set_value("carved").run()
    assert app.selectbox(key="run.match").value in trace.kept_question
    assert not app.exception and any("question (kept)" in m.value for m in app.markdown)  # the trace says why
    assert all(b.key != "btn.run.explain" for b in app.button)  # nothing to replay


def test_the_toggle_off_lets_the_question_be_evicted_and_an_empty_box_asks_none(app):
    configure_run(app, "sliding", 4)
    set_question(app, QUESTION)
    app.toggle(key="run.protect_question").set_value(False)
    task, trace = _run(app)
    assert trace.config["protect_question"] is False and not trace.kept_question
    assert _asked(trace) == QUESTION + TURN_END and task.label.endswith("question evictable")
    assert any("evictable" in c.value for c in app.caption)
    set_question(app, "")
    task, trace = _run(app)
    assert task.question is None and trace.question_start is None and "question_start" not in trace.config
    assert trace.config["protect_question"] is True  # no question: the toggle changes neither label nor result
    assert not any("question:" in c.value for c in app.caption)


def test_a_whitespace_question_is_refused_in_one_line(app):
    configure_run(app, "sliding", 4)
    set_question(app, "  \n ")
    app.button(key="btn.run").click().run()
    assert not app.exception and "the question is empty" in app.error[0].value
    assert "job.run" not in app.session_state and "done.run" not in app.session_state


def test_picking_a_sample_fills_the_question_box(app):
    samples = load_samples()
    allergy = next(s for s in samples if "admission note" in s.title)
    app.selectbox(key="doc.sample").set_value(allergy.title).run()
    assert app.text_area(key="doc.question").value == allergy.question == "What is Mr. Whitcombe allergic to?"
    chat = next(s for s in samples if "chat" in s.title)
    assert chat.question and chat.key_phrase not in chat.question  # the question asks for the code, not states it
    app.selectbox(key="doc.sample").set_value(chat.title).run()
    assert app.text_area(key="doc.question").value == chat.question
    plain = next(s for s in samples if s.question is None)
    app.selectbox(key="doc.sample").set_value(plain.title).run()
    assert app.text_area(key="doc.question").value == ""  # another document: the last one's question goes


def test_the_hint_moves_the_documents_last_paragraph_into_the_question_box(app):
    assert any(b.key == "doc.split_question" for b in app.button)  # the default document ends with a question
    set_document(app, "The spare key is in the blue tin.\n\nThe guard walks twice.\n\n  Where is the key?  \n")
    set_question(app, "")
    app.run()
    app.button(key="doc.split_question").click().run()
    assert not app.exception
    assert app.text_area(key="doc.text").value == "The spare key is in the blue tin.\n\nThe guard walks twice."
    assert app.text_area(key="doc.question").value == "Where is the key?"
    assert all(b.key != "doc.split_question" for b in app.button)  # the box is filled: no hint
    set_document(app, DOC)  # one paragraph that ends with a question: nothing would be left of the document
    set_question(app, "")
    app.run()
    assert all(b.key != "doc.split_question" for b in app.button)


def test_split_question_keeps_every_word():
    assert split_question("A.\n\nB?") == ("A.", "B?")
    assert split_question("A.\n \t\nB\nstill B?\n") == ("A.", "B\nstill B?")
    assert split_question("A?") is None and split_question("A.\n\nB.") is None and split_question("\n\nB?") is None


def test_a_link_restores_the_question_or_says_it_is_gone(app, monkeypatch):
    set_document(app, DOC)
    set_question(app, QUESTION)
    app.toggle(key="run.protect_question").set_value(False)
    app.run()
    params = {key: app.query_params[key] for key in app.query_params}
    params = {key: value[0] if isinstance(value, list) else value for key, value in params.items()}
    assert len(params["question"]) == 12 and params["run.protect_question"] == "0"
    again = fresh_session(monkeypatch, params)
    assert not again.exception and not again.warning
    assert again.text_area(key="doc.question").value == QUESTION
    assert again.toggle(key="run.protect_question").value is False
    gone = fresh_session(monkeypatch, {**params, "question": "0123456789ab"})
    assert "This link's question (#0123456789ab) is no longer held" in gone.warning[0].value
    assert gone.text_area(key="doc.question").value == "" and gone.text_area(key="doc.text").value == DOC


def test_compare_asks_every_run_the_same_question_and_the_full_cache_too(app):
    app.switch_page("pages/compare.py").run()
    set_document(app, DOC)
    set_question(app, QUESTION)
    app.number_input(key="cmp.J").set_value(16)
    app.number_input(key="cmp.h").set_value(4)
    app.number_input(key="cmp.max_new").set_value(4)
    app.checkbox(key="cmp.full_cache").check().run()
    settle(app.button(key="btn.compare").click().run())
    assert not app.exception and not app.error
    done = app.session_state["done.compare"]
    assert isinstance(done.tasks[-1], FullCacheTask)
    assert [task.question for task in done.tasks] == [QUESTION] * 3
    starts = {trace.question_start for trace in done.results}
    assert len(starts) == 1 and None not in starts
    assert all(_asked(trace) == QUESTION + TURN_END for trace in done.results)


def test_what_if_runs_again_with_the_same_question():
    task = RunTask("tiny-random", DOC, RunConfig(policy="sliding", cache_size=16), question=QUESTION)
    twin = what_if_config(task, "pin", "Ada Brenn")
    assert twin.question == QUESTION and twin.config.pin == ("Ada Brenn",) and twin.prompt == DOC


def test_a_measured_sample_sets_its_budget_and_is_marked_off_the_models_it_demonstrates_on(app):
    measured = next(s for s in load_samples() if s.cache_size is not None)
    app.selectbox(key="doc.sample").set_value(measured.title).run()
    assert not app.exception
    assert app.number_input(key="run.J").value == measured.cache_size
    assert measured.label(measured.models[0] if measured.models else "") == measured.title
    assert "(demonstrates on" in measured.label("tiny-random")  # the tests' model: not one it was measured on
