"""Every page of the Streamlit app through AppTest, with the tiny random model.

A run happens in the model worker process, followed from a background thread, so after clicking a
button the test reruns the script until the page's job has ended (what the page's polling fragment
does in a browser). The worker is the tiny model's, shared by every test (``tiny_worker``).
"""

import json

import pytest
from app_support import DOC, charts, configure_run, fresh_session, set_document, settle

from ccviz.explain import missed_reads
from ccviz.figures.tokens import MISSED
from ccviz.ui.samples import load_samples
from ccviz.worker.jobs import Job
from ccviz.worker.tasks import FullCacheTask


def test_run_page_runs_a_policy_and_shows_the_retention_view(app):
    configure_run(app, "counter_causal_fast", 8)
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    spec = json.loads(charts(app)[0].proto.spec)
    heat = spec["data"][0]
    assert heat["type"] == "heatmap" and heat["customdata"]["shape"].count(",") == 2  # 3-D customdata
    assert "counter_causal_fast" in app.markdown[0].value or any("counter_causal_fast" in m.value for m in app.markdown)
    assert len(app.html) == 1 and "kept" in app.html[0].proto.body  # the refresh in context
    assert app.slider(key="run.cycle").value == app.slider(key="run.cycle").max  # the last refresh first
    # Switching the colouring reuses the finished trace: nothing runs again.
    app.radio(key="run.colour").set_value("prompt / generated").run()
    assert not any(isinstance(v, Job) and v.running for v in app.session_state.values())
    assert json.loads(charts(app)[0].proto.spec)["layout"]["coloraxis"]["colorbar"]["ticktext"] == [
        "frozen",
        "prompt",
        "generated",
    ]
    # Re-running the same configuration comes from the cache at once.
    done = app.session_state["done.run"]
    app.button(key="btn.run").click().run()
    assert app.session_state["done.run"].results[0] is done.results[0]


def test_run_page_explains_why_a_token_was_evicted(app):
    configure_run(app, "counter_causal_fast", 4)
    settle(app.button(key="btn.run").click().run())
    trace = app.session_state["done.run"].results[0]
    t = next(tok.t for tok in trace.tokens if tok.text == " Ada")
    refresh = next(
        c.index for c in trace.cycles if t in c.candidates and t not in c.kept
    )  # the refresh that evicted it
    app.slider(key="run.cycle").set_value(refresh).run()
    app.text_input(key="run.find").set_value("ada").run()
    assert app.selectbox(key="run.match").value == t
    settle(app.button(key="btn.run.explain").click().run())
    assert not app.exception and not app.error
    verdict = next(m.value for m in app.markdown if m.value.startswith(f"**t={t}"))
    assert f"at refresh {refresh}" in verdict and "evicted" in verdict
    spec = json.loads(charts(app)[-1].proto.spec)
    assert [d["type"] for d in spec["data"]] == ["heatmap", "heatmap"]  # reads of its future, attention received
    assert "outline:2px solid" in app.html[-1].proto.body  # the token in its text, shaded by what it read
    # The same selection again is answered from the result store: no job starts.
    app.run()
    assert not any(isinstance(v, Job) and v.running for v in app.session_state.values())
    # A token typed by number, then the refresh moved to before it was processed: the trace says so at once.
    app.text_input(key="run.find").set_value("").run()
    app.number_input(key="run.t").set_value(len(trace.tokens) - 1).run()
    app.slider(key="run.cycle").set_value(0).run()
    assert not app.exception and any("Not processed yet at refresh 0" in m.value for m in app.markdown)
    assert all(b.key != "btn.run.explain" for b in app.button)  # nothing to replay, nothing to click


