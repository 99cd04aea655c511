"""The verdict line and run titles in the app: the Expected answer box, the line at the top of a run with its
link to Explain a token, the same line at the head of each Compare column, and the samples that fill the box.

AppTest with the tiny random model, as tests/test_app.py (whose fixture and helpers these reuse). On DOC at
J = 16 a sliding window evicts "1852" (the document's first sentence), and the tiny model never writes it.
"""

from __future__ import annotations

from app_support import DOC, configure_run, set_document, settle

from ccviz.explain import run_verdict
from ccviz.ui.samples import load_samples


def _verdicts(at) -> list[str]:
    return [m.value for m in at.markdown if "Answered:" in m.value]


def _run(at):
    settle(at.button(key="btn.run").click().run())
    assert not at.exception and not at.error
    return at.session_state["done.run"].results


def test_a_run_with_an_expected_answer_opens_with_its_verdict_and_explains_that_refresh(app):
    configure_run(app, "sliding", 4)
    app.text_input(key="doc.expect").set_value("1852")
    trace = _run(app)[0]
    verdict = run_verdict(trace, "1852")
    e = verdict.eviction
    assert verdict.fate == "evicted" and not verdict.answered
    assert any(m.value == "#### Sliding window · J = 16" for m in app.markdown)  # the heading in plain words
    assert any("`sliding` · J=16 · h=4" in m.value for m in app.markdown)  # the exact spelling, in its expander
    (line,) = _verdicts(app)
    assert "**Answered: no.**" in line and f"evicted at refresh {e.refresh} ({e.phase}, after {e.step} tokens)" in line
    assert f"(t={e.position}) ranked " in line and "cut-off J = 16" in line
    app.button(key="run.verdict.explain").click().run()
    assert app.slider(key="run.cycle").value == e.refresh and app.number_input(key="run.t").value == e.position
    settle(app)  # the explanation started by itself
    assert not app.exception and not app.error
    said = next(m.value for m in app.markdown if m.value.startswith(f"**t={e.position}"))
    assert f"at refresh {e.refresh}" in said and "evicted" in said


def test_the_full_cache_joins_the_line_a_kept_answer_points_to_what_it_read_and_no_answer_no_line(app):
    configure_run(app, "sliding", 4)
    app.checkbox(key="run.full_cache").check()
    app.text_input(key="doc.expect").set_value("the light")  # the document's last words: the window keeps them
    trace, full = _run(app)
    (line,) = _verdicts(app)
    assert run_verdict(trace, "the light", full).fate == "kept"
    assert "The full cache does not answer either" in line and "was kept, yet the answer does not give it" in line
    assert "Record what the answer read" in line  # this run did not record it
    assert all(b.key != "run.verdict.explain" for b in app.button)
    app.text_input(key="doc.expect").set_value("").run()
    assert not _verdicts(app) and not app.exception  # the same run, no expected answer: no line, nothing ran


def test_samples_fill_the_expected_answer_box(app):
    samples = load_samples()
    allergy = next(s for s in samples if "admission note" in s.title)
    app.selectbox(key="doc.sample").set_value(allergy.title).run()
    assert app.text_input(key="doc.expect").value == allergy.answer == "chlorhexidine"
    plain = next(s for s in samples if s.answer is None)
    app.selectbox(key="doc.sample").set_value(plain.title).run()
    assert app.text_input(key="doc.expect").value == ""


def test_each_compare_column_opens_with_its_verdict(app):
    app.switch_page("pages/compare.py").run()
    set_document(app, DOC)
    app.number_input(key="cmp.J").set_value(16)
    app.number_input(key="cmp.h").set_value(4)
    app.number_input(key="cmp.max_new").set_value(3)
    app.text_input(key="doc.expect").set_value("1852")
    settle(app.button(key="btn.compare").click().run())
    assert not app.exception and not app.error
    traces = app.session_state["done.compare"].results
    heads = [m.value for m in app.markdown if m.value.startswith(("**A · ", "**B · "))][:2]  # then the outputs'
    assert heads == ["**A · Sliding window**", "**B · Counter-causal surprise (fast) · by clause**"]
    lines = _verdicts(app)
    assert len(lines) == len(traces) == 2
    for line, trace in zip(lines, traces):
        assert run_verdict(trace, "1852").detail.split(":")[0] in line  # its own run's refresh and step
    assert all(b.key != "run.verdict.explain" for b in app.button)  # Compare has no Explain a token
