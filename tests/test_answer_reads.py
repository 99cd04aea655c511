"""What the answer read (``record_reads``): the record against an explicit softmax of the model's own last-layer
queries over the cached keys, a run unchanged by recording, the trace format, the CLI and the Run page."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from app_support import configure_run, settle
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from ccviz import CcvizError, generate
from ccviz.engine import CacheSession, RunConfig
from ccviz.trace import AnswerRead, Trace

PROMPT = (
    "The lighthouse on Gull Rock was built in 1852. Its keeper, Ada Brenn, logged the weather every four hours. "
    "The lens came from Paris. The locker code is 7684. Who kept the light?"
)
RUN = {"chat": False, "max_new_tokens": 5, "stop_at_eos": False}
HALF_LEVEL = 0.5 / 255 + 1e-4  # the record's error, on its square-root scale (float32 sums besides)


def _root_error(decoded: np.ndarray, exact: np.ndarray) -> float:
    """The largest difference on the record's scale: sqrt(value / the step's max)."""
    scale = exact.max()
    return float(np.abs(np.sqrt(decoded / scale) - np.sqrt(exact / scale)).max())


def test_the_record_is_the_softmax_of_the_last_layers_queries_over_the_cached_keys(smollm):
    """Slow and explicit: every pass's input to the last attention layer and its cached keys, taken by a hook;
    the query projected and rotated by hand, then softmax(q K^T / sqrt(d)) per head, max and mean over heads."""
    model, seen = smollm.model, []
    attention = model.model.layers[-1].self_attn

    def hook(module, args, kwargs, output):
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        keys = kwargs["past_key_values"].layers[-1].keys  # after the pass: every cached key, rotated
        seen.append((hidden[:, -1:].clone(), [e[:, -1:].clone() for e in kwargs["position_embeddings"]], keys.clone()))

    handle = attention.register_forward_hook(hook, with_kwargs=True)
    try:
        trace = generate(smollm, PROMPT, policy="tova", cache_size=24, chunk_size=8, record_reads=True, **RUN)
    finally:
        handle.remove()
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    d = config.head_dim
    steps = len(trace.answer_reads)
    assert steps == RUN["max_new_tokens"] == len(trace.tokens) - trace.prompt_length
    for step, (hidden, (cos, sin), keys) in enumerate(seen[-steps:]):  # one pass per generated token, the last
        reading = trace.answer_reading(step)
        assert reading.query == trace.prompt_length - 1 + step and reading.token == reading.query + 1
        with torch.no_grad():
            q = attention.q_proj(hidden).view(1, 1, heads, d).transpose(1, 2)
            q, _ = apply_rotary_pos_emb(q, q, cos, sin)
            k = keys.repeat_interleave(heads // kv_heads, dim=1)  # query head h reads KV head h // group
            weights = torch.softmax((q[0] @ k[0].transpose(1, 2))[:, 0] * d**-0.5, dim=-1)  # [heads, entries]
        present = ~np.isnan(reading.max)
        assert present.sum() == keys.shape[2] < reading.query + 1  # the cache it met, after evictions
        assert present[-1] and len(reading.evicted) == reading.query + 1 - present.sum()
        for decoded, exact in ((reading.max, weights.amax(0)), (reading.mean, weights.mean(0))):
            assert _root_error(decoded[present], exact.double().numpy()) <= HALF_LEVEL


def _comparable(trace: Trace) -> dict:
    data = trace.to_dict()
    for cycle in data["cycles"]:
        cycle["seconds"] = 0.0
    del data["timings"], data["config"]["record_reads"]
    data.pop("answer_reads", None)
    return data


def _cached(trace: Trace, query: int) -> set[int]:
    """The cache the pass of ``query`` met, from the refreshes: the last one's survivors, then every token fed since."""
    before = [c for c in trace.cycles if c.step <= query]
    start = before[-1].step if before else 0
    return {*(before[-1].kept if before else ()), *range(start, query + 1)}