def test_a_link_restores_document_policy_options_and_budget(app, monkeypatch):
    set_document(app, DOC)
    app.selectbox(key="run.policy").set_value("counter_causal")
    app.run()
    app.selectbox(key="run.policy.counter_causal.score").set_value("contrast")
    app.number_input(key="run.J").set_value(48)
    app.number_input(key="run.h").set_value(12)
    app.segmented_control(key="run.granularity").set_value("word")
    app.toggle(key="doc.chat").set_value(False)
    app.run()
    params = {
        key: app.query_params[key][0] if isinstance(app.query_params[key], list) else app.query_params[key]
        for key in app.query_params
    }
    assert params["run.policy"] == "counter_causal" and params["run.J"] == "48" and len(params["doc"]) == 12
    assert "run.frozen" not in params  # settings at their defaults stay out of the link
    again = fresh_session(monkeypatch, params)
    assert not again.exception and not again.warning
    assert again.text_area(key="doc.text").value == DOC and again.toggle(key="doc.chat").value is False
    assert again.selectbox(key="run.policy").value == "counter_causal"
    assert again.selectbox(key="run.policy.counter_causal.score").value == "contrast"
    assert (again.number_input(key="run.J").value, again.number_input(key="run.h").value) == (48, 12)
    assert again.segmented_control(key="run.granularity").value == "word"


def test_a_link_with_an_unknown_document_says_so_and_keeps_its_settings(app, monkeypatch):
    at = fresh_session(monkeypatch, {"doc": "0123456789ab", "run.J": "40", "run.policy": "no_such_policy"})
    assert not at.exception
    lines = [w.value for w in at.warning]
    assert len(lines) == 2 and "#0123456789ab" in lines[0] and "no longer held" in lines[0]
    assert "run.policy='no_such_policy'" in lines[1]
    assert at.number_input(key="run.J").value == 40  # the valid settings are kept
    assert at.text_area(key="doc.text").value != ""  # the default document


def test_run_page_records_every_signal_when_asked(app):
    configure_run(app, "sliding", 4)
    settle(app.button(key="btn.run").click().run())
    assert "attention_last" not in app.selectbox(key="run.signal").options  # only sliding's own signal
    app.checkbox(key="run.record_all").check()
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    recorded = app.selectbox(key="run.signal").options
    assert {"attention_last", "attention_chunk"} <= set(recorded) and any("surprise" in s for s in recorded)


def test_run_page_keeps_whole_words_when_asked(app):
    """The unit widgets reach the engine: the trace says so, every refresh records units, and the label too."""
    configure_run(app, "tova", 4)
    app.run()  # the widgets of tova's own unit (the page opens on counter_causal_fast, by clause)
    assert app.button_group(key="run.pool").disabled  # pooling means nothing at token level
    assert app.number_input(key="run.left_context").disabled and app.slider(key="run.sentence_share").disabled
    app.button_group(key="run.granularity").set_value("word").run()
    app.button_group(key="run.pool").set_value("mean").run()
    app.number_input(key="run.left_context").set_value(3).run()
    app.slider(key="run.sentence_share").set_value(0.5).run()
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    done = app.session_state["done.run"]
    trace = done.results[0]
    assert (trace.config["granularity"], trace.config["pool"]) == ("word", "mean")
    assert (trace.config["left_context"], trace.config["sentence_share"]) == (3, 0.5)
    assert all(cycle.units is not None for cycle in trace.cycles)
    assert done.tasks[0].label == "tova by word (mean) with 3 words of left context, 50% to whole sentences first"
    assert "attention_last:word" in app.selectbox(key="run.signal").options  # the pooled score that ranked them


def test_run_page_unit_widgets_follow_the_papers_box(app):
    """The page opens on counter_causal_fast, which keeps clauses; its "paper" box means single tokens, so
    "Keep whole: default" then says token and the unit-score widget is off (nothing to pool)."""
    assert not app.button_group(key="run.pool").disabled
    assert "default (clause)" in app.button_group(key="run.granularity").options
    app.checkbox(key="run.policy.counter_causal_fast.paper").check().run()
    assert not app.exception and not app.error
    assert "default (token)" in app.button_group(key="run.granularity").options
    assert app.button_group(key="run.pool").disabled and app.number_input(key="run.left_context").disabled


