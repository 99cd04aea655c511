"""What-if pins and drops: a pinned phrase is kept at every refresh within J, a dropped one is gone at its
first refresh, under every keep rule; the trace records both and re-runs identically; the CLI takes them."""

import base64
import json

import numpy as np
import pytest
from app_support import charts, configure_run, settle

from ccviz import CcvizError, RunConfig, Trace, generate
from ccviz.cli import _parser, main
from ccviz.engine import prepare
from ccviz.explain import explain_token, explain_without_replay, matching_tokens

RECORD = (
    "The patient, Mr. Okafor, is allergic to amoxicillin. His record number is KX-4817. He was seen on Tuesday "
    "for a cough that had lasted two weeks, and the clinician noted mild fever. "
) * 3 + "What is he allergic to?"
PIN, DROP = "allergic to amoxicillin", "KX-4817"
SMALL = {"cache_size": 32, "max_new_tokens": 4}


def covered(trace: Trace, phrase: str) -> list[int]:
    """The prompt tokens the phrase covers, found in the trace's own texts (after the frozen prefix)."""
    frozen = trace.run_config.frozen
    return [t for t in matching_tokens(trace, phrase, trace.prompt_length) if t >= frozen]


def check_pinned(trace: Trace, pinned: list[int], budget: int) -> None:
    """Every pinned token processed by a refresh is held there, by every layer and KV head; at most
    ``budget`` candidates survive (on average over the layers and heads, which a per-layer allocation
    shares the budget across)."""
    frozen = trace.run_config.frozen
    for cycle in trace.cycles:
        sets = [
            cycle.kept_by(layer, head) for layer in range(cycle.num_layers or 1) for head in range(cycle.num_heads or 1)
        ]  # a single set, kept, without per-layer sets
        for held in sets:
            assert {t for t in pinned if t < cycle.step} <= set(held), cycle.index
        assert sum(len([t for t in held if t >= frozen]) for held in sets) <= budget * len(sets), cycle.index


def plotted(values) -> np.ndarray:
    """A Plotly spec's array, written as a list or as typed binary data."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=values["dtype"])
    return np.asarray(values)


def first_refreshes(trace: Trace, tokens: list[int]) -> dict[int, int]:
    """Each token's first refresh as a candidate."""
    return {t: next(c.index for c in trace.cycles if t in c.candidates) for t in tokens}


@pytest.fixture(scope="module")
def smol_runs(smollm):
    base = generate(smollm, RECORD, policy="counter_causal_fast", **SMALL)
    what_if = generate(smollm, RECORD, policy="counter_causal_fast", pin=[PIN], drop=DROP, **SMALL)
    return base, what_if


def test_pinned_phrase_is_cached_at_every_refresh_within_j(smol_runs):
    base, what_if = smol_runs
    pinned = covered(what_if, PIN)
    assert len(pinned) >= 9  # three occurrences, several tokens each
    assert any(t not in base.final_kept for t in pinned), "without the pin the policy evicts some of it"
    check_pinned(what_if, pinned, SMALL["cache_size"])
    frozen = what_if.run_config.frozen
    full = [c for c in what_if.cycles if len(c.candidates) > SMALL["cache_size"]]
    assert full and all(len(c.kept) - frozen <= SMALL["cache_size"] for c in full)  # pins take places, not more


def test_dropped_phrase_is_gone_after_its_first_refresh(smol_runs):
    base, what_if = smol_runs
    dropped = covered(what_if, DROP)
    assert dropped
    firsts = first_refreshes(base, dropped)
    assert any(t in base.cycles[i].kept for t, i in firsts.items()), "without the drop some of it survives"
    for t, first in first_refreshes(what_if, dropped).items():
        assert all(t not in c.kept for c in what_if.cycles[first:])
    assert what_if.output_text != "" and what_if.config["pin"] == [PIN] and what_if.config["drop"] == [DROP]


