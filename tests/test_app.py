"""The Streamlit app with the tiny random model through AppTest."""

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setenv("CCVIZ_MODEL", "tiny-random")
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)


def test_run_page_runs_a_policy(app):
    app.run()
    assert not app.exception
    app.text_area[0].set_value("Tell me a story about a brave little mouse who lived in a library.")
    app.number_input[0].set_value(8)
    app.number_input[1].set_value(4)
    app.number_input[2].set_value(12)
    app.button[0].click().run()
    assert not app.exception
    assert not app.error
    table = app.dataframe[0].value
    assert len(table) > 3
    assert all(n <= table["cache"].max() for n in table["cache"])


def test_run_page_reports_bad_input(app):
    app.run()
    app.text_area[0].set_value("   ")
    app.button[0].click().run()
    assert not app.exception
    assert "prompt is empty" in app.error[0].value
