"""The app's plumbing without Streamlit: background jobs, the result cache, limits, option widgets."""

import base64
import io
import json
import re
import threading
import time

import numpy as np
import pytest

from ccviz import CcvizError, RunConfig
from ccviz.figures import retention_heatmap, retention_image_html
from ccviz.ui.options import option_specs
from ccviz.ui.samples import SAMPLES_DIR, load_samples
from ccviz.ui.uploads import decode_document
from ccviz.worker.jobs import Job, ResultStore, check_run
from ccviz.worker.limits import MAX_TOKENS_ENV, max_tokens
from ccviz.worker.tasks import RunTask, SurpriseTask

STORY = "Once upon a time a lighthouse keeper counted the ships that passed his rock every night. " * 20


def _task(tiny, prompt: str = STORY, **kw) -> RunTask:
    base = dict(policy="sliding", cache_size=16, chunk_size=4, max_new_tokens=6)
    return RunTask(tiny.name, prompt, RunConfig(**{**base, **kw}))


def _content(trace):
    """Everything a run decides (timings differ between any two runs)."""
    return trace.tokens, [(c.candidates, c.kept, c.scores) for c in trace.cycles], trace.output_text


def _finish(job: Job) -> Job:
    assert job.wait(120), "the job did not end"
    return job


def test_a_job_runs_in_the_background_and_its_result_is_cached(tiny, tiny_worker, direct_run):
    store = ResultStore()
    task = _task(tiny)
    job = Job([task], tiny_worker, store).start()
    assert _finish(job).errors == [] and not job.cancelled
    trace = job.results[0]
    assert trace.status == "complete" and trace.cycles
    assert _content(trace) == _content(direct_run(STORY, task.config))  # the same run as a direct call
    again = Job([task], tiny_worker, store).start()
    assert not again.running and again.results[0] is trace  # instant: no thread, no recompute


def test_the_live_trace_grows_per_refresh_and_its_last_state_draws_the_final_figure(tiny, tiny_worker):
    task = _task(tiny, max_new_tokens=12)
    job = Job([task], tiny_worker, ResultStore()).start()
    seen = []
    while job.running:
        live = job.live
        if live is not None and (not seen or len(live.cycles) != seen[-1]):
            seen.append(len(live.cycles))
            assert [c.index for c in live.cycles] == list(range(len(live.cycles)))  # a snapshot, never half-extended
            assert all(t < len(live.tokens) for c in live.cycles for t in c.kept)  # every drawn token is recorded
        time.sleep(0.001)
    final = _finish(job).results[0]
    assert seen == sorted(seen) and len(seen) >= 2, seen  # drawn while running, growing
    assert len(job.live.cycles) == len(final.cycles)
    for colour in ("timestep", "source"):  # the live picture's last state is the final figure, cell for cell
        assert (
            _picture(retention_image_html(job.live, colour)).tolist()
            == _plotly_colours(retention_heatmap(final, colour)).tolist()
        )


def _picture(live_html: str) -> np.ndarray:
    """The live view's PNG, decoded by Pillow."""
    from PIL import Image

    data = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", live_html).group(1)
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))


def _plotly_colours(fig) -> np.ndarray:
    """Slow reference: each cell's colour on the figure's own colour axis, interpolated by hand between its stops."""
    import plotly.colors

    axis, z = fig.layout.coloraxis, np.asarray(fig.data[0].z, dtype=np.float64)
    stops = [
        (
            stop,
            plotly.colors.hex_to_rgb(colour)
            if colour.startswith("#")
            else tuple(float(v) for v in colour[4:-1].split(",")),
        )
        for stop, colour in axis.colorscale
    ]
    out = np.zeros(z.shape + (3,), dtype=np.uint8)
    for (r, c), value in np.ndenumerate(z):
        if np.isnan(value):
            out[r, c] = (244, 244, 244)  # the plot background
            continue
        where = min(max((value - axis.cmin) / (axis.cmax - axis.cmin), 0.0), 1.0)
        (s0, c0), (s1, c1) = next((a, b) for a, b in zip(stops, stops[1:]) if a[0] <= where <= b[0] and b[0] > a[0])
        out[r, c] = [round(x0 + (x1 - x0) * (where - s0) / (s1 - s0)) for x0, x1 in zip(c0, c1)]
    return out


def test_cancel_keeps_every_live_row_in_the_partial_trace(tiny, tiny_worker):
    job = Job([_task(tiny, prompt=STORY * 3, max_new_tokens=50)], tiny_worker, ResultStore()).start()
    deadline = time.monotonic() + 60
    while (job.live is None or len(job.live.cycles) < 3) and job.running and time.monotonic() < deadline:
        time.sleep(0.005)
    drawn = len(job.live.cycles)
    job.cancel()
    partial = _finish(job).results[0]
    assert partial.status == "cancelled" and len(partial.cycles) >= drawn >= 3
    assert _picture(retention_image_html(job.live)).tolist() == _plotly_colours(retention_heatmap(partial)).tolist()


def test_store_is_a_bounded_lru():
    store = ResultStore(max_entries=2)
    store.put("a", 1)
    store.put("b", 2)
    assert store.get("a") == 1  # a is now the most recent
    store.put("c", 3)
    assert store.get("b") is None and store.get("a") == 1 and store.get("c") == 3 and len(store) == 2