def test_explain_names_a_pinned_and_a_dropped_token(smol_runs):
    _, what_if = smol_runs
    last = len(what_if.cycles) - 1
    pinned = explain_without_replay(what_if, last, covered(what_if, PIN)[0])
    dropped = explain_without_replay(what_if, last, covered(what_if, DROP)[0])
    assert pinned is not None and pinned.kept and "pins" in pinned.reason
    assert dropped is not None and dropped.kept is False and "drops" in dropped.reason


def test_explain_replays_a_pinned_run_exactly(smollm, smol_runs):
    _, what_if = smol_runs
    marked = set(covered(what_if, PIN)) | set(covered(what_if, DROP))
    cycle = next(c for c in what_if.cycles if len(c.candidates) > SMALL["cache_size"])
    token = next(t for t in cycle.candidates if t not in marked)
    explanation = explain_token(smollm, what_if, cycle.index, token)
    assert explanation.status == "candidate" and explanation.matches_trace
    assert explanation.kept == (token in cycle.kept)


def test_trace_config_round_trips_and_reruns_identically(smollm, smol_runs, tmp_path):
    _, what_if = smol_runs
    path = tmp_path / "pins.json"
    what_if.save(path)
    loaded = Trace.load(path)
    assert loaded.config["pin"] == [PIN] and loaded.config["drop"] == [DROP]
    config = RunConfig.from_trace(loaded)
    assert config.pin == (PIN,) and config.drop == (DROP,) and hash(config)
    again = generate(smollm, RECORD, config)
    assert again.output_text == what_if.output_text
    assert [c.kept for c in again.cycles] == [c.kept for c in what_if.cycles]
    old = {key: value for key, value in loaded.config.items() if key not in ("pin", "drop")}
    assert RunConfig.from_dict(old, check_policy=False).pin == ()  # a trace written before pins existed


@pytest.mark.parametrize(
    "settings",
    [
        {"policy": "counter_causal_fast", "granularity": "word"},
        {"policy": "counter_causal_fast", "granularity": "sentence", "pool": "mean"},
        {"policy": "tova", "allocation": "pyramid", "pyramid_beta": 4.0},
        {"policy": "snapkv", "allocation": "adaptive", "recent": 2},
    ],
    ids=["word", "sentence", "pyramid", "adaptive"],
)
def test_pins_hold_under_units_and_per_layer_allocation(tiny, settings):
    run = generate(tiny, RECORD, cache_size=24, max_new_tokens=3, pin=(PIN,), drop=(DROP,), **settings)
    pinned = covered(run, PIN)
    check_pinned(run, pinned, 24)
    for t, first in first_refreshes(run, covered(run, DROP)).items():
        assert all(t not in c.kept for c in run.cycles[first:])
    without = generate(tiny, RECORD, cache_size=24, max_new_tokens=3, **settings)
    assert any(t not in without.final_kept for t in pinned)  # the pin changed what survived


def test_config_validates_phrases():
    config = RunConfig(policy="tova", cache_size=16, pin=["a b", "c"], drop="d")
    assert config.pin == ("a b", "c") and config.drop == ("d",) and hash(config)
    assert "pinning 'a b', 'c', dropping 'd'" in config.describe()
    for bad in ([""], ["  "], [3], 5):
        with pytest.raises(CcvizError, match="non-empty strings"):
            RunConfig(policy="tova", cache_size=16, pin=bad)
    with pytest.raises(CcvizError, match="both pinned and dropped"):
        RunConfig(policy="tova", cache_size=16, pin=("x",), drop=("x",))


def test_missing_phrase_and_full_budget_fail_before_model_work(tiny):
    with pytest.raises(CcvizError, match="cannot pin 'penicillin': it is not in the document") as err:
        prepare(tiny, RECORD, RunConfig(policy="tova", cache_size=16, pin=("penicillin",)))
    assert "\n" not in str(err.value)
    with pytest.raises(CcvizError, match="cannot drop"):
        generate(tiny, RECORD, policy="tova", cache_size=16, drop=("penicillin",))
    with pytest.raises(CcvizError, match="leaving no place to score"):
        prepare(tiny, RECORD, RunConfig(policy="tova", cache_size=16, recent=8, pin=(PIN,)))


