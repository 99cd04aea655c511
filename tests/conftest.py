import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]

WORKER_THREADS = torch.get_num_threads()  # torch's choice before ours: what a fresh process (the worker) uses
THREADS = max(1, min(2, os.cpu_count() or 1))
torch.set_num_threads(THREADS)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (excluded from the default run; use -m slow)")
    config.addinivalue_line("markers", "browser: needs Debian's chromium and playwright")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU, skipped without one (scripts/gpu_check.sh runs them)")


@pytest.fixture
def registry():
    """POLICIES as it was before the test: registrations made by the test are undone."""
    from ccviz import POLICIES

    before = dict(POLICIES)
    yield POLICIES
    POLICIES.clear()
    POLICIES.update(before)


@pytest.fixture(scope="session")
def smollm():
    """The real embedded SmolLM2-135M-Instruct, loaded once for the whole session."""
    from ccviz import load_model

    return load_model()


@pytest.fixture(scope="session")
def tiny():
    """A 2-layer random Llama with SmolLM2's tokenizer: for fast unit tests of the mechanics only."""
    from ccviz import load_model

    return load_model("tiny-random")


@pytest.fixture(scope="session")
def tiny_worker():
    """The app's model worker process on the tiny model (the very one AppTest sessions share), once loaded."""
    from ccviz.ui.model import shared_worker

    worker = shared_worker("tiny-random", ())
    assert worker.wait_ready(300).ready, worker.status().message
    return worker


@pytest.fixture
def direct_run(tiny):
    """``run_generation`` on the tiny model in this process, at the model worker's thread count: the worker's run
    to compare with. A sum split over another count of threads rounds otherwise (the quick run's core-sharing below
    drops this process to one thread), so a score differs in its last bits."""

    def run(prompt: str, config):
        from ccviz import run_generation

        ours = torch.get_num_threads()
        torch.set_num_threads(WORKER_THREADS)
        try:
            return run_generation(tiny, prompt, config)
        finally:
            torch.set_num_threads(ours)

    return run


def _quick_command(task: str, out: Path, *flags: str) -> list[str]:
    model = ["--model", "tiny-random"]
    return [sys.executable, "-m", "ccviz", "bench", task, "--quick", *flags, *model, "--out", str(out)]


def _one_thread() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1"}


def bench_quick(task: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    """A real ``python -m ccviz bench TASK --quick`` on the tiny model into ``out`` (one torch thread)."""
    done = subprocess.run(
        _quick_command(task, out, *flags), capture_output=True, text=True, timeout=300, env=_one_thread(), cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    return done


_QUICK_RUN: dict[str, tuple[Path, subprocess.Popen]] = {}  # the session's quick run of every task, once started


def _start_quick_run() -> tuple[Path, subprocess.Popen]:
    folder = Path(tempfile.mkdtemp(prefix="ccviz-quick-bench-"))
    with open(folder / "stdout", "w") as stdout, open(folder / "stderr", "w") as stderr:  # no pipe to fill
        process = subprocess.Popen(
            _quick_command("all", folder / "quick"), stdout=stdout, stderr=stderr, env=_one_thread(), cwd=ROOT
        )
    _QUICK_RUN["all"] = folder, process
    return folder, process


def pytest_collection_finish(session):
    """The quick run of every task takes most of a minute on one thread: it starts as soon as the tests that
    read it are known, and runs on the other core beside the tests collected before them."""
    if any("quick_bench" in getattr(item, "fixturenames", ()) for item in session.items):
        _start_quick_run()


def pytest_sessionfinish(session):
    if "all" in _QUICK_RUN:
        folder, process = _QUICK_RUN.pop("all")
        if process.poll() is None:  # a run of tests that stopped before reading it
            process.kill()
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _a_core_each_beside_the_quick_run():
    """While the quick run works on one core, a test's torch gets the other (two threads on it would
    spin against the run: the first tests took three times as long)."""
    running = "all" in _QUICK_RUN and _QUICK_RUN["all"][1].poll() is None
    torch.set_num_threads(1 if running else THREADS)


@pytest.fixture(scope="session")
def quick_bench() -> tuple[Path, subprocess.CompletedProcess]:
    """Every benchmark task, quick, on the tiny model, once for the session: (results folder, the run)."""
    folder, process = _QUICK_RUN.get("all") or _start_quick_run()
    process.wait(timeout=600)  # a hang guard
    stdout, stderr = ((folder / name).read_text(encoding="utf-8") for name in ("stdout", "stderr"))
    assert process.returncode == 0, stderr
    return folder / "quick", subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(autouse=True, scope="session")
def _apptest_runs_through_app_py():
    """AppTest forgets, before every run, that app.py calls st.navigation, and so runs each script of a
    folder named pages/ as a legacy page: widgets would change identity between runs and a click would be
    lost to the rerun of :func:`ccviz.ui.frame.ensure_app_frame`. A real server decides this once, at its
    first request, which the pages handle (the browser test checks a deep link as that first request);
    here every run starts as the server does after it."""
    from streamlit.runtime.pages_manager import PagesManager
    from streamlit.testing.v1 import app_test

    class NavigationPages(PagesManager):
        def __init__(self, *args, **kwargs):
            # Before the base class looks for the folder: sessions run in threads at once must never see True.
            PagesManager.uses_pages_directory = False
            super().__init__(*args, **kwargs)

    original = app_test.PagesManager
    app_test.PagesManager = NavigationPages
    yield
    app_test.PagesManager = original


@pytest.fixture
def app(monkeypatch, tiny_worker):
    """A new session of the app on the tiny model, after its first run."""
    monkeypatch.setenv("CCVIZ_MODEL", "tiny-random")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception
    return at
