"""Policy specs, result files (resuming, provenance of each run, growing columns) and the task registry."""

import json
from pathlib import Path

import pandas as pd
import pytest

from ccviz import CcvizError
from ccviz.references import import_ref
from ccviz_bench.results import ResultTable, load_results
from ccviz_bench.specs import PolicySpec, parse_spec
from ccviz_bench.tables import provenance_line


def test_policy_specs_parse_and_fail_in_one_line():
    spec = parse_spec("counter_causal_fast:score=contrast,smooth=5")
    assert spec == PolicySpec("counter_causal_fast", (("score", "contrast"), ("smooth", 5)))
    assert spec.label == "counter_causal_fast:score=contrast,smooth=5"
    assert spec.build().smooth == 5
    assert parse_spec("sliding").label == "sliding"
    with pytest.raises(CcvizError, match="unknown policy"):
        parse_spec("nope")
    with pytest.raises(CcvizError, match="key=value"):
        parse_spec("counter_causal:score")
    with pytest.raises(CcvizError, match="no option"):
        parse_spec("sliding:window=3")


def test_benchmarks_measure_every_policy_and_the_papers_form_of_counter_causal():
    from ccviz.policies import POLICIES
    from ccviz_bench.specs import registered_specs

    labels = [spec.label for spec in registered_specs()]
    assert set(POLICIES) < set(labels) and len(labels) == len(set(labels))
    for name in ("counter_causal", "counter_causal_fast"):
        paper = labels[labels.index(name) + 1]  # listed next to ours, so tables show them together
        assert paper == f"{name}:paper=True"
        form = parse_spec(paper).build()
        assert (form.score, form.smooth, form.unit_defaults()) == ("logit", 0, ("token", 0))
        assert parse_spec(paper).meaning() != parse_spec(name).meaning()


def test_result_rows_are_read_in_the_benchmarks_policy_order(tmp_path):
    """Rows appended over several runs (a new default measured later) still make tables in one order."""
    path = tmp_path / "rows.csv"
    policies = ["tova", "my:spec", "counter_causal", "sliding", "full", "counter_causal:paper=True", "tova"]
    pd.DataFrame({"policy": policies, "value": range(len(policies))}).to_csv(path, index=False)
    frame = load_results(tmp_path)["rows"]
    assert frame.policy.tolist() == [
        "full",
        "sliding",
        "tova",
        "tova",
        "counter_causal",
        "counter_causal:paper=True",
        "my:spec",
    ]
    assert frame.value.tolist()[2:4] == [0, 6]  # stable: a policy's own rows keep their order


def test_result_table_resumes_and_refuses_other_settings(tmp_path):
    def table(**kw):
        return ResultTable(tmp_path, "demo", ["case", "policy", "value"], ["case", "policy"], {"words": 10}, **kw)

    first = table()
    first.add({"case": 0, "policy": "sliding", "value": 0.5})
    again = table()
    assert again.has(case=0, policy="sliding") and not again.has(case=1, policy="sliding")
    again.add({"case": 1, "policy": "sliding", "value": 0.25})
    assert again.frame()["value"].tolist() == [0.5, 0.25]
    with pytest.raises(CcvizError, match="other settings"):
        ResultTable(tmp_path, "demo", ["case", "policy", "value"], ["case", "policy"], {"words": 20})
    again.pin_policies([PolicySpec("h2o")])
    pinned = table()
    pinned.meta["policies"]["h2o"] = {"normalize": True}  # as if h2o's default had changed since
    with pytest.raises(CcvizError, match="'h2o' now means"):
        pinned.pin_policies([PolicySpec("h2o")])
    pinned.pin_policies([parse_spec("h2o:normalize=true")])  # written out, the spec is unambiguous
    assert not table(fresh=True).has(case=0, policy="sliding")
    loaded = load_results(tmp_path)
    assert loaded["meta"]["demo"]["settings"] == {"words": 10} and loaded["meta"]["demo"]["commit"]