def test_run_page_runs_a_pyramid_and_shows_each_layers_cache(app):
    """The allocation widget reaches the engine; a per-layer run gets a layer selector and a layer-count view."""
    configure_run(app, "tova", 4)
    app.button_group(key="run.allocation").set_value("pyramid").run()
    app.number_input(key="run.beta").set_value(4.0)
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    done = app.session_state["done.run"]
    trace = done.results[0]
    assert (trace.config["allocation"], trace.config["pyramid_beta"]) == ("pyramid", 4.0) and trace.cycles[
        -1
    ].num_layers == 2
    assert done.tasks[0].label == "tova, pyramid"
    first, last = (len(trace.cycles[-1].kept_by(layer)) for layer in (0, 1))
    assert first > last
    assert all(b.key != "btn.run.explain" for b in app.button) and any("decides per layer" in i.value for i in app.info)
    app.select_slider(key="run.layer").set_value(1).run()
    spec = json.loads(charts(app)[0].proto.spec)
    assert "layer 1" in spec["layout"]["title"]["text"] and spec["data"][0]["z"]["shape"].endswith(
        f"{max(len(c.kept_by(1)) for c in trace.cycles)}"
    )
    app.radio(key="run.colour").set_value("layers holding it").run()
    assert (
        json.loads(charts(app)[0].proto.spec)["layout"]["coloraxis"]["colorbar"]["title"]["text"] == "layers holding it"
    )
    app.selectbox(key="run.policy").set_value("counter_causal_fast").run()
    app.button_group(key="run.allocation").set_value("adaptive").run()
    assert "needs per-head scores" in app.error[0].value  # said at once, before any run
    app.button(key="btn.run").click().run()
    assert not app.exception and any("needs per-head scores" in e.value for e in app.error)


@pytest.mark.parametrize(
    "prepare, message",
    [
        (lambda at: set_document(at, "   "), "prompt is empty"),
        (lambda at: at.number_input(key="run.h").set_value(500), "must not exceed the cache size"),
        (lambda at: set_document(at, DOC * 40), "over this app's limit"),
    ],
)
def test_run_page_reports_bad_input_before_running(app, monkeypatch, prepare, message):
    monkeypatch.setenv("CCVIZ_MAX_TOKENS", "1000")
    prepare(app)
    app.button(key="btn.run").click().run()
    assert not app.exception
    assert message in app.error[0].value
    assert "job.run" not in app.session_state and "done.run" not in app.session_state
    assert app.text_area(key="doc.text").value.strip() == app.session_state["doc.text"].strip()  # the input is kept


def test_samples_and_uploads_fill_the_document(app):
    first = load_samples()[0]
    app.selectbox(key="doc.sample").select_index(0).run()
    assert app.text_area(key="doc.text").value == first.text  # the menu's first sample, whole
    app.file_uploader(key="up.doc").set_value(("notes.txt", b"Pasted notes.", "text/plain")).run()
    assert app.text_area(key="doc.text").value == "Pasted notes."
    app.file_uploader(key="up.doc").set_value(("bad.txt", b"\xff\xfe\x00\x00", "text/plain")).run()
    assert "not UTF-8" in app.error[0].value
    assert app.text_area(key="doc.text").value == "Pasted notes."  # nothing the user had is lost