def test_cli_pin_and_drop_are_repeatable(tmp_path):
    args = _parser().parse_args(
        ["run", "--prompt", "x", "--policy", "tova", "--cache-size", "8", "--pin", "a", "--pin", "b", "--drop", "c"]
    )
    assert args.pin == ["a", "b"] and args.drop == ["c"]
    out = tmp_path / "t.json"
    flags = ["--pin", "amoxicillin", "--pin", "Okafor", "--drop", DROP, "--out", str(out)]
    assert main(["run", "--model", "tiny-random", "--prompt", RECORD, "--policy", "tova", "--cache-size", "24",
                 "--max-new-tokens", "2", *flags]) == 0  # fmt: skip
    config = json.loads(out.read_text())["config"]
    assert config["pin"] == ["amoxicillin", "Okafor"] and config["drop"] == [DROP]


def test_cli_missing_phrase_is_one_line(capsys):
    """In this process, as test_cli's bad-input cases (which show main() ends a real process the same way)."""
    from ccviz.cli import main

    args = ["run", "--model", "tiny-random", "--prompt", RECORD, "--policy", "tova", "--cache-size", "16"]
    assert main([*args, "--pin", "penicillin"]) == 2
    out, err = capsys.readouterr()
    assert not out and err.strip().splitlines() == ["ccviz: error: cannot pin 'penicillin': it is not in the document"]


def test_run_page_what_if_runs_a_pinned_twin_and_shows_both(app):
    configure_run(app, "counter_causal_fast", 4)
    settle(app.button(key="btn.run").click().run())
    base = app.session_state["done.run"]
    app.button(key="btn.run.what_if").click().run()
    assert [e.value for e in app.error] == ["type a phrase of the document, or pick a sentence, to pin or drop"]
    app.text_input(key="run.what_if.phrase").set_value("Ada Brenn")
    settle(app.button(key="btn.run.what_if").click().run())
    assert not app.exception and not app.error
    twin = app.session_state["done.run.what_if"]
    assert twin.tasks[0].config == base.tasks[0].config.replace(pin=("Ada Brenn",))
    before, after = base.results[0], twin.results[0]
    pinned = covered(after, "Ada Brenn")
    assert pinned and set(pinned) <= set(after.final_kept) and not set(pinned) <= set(before.final_kept)
    specs = [json.loads(c.proto.spec) for c in charts(app)]
    assert any(sum(d["type"] == "heatmap" for d in spec["data"]) == 2 for spec in specs)  # both runs' heatmaps
    changes = next(s for s in specs if s["layout"].get("title", {}).get("text", "").startswith("Kept by one run"))
    lines = [{axis: plotted(line[axis]) for axis in "xy"} for line in changes["data"]]
    assert len(lines) == 2 and len(lines[0]["x"]) == min(len(before.cycles), len(after.cycles))
    assert lines[1]["y"].max() > 0  # the what-if kept what this run had evicted
    assert any("What changed in the cache" in s.value for s in app.subheader)
    assert len(app.code) == 3  # the run's output, then both outputs side by side
    # A sentence picked from the document drops it instead.
    app.radio(key="run.what_if.verb").set_value("drop").run()
    sentence = next(o for o in app.selectbox(key="run.what_if.pick").options if "Its keeper" in o)
    app.selectbox(key="run.what_if.pick").set_value(sentence).run()
    settle(app.button(key="btn.run.what_if").click().run())
    assert app.session_state["done.run.what_if"].tasks[0].config.drop == (
        "Its keeper, Ada Brenn, logged the weather every four hours.",
    )