def _run_table(monkeypatch, directory: Path, commit: str, cpu: str = "CPU A") -> ResultTable:
    """The ``runs`` table opened by a run at ``commit`` (a clean tree) on a machine whose CPU is ``cpu``."""
    import ccviz_bench.results as results

    monkeypatch.setattr(results, "source_commit", lambda: commit)
    monkeypatch.setattr(results, "git", lambda *args: "")
    monkeypatch.setattr(results, "cpu_name", lambda: cpu)
    return ResultTable(directory, "runs", ["case", "policy", "value"], ["case", "policy"], {"words": 10})


def test_a_result_table_records_each_run_that_wrote_rows_and_its_commit(tmp_path, monkeypatch):
    """A file grows over runs at several commits: each run that wrote rows keeps its own entry, a run that wrote
    none adds nothing, and a file from before runs were recorded keeps its rows under its last commit, marked."""

    def run_at(commit: str) -> ResultTable:
        return _run_table(monkeypatch, tmp_path, commit)

    legacy = run_at("aaa0001")
    legacy.add({"case": 0, "policy": "sliding", "value": 1})
    meta_path = tmp_path / "runs.json"
    meta = json.loads(meta_path.read_text())
    del meta["runs"]  # as written before this version
    meta_path.write_text(json.dumps(meta))
    second = run_at("bbb0002")
    second.add({"case": 1, "policy": "sliding", "value": 2})
    second.add({"case": 1, "policy": "tova", "value": 3})
    run_at("ccc0003")  # opens the file, writes nothing
    third = run_at("ddd0004")
    third.add({"case": 2, "policy": "tova", "value": 4})
    runs = json.loads(meta_path.read_text())["runs"]
    assert [(r["commit"], r["rows"], r["policies"], r.get("earlier", False)) for r in runs] == [
        ("aaa0001", 1, [], True),
        ("bbb0002", 2, ["sliding", "tova"], False),
        ("ddd0004", 1, ["tova"], False),
    ]
    assert all(r["started"] <= r["ended"] for r in runs)
    line = provenance_line(json.loads(meta_path.read_text()))
    assert "runs at commits `aaa0001` and earlier commits (1 rows), `bbb0002` (2 rows; " in line
    assert "`ddd0004` (1 rows; " in line and "the others did not record theirs" in line


def test_each_run_records_its_machine_and_a_file_resumed_elsewhere_names_both(tmp_path, monkeypatch):
    """The header's machine is only the latest run's: a file measured on one machine says so once, and one
    resumed on another names each run's machine, instead of claiming the latest for every row."""
    for directory, second_cpu in [(tmp_path / "same", "CPU A"), (tmp_path / "moved", "CPU B")]:
        _run_table(monkeypatch, directory, "aaa0001", "CPU A").add({"case": 0, "policy": "tova", "value": 1})
        _run_table(monkeypatch, directory, "bbb0002", second_cpu).add({"case": 1, "policy": "tova", "value": 2})
        _run_table(monkeypatch, directory, "ccc0003", "CPU C")  # opens the file (the header now says CPU C), no rows
    same = provenance_line(json.loads((tmp_path / "same" / "runs.json").read_text()))
    assert "`aaa0001` (1 rows), `bbb0002` (1 rows), on CPU A, " in same and "CPU C" not in same
    moved = provenance_line(json.loads((tmp_path / "moved" / "runs.json").read_text()))
    assert "`aaa0001` (1 rows; CPU A, " in moved and "`bbb0002` (1 rows; CPU B, " in moved and "CPU C" not in moved
    assert "(each run names its own)" in moved


