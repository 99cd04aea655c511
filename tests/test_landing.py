"""What a newcomer finds: a bare link's first visit loads the first sample measured to demonstrate on the session's
model (its document, question, expected answer and budget), a link keeps to what it names, and a document pasted
over a sample takes the sample's question and expected answer with it.

AppTest with the tiny random model; the session's model is reported as SmolLM2 where the landing sample is
measured to demonstrate, so nothing runs.
"""

from __future__ import annotations

import pytest
from app_support import fresh_session, set_document

from ccviz.ui import inputs, landing
from ccviz.ui.keys import EXPECT_KEY, QUESTION_KEY
from ccviz.ui.samples import landing_sample, load_samples

SMOLLM2 = "SmolLM2-135M-Instruct"


@pytest.fixture
def on_smollm2(monkeypatch, tiny_worker):
    monkeypatch.setattr(landing, "chosen_model", lambda *_: SMOLLM2)
    return landing_sample(load_samples(), SMOLLM2)


def test_the_landing_sample_is_the_first_that_demonstrates_on_the_model():
    samples = load_samples()
    landing = landing_sample(samples, SMOLLM2)
    assert landing is not None and landing.cache_size and landing.question and landing.answer
    assert landing == next(s for s in samples if s.models and SMOLLM2 in s.models)
    assert landing_sample(samples, "tiny-random") is None  # measured on no sample: nothing is loaded


def test_a_newcomer_finds_the_landing_sample_loaded(monkeypatch, on_smollm2):
    at = fresh_session(monkeypatch, {})
    assert not at.exception
    assert at.text_area(key="doc.text").value == on_smollm2.text
    assert at.text_area(key=QUESTION_KEY).value == on_smollm2.question
    assert at.text_input(key=EXPECT_KEY).value == on_smollm2.answer
    assert at.number_input(key="run.J").value == on_smollm2.cache_size
    assert at.selectbox(key="doc.sample").value == on_smollm2.title
    at.switch_page("pages/compare.py").run()
    assert not at.exception
    assert at.number_input(key="cmp.J").value == on_smollm2.cache_size
    assert at.text_input(key="cmp.phrase").value == on_smollm2.key_phrase
    assert at.text_area(key="doc.text").value == on_smollm2.text


def test_a_link_keeps_to_what_it_names(monkeypatch, on_smollm2):
    at = fresh_session(monkeypatch, {"run.J": "64"})
    assert at.text_area(key="doc.text").value == inputs.DEFAULT_TEXT
    assert at.text_area(key=QUESTION_KEY).value == ""
    assert at.number_input(key="run.J").value == 64


def test_no_landing_on_a_model_no_sample_demonstrates_on(monkeypatch, tiny_worker):
    at = fresh_session(monkeypatch, {})
    assert at.text_area(key="doc.text").value == inputs.DEFAULT_TEXT
    assert at.text_area(key=QUESTION_KEY).value == ""


def test_a_pasted_document_takes_the_samples_question_with_it_an_edit_keeps_it(monkeypatch, on_smollm2):
    at = fresh_session(monkeypatch, {})
    set_document(at, on_smollm2.text + "\n\nA line the user added.")  # an edit of the sample
    at.run()
    assert at.text_area(key=QUESTION_KEY).value == on_smollm2.question
    assert at.text_input(key=EXPECT_KEY).value == on_smollm2.answer
    set_document(at, "The spare key is in the blue tin under the desk.")  # another document
    at.run()
    assert at.text_area(key=QUESTION_KEY).value == ""
    assert at.text_input(key=EXPECT_KEY).value == ""
    assert at.selectbox(key="doc.sample").value is None
    assert not at.exception


def test_a_question_the_user_wrote_stays_when_the_document_changes(monkeypatch, on_smollm2):
    at = fresh_session(monkeypatch, {})
    at.text_area(key=QUESTION_KEY).set_value("Who signed the agreement?").run()
    set_document(at, "The spare key is in the blue tin under the desk.")
    at.run()
    assert at.text_area(key=QUESTION_KEY).value == "Who signed the agreement?"
