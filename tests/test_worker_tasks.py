"""The model worker runs the app's tasks without the app: its process never imports ``ccviz.ui``."""

from worker_probe import LoadedUiModules

from ccviz import RunConfig
from ccviz.worker.jobs import Job, ResultStore, check_run
from ccviz.worker.tasks import AttentionTask, ExplainTask, RunTask, SurpriseTask

DOC = "The keeper counted ships. The tide rose at noon, and the light burned all night. " * 6


def _run(worker, *tasks) -> list:
    job = Job(list(tasks), worker, ResultStore()).start()
    assert job.wait(120), "the job did not end"
    assert job.errors == [], job.errors
    return job.results


def test_the_worker_runs_every_kind_of_task_without_importing_the_ui(tiny, tiny_worker):
    run = RunTask(tiny.name, DOC, RunConfig(policy="tova", cache_size=16, chunk_size=4, max_new_tokens=4))
    assert check_run(tiny_worker, run, 4096) > 0  # the checks pipe: RunTask.check in the worker's second thread
    trace, surprise, attention = _run(
        tiny_worker, run, SurpriseTask(tiny.name, DOC, chat=True), AttentionTask(tiny.name, DOC, chat=True)
    )
    assert trace.cycles and len(surprise) == trace.prompt_length and attention.cycles
    last = len(trace.cycles) - 1
    position = trace.cycles[last].candidates[-1]
    (explained,) = _run(tiny_worker, ExplainTask(tiny.name, trace, refresh=last, position=position))
    assert explained.position == position and explained.status == "candidate"
    (loaded,) = _run(tiny_worker, LoadedUiModules())
    assert loaded == [], f"the model worker imported the app's modules: {loaded}"
