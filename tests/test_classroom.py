"""A classroom on one server: identical runs computed once and shared, a queued run's place and wait, closed tabs.

Plain Python against the app's jobs (:mod:`ccviz.worker.jobs`, :mod:`ccviz.worker.flights`) and the real model worker
on the tiny random model; a :class:`hold_task.Hold` keeps the model busy so that runs really queue.
"""

import re
import time

import pytest
from hold_task import Hold

from ccviz import RunConfig, Trace
from ccviz.worker.eta import Ahead, RunSpeeds, estimate_wait, queue_line, wait_text
from ccviz.worker.jobs import Job, ResultStore
from ccviz.worker.tasks import RunTask

STORY = "Once upon a time a lighthouse keeper counted the ships that passed his rock every night. " * 20
LONG = STORY * 3


def _task(tiny, prompt: str = STORY, **kw) -> RunTask:
    base = dict(policy="sliding", cache_size=16, chunk_size=4, max_new_tokens=6)
    return RunTask(tiny.name, prompt, RunConfig(**{**base, **kw}))


def _content(trace):
    return trace.tokens, [(c.candidates, c.kept, c.scores) for c in trace.cycles], trace.output_text


def _until(condition, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _finish(job: Job) -> Job:
    assert job.wait(120), "the job did not end"
    return job


@pytest.fixture
def sent(tiny_worker, monkeypatch) -> list:
    """Every task the server sends to the model worker, in order."""
    tasks = []
    execute = tiny_worker.execute

    def counting(task, *args, **kwargs):
        tasks.append(task)
        return execute(task, *args, **kwargs)

    monkeypatch.setattr(tiny_worker, "execute", counting)
    return tasks


def _hold(worker, store: ResultStore, seconds: float = 60) -> Job:
    """A job holding the model until cancelled: what is started after it queues."""
    job = Job([Hold(seconds)], worker, store).start()
    _until(lambda: job.progress.processed == 1, "the hold to take the model")
    return job


def test_identical_runs_started_together_are_computed_once_and_share_their_live_rows(
    tiny, tiny_worker, sent, direct_run
):
    store = ResultStore()
    hold = _hold(tiny_worker, store)
    task = _task(tiny, max_new_tokens=30)
    jobs = [Job([_task(tiny, max_new_tokens=30)], tiny_worker, store).start() for _ in range(3)]  # equal tasks
    _until(lambda: all(job.progress.waiting for job in jobs), "the three jobs to queue")
    assert len(store.flights) == 2  # the hold, and one run for the three sessions
    assert all(job.progress_line()[1].endswith("queued: 1 run ahead…") for job in jobs)
    hold.cancel()
    results = [_finish(job).results[0] for job in jobs]
    assert [t for t in sent if isinstance(t, RunTask)] == [task]  # one worker task
    assert all(job.errors == [] and not job.cancelled for job in jobs)
    assert results[0].status == "complete" and all(result is results[0] for result in results)
    assert _content(results[0]) == _content(direct_run(STORY, task.config))
    assert all(job.live.cycles == results[0].cycles for job in jobs)  # each session saw every live row
    assert store.get(task) is results[0] and len(store.flights) == 0


def test_a_cancelled_shared_run_goes_on_for_the_session_still_waiting(tiny, tiny_worker, sent, direct_run):
    store = ResultStore()
    task = _task(tiny, prompt=LONG, max_new_tokens=60)
    leaver, stayer = (Job([task], tiny_worker, store).start() for _ in range(2))
    _until(lambda: leaver.live is not None and len(leaver.live.cycles) >= 2, "two live rows")
    assert "shared by 2 sessions" in stayer.progress_line()[1]
    leaver.cancel()
    partial = _finish(leaver).results[0]
    assert leaver.cancelled and partial.status == "cancelled" and len(partial.cycles) >= 2
    assert stayer.running  # the run goes on for the other session
    final = _finish(stayer).results[0]
    assert final.status == "complete" and not stayer.cancelled
    assert final.cycles[: len(partial.cycles)] == partial.cycles and len(final.cycles) > len(partial.cycles)
    assert _content(final) == _content(direct_run(LONG, task.config))
    assert sent == [task] and store.get(task) is final


def test_a_shared_run_stops_when_no_session_waits_for_it(tiny, tiny_worker, sent):
    store = ResultStore()
    task = _task(tiny, prompt=LONG, max_new_tokens=60)
    first, second = (Job([task], tiny_worker, store).start() for _ in range(2))
    _until(lambda: first.live is not None and len(first.live.cycles) >= 2, "two live rows")
    first.cancel()
    _finish(first)
    second.cancel()
    stopped = _finish(second).results[0]
    assert first.cancelled and second.cancelled and sent == [task]
    assert stopped.status == "cancelled" and len(stopped.tokens) < stopped.prompt_length + 60  # stopped part-way
    assert store.get(task) is None and len(store.flights) == 0  # nothing kept as if it were complete
    again = _finish(Job([task], tiny_worker, store).start())  # the next request computes it afresh
    assert again.results[0].status == "complete" and sent == [task, task]


def test_a_run_whose_tab_closed_leaves_the_queue_unless_another_session_waits_for_it(tiny, tiny_worker, sent):
    store = ResultStore()
    hold = _hold(tiny_worker, store)
    tab = {"open": True}
    alone = Job([_task(tiny)], tiny_worker, store, owner_connected=lambda: tab["open"], abandon_after=0).start()
    _until(lambda: alone.progress.waiting, "the run to queue")
    assert len(tiny_worker.queued()) == 2
    tab["open"] = False  # the tab closes while its run is queued
    _finish(alone)
    assert alone.abandoned and alone.cancelled and alone.results == [None]
    assert [flight.task for flight in tiny_worker.queued()] == [Hold()]  # the closed tab's run left the queue
    shared, tab["open"] = _task(tiny, max_new_tokens=9), True
    gone = Job([shared], tiny_worker, store, owner_connected=lambda: tab["open"], abandon_after=0).start()
    here = Job([shared], tiny_worker, store).start()
    _until(lambda: gone.progress.waiting and here.progress.waiting, "both to queue")
    tab["open"] = False
    _finish(gone)
    assert gone.abandoned and gone.results == [None] and here.running
    assert [flight.task for flight in tiny_worker.queued()] == [Hold(), shared]  # still queued for the other
    hold.cancel()
    assert _finish(here).results[0].status == "complete"
    assert [t for t in sent if isinstance(t, RunTask)] == [shared]


def test_distinct_runs_are_not_merged(tiny, tiny_worker, sent, direct_run):
    store = ResultStore()
    hold = _hold(tiny_worker, store)
    tasks = [_task(tiny), _task(tiny, cache_size=12), _task(tiny, prompt=STORY.upper())]
    jobs = []
    for task in tasks:  # one after another: clicks a moment apart queue in the order they came
        jobs.append(Job([task], tiny_worker, store).start())
        _until(lambda: jobs[-1].progress.waiting, "the job to queue")
    assert len(store.flights) == 4
    places = [job.progress_line()[1].split("queued: ")[1] for job in jobs]
    assert places == ["1 run ahead…", "2 runs ahead…", "3 runs ahead…"]  # no run measured yet: no time
    hold.cancel()
    for job, task in zip(jobs, tasks):
        assert _content(_finish(job).results[0]) == _content(direct_run(task.prompt, task.config))
    assert [t for t in sent if isinstance(t, RunTask)] == tasks


def test_a_queued_run_shows_its_place_and_an_estimated_wait_from_measured_runs(tiny, tiny_worker):
    store = ResultStore()
    measured = _finish(Job([_task(tiny, max_new_tokens=20)], tiny_worker, store).start())
    assert measured.results[0].status == "complete"
    assert store.flights.speeds.per_token() > 0  # the run's speed is measured
    hold = _hold(tiny_worker, store)
    ahead = Job([_task(tiny, cache_size=12)], tiny_worker, store, sizes=[400]).start()
    _until(lambda: ahead.progress.waiting, "the first to queue")
    behind = Job([_task(tiny, cache_size=10)], tiny_worker, store, sizes=[400]).start()
    _until(lambda: behind.progress.waiting, "the second to queue")
    line = behind.progress_line()[1]
    assert re.search(r"queued: 2 runs ahead, about \d+ (s|min)…$", line), line
    expected = estimate_wait([Ahead(None, 1), Ahead(400)], store.flights.speeds)
    assert line.endswith(f"2 runs ahead, {wait_text(expected)}…")
    hold.cancel()
    assert _finish(behind).results[0].status == "complete" and _finish(ahead).results[0].status == "complete"


def test_the_wait_is_the_rest_of_the_running_run_plus_every_run_queued_before():
    speeds = RunSpeeds()
    assert estimate_wait([Ahead(100)], speeds) is None and queue_line([Ahead(100)], speeds) == "1 run ahead"
    for tokens, seconds in [(100, 10.0), (200, 10.0), (100, 20.0)]:  # 0.1, 0.05, 0.2 s per token; median 0.1
        speeds.record(tokens, seconds)
    speeds.record(0, 5.0)  # nothing processed: not a speed
    assert speeds.per_token() == pytest.approx(0.1) and speeds.per_run() == pytest.approx(10.0)
    # the running run has 50 of its 150 tokens done; then a run of 100 tokens, then one of unknown size
    assert estimate_wait([Ahead(150, 50), Ahead(100), Ahead(None)], speeds) == pytest.approx(10 + 10 + 10)
    assert queue_line([Ahead(150, 50), Ahead(100)], speeds) == "2 runs ahead, about 20 s"
    assert queue_line([Ahead(30)], speeds) == "1 run ahead, about 3 s"
    assert [wait_text(s) for s in (0.2, 12.4, 88, 200)] == ["about 1 s", "about 10 s", "about 90 s", "about 3 min"]
    for _ in range(30):  # only recent runs count
        speeds.record(10, 10.0)
    assert speeds.per_token() == pytest.approx(1.0)


def test_a_live_picture_is_built_once_per_refresh_for_every_session_that_polls(tiny, monkeypatch):
    from ccviz import generate
    from ccviz.ui import views

    built = []
    monkeypatch.setattr(views, "retention_image_html", lambda trace: built.append(trace) or f"<img {len(built)}>")
    trace = generate(tiny, STORY, policy="sliding", cache_size=16, chunk_size=4, max_new_tokens=6)
    first, second = (Trace(config=trace.config, tokens=trace.tokens, cycles=trace.cycles[:n]) for n in (1, 2))
    pictures = [views.live_picture(snapshot) for snapshot in (first, first, first, second, second)]
    assert pictures == ["<img 1>"] * 3 + ["<img 2>"] * 2 and built == [first, second]  # polls without news are free
