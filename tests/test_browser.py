"""End to end in a real browser: `streamlit run app.py` with SmolLM2, driven by Debian's chromium.

Pastes a sample document, runs counter_causal_fast on the Run page and counter_causal_fast against
sliding on the Compare page, and checks each heatmap rendered (with a working hover) and no exception
box appeared; a newcomer's two clicks from the landing sample to one policy evicting its answer and another
keeping it, whose question is asked apart and kept. Then the teaching
features: the live heatmap (its first rows timed), cancel, the SVG and HTML exports, reloads. Three
sessions paste different documents and click Run together: each gets its own result from the one model
worker (marked slow). Screenshots go to test-artifacts/ for a human to look at; the README's two
(docs/images/) are taken by the first test, see docs/reliability.md#the-readmes-screenshots.

A second server on the tiny random model checks what AppTest cannot: a deep link as the server's first
request, Streamlit's own range message, a real file upload, markup in a document staying inert, and a
tab closed mid-run.
"""

from __future__ import annotations

import os
import shutil
import struct
import time
from pathlib import Path

import pytest
from browser_support import (
    ARTIFACTS,
    ROOT,
    RUN_TIMEOUT_MS,
    SESSION_DOCUMENTS,
    browser_marks,
    chromium,
    idle,
    metric,
    model_ready,
    open_page,
    paste_document,
    photographed_on_failure,
    serve_app,
    set_number,
)

pytestmark = browser_marks()


@pytest.fixture(scope="module")
def app_url():
    with serve_app(
        {k: v for k, v in os.environ.items() if k != "CCVIZ_MODEL"}, "streamlit.log"
    ) as url:  # the real SmolLM2
        yield url


def _no_exception(page) -> None:
    boxes = page.locator("[data-testid='stException']")
    assert boxes.count() == 0, boxes.first.inner_text()


def _wait_for_log(log: Path, text: str, timeout: float = 60.0) -> None:
    """Wait until the server's log says ``text`` (it is written from the server's own threads)."""
    deadline = time.monotonic() + timeout
    while text not in log.read_text():
        assert time.monotonic() < deadline, f"the server never logged {text!r}"
        time.sleep(0.25)


def _hover_heatmap(page) -> str:
    """Move over the middle of the first heatmap and return the hover label's text."""
    box = page.locator(".js-plotly-plot .nsewdrag").first.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + box["height"] * 0.5)
    page.wait_for_selector(".hoverlayer .hovertext", timeout=10_000)
    return page.locator(".hoverlayer .hovertext").first.text_content()


SCREENSHOTS_ENV = "CCVIZ_SCREENSHOTS"  # a folder: the README's screenshots are copied there (docs/images)
SCREENSHOT_VIEWPORT = {"width": 1400, "height": 900}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _documentation_screenshot(page, anchor, name: str, tmp_path: Path) -> Path:
    """A 1400 x 900 picture of the page scrolled so ``anchor`` is at the top, for the README.

    Always written to ``tmp_path`` and checked; also copied into ``$CCVIZ_SCREENSHOTS`` when that is set
    (``CCVIZ_SCREENSHOTS=docs/images python -m pytest tests/test_browser.py -k "paste_run or newcomer"``).
    """
    before = page.viewport_size
    page.mouse.move(0, 0)  # no hover label in the picture
    page.set_viewport_size(SCREENSHOT_VIEWPORT)
    anchor.evaluate("element => element.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(1500)  # Plotly redraws the charts at the new width
    path = tmp_path / name
    try:
        page.screenshot(path=str(path))
    finally:
        page.set_viewport_size(before)
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{name} is not a PNG"
    assert struct.unpack(">II", data[16:24]) == (SCREENSHOT_VIEWPORT["width"], SCREENSHOT_VIEWPORT["height"])
    assert len(data) > 40_000, f"{name} is only {len(data)} bytes: a blank page?"
    folder = os.environ.get(SCREENSHOTS_ENV)
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, Path(folder) / name)
    return path