def test_a_result_table_grows_columns_refills_blank_cells_and_lets_extent_settings_change(tmp_path):
    """A file from before a column was added gains it blank; a row that left a column blank is measured
    again and replaced (not duplicated); settings that only count rows may change between runs."""
    old = ResultTable(tmp_path, "grow", ["case", "policy", "value"], ["case", "policy"], {"words": 10, "cases": 2})
    old.add({"case": 0, "policy": "tova", "value": 1})
    columns = ["case", "policy", "value", "answered"]
    grown = ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 10, "cases": 5}, extent=("cases",))
    assert grown.has(case=0, policy="tova") and grown.lacks("answered", case=0, policy="tova")
    assert not grown.lacks("answered", case=1, policy="tova")  # no row: missing, not lacking
    grown.add({"case": 1, "policy": "tova", "value": 2, "answered": 0})
    grown.add({"case": 0, "policy": "tova", "value": 3, "answered": 1})  # the refill replaces the row
    frame = grown.frame()
    assert sorted(zip(frame["case"], frame["value"], frame["answered"])) == [(0, 3, 1), (1, 2, 0)]
    again = ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 10, "cases": 9}, extent=("cases",))
    assert not again.lacks("answered", case=0, policy="tova") and again.meta["rows"] == 2
    assert again.meta["settings"]["cases"] == 9
    fewer = ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 10, "cases": 3}, extent=("cases",))
    assert fewer.meta["settings"]["cases"] == 9  # the file still holds what the larger run measured
    with pytest.raises(CcvizError, match="other settings"):  # what a row means still may not change
        ResultTable(tmp_path, "grow", columns, ["case", "policy"], {"words": 20, "cases": 9}, extent=("cases",))
    with pytest.raises(CcvizError, match="other columns"):  # a column gone is not a column added
        ResultTable(
            tmp_path, "grow", ["case", "policy"], ["case", "policy"], {"words": 10, "cases": 9}, extent=("cases",)
        )


def test_a_nan_written_to_a_result_table_reads_back_as_a_number(tmp_path):
    """csv writes a float NaN as "nan": it reads back as a missing number, not as text in a float column."""
    rows = ResultTable(tmp_path, "timed", ["policy", "n", "ratio"], ["policy", "n"], {})
    rows.add({"policy": "sliding", "n": 512, "ratio": 0.25})
    rows.add({"policy": "sliding", "n": 16384, "ratio": float("nan")})  # past the forward baseline
    frame = load_results(tmp_path)["timed"]
    assert frame["ratio"].dtype == float and frame["ratio"].isna().tolist() == [False, True]
    assert frame["policy"].tolist() == ["sliding", "sliding"]


def test_every_task_is_described_once_in_the_registry():
    """One entry per task: unique names, titles and result files, and every part it names exists."""
    from ccviz_bench import registry

    tasks = registry.all_tasks()
    names = [entry.name for entry in (*tasks, *registry.PROBES)]
    titles = [entry.title for entry in tasks]
    files = [stem for entry in tasks for stem in entry.files]
    assert len(set(names)) == len(names) and len(set(titles)) == len(titles) and len(set(files)) == len(files)
    assert [entry.name for entry in tasks] == list(registry.NAMES)  # each listing finds the task it names
    for entry in tasks:
        functions = [entry.run, entry.tables, entry.default_labels, entry.figures]
        functions += [part.summarise for part in entry.parts] + ([entry.charts.draw] if entry.charts else [])
        assert all(callable(function) for function in functions), entry.name
        for part in entry.parts:
            assert registry.part_of(part.files[0]) is part and hasattr(part.settings, "quick")
        assert (entry.settings is None) == (not entry.takes_set)
    assert all(hasattr(import_ref(probe.settings), "quick") for probe in registry.PROBES)
    assert registry.part_of("not_a_result") is None


def test_one_budget_rule_labels_every_budget():
    from ccviz.engine.budget import budget_text, is_share

    assert is_share(1.0) and not is_share(2)
    assert budget_text(0.25) == "J=25%" and budget_text(512.0) == "J=512"
    assert budget_text(0.1, "{:.0%} of the document", "{:d} tokens") == "10% of the document"
    assert budget_text(1024, "{:.0%} of the document", "{:d} tokens") == "1024 tokens"


def test_consecutive_runs_at_one_commit_are_named_once(tmp_path, monkeypatch):
    for value, commit in enumerate(("aaa0001", "aaa0001", "aaa0001", "bbb0002")):
        _run_table(monkeypatch, tmp_path, commit, "CPU A").add({"case": value, "policy": "tova", "value": value})
    line = provenance_line(json.loads((tmp_path / "runs.json").read_text()))
    assert "runs at commits `aaa0001` (3 rows in 3 runs), `bbb0002` (1 rows), on CPU A, " in line
