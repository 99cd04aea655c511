"""Browser helpers shared by tests/test_browser.py and scripts/bench/app_sessions.py: a real server, pages, waits."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
RUN_TIMEOUT_MS = 150_000


def browser_marks() -> list:
    """A browser test module's ``pytestmark``: marker ``browser``, skipped where Debian's chromium is absent."""
    import pytest  # here, not at the top: the app benchmarks import this module without pytest's plugins

    reason = f"{CHROMIUM} is absent: install Debian's chromium (apt-get install chromium)"
    return [pytest.mark.browser, pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=reason)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve_app(env: dict[str, str], log_name: str):
    """`streamlit run app.py` on a free port with ``env``; yields its URL once healthy."""
    ARTIFACTS.mkdir(exist_ok=True)
    port = free_port()
    log = open(ARTIFACTS / log_name, "w")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.headless",
            "true",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--browser.gatherUsageStats",
            "false",
            "--server.fileWatcherType",
            "none",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start: see {ARTIFACTS / log_name}")
            time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@contextlib.contextmanager
def chromium(playwright):
    """Debian's chromium, headless with the flags every test uses; closed however the block ends."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        yield browser
    finally:
        browser.close()


@contextlib.contextmanager
def photographed_on_failure(shots: dict):
    """On an exception, a screenshot of each page still open (file name -> page) into test-artifacts/, then re-raise."""
    try:
        yield
    except Exception:
        for name, page in shots.items():
            if not page.is_closed():  # a screenshot of a closed tab would hide the real failure
                page.screenshot(path=str(ARTIFACTS / name))
        raise


def idle(page) -> None:
    """Wait until the app's script has finished reacting to the last interaction: first for its rerun to
    start (up to half a second: none may come, or it may be over before we look), then for it to end."""
    from playwright.sync_api import TimeoutError as NoRerun

    with contextlib.suppress(NoRerun):
        page.wait_for_selector("[data-testid='stApp'][data-test-script-state='running']", timeout=500)
    page.wait_for_selector("[data-testid='stApp'][data-test-script-state='notRunning']", timeout=RUN_TIMEOUT_MS)


def set_number(page, label: str, value: int) -> None:
    """Type ``value`` into the number widget labelled ``label`` and wait for the rerun."""
    field = page.get_by_role("spinbutton", name=label)
    field.fill(str(value))
    field.press("Enter")
    idle(page)


def paste_document(page, text: str) -> None:
    """Fill the shared document box as a user pastes (Ctrl+Enter applies it) and wait for the rerun."""
    box = page.get_by_role("textbox", name="Document or prompt")
    box.fill(text)
    box.press("Control+Enter")
    idle(page)


def open_page(browser, url: str):
    """A new tab (its own browser context, so its own Streamlit session) on ``url``, once the app is idle."""
    page = browser.new_page(viewport={"width": 1400, "height": 1800})
    page.goto(url)
    page.wait_for_selector("[data-testid='stApp']")
    idle(page)
    return page


def model_ready(page, timeout_ms: int = RUN_TIMEOUT_MS) -> None:
    """The sidebar's status line says the model worker has loaded (buttons that run the model are enabled)."""
    page.wait_for_selector("[data-testid='stSidebar'] >> text=/Model: .* · ready/", timeout=timeout_ms)


def metric(page, label: str) -> str:
    """The value shown by the ``st.metric`` labelled ``label``."""
    box = page.locator("[data-testid='stMetric']").filter(has_text=label)
    return box.locator("[data-testid='stMetricValue']").inner_text()


def excerpt(name: str, words: int, question: str) -> str:
    """A question, then the first ``words`` words of a sample: a different ~350-token document per name."""
    text = (ROOT / "assets" / "samples" / name).read_text(encoding="utf-8")
    return f"{question}\n\n" + " ".join(text.split()[:words])


SESSION_DOCUMENTS = [
    excerpt("clinical_record.md", 240, "Question A: which drug must this patient never be given?"),
    excerpt("multi_session_chat.md", 250, "Question B: what is the locker code?"),
    excerpt("prose.md", 260, "Question C: what is the essay's main claim?"),
]