def test_paste_run_and_open_compare(app_url, tmp_path):
    from playwright.sync_api import sync_playwright

    from ccviz import POLICIES

    document = (ROOT / "assets" / "samples" / "reasoning_prompt.md").read_text(encoding="utf-8")  # the shortest sample
    with sync_playwright() as p, chromium(p) as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 2400})
        with photographed_on_failure({"failure.png": page}):
            page.goto(app_url)
            page.wait_for_selector("[data-testid='stApp']")
            idle(page)
            model_ready(page)

            # Run & retention: paste the document, counter_causal_fast is the default policy.
            paste_document(page, document)
            set_number(page, "Cache size J", 64)
            set_number(page, "Max new tokens", 16)
            assert POLICIES["counter_causal_fast"].summary in page.locator("[data-testid='stSidebar']").inner_text()
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_selector(".js-plotly-plot", timeout=RUN_TIMEOUT_MS)
            idle(page)
            _no_exception(page)
            hover = _hover_heatmap(page)
            assert "refresh" in hover and "t = " in hover and "score" in hover, hover
            page.screenshot(path=str(ARTIFACTS / "run_page.png"))
            summary = (
                page.locator("h4").filter(has_text="Counter-causal surprise (fast)").first
            )  # the run's title, above its metrics
            _documentation_screenshot(page, summary, "retention.png", tmp_path)
            _no_exception(page)

            # Compare: A = sliding, B = counter_causal_fast by default; the document carries over (the newcomer's
            # walk below runs it).
            page.get_by_role("link", name="Compare").click()
            page.wait_for_selector("text=Compare policies")
            idle(page)
            assert page.get_by_role("textbox", name="Document or prompt").input_value() == document
            sidebar = page.locator("[data-testid='stSidebar']").inner_text()
            assert POLICIES["sliding"].summary in sidebar and POLICIES["counter_causal_fast"].summary in sidebar
            _no_exception(page)


def test_a_newcomer_sees_one_policy_evict_the_answer_and_another_keep_it_in_two_clicks(app_url, tmp_path):
    """A bare link's first visit holds the landing sample, loaded as a pick from the sample menu loads it (its
    question and expected answer filled); the menu's Compare, then Run all, and the two columns' verdicts
    disagree: one run evicted the answer and missed it, the other answered, as the sample's recorded outcome
    (assets/samples/outcomes.json) says. Then Run on the Run page: the downloaded trace holds the sample's
    question after the document, from its question_start on, kept out of eviction, and the run opens with its
    verdict line."""
    import json

    from playwright.sync_api import expect, sync_playwright

    from ccviz import Trace
    from ccviz.explain import run_verdict
    from ccviz.ui.samples import landing_sample, load_samples

    model = "SmolLM2-135M-Instruct"
    sample = landing_sample(load_samples(), model)
    assert sample is not None and sample.question and sample.answer
    outcomes = json.loads((ROOT / "assets" / "samples" / "outcomes.json").read_text(encoding="utf-8"))
    recorded = next(o for o in outcomes["models"][model]["samples"].values() if o["question"] == sample.question)
    assert not recorded["policies"]["sliding"]["answered"] and recorded["policies"]["counter_causal_fast"]["answered"]
    with sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, app_url)
        with photographed_on_failure({"landing-failure.png": page}):
            model_ready(page)
            expect(page.get_by_role("textbox", name="Question (optional)")).to_have_value(sample.question)
            expect(page.get_by_role("textbox", name="Expected answer (optional)")).to_have_value(sample.answer)
            page.get_by_role("link", name="Compare").click()  # click 1
            page.wait_for_selector("text=Compare policies")
            idle(page)
            page.get_by_role("button", name="Run all").click()  # click 2: A = sliding, B = counter_causal_fast
            page.wait_for_selector("text=Kept-set overlap", timeout=RUN_TIMEOUT_MS)
            idle(page)
            _no_exception(page)
            expect(page.locator("p", has_text="Answered: no").first).to_contain_text("was evicted at refresh")
            expect(page.locator("p", has_text="Answered: yes").first).to_be_visible()
            assert page.locator(".js-plotly-plot").count() >= 2  # the side-by-side heatmaps and the overlap matrix
            page.screenshot(path=str(ARTIFACTS / "compare_page.png"))
            survived = page.locator("h3").filter(has_text="survive?").first  # the phrase badges, then the heatmaps
            _documentation_screenshot(page, survived, "compare.png", tmp_path)

            page.get_by_role("link", name="Run & retention").click()  # the same run as column B
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_selector(FINAL_VIEW, timeout=RUN_TIMEOUT_MS)
            idle(page)
            _no_exception(page)
            with page.expect_download(timeout=60_000) as download:
                page.get_by_role("button", name="Download trace JSON").click()
            path = tmp_path / "question.json"
            download.value.save_as(path)
            trace = Trace.load(path)
            assert trace.question_start is not None and trace.config["protect_question"] is True
            asked = "".join(tok.text for tok in trace.tokens[trace.question_start : trace.prompt_length])
            assert asked == f"{sample.question}<|im_end|>\n<|im_start|>assistant\n", asked
            assert list(trace.kept_question) == list(range(trace.question_start, trace.prompt_length))
            assert (trace.eviction_refreshes()[list(trace.kept_question)] == -1).all()  # never evicted
            assert "question kept" in page.locator(".js-plotly-plot .gtitle").first.text_content()
            verdict = run_verdict(trace, sample.answer)
            assert verdict is not None and verdict.answered
            expect(page.locator("p", has_text=verdict.head).first).to_be_visible()


