import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running (excluded from the default run; use -m slow)")
    config.addinivalue_line("markers", "browser: needs Debian's chromium and playwright")
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU, skipped without one (scripts/gpu_check.sh runs them)")


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


def bench_quick(task: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    """A real ``python -m ccviz bench TASK --quick`` on the tiny model into ``out`` (one torch thread)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "ccviz", "bench", task, "--quick", *flags, "--model", "tiny-random", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="session")
def quick_bench(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """Every benchmark task, quick, on the tiny model, once for the session: (results folder, the run)."""
    out = tmp_path_factory.mktemp("bench") / "quick"
    return out, bench_quick("all", out)


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
