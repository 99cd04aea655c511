"""scripts/bench/protocol_tab.py: the browser-free sessions of the classroom benchmark speak the app's protocol.

A real ``streamlit run app.py`` on the tiny random model. Two tabs paste different documents and click Run
together; each must end on its own result, reached only if the tab follows the page's fragment polls (the run's
end is noticed by the polling fragment, which reruns the page). Marked slow: ``-m slow`` runs it.
"""

import os
import sys
from pathlib import Path

import pytest
from browser_support import serve_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "bench"))
from protocol_tab import ProtocolTab  # noqa: E402

WAIT_S = 240


def _finished(tab: ProtocolTab) -> bool:
    return not tab.seen.running_full and tab.metric("Prompt tokens") is not None


@pytest.mark.slow  # a server start and two runs, 25-70 s: a check of a benchmark's driver, not of the app
def test_two_protocol_tabs_run_together_and_each_sees_its_own_result():
    env = dict(os.environ, CCVIZ_MODEL="tiny-random")
    with serve_app(env, "protocol-tab.log") as url:
        tabs = [ProtocolTab(url), ProtocolTab(url, "charts.live=0")]
        try:
            for tab, words in zip(tabs, (12, 40)):
                tab.set_value("text_area", "Document or prompt", "Tell me about the sea. " * words, WAIT_S)
                tab.set_value("number_input", "Max new tokens", 8, WAIT_S)
                assert "doc=" in tab.query, "the app's link (page_info_changed) was not followed"
            for tab in tabs:
                tab.press("Run", WAIT_S)
            for tab in tabs:
                tab.wait(lambda seen, tab=tab: _finished(tab), WAIT_S)
            counts = [int(tab.metric("Prompt tokens") or 0) for tab in tabs]
            assert counts[0] < counts[1], counts  # each tab shows its own document's run
            assert all(not tab.errors() for tab in tabs), [tab.errors() for tab in tabs]
            assert all(tab.shown("code") for tab in tabs)  # the generated text
        finally:
            for tab in tabs:
                tab.close()