# Every token of the answer-read view, in order: its text and whether it is struck (evicted, unreadable).
ANSWER_TOKENS = """() => [...document.querySelectorAll('span[title]')]
  .filter(s => / · (read |evicted at refresh \\d+: unreadable|the generated token)/.test(s.title))
  .map(s => [s.textContent, s.title.endsWith(': unreadable')])"""


@pytest.mark.slow  # 35 s of two SmolLM2 runs; the default run covers the view and pins through AppTest (test_app.py)
def test_explain_a_wrong_answer_then_pin_the_evicted_allergy(app_url):
    """The walk-through on the clinical record at the defaults (counter_causal_fast, J = 128): the
    answer misses the allergy; what the first answer token read shows the allergy struck (evicted); pinning
    it runs a twin that keeps every one of its tokens."""
    from playwright.sync_api import sync_playwright

    document = (ROOT / "assets" / "samples" / "clinical_record.md").read_text(encoding="utf-8")
    with sync_playwright() as p, chromium(p) as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 2400})
        with photographed_on_failure({"what-if-failure.png": page}):
            page.goto(app_url)
            page.wait_for_selector("[data-testid='stApp']")
            idle(page)
            model_ready(page)
            paste_document(page, document)
            set_number(page, "Max new tokens", 8)  # the prefill decides the evictions; a short answer is enough
            page.get_by_text("Record what the answer read").click()
            idle(page)
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_selector("h3:has-text('What the answer read')", timeout=RUN_TIMEOUT_MS)
            idle(page)
            _no_exception(page)
            tokens = page.evaluate(ANSWER_TOKENS)
            text = "".join(piece for piece, _ in tokens)
            start = text.index("amoxicillin")
            struck = []
            for piece, gone in tokens:  # per character, whether its token is struck
                struck += [gone] * len(piece)
            assert any(struck[start : start + len("amoxicillin")]), "the allergy should be evicted at J = 128"
            page.get_by_role("textbox", name="Or type a phrase").fill("amoxicillin")
            page.get_by_role("textbox", name="Or type a phrase").press("Enter")
            idle(page)
            page.get_by_role("button", name="Run again, pinning the phrase").click()
            page.wait_for_selector("h3:has-text('What changed in the cache')", timeout=RUN_TIMEOUT_MS)
            idle(page)
            _no_exception(page)
            body = page.locator("[data-testid='stMain']").inner_text()
            assert "3 of 3 tokens in the cache at the end" in body, body[-2000:]  # the pinned twin keeps it all
            page.screenshot(path=str(ARTIFACTS / "what_if_pinned.png"), full_page=True)