def test_the_needle_generator_loads_one_map_cell_and_the_run_marks_the_needle(app):
    from ccviz.cases.haystack import make_haystack_case
    from ccviz.figures import phrase_survival
    from ccviz.figures.tokens import MARKED
    from ccviz.models import load_tokenizer

    app.select_slider(key="needle.length").set_value(500)
    app.slider(key="needle.depth").set_value(30)
    app.selectbox(key="needle.kind").set_value("identifier")
    app.button(key="needle.generate").click().run()
    assert not app.exception and not app.error
    case = make_haystack_case(load_tokenizer("tiny-random"), "needle", 500, 0.3, kind="identifier")
    document, question = case.prompt[: case.question_start].rstrip(), case.prompt[case.question_start :]
    assert app.text_area(key="doc.text").value == document  # the harness's own case: its document in the text box
    assert app.text_area(key="doc.question").value == question  # and its question asked apart, as the map asks it
    assert app.toggle(key="doc.chat").value and app.number_input(key="run.max_new").value == case.max_new_tokens
    assert case.answers[0] in app.success[0].value and "J = " in app.success[0].value
    doc_tokens = int(app.number_input(key="run.J").value)
    assert 0.24 * 480 <= doc_tokens <= 0.26 * 500  # 25% of the document, as the map's budget
    app.selectbox(key="run.policy").set_value("sliding")
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    assert any(
        "-badge[" in m.value and "needle evicted]" in m.value for m in app.markdown
    )  # a recency window lost a needle 30% deep
    trace = app.session_state["done.run"].results[0]
    needle = phrase_survival(trace, case.target)
    assert needle.tokens and not needle.kept
    context = app.html[-1].proto.body  # the refresh in context: the needle's tokens outlined, and the legend says so
    assert context.count(MARKED) == len(needle.tokens) + 1 and "the needle" in context
    app.selectbox(key="doc.sample").select_index(0).run()  # another document: nothing is marked any more
    assert "doc.needle" not in app.session_state


def test_surprise_page_highlights_and_shows_what_survives(app):
    app.switch_page("pages/surprise.py").run()
    set_document(app, DOC)
    app.number_input(key="sur.J").set_value(16)
    app.number_input(key="sur.h").set_value(8)
    settle(app.button(key="btn.surprise").click().run())
    assert not app.exception and not app.error
    signals = app.selectbox(key="surprise.signal").options
    assert any("surprise (fast, logit" in s for s in signals)
    assert any("attention received" in s for s in signals) and any("H2O accumulation" in s for s in signals)
    assert any("during the counter_causal_fast run" in s for s in signals)
    body = app.html[0].proto.body
    assert body.count("<span") > 40 and "survived to the end" in body
    app.button_group(key="surprise.mode").set_value("What survives").run()
    assert "tokens survive" in app.html[0].proto.body
    app.button_group(key="surprise.mode").set_value("Sentences").run()
    assert "sentences" in app.html[0].proto.body and len(app.dataframe) == 1


def test_surprise_page_reports_bad_input(app):
    app.switch_page("pages/surprise.py").run()
    set_document(app, "")
    app.button(key="btn.surprise").click().run()
    assert not app.exception and "prompt is empty" in app.error[0].value


