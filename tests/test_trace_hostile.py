"""Hostile trace files: whatever the bytes, loading either succeeds exactly or fails with CcvizError."""

import json

import pytest
from engine_support import traces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccviz import CcvizError, Trace

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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
