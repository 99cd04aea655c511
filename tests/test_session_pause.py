"""A session that pauses before a refresh: the same decisions, and the candidates it will decide on in between."""

import pytest
import torch

from ccviz import Candidates, CcvizError, RunConfig
from ccviz.engine import CacheSession
from ccviz.policies import CounterCausalFast

TEXT = "The locker code is 4817. The spare key is in the blue tin under the desk. " * 4


def _config(policy: str = "tova", **more) -> RunConfig:
    return RunConfig(policy=policy, cache_size=12, chunk_size=8, frozen=2, chat=False, **more)


@pytest.mark.parametrize("policy", ["tova", "counter_causal_fast", "snapkv"])
def test_pausing_before_every_refresh_changes_no_decision(tiny, policy):
    ids = tiny.tokenizer(TEXT)["input_ids"][:60]
    bounds = [0, 3, 8, 11, 16, 19, 24, 27, 32, 35, 40]  # the same passes both ways (a pass's length moves the last bit)
    plain = CacheSession(tiny, _config(policy))
    for start, end in zip(bounds, bounds[1:]):
        plain.feed(ids[start:end])
    for token in ids[40:]:
        plain.feed([token], phase="decode")
    paused = CacheSession(tiny, _config(policy))
    waits = 0
    for start, end in zip(bounds, bounds[1:]):
        paused.feed(ids[start:end], refresh=False)  # every other feed ends where a refresh falls due
        if paused.refresh_pending:
            waits += 1
            view = paused.candidates()
            assert isinstance(view, Candidates) and len(view) == len(paused.cache) - 2  # nothing evicted yet
            assert view.pos.tolist() == paused.cache.pos[2:].tolist() and view.keys(0).shape[-2] == len(view)
            assert all(table.shape[0] == len(view) for table in view.extras.values())
    for token in ids[40:]:
        paused.feed([token], phase="decode", refresh=False)
    assert paused.refresh_pending == (len(ids) % 8 == 0)
    if paused.refresh_pending:
        paused.refresh()
    assert waits == 5 and not paused.refresh_pending
    a, b = plain.trace, paused.trace
    assert [c.kept for c in a.cycles] == [c.kept for c in b.cycles]
    assert [c.scores for c in a.cycles] == [c.scores for c in b.cycles]
    assert paused.cache.pos.tolist() == plain.cache.pos.tolist()


def test_a_paused_refresh_shows_the_decision_the_refresh_then_makes(tiny):
    ids = tiny.tokenizer(TEXT)["input_ids"][:32]
    session = CacheSession(tiny, _config("sliding"))
    session.feed(ids, refresh=False)
    assert session.refresh_pending and len(session.trace.cycles) == 3 and len(session.cache) == 2 + 12 + 8
    view = session.candidates()
    scores = session.policy.score_candidates(tiny.model, view)
    expected = view.pos[session.survivors(scores)].tolist()
    session.refresh()
    assert session.cache.pos.tolist() == [0, 1] + expected == [0, 1, *range(20, 32)]
    assert session.trace.cycles[-1].kept == [0, 1, *range(20, 32)]


def test_observers_are_served_but_never_recorded(tiny):
    ids = tiny.tokenizer(TEXT)["input_ids"][:24]
    session = CacheSession(tiny, _config("sliding"), observers=[CounterCausalFast()])
    session.feed(ids, refresh=False)
    view = session.candidates()
    last = len(tiny.model.model.layers) - 1
    assert set(view.residuals) == {last} and view.residuals[last].shape[0] == len(view)  # H^(L-1), for the observer
    assert torch.isfinite(CounterCausalFast().score_candidates(tiny.model, view)[:-1]).all()
    assert set(session.trace.cycles[-1].scores) == {"recency"}
    with pytest.raises(CcvizError):
        session.feed([])