def test_compare_page_runs_policies_side_by_side(app):
    app.switch_page("pages/compare.py").run()
    set_document(app, DOC)
    app.text_input(key="cmp.phrase").set_value("Ada Brenn")
    app.number_input(key="cmp.J").set_value(16)
    app.number_input(key="cmp.h").set_value(4)
    app.number_input(key="cmp.max_new").set_value(6)
    assert app.selectbox(key="cmp.p0").value == "sliding" and app.selectbox(key="cmp.p1").value == "counter_causal_fast"
    settle(app.button(key="btn.compare").click().run())
    assert not app.exception and not app.error
    side_by_side, overlap = (json.loads(c.proto.spec) for c in charts(app))
    assert [d["type"] for d in side_by_side["data"]] == ["heatmap", "heatmap"]
    assert "Jaccard" in overlap["data"][0]["hovertemplate"]
    assert sum("-badge[" in m.value for m in app.markdown) == 2  # whether "Ada Brenn" survived, per policy
    table = app.dataframe[0].value
    assert list(table["run"]) == ["A · Sliding window", "B · Counter-causal surprise (fast) · by clause"]
    assert list(table["policy"])[0] == "sliding" and (table["refreshes"] > 3).all()  # the exact spelling beside
    assert [b.proto.label for b in app.get("download_button")] == ["Download all figures (HTML report)"]
    # one policy by token and by word, side by side: each run has its own unit
    app.selectbox(key="cmp.p0").set_value("counter_causal_fast").run()
    app.button_group(key="cmp.p1.granularity").set_value("sentence").run()
    settle(app.button(key="btn.compare").click().run())
    assert not app.exception and not app.error
    assert list(app.dataframe[0].value["run"]) == [
        "A · Counter-causal surprise (fast) · by clause",
        "B · Counter-causal surprise (fast) · by sentence",
    ]
    # one policy under uniform and pyramid allocation, side by side, one layer at a time
    app.button_group(key="cmp.p1.granularity").set_value("default").run()
    app.button_group(key="cmp.p1.allocation").set_value("pyramid").run()
    settle(app.button(key="btn.compare").click().run())
    assert not app.exception and not app.error
    assert list(app.dataframe[0].value["run"]) == [
        "A · Counter-causal surprise (fast) · by clause",
        "B · Counter-causal surprise (fast) · pyramid allocation",
    ]
    app.select_slider(key="compare.layer").set_value(1).run()
    side_by_side = json.loads(charts(app)[0].proto.spec)
    widths = [int(d["z"]["shape"].split(",")[1]) for d in side_by_side["data"]]
    assert widths[1] < widths[0]  # the pyramid's last layer holds fewer entries than the uniform cache


def test_compare_page_reports_bad_input(app):
    app.switch_page("pages/compare.py").run()
    set_document(app, DOC)
    app.selectbox(key="cmp.p1").set_value("snapkv").run()
    app.number_input(key="cmp.p1.snapkv.kernel").set_value(4)
    app.button(key="btn.compare").click().run()
    assert not app.exception and "kernel must be odd" in app.error[0].value


def test_traces_page_downloads_runs_and_views_uploaded_traces(app, tiny):
    from ccviz import generate

    set_document(app, DOC)
    app.number_input(key="run.J").set_value(16)
    settle(app.button(key="btn.run").click().run())
    app.switch_page("pages/traces.py").run()
    assert not app.exception and len(app.get("download_button")) == 1

    trace = generate(tiny, DOC, policy="sliding", cache_size=16, chunk_size=4, max_new_tokens=4)
    app.file_uploader(key="up.traces").set_value([("run.json", trace.to_json().encode(), "application/json")]).run()
    assert not app.exception and not app.error
    assert charts(app) and "sliding" in app.markdown[0].value + "".join(m.value for m in app.markdown)
    app.button_group(key="traces.view").set_value("Signals").run()
    assert "recency" in app.selectbox(key="traces.signals.signal").value

    bad = json.loads(trace.to_json())
    bad["cycles"][0]["kept"] = [5, 1]
    app.file_uploader(key="up.traces").set_value(
        [
            ("run.json", trace.to_json().encode(), "application/json"),
            ("broken.json", json.dumps(bad).encode(), "application/json"),
            ("notjson.json", b"{nope", "application/json"),
        ]
    ).run()
    assert not app.exception
    errors = [e.value for e in app.error]
    assert any("broken.json" in e and "increasing position order" in e for e in errors)
    assert any("notjson.json" in e and "invalid JSON" in e for e in errors)

    bare = json.loads(trace.to_json())
    bare["config"] = {"policy": "sliding", "cache_size": 16}  # says almost nothing: every other field at its default
    app.file_uploader(key="up.traces").set_value([("bare.json", json.dumps(bare).encode(), "application/json")]).run()
    app.button_group(key="traces.view").set_value("Retention").run()
    assert not app.exception and not app.error and charts(app)
    bare["config"] = {"frozen": "?"}  # not a run's config: refused in one line when it loads
    app.file_uploader(key="up.traces").set_value([("bare.json", json.dumps(bare).encode(), "application/json")]).run()
    assert not app.exception
    assert any(
        "bare.json" in e.value and "config: a run config needs policy and cache_size" in e.value for e in app.error
    )

    app.file_uploader(key="up.traces").set_value([("a.json", trace.to_json().encode(), "application/json")] * 2).run()
    app.button_group(key="traces.view").set_value("Compare").run()
    assert not app.exception and len(charts(app)) == 2