LIVE_DOCUMENT_TOKENS = 1000


def _thousand_token_document(smollm) -> str:
    """About 1,000 tokens of the shipped samples (the measure: first live rows at J = 128)."""
    words = " ".join(
        (ROOT / "assets" / "samples" / name).read_text(encoding="utf-8") for name in ("prose.md", "clinical_record.md")
    ).split()
    low, high = 1, len(words)
    while low < high:  # the longest prefix of words within the token count
        mid = (low + high + 1) // 2
        if len(smollm.tokenizer(" ".join(words[:mid])).input_ids) <= LIVE_DOCUMENT_TOKENS:
            low = mid
        else:
            high = mid - 1
    return " ".join(words[:low])


HEATMAP_ROWS = (
    "() => { const g = document.querySelector('.js-plotly-plot'); "
    "return g && g.calcdata ? g.calcdata[0][0].z.length : 0; }"
)
LIVE_ROWS = (
    "() => { const i = document.querySelector(\"img[alt^='retention so far']\"); "
    "return i ? parseInt(i.alt.split(': ')[1]) : 0; }"
)
WHITE_PAPER = 'style="fill: rgb(255, 255, 255); fill-opacity: 1;"'  # Plotly's paper rectangle, white and opaque
FINAL_VIEW = "button:has-text('Download all figures')"  # only under a finished run's view, never the live one
NEEDLE_HEATMAP = (
    "() => [...document.querySelectorAll('.js-plotly-plot')].some(g => g.data && g.data[0].type === 'heatmap' "
    "&& (g.layout.yaxis.title.text || '') === 'needle depth' && g.calcdata && g.calcdata[0][0].z.length > 0)"
)
PLOTLY_TRACES = "() => [...document.querySelectorAll('.js-plotly-plot')].map(g => g.data.length)"


def _camera_download(page, tmp_path: Path, name: str) -> Path:
    """Hover the first chart and click its toolbar camera; the file it saves."""
    chart = page.locator(".js-plotly-plot").first
    chart.hover()
    with page.expect_download(timeout=60_000) as download:
        chart.locator(".modebar-btn[data-title^='Download plot']").click()
    path = tmp_path / name
    download.value.save_as(path)
    assert download.value.suggested_filename.startswith("ccviz-retention-counter_causal_fast-J128"), (
        download.value.suggested_filename
    )
    return path


