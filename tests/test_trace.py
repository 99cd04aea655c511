"""Trace JSON: exact round trip (infinite scores included) and clear rejection of bad files."""

import json
import math

import pytest

from ccviz import CcvizError, Trace, generate
from ccviz.trace import Cycle, TokenRecord


def _hand_trace():
    tokens = [
        TokenRecord(t=i, id=100 + i, text=f"<b>{i}</b>", source="prompt" if i < 4 else "generated") for i in range(6)
    ]
    cycles = [
        Cycle(
            index=0,
            step=3,
            phase="prefill",
            candidates=[1, 2],
            kept=[0, 1, 2],
            scores={"surprise": [1.5, math.inf]},
            seconds=0.01,
        ),
        Cycle(
            index=1,
            step=6,
            phase="decode",
            candidates=[1, 2, 3, 4, 5],
            kept=[0, 2, 5],
            scores={"surprise": [-0.1, 2.0, -math.inf, 0.333333333333, math.inf], "recency": [1.0, 2, 3, 4, 5]},
            seconds=0.02,
            units=[0, 0, 1, 2, 2],
        ),
    ]
    return Trace(
        config={"policy": "x", "cache_size": 2},
        tokens=tokens,
        cycles=cycles,
        output_text="hi",
        timings={"total_seconds": 1.0},
        peak_cache_length=6,
        stop_reason="eos",
    )


def test_round_trip_preserves_everything(tmp_path):
    trace = _hand_trace()
    path = tmp_path / "t.json"
    trace.save(path)
    text = path.read_text()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    loaded = Trace.load(path)
    assert loaded == trace
    assert loaded.cycles[0].scores["surprise"][1] == math.inf
    assert loaded.cycles[1].scores["surprise"][2] == -math.inf
    assert loaded.to_json() == text
    assert loaded.cycles[0].units is None and loaded.cycles[1].units == [0, 0, 1, 2, 2]
    old = json.loads(text)
    del old["cycles"][0]["units"]  # traces from before units were recorded load as token-level ones
    assert Trace.from_json(json.dumps(old)).cycles[0].units is None


def test_round_trip_of_a_real_run(tiny, tmp_path):
    trace = generate(tiny, "Tell me about cats.", policy="sliding", cache_size=8, max_new_tokens=10)
    trace.save(tmp_path / "run.json")
    assert Trace.load(tmp_path / "run.json") == trace


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("cycles"), "missing field 'cycles'"),
        (lambda d: d.update(schema_version=99), "schema_version is 99"),
        (lambda d: d["cycles"][1]["scores"]["surprise"].pop(), "has 4 values for 5 candidates"),
        (lambda d: d["cycles"][1]["scores"]["surprise"].__setitem__(0, "nan"), "must be a finite number"),
        (lambda d: d["tokens"][0].update(source="robot"), "source must be"),
        (lambda d: d["cycles"][0].update(kept=[2, 1]), "increasing position order"),
        (lambda d: d["cycles"][0].update(kept=[0, 99]), "timesteps between 0 and 5"),
        (lambda d: d["tokens"][2].pop("text"), "missing 'text'"),
        (lambda d: d["cycles"][1].update(units=[0, 0, 2, 2, 2]), "units must number the 5 candidates' units"),
        (lambda d: d["cycles"][1].update(units=[0, 1]), "units must number the 5 candidates' units"),
        (lambda d: d["cycles"][1].update(units="word"), "'cycles\\[1\\].units' must be a list"),
        (lambda d: d["config"].update(question_start=-3), "config.question_start must be a non-negative integer"),
        (lambda d: d["config"].update(prompt_tokens="many"), "config.prompt_tokens must be a non-negative integer"),
    ],
)
def test_bad_traces_are_rejected_clearly(mutate, message):
    data = json.loads(_hand_trace().to_json())
    mutate(data)
    with pytest.raises(CcvizError, match=message):
        Trace.from_json(json.dumps(data))


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"schema_version": 1, "x": NaN}', b"\xff\xfe\x00"])
def test_garbage_is_rejected(text):
    with pytest.raises(CcvizError, match="not a (valid )?ccviz trace"):
        Trace.from_json(text)


def test_missing_file(tmp_path):
    with pytest.raises(CcvizError, match="cannot read trace"):
        Trace.load(tmp_path / "nope.json")