@pytest.mark.parametrize("policy, allocation", [("tova", "uniform"), ("snapkv", "uniform"), ("tova", "pyramid")])
def test_recording_changes_nothing_and_reads_exactly_the_cache(tiny, policy, allocation):
    settings = {"policy": policy, "cache_size": 12, "chunk_size": 4, "allocation": allocation, **RUN}
    recorded = generate(tiny, PROMPT, record_reads=True, **settings)
    plain = generate(tiny, PROMPT, **settings)
    assert _comparable(recorded) == _comparable(plain)
    assert plain.answer_reads is None and "answer_reads" not in plain.to_dict()
    assert recorded.run_config.record_reads and not plain.run_config.record_reads
    assert len(recorded.answer_reads) == len(recorded.tokens) - recorded.prompt_length
    for step in range(len(recorded.answer_reads)):
        reading = recorded.answer_reading(step)
        held = set(np.flatnonzero(~np.isnan(reading.max)).tolist())
        assert held == _cached(recorded, reading.query)
        assert set(reading.evicted.tolist()) == set(range(reading.query + 1)) - held
        if allocation == "uniform":  # each head's softmax sums to 1 over the cache; so does their mean
            assert np.nansum(reading.mean) == pytest.approx(1.0, abs=0.02)


def test_a_session_without_the_prompts_length_cannot_record_reads(tiny):
    config = RunConfig(policy="sliding", cache_size=8, record_reads=True)
    with pytest.raises(CcvizError, match="record_reads needs the prompt's length"):
        CacheSession(tiny, config)


def test_the_quantised_record_keeps_small_reads_and_the_top_one_exact():
    rng = np.random.default_rng(0)
    values = rng.dirichlet(np.full(300, 0.1))  # heavy-tailed, like attention
    values[7] = 0.0
    positions = np.sort(rng.choice(400, size=300, replace=False))
    record = AnswerRead.encode(positions, values, values / 2)
    top, half = record.values(int(positions[-1]))
    assert np.flatnonzero(~np.isnan(top)).tolist() == positions.tolist()
    assert top[positions[values.argmax()]] == values.max() and top[positions[7]] == 0.0
    assert _root_error(top[positions], values) <= HALF_LEVEL and _root_error(half[positions], values / 2) <= HALF_LEVEL
    small = (values > 1e-4 * values.max()) & (values < 1e-3 * values.max())
    assert small.any() and (top[positions][small] > 0).all()  # a linear byte would have made them 0


def test_reads_round_trip_and_old_or_broken_records_load_or_fail_in_one_line(tiny, tmp_path):
    trace = generate(tiny, PROMPT, policy="tova", cache_size=12, chunk_size=4, record_reads=True, **RUN)
    path = tmp_path / "reads.json"
    trace.save(path)
    loaded = Trace.load(path)
    assert loaded.answer_reads == trace.answer_reads and loaded.to_dict() == trace.to_dict()
    np.testing.assert_array_equal(loaded.answer_reading(2).mean, trace.answer_reading(2).mean)
    data = trace.to_dict()
    del data["answer_reads"], data["config"]["record_reads"]  # as a trace from before them
    old = Trace.from_dict(data)
    assert old.answer_reads is None and not old.run_config.record_reads
    with pytest.raises(CcvizError, match="re-run with --record-reads"):
        old.answer_reading(0)
    with pytest.raises(CcvizError, match="the step must be 0 to 4"):
        trace.answer_reading(5)
    broken = json.loads(trace.to_json())
    broken["answer_reads"][1]["mean_levels"] += "00"
    with pytest.raises(CcvizError, match=r"answer_reads\[1\].mean_levels must be a byte in hex per present entry"):
        Trace.from_dict(broken)
    broken = json.loads(trace.to_json())
    broken["answer_reads"].append(broken["answer_reads"][0])
    with pytest.raises(CcvizError, match="more steps than generated tokens"):
        Trace.from_dict(broken)


@pytest.fixture(scope="module")
def reads_trace(tmp_path_factory):
    """A tiny-model run with reads, through the CLI: the trace file."""
    from ccviz.cli import main

    path = tmp_path_factory.mktemp("reads") / "trace.json"
    run = ["run", "--model", "tiny-random", "--raw", "--prompt", PROMPT, "--policy", "tova", "--cache-size", "12"]
    assert main([*run, "--chunk-size", "4", "--max-new-tokens", "4", "--record-reads", "--out", str(path)]) == 0
    return path