def test_live_rows_cancel_exports_and_a_reload(app_url, smollm, tmp_path):
    """The teaching features end to end: cancel keeps the live rows, first live rows (timed on the warm server),
    SVG and HTML exports, and a reload."""
    from playwright.sync_api import expect, sync_playwright

    from ccviz import POLICIES

    document = _thousand_token_document(smollm)
    with sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, app_url)
        with photographed_on_failure({"failure-teaching.png": page}):
            model_ready(page)
            paste_document(page, document)
            set_number(page, "Max new tokens", 8)
            set_number(page, "min gap", 1)  # a policy option, to see it restored

            # 1. Cancel keeps the rows drawn (this run also warms the server and the browser's Plotly).
            set_number(page, "Cache size J", 120)
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_function(f"({LIVE_ROWS})() >= 3", timeout=RUN_TIMEOUT_MS)
            page.get_by_role("button", name="Cancel").click()
            drawn = page.evaluate(LIVE_ROWS)
            page.wait_for_selector("text=Partial trace: the run was cancelled", timeout=RUN_TIMEOUT_MS)
            page.wait_for_selector(FINAL_VIEW, timeout=RUN_TIMEOUT_MS)
            idle(page)
            assert page.evaluate(HEATMAP_ROWS) >= drawn
            _no_exception(page)

            # 2. Live rows: the first refreshes are drawn while the run goes on (a recorded timing, not a target).
            #    The run is then cancelled too: its partial view serves the exports, and the suite saves the rest of it.
            set_number(page, "Cache size J", 128)
            clicked = time.monotonic()
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_function(f"({LIVE_ROWS})() > 0", timeout=RUN_TIMEOUT_MS)
            first_rows = time.monotonic() - clicked
            assert page.get_by_role("button", name="Cancel").count() == 1  # drawn while the run goes on
            page.wait_for_function(f"({LIVE_ROWS})() >= 4", timeout=RUN_TIMEOUT_MS)
            page.get_by_role("button", name="Cancel").click()
            live_rows = page.evaluate(LIVE_ROWS)
            page.wait_for_selector(FINAL_VIEW, timeout=RUN_TIMEOUT_MS)
            idle(page)
            _no_exception(page)
            final_rows = page.evaluate(HEATMAP_ROWS)
            assert final_rows >= live_rows
            line = (
                f"{time.strftime('%Y-%m-%d')}: first live rows {first_rows:.2f} s after clicking Run "
                f"({LIVE_DOCUMENT_TOKENS} tokens, J=128, warm server)\n"
            )
            with open(ARTIFACTS / "live_timing.txt", "a") as out:
                out.write(line)
            print("\n" + line)

            # 3. Exports: the camera saves SVG when asked; the HTML report holds the figure; both open in chromium.
            page.get_by_role("radio", name="SVG").click()
            idle(page)
            svg = _camera_download(page, tmp_path, "retention.svg")
            assert svg.read_text().lstrip().startswith("<svg") and WHITE_PAPER in svg.read_text()
            traces = page.evaluate(PLOTLY_TRACES)[0]
            viewer = browser.new_page()
            viewer.goto(svg.as_uri())
            assert viewer.locator("g.hm").count() == traces  # every heatmap trace is in the file
            with page.expect_download(timeout=60_000) as download:
                page.get_by_role("button", name="Download all figures (HTML report)").click()
            report = tmp_path / download.value.suggested_filename
            download.value.save_as(report)
            viewer.goto(report.as_uri())
            viewer.wait_for_selector(".js-plotly-plot")
            assert viewer.evaluate(PLOTLY_TRACES) == [traces]
            viewer.locator(".js-plotly-plot").first.hover()
            with viewer.expect_download(timeout=60_000) as saved:  # the report's own SVG button
                viewer.locator(".modebar-btn[data-title='Download plot as an SVG']").click()
            assert saved.value.suggested_filename.endswith(".svg")
            saved.value.save_as(tmp_path / "from-report.svg")
            assert WHITE_PAPER in (tmp_path / "from-report.svg").read_text()
            assert (
                viewer.locator("h2", has_text="What survives").count() == 1
                and viewer.locator("th", has_text="cache_size").count() == 1
            )
            viewer.close()

            # 4. A reload brings back the document and every setting.
            page.reload()
            page.wait_for_selector("[data-testid='stApp']")
            idle(page)
            restored = {"Max new tokens": "8", "min gap": "1", "Cache size J": "128"}
            expect(page.get_by_role("textbox", name="Document or prompt")).to_have_value(
                document, timeout=30_000
            )  # a fresh session's first run
            for label, value in restored.items():
                expect(page.get_by_role("spinbutton", name=label)).to_have_value(value)
            expect(page.get_by_role("radio", name="SVG")).to_have_attribute("aria-checked", "true")
            assert POLICIES["counter_causal_fast"].summary in page.locator("[data-testid='stSidebar']").inner_text()
            _no_exception(page)
            # Another policy and budget, nothing run: a reload restores those too.
            page.get_by_role("combobox", name="Policy").click()
            page.get_by_role("option", name="tova", exact=True).click()
            idle(page)
            set_number(page, "Cache size J", 112)
            set_number(page, "Recent R", 8)
            page.reload()
            page.wait_for_selector("[data-testid='stApp']")
            idle(page)
            expect(page.get_by_role("spinbutton", name="Cache size J")).to_have_value("112", timeout=30_000)
            expect(page.get_by_role("spinbutton", name="Recent R")).to_have_value("8")
            expect(page.get_by_role("textbox", name="Document or prompt")).to_have_value(document)
            assert POLICIES["tova"].summary in page.locator("[data-testid='stSidebar']").inner_text()
            _no_exception(page)


