"""Hostile trace files: whatever the bytes, loading either succeeds exactly or fails with CcvizError."""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccviz import CcvizError, Trace
from ccviz.trace import Cycle, TokenRecord

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw):
    n = draw(st.integers(1, 30))
    tokens = [
        TokenRecord(
            t=t,
            id=draw(st.integers(0, 50000)),
            text=draw(st.text(max_size=6)),
            source=draw(st.sampled_from(["prompt", "generated"])),
        )
        for t in range(n)
    ]
    cycles = []
    for index in range(draw(st.integers(0, 4))):
        candidates = sorted(draw(st.sets(st.integers(0, n - 1), max_size=n)))
        kept = sorted(draw(st.sets(st.integers(0, n - 1), max_size=n)))
        score = st.one_of(st.floats(allow_nan=False, width=32), st.just(math.inf), st.just(-math.inf))
        signals = draw(st.lists(st.sampled_from(["surprise", "recency", "attention_last"]), unique=True, max_size=2))
        scores = {name: [float(draw(score)) for _ in candidates] for name in signals}
        cycles.append(
            Cycle(
                index=index,
                step=draw(st.integers(1, n)),
                phase=draw(st.sampled_from(["prefill", "decode"])),
                candidates=candidates,
                kept=kept,
                scores=scores,
                seconds=draw(st.floats(0, 100, allow_nan=False)),
            )
        )
    return Trace(
        config={"policy": draw(st.text(max_size=10)), "cache_size": draw(st.integers(1, 100))},
        tokens=tokens,
        cycles=cycles,
        output_text=draw(st.text(max_size=20)),
        timings={"total_seconds": draw(st.floats(0, 1e6, allow_nan=False))},
        peak_cache_length=draw(st.integers(0, 1000)),
        status=draw(st.sampled_from(["complete", "cancelled", "error"])),
        stop_reason=draw(st.sampled_from(["eos", "max_new_tokens", "cancelled"])),
    )


@FAST
@given(traces())
def test_round_trip_is_exact(trace):
    text = trace.to_json()
    assert Trace.from_json(text) == trace
    assert Trace.from_json(text).to_json() == text


@FAST
@given(st.binary(max_size=400))
def test_random_bytes_never_crash(data):
    try:
        Trace.from_json(data)
    except CcvizError:
        pass


@FAST
@given(traces(), st.data())
def test_corrupted_traces_fail_cleanly(trace, data):
    """Truncation or a field replaced by a value of another type: a CcvizError or a valid trace, nothing else."""
    text = trace.to_json()
    cut = data.draw(st.integers(0, len(text) - 1))
    with pytest.raises(CcvizError):
        Trace.from_json(text[:cut])
    raw = json.loads(text)
    key = data.draw(st.sampled_from(sorted(raw)))
    raw[key] = data.draw(
        st.one_of(
            st.none(),
            st.integers(),
            st.text(max_size=3),
            st.lists(st.integers(), max_size=3),
            st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        )
    )
    try:
        loaded = Trace.from_json(json.dumps(raw))
    except CcvizError:
        return
    assert isinstance(loaded, Trace)


def test_deep_nesting_and_huge_files(tmp_path, monkeypatch):
    with pytest.raises(CcvizError, match="nested too deeply|invalid JSON"):
        Trace.from_json("[" * 100000 + "]" * 100000)
    big = tmp_path / "big.json"
    with open(big, "wb") as handle:
        handle.truncate(100 * 2**20)  # a sparse 100 MB file
    with pytest.raises(CcvizError, match="larger than 64 MB"):
        Trace.load(big)
