"""The shipped samples demonstrate what they are shipped for: assets/samples/outcomes.json, measured by
scripts/samples.py, agrees with index.json and holds its three properties on SmolLM2."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "assets" / "samples"
SMOLLM2 = "SmolLM2-135M-Instruct"


def _script():
    spec = importlib.util.spec_from_file_location("samples_script", ROOT / "scripts" / "samples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


INDEX = json.loads((SAMPLES / "index.json").read_text(encoding="utf-8"))
OUTCOMES = json.loads((SAMPLES / "outcomes.json").read_text(encoding="utf-8"))
ASKED = [entry for entry in INDEX if "cache_size" in entry]  # the samples meant to demonstrate


def test_a_demonstrating_sample_asks_one_question_whose_answer_it_states_once():
    assert ASKED
    for entry in ASKED:
        assert entry["question"].strip() and entry["answer"].strip() and entry["cache_size"] > 0, entry["file"]
        text = (SAMPLES / entry["file"]).read_text(encoding="utf-8")
        assert text.lower().count(entry["answer"].lower()) == 1, f"{entry['file']} states its answer once"


@pytest.mark.parametrize("entry", ASKED, ids=[entry["file"] for entry in ASKED])
def test_the_outcomes_agree_with_the_index(entry):
    script = _script()
    for model, section in OUTCOMES["models"].items():
        outcome = section["samples"].get(entry["file"])
        if outcome is None:
            assert model not in entry.get("models", []), f"{entry['file']} claims {model} without a measurement"
            continue
        assert (outcome["question"], outcome["answer"], outcome["cache_size"]) == (
            entry["question"], entry["answer"], entry["cache_size"],
        ), f"{entry['file']} changed since it was measured on {model}: run scripts/samples.py"  # fmt: skip
        assert set(outcome["policies"]) == set(script.POLICIES)
        answered = [row["answered"] for row in outcome["policies"].values()]
        assert outcome["policies_split"] == (any(answered) and not all(answered))
        assert outcome["full_answers"] == outcome["full"]["answered"]
        assert outcome["unguessable"] == (not outcome["without_answer"]["answered"])
        assert (model in entry.get("models", [])) == script.demonstrates(outcome)


def test_the_apps_documentation_shows_the_measured_outcomes():
    script = _script()
    found = script.TABLE.search(script.DOCS.read_text(encoding="utf-8"))
    assert found, "docs/app.md lost its <!-- samples: begin --> ... end markers"
    assert found.group(2) == script.outcomes_table(OUTCOMES, INDEX), "run `python scripts/samples.py --docs`"


def test_the_verdict_quoted_in_the_documentation_is_the_recorded_one():
    """docs/app.md quotes the sliding window's verdict on the tenancy agreement: its output, the full cache's and
    the refresh that evicted the answer are those scripts/samples.py recorded."""
    text = " ".join((ROOT / "docs" / "app.md").read_text(encoding="utf-8").replace("> ", "").split())
    recorded = OUTCOMES["models"][SMOLLM2]["samples"]["tenancy_agreement.md"]
    sliding, left = recorded["policies"]["sliding"], recorded["policies"]["sliding"]["answer_left"]
    assert f'answered "{sliding["output"]}"' in text
    assert "for the Property is 2,375 pounds." in recorded["full"]["output"] and '2,375 pounds.".' in text
    assert f"refresh {left['refresh']} ({left['phase']}, after {left['step']} tokens)" in text


@pytest.mark.parametrize("entry", ASKED, ids=[entry["file"] for entry in ASKED])
def test_every_sample_demonstrates_on_smollm2(entry):
    outcome = OUTCOMES["models"][SMOLLM2]["samples"][entry["file"]]
    assert outcome["unguessable"], "the full cache gives the answer without the sentence that states it"
    assert outcome["full_answers"], "the full cache misses the answer"
    assert outcome["policies_split"], "every policy answers alike: nothing to show"
    assert SMOLLM2 in entry["models"]


def test_answered_is_the_benchmarks_rule_and_the_answer_can_be_cut_out():
    from ccviz.phrases import answer_matches

    script = _script()
    text = "The ward is quiet.\nLocker 4417 is yours. Bring a lock!\nDinner is at six."
    cut = script.without_answer(text, "4417")
    assert "4417" not in cut and "Dinner is at six." in cut and "Bring a lock!" in cut
    assert answer_matches("The code is 4,417.", "4417") and not answer_matches("The code is 44170.", "4417")


@pytest.mark.slow  # about a minute of SmolLM2: the first sample measured again, end to end
def test_remeasuring_a_sample_gives_the_published_outcome(smollm):
    script = _script()
    entry = ASKED[0]
    published = OUTCOMES["models"][SMOLLM2]["samples"][entry["file"]]
    policies = tuple(sorted({p for p, row in published["policies"].items() if row["answered"]})[:1]) + tuple(
        sorted({p for p, row in published["policies"].items() if not row["answered"]})[:1]
    )
    again = script.measure(smollm, entry, policies)
    for key in ("full", "without_answer"):
        assert again[key]["output"] == published[key]["output"]
    for policy in policies:
        row = published["policies"][policy]
        assert again["policies"][policy]["output"] == row["output"]
        assert again["policies"][policy]["answer_left"] == row["answer_left"]