@pytest.mark.slow  # 80 s; the default run checks the same queueing through AppTest (test_app_reliability.py)
def test_three_sessions_clicking_run_together_each_get_their_own_result(app_url, smollm):
    """Three tabs of one server, three documents, three clicks at once: the runs queue on the one model
    worker and each page ends with its own document's token count and text. Click-to-result times go to
    test-artifacts/sessions.json (the targets are measured by scripts/bench/app_sessions.py, not asserted here)."""
    import json

    from playwright.sync_api import sync_playwright

    from ccviz.prompts import encode_prompt

    expected = [len(encode_prompt(smollm.tokenizer, doc, chat=True).ids) for doc in SESSION_DOCUMENTS]
    with sync_playwright() as p, chromium(p) as browser:
        pages = [open_page(browser, app_url) for _ in SESSION_DOCUMENTS]
        with photographed_on_failure({f"session_{i}-failure.png": page for i, page in enumerate(pages)}):
            for page, doc in zip(pages, SESSION_DOCUMENTS):
                model_ready(page)
                paste_document(page, doc)
                set_number(page, "Max new tokens", 8)  # the prefill is what differs between the documents
            started = []
            for page in pages:
                page.get_by_role("button", name="Run", exact=True).click()
                started.append(time.monotonic())
            finished = []
            for page in pages:
                page.wait_for_selector("[data-testid='stMetric'] >> text=Prompt tokens", timeout=RUN_TIMEOUT_MS)
                finished.append(time.monotonic())
            for i, (page, doc, n_prompt) in enumerate(zip(pages, SESSION_DOCUMENTS, expected)):
                idle(page)
                _no_exception(page)
                assert metric(page, "Prompt tokens") == str(n_prompt)
                question = doc.split("\n")[0]
                assert question in page.locator("[data-testid='stHtml']").first.inner_text()  # its own text, as pasted
                assert page.locator(".js-plotly-plot").count() >= 1
                page.screenshot(path=str(ARTIFACTS / f"session_{i}.png"))
            seconds = [round(end - start, 2) for start, end in zip(started, finished)]
            (ARTIFACTS / "sessions.json").write_text(
                json.dumps({"prompt_tokens": expected, "click_to_result_s": seconds})
            )


HOSTILE = 'Notes <img src=x onerror="window.__pwned=1"> and <script>window.__pwned=2</script> end \x07.'


@pytest.fixture(scope="module")
def tiny_app_url():
    """The app on the tiny random model, stopping a closed tab's run after 1 s (for the reliability test)."""
    env = {**os.environ, "CCVIZ_MODEL": "tiny-random", "CCVIZ_ABANDON_SECONDS": "1", "CCVIZ_MAX_TOKENS": "9000"}
    with serve_app(env, "streamlit-tiny.log") as url:
        yield url