def test_cancel_keeps_the_partial_trace_and_does_not_cache_it(tiny, tiny_worker):
    store = ResultStore()
    task = _task(tiny, prompt=STORY * 3, max_new_tokens=50)
    job = Job([task, _task(tiny, policy="streaming_llm")], tiny_worker, store).start()
    deadline = time.monotonic() + 60
    while job.progress.refreshes < 3 and job.running and time.monotonic() < deadline:
        time.sleep(0.005)
    job.cancel()
    _finish(job)
    partial = job.results[0]
    assert job.cancelled and partial.status == "cancelled" and len(partial.cycles) >= 3
    assert job.results[1] is None  # the next task never started
    assert store.get(task) is None


def test_failures_become_messages_and_later_tasks_still_run(tiny, tiny_worker):
    bad = _task(tiny, prompt="word " * 9000)  # longer than the model's context: refused by the engine in the worker
    job = _finish(Job([bad, _task(tiny)], tiny_worker, ResultStore()).start())
    assert len(job.errors) == 1 and "exceeds the model's 8192 positions" in job.errors[0]
    assert job.results[0] is None and job.results[1].status == "complete"


def test_two_sessions_at_once_do_not_interfere(tiny, tiny_worker, direct_run):
    a, b = _task(tiny, policy="sliding"), _task(tiny, policy="counter_causal_fast", cache_size=12, chunk_size=3)
    expected = [_content(direct_run(STORY, t.config)) for t in (a, b)]
    jobs = [Job([t], tiny_worker, ResultStore()) for t in (a, b)]
    starter = [threading.Thread(target=job.start) for job in jobs]
    for thread in starter:
        thread.start()
    for thread in starter:
        thread.join()
    assert [_content(_finish(job).results[0]) for job in jobs] == expected


def test_whole_document_surprise_has_one_value_per_prompt_token(tiny, tiny_worker):
    run = _finish(Job([_task(tiny)], tiny_worker, ResultStore()).start()).results[0]
    surprise = _finish(
        Job([SurpriseTask(model=tiny.name, prompt=STORY, chat=True)], tiny_worker, ResultStore()).start()
    ).results[0]
    assert len(surprise) == run.prompt_length and surprise[-1] == float("inf")


def test_token_limits_are_checked_before_anything_runs(tiny, tiny_worker, monkeypatch):
    assert max_tokens() == 4096
    with pytest.raises(CcvizError, match=r"over this app's limit of 100 tokens per run \(CCVIZ_MAX_TOKENS\)"):
        check_run(tiny_worker, _task(tiny), 100)
    assert check_run(tiny_worker, _task(tiny), 4096) == _task(tiny).check(tiny) > 300
    with pytest.raises(CcvizError, match="exceeds the model's 8192 positions"):
        check_run(tiny_worker, _task(tiny, prompt="word " * 9000), 100_000)
    monkeypatch.setenv(MAX_TOKENS_ENV, "lots")
    with pytest.raises(CcvizError, match="must be a whole number"):
        max_tokens()


def test_uploads_are_decoded_or_refused_with_a_reason():
    assert decode_document("a.txt", "\ufeffhello".encode("utf-8"), 1024) == "hello"
    with pytest.raises(CcvizError, match="not UTF-8"):
        decode_document("a.txt", b"\xff\xfe\x00a", 1024)
    with pytest.raises(CcvizError, match="limited to 1 KB"):
        decode_document("a.txt", b"x" * 2048, 1024)
    with pytest.raises(CcvizError, match="empty"):
        decode_document("a.txt", b"  \n", 1024)


def test_option_widgets_follow_the_policy_dataclass_fields():
    specs = {spec.name: spec for spec in option_specs("counter_causal_fast")}
    assert specs["score"].kind == "choice" and "contrast" in specs["score"].choices
    assert specs["min_gap"].kind == "int" and specs["min_gap"].default == 0
    assert {spec.kind for spec in option_specs("h2o")} == {"bool"}
    assert option_specs("sliding") == []


def test_samples_are_listed_with_a_key_phrase_found_once_in_their_text():
    samples = load_samples()
    listed = json.loads((SAMPLES_DIR / "index.json").read_text(encoding="utf-8"))
    assert [s.title for s in samples] == [entry["title"] for entry in listed]
    allergy = next(s for s in samples if "admission note" in s.title)
    assert allergy.text.count(allergy.key_phrase) == 1
    for sample in samples:
        assert sample.key_phrase in sample.text


def test_the_document_store_is_bounded_by_count_and_bytes():
    from ccviz.ui.documents import DocumentStore, document_hash

    store = DocumentStore(max_documents=3, max_bytes=100)
    keys = [store.put(text) for text in ("a" * 10, "b" * 10, "c" * 10)]
    assert keys[0] == document_hash("a" * 10) and len(keys[0]) == 12
    assert store.get(keys[0]) == "a" * 10  # now the most recent
    store.put("d" * 10)
    assert store.get(keys[1]) is None and store.get(keys[0]) and len(store) == 3  # the least recent went
    store.put("e" * 95)  # over the byte budget: the older ones make room
    assert len(store) == 1 and store.get(document_hash("e" * 95)) == "e" * 95


def test_finding_a_token_finds_a_word_split_into_several(tiny):
    from ccviz import generate
    from ccviz.explain import matching_tokens

    trace = generate(
        tiny,
        "Allergy: amoxicillin (anaphylaxis). Never give Amoxicillin.",
        policy="sliding",
        cache_size=16,
        max_new_tokens=2,
        chat=False,
    )
    found = matching_tokens(trace, "amoxicillin", len(trace.tokens))
    assert "".join(trace.tokens[t].text for t in found).lower().count("amoxicillin") == 2
    assert all("".join(trace.tokens[t].text for t in found[i : i + 3]).strip().lower() == "amoxicillin" for i in (0, 3))
    assert matching_tokens(trace, "(", 4) == [] and matching_tokens(
        trace, "(", len(trace.tokens)
    )  # up to the refresh's step