WIDGET_OF_KIND = {
    "bool": "checkbox",
    "int": "number_input",
    "float": "number_input",
    "choice": "selectbox",
    "text": "text_input",
}


def test_every_registered_policy_gets_its_option_widgets(app):
    from ccviz import POLICIES
    from ccviz.ui.options import option_specs

    for name in POLICIES:
        app.selectbox(key="run.policy").set_value(name).run()
        assert not app.exception, name
        for spec in option_specs(name):
            widgets = app.get(WIDGET_OF_KIND[spec.kind])
            assert any(w.key == f"run.policy.{name}.{spec.name}" for w in widgets), (name, spec.name)


def test_run_page_shows_the_full_caches_answer_and_what_it_read_that_the_run_evicted(app):
    configure_run(app, "tova", 6)
    app.checkbox(key="run.full_cache").check().run()
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    done = app.session_state["done.run"]
    trace, full = done.results
    assert isinstance(done.tasks[1], FullCacheTask) and not full.cycles
    assert any(m.value == "**The full cache** (nothing evicted)" for m in app.markdown)
    missed = missed_reads(trace, full)
    assert missed  # on this document at J = 16 the run evicts tokens the full answer read
    table = next(d.value for d in app.dataframe if "rank in the full answer's reads" in d.value)
    assert table["t"].tolist() == [m.position for m in missed]
    assert table["evicted at refresh"].tolist() == [m.refresh for m in missed]
    context = app.html[0].proto.body  # the last refresh's token view: the missed ones dashed
    assert context.count(MISSED) == sum(m.position < trace.cycles[-1].step for m in missed) + 1  # + the legend
    # Another budget on the same document reuses the full cache's run from the result store.
    app.number_input(key="run.J").set_value(20).run()
    settle(app.button(key="btn.run").click().run())
    again = app.session_state["done.run"]
    assert again.results[0] is not trace and again.results[1] is full


def test_compare_page_lists_per_policy_what_the_full_answer_read_that_it_evicted(app):
    app.switch_page("pages/compare.py").run()
    app.text_area(key="doc.text").set_value(DOC)
    app.number_input(key="cmp.J").set_value(16)
    app.number_input(key="cmp.h").set_value(4)
    app.number_input(key="cmp.max_new").set_value(5)
    app.checkbox(key="cmp.full_cache").check().run()
    settle(app.button(key="btn.compare").click().run())
    assert not app.exception and not app.error
    done = app.session_state["done.compare"]
    assert len(done.tasks) == 3 and isinstance(done.tasks[2], FullCacheTask)
    assert list(app.dataframe[0].value["run"]) == [  # the runs only
        "A · Sliding window",
        "B · Counter-causal surprise (fast) · by clause",
    ]
    tables = [d.value for d in app.dataframe if "rank in the full answer's reads" in d.value]
    expected = [missed_reads(trace, done.results[2]) for trace in done.results[:2]]
    assert [t["t"].tolist() for t in tables] == [[m.position for m in e] for e in expected if e]


def test_run_page_offers_kvpress_scorers_and_runs_one_with_its_options(app):
    pytest.importorskip("kvpress")
    assert "kvpress:SnapKVPress" in app.selectbox(key="run.policy").options  # after ccviz's own
    configure_run(app, "kvpress:SnapKVPress", 4)
    app.run()
    app.number_input(key="run.policy.kvpress:SnapKVPress.window_size").set_value(4)
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    trace = app.session_state["done.run"].results[0]
    assert trace.run_config.policy == "kvpress:SnapKVPress" and trace.run_config.options["window_size"] == 4