def test_explain_answer_lists_what_was_read_most_and_the_evicted_beside_it(reads_trace, capsys):
    from ccviz.cli import main
    from ccviz.explain import answer_summary

    capsys.readouterr()
    trace = Trace.load(reads_trace)
    assert main(["explain", str(reads_trace), "--answer", "--step", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    reading = trace.answer_reading(1)
    token = trace.tokens[reading.token]
    assert lines[0].startswith(f"generated token 1: t={reading.token} {token.text!r}, picked by the pass of t=")
    summary = answer_summary(trace, 1)
    best = summary.read_most[0]
    assert best.max == np.nanmax(reading.max) and lines[2].split()[0] == f"t={best.position}"
    assert all(e.max >= later.max for e, later in zip(summary.read_most, summary.read_most[1:]))
    evicted = set(reading.evicted.tolist())
    for span in summary.evicted_beside:  # really evicted, and by the refresh it names
        assert set(range(span.first, span.last + 1)) <= evicted
        cycle = trace.cycles[span.refresh]
        assert span.first in cycle.candidates and span.first not in cycle.kept
        assert any(f"{span.where} " in line and f"refresh {span.refresh}" in line for line in lines)
    assert main(["explain", str(reads_trace), "--answer"]) == 0
    assert capsys.readouterr().out.startswith("generated token 0: ")  # the answer's first token by default


@pytest.mark.parametrize(
    "args, message",
    [
        (["--answer", "--step", "4"], "the step must be 0 to 3"),
        (["--step", "1", "--token", "3"], "--step goes with --answer"),
        (["--answer", "--json"], "--refresh and --json go with --token or --find"),
        (["--answer", "--token", "3"], "not allowed with argument"),
    ],
    ids=["range", "step-alone", "json", "both"],
)
def test_explain_answer_bad_input_is_one_line(reads_trace, args, message, capsys):
    from ccviz.cli import main

    assert main(["explain", str(reads_trace), *args]) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.strip().splitlines()) == 1 and message in err, err


def test_explain_answer_of_a_trace_without_reads_says_how_to_get_them(reads_trace, tmp_path, capsys):
    from ccviz.cli import main

    trace = Trace.load(reads_trace)
    path = tmp_path / "plain.json"
    replace(trace, answer_reads=None).save(path)
    assert main(["explain", str(path), "--answer"]) == 2
    assert capsys.readouterr().err.strip() == (
        "ccviz: error: this trace has no record of what the answer read: re-run with --record-reads"
    )


def test_run_page_shows_what_the_answer_read_and_explain_opens_the_evicting_refresh(app):  # noqa: F811
    configure_run(app, "tova", 4)
    app.checkbox(key="run.record_reads").check()
    settle(app.button(key="btn.run").click().run())
    assert not app.exception and not app.error
    trace = app.session_state["done.run"].results[0]
    assert trace.run_config.record_reads and len(trace.answer_reads) == 4
    view = next(h.proto.body for h in app.html if "the generated token" in h.proto.body)
    assert "line-through" in view and "evicted at refresh" in view  # evicted tokens, struck
    app.select_slider(key="run.answer_step").set_value(2).run()
    token = trace.tokens[trace.prompt_length + 2]
    assert f"t={token.t} " in next(h.proto.body for h in app.html if "the generated token" in h.proto.body)
    # Explain a token evicted before the last refresh: one click opens the refresh that evicted it.
    gone, evicted_at = next((t, c.index) for c in trace.cycles[:-1] for t in c.candidates if t not in c.kept)
    assert app.slider(key="run.cycle").value == len(trace.cycles) - 1
    app.number_input(key="run.t").set_value(gone).run()
    assert any(f"Evicted earlier, at refresh {evicted_at}" in m.value for m in app.markdown)
    app.button(key="run.open_refresh").click().run()
    assert not app.exception and app.slider(key="run.cycle").value == evicted_at
    assert any(b.key == "btn.run.explain" for b in app.button)  # a candidate there: its decision can be replayed
