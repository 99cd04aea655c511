"""The full cache beside a run: one full-cache run per document and decoding, and what its answer read
that the policy evicted (ccviz.explain.full_cache)."""

import math

import pytest

from ccviz import CcvizError, RunConfig
from ccviz.engine import Listeners, run_generation
from ccviz.explain.full_cache import full_cache_reads, missed_reads
from ccviz.worker.tasks import FullCacheTask, RunTask

DOC = (
    "Ward notes for the night shift. The locker code is 7684 and the allergy is penicillin. "
    + "The weather was mild and the ward was quiet all evening. " * 6
    + "\nWhat is the locker code?"
)


def _no_progress(*_):
    pass


@pytest.fixture(scope="module")
def runs(tiny):
    run = RunTask(tiny.name, DOC, RunConfig(policy="tova", cache_size=24, chunk_size=6, max_new_tokens=5))
    trace = run.execute(tiny, Listeners(_no_progress, lambda: False))
    full = FullCacheTask.beside(run).execute(tiny, Listeners(_no_progress, lambda: False))
    return run, trace, full


def test_one_full_cache_run_serves_every_policy_and_budget_of_a_document():
    config = RunConfig(policy="tova", cache_size=24, max_new_tokens=5)
    base = FullCacheTask.beside(RunTask("m", DOC, config))
    for other in (
        config.replace(cache_size=64),
        config.replace(granularity="word"),
        RunConfig(policy="counter_causal_fast", cache_size=8, max_new_tokens=5),
    ):
        assert FullCacheTask.beside(RunTask("m", DOC, other)) == base
    assert len({base, FullCacheTask.beside(RunTask("m", DOC, config.replace(max_new_tokens=6)))}) == 2
    assert FullCacheTask.beside(RunTask("m", DOC, config.replace(chat=False))) != base
    assert FullCacheTask.beside(RunTask("m", DOC + " ", config)) != base


def test_the_full_cache_run_evicts_nothing_and_answers_as_a_plain_full_run(tiny, runs):
    run, _, full = runs
    plain = run_generation(tiny, DOC, RunConfig(policy="full", cache_size=2000, max_new_tokens=5))
    assert not full.cycles and full.output_text == plain.output_text
    assert len(full.answer_reads) == len(full.tokens) - full.prompt_length


def test_missed_reads_are_the_full_answers_most_read_entries_the_policy_evicted(runs):
    _, trace, full = runs
    n = full.prompt_length
    explicit = [max(full.answer_reading(s).max[t] for s in range(len(full.answer_reads))) for t in range(n)]
    assert full_cache_reads(full).tolist() == pytest.approx(explicit)
    most = sorted(range(n), key=lambda t: -explicit[t])[:10]
    evicted = {}
    for cycle in trace.cycles:  # the first refresh that had it as a candidate and did not keep it
        for t in set(cycle.candidates) - set(cycle.kept):
            evicted.setdefault(t, cycle.index)
    expected = [(t, rank + 1, evicted[t]) for rank, t in enumerate(most) if t in evicted]
    missed = missed_reads(trace, full, top=10)
    assert expected and [(m.position, m.rank, m.refresh) for m in missed] == expected
    assert all(math.isclose(m.read, explicit[m.position]) for m in missed)


def test_a_full_cache_run_of_another_document_or_without_reads_is_refused(tiny, runs):
    run, trace, full = runs
    other = FullCacheTask.beside(RunTask(run.model, DOC.replace("7684", "1234"), run.config))
    with pytest.raises(CcvizError, match="another prompt"):
        missed_reads(trace, other.execute(tiny, Listeners(_no_progress, lambda: False)))
    with pytest.raises(CcvizError, match="record_reads"):
        missed_reads(trace, trace)