def test_a_deep_link_as_a_fresh_servers_first_request_gets_the_whole_app(tiny_app_url):
    """Before any session has run app.py, Streamlit serves a URL such as /benchmarks from a folder named
    pages/ as a legacy page (no menu titles, no wide layout) unless the page reruns itself through app.py
    (ccviz.ui.frame.ensure_app_frame). Runs
    first on the tiny server (tests run in file order), so this is its first page request."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, f"{tiny_app_url}/benchmarks")
        page.wait_for_selector("h1:has-text('Benchmarks')")
        menu = page.locator("[data-testid='stSidebarNav']").inner_text()
        assert "Run & retention" in menu and "Traces" in menu, menu  # app.py's menu, not file names
        _no_exception(page)
        # The published needle map renders as a real Plotly heatmap (depth down, length across).
        page.get_by_role("tab", name="Needle in a haystack", exact=True).click()
        page.wait_for_function(NEEDLE_HEATMAP, timeout=RUN_TIMEOUT_MS)
        title = page.evaluate(
            "() => [...document.querySelectorAll('.js-plotly-plot')]"
            ".map(g => g.layout.title.text.replaceAll('<br>', ' '))"
        )
        assert any(t.startswith("Answer accuracy: sliding") for t in title), title  # answers are the default measure
        _no_exception(page)


def test_bad_input_markup_and_a_closed_tab(tiny_app_url):
    """What AppTest cannot see: Streamlit's range message, a real upload, markup in the page, a closed tab."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, chromium(p) as browser:
        page = open_page(browser, tiny_app_url)
        with photographed_on_failure({"reliability-failure.png": page}):
            set_number(page, "Cache size J", -3)
            assert "allowed range" in page.locator("[data-testid='stSidebar']").inner_text()
            set_number(page, "Cache size J", 16)
            set_number(page, "Max new tokens", 8)

            box = page.get_by_role("textbox", name="Document or prompt")
            before = box.input_value()
            page.locator("input[type='file']").set_input_files(
                files=[{"name": "photo.txt", "mimeType": "text/plain", "buffer": b"\x89PNG\r\n\x1a\n\xff\xfe"}]
            )
            idle(page)
            assert (
                page.locator("[data-testid='stAlert']").filter(has_text="photo.txt is not UTF-8 text").count() == 1
            )  # (the model may still load)
            assert box.input_value() == before  # the user's text is kept

            box.fill(HOSTILE)
            box.press("Control+Enter")
            idle(page)
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_selector(".js-plotly-plot", timeout=RUN_TIMEOUT_MS)
            idle(page)
            _no_exception(page)
            assert page.evaluate("window.__pwned") is None  # nothing in the document ran
            assert "<script>window.__pwned=2</script>" in page.locator("[data-testid='stHtml']").first.inner_text()

            page.get_by_role("link", name="Traces").click()
            page.wait_for_selector("text=Open trace files")
            idle(page)
            page.locator("input[type='file']").set_input_files(
                files=[{"name": "random.json", "mimeType": "application/json", "buffer": bytes(range(256))}]
            )
            idle(page)
            assert (
                page.locator("[data-testid='stAlert']").filter(has_text="random.json: not a ccviz trace").count() == 1
            )
            assert page.locator(".js-plotly-plot").count() == 0
            _no_exception(page)

            # A tab closed mid-run: its run is stopped, so another tab's run does not wait for it.
            page.get_by_role("link", name="Run & retention").click()
            page.wait_for_selector("text=Run & retention")
            idle(page)
            # J = 4096 refreshed every 2 tokens: a run of a minute or more on any machine, so it is still
            # running when the tab goes (8,000 tokens at J = 16 can finish before the disconnection is seen).
            set_number(page, "Cache size J", 4096)
            set_number(page, "Chunk size h", 2)
            set_number(page, "Max new tokens", 8000)
            page.get_by_role("button", name="Run", exact=True).click()
            # The live progress line, not just "refreshes": the earlier result's "Refreshes" metric is
            # still on the page and would match at once, closing the tab before the new job exists.
            page.wait_for_selector(r"text=/\d+\/\d+ tokens · \d+ refreshes/", timeout=RUN_TIMEOUT_MS)
            page.close()
            _wait_for_log(ARTIFACTS / "streamlit-tiny.log", "stopping a run whose browser session has been gone")
            page = open_page(browser, tiny_app_url)
            set_number(page, "Cache size J", 16)
            set_number(page, "Max new tokens", 8)
            page.get_by_role("button", name="Run", exact=True).click()
            page.wait_for_selector(".js-plotly-plot", timeout=RUN_TIMEOUT_MS)
            _no_exception(page)
