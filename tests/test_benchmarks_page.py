"""The Benchmarks page: figure builders on hand-built frames, the reproduce command rebuilt from the
metadata, and the page itself (AppTest) on a real quick run, on a partial/broken copy and on nothing."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
import plotly.io
import pytest
from conftest import bench_quick
from streamlit.testing.v1 import AppTest

from ccviz_bench.command import TASKS
from ccviz_bench.figures import (
    divergence_figure,
    perplexity_figure,
    rate_figure,
    refresh_cost_figure,
    refresh_seconds_figure,
)
from ccviz_bench.reproduce import reproduce_command
from ccviz_bench.results import results_dir
from ccviz_bench.tasks.ablation import RETENTION_BUDGET, ablation_specs
from ccviz_bench.tasks.needle import RULER_VARIANTS, RulerSettings
from ccviz_bench.tasks.retention import RetentionSettings

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")


def _rate_row(policy, budget, survival, s_low, s_high, accuracy, a_low, a_high, n=10):
    return dict(
        policy=policy,
        budget=budget,
        survival=survival,
        survival_low=s_low,
        survival_high=s_high,
        survival_n=n,
        accuracy=accuracy,
        accuracy_low=a_low,
        accuracy_high=a_high,
        accuracy_n=n,
    )


RETENTION = pd.DataFrame(
    [
        _rate_row("full", 1.0, 1.0, 0.72, 1.0, 0.7, 0.4, 0.89),
        _rate_row("sliding", 0.5, 0.6, 0.31, 0.83, NAN, NAN, NAN, n=0),  # no accuracy measured in this cell
        _rate_row("sliding", 0.1, 0.1, 0.02, 0.4, 0.0, 0.0, 0.28),
        _rate_row("tova", 0.1, 0.3, 0.11, 0.6, 0.2, 0.06, 0.51),
        _rate_row("tova", 0.5, 0.9, 0.6, 0.98, 0.5, 0.24, 0.76),
    ]
)


def _policy_rows(frame: pd.DataFrame, policy: str, x: str, y: str) -> pd.DataFrame:
    return frame[frame.policy == policy].dropna(subset=[y]).sort_values(x)


def test_rate_figures_plot_the_summary_with_wilson_bars_and_the_full_cache_ceiling():
    for measure in ("survival", "accuracy"):
        fig = rate_figure(RETENTION, measure)
        assert [t.name for t in fig.data] == ["sliding", "tova"]  # measured order, full as a line instead
        for trace in fig.data:
            rows = _policy_rows(RETENTION, trace.name, "budget", measure)
            assert list(trace.x) == list(rows.budget) and list(trace.y) == pytest.approx(list(rows[measure]))
            assert list(trace.error_y.array) == pytest.approx(list(rows[f"{measure}_high"] - rows[measure]))
            assert list(trace.error_y.arrayminus) == pytest.approx(list(rows[measure] - rows[f"{measure}_low"]))
        (line,) = fig.layout.shapes
        assert line.y0 == line.y1 == RETENTION.loc[0, measure]
    assert list(rate_figure(RETENTION, "accuracy").data[0].x) == [0.1]  # the unmeasured cell is left out, not 0


def test_perplexity_divergence_and_refresh_figures_plot_the_frame_numbers():
    ppl = pd.DataFrame(
        {
            "policy": ["full", "sliding", "sliding", "h2o"],
            "budget": [2048, 128, 64, 64],
            "nll": [3.1, 3.4, 3.9, 3.6],
            "perplexity": [math.exp(v) for v in (3.1, 3.4, 3.9, 3.6)],
            "delta_nll": [0.0, 0.3, 0.8, 0.5],
        }
    )
    fig = perplexity_figure(ppl)
    assert [t.name for t in fig.data] == ["sliding", "h2o"]
    assert list(fig.data[0].x) == [64, 128] and list(fig.data[0].y) == [3.9, 3.4]
    assert fig.layout.shapes[0].y0 == 3.1 and fig.layout.xaxis.type == "log"

    decode = pd.DataFrame(
        {
            "policy": ["full", "tova", "tova"],
            "budget": [400, 64, 128],
            "first_divergence_median": [400, 12.5, 40],
            "first_divergence_mean": [400, 15.0, 38.2],
            "repeated_4grams": [0.01, 0.3, 0.1],
            "prompts": [6, 6, 6],
        }
    )
    fig = divergence_figure(decode)
    assert [t.name for t in fig.data] == ["tova"] and list(fig.data[0].y) == [12.5, 40]

    refresh = pd.DataFrame(
        {
            "policy": ["counter_causal", "sliding", "counter_causal", "sliding"],
            "n": [1024, 1024, 512, 512],
            "ratio": [1.2, 2e-5, 0.6, 1e-5],
            "refresh_seconds": [0.12, 2e-6, 0.03, 5e-7],
            "forward_seconds": [0.1, 0.1, 0.05, 0.05],
        }
    )
    fig = refresh_cost_figure(refresh)
    assert [t.name for t in fig.data] == ["counter_causal", "sliding"]
    assert list(fig.data[0].x) == [512, 1024] and list(fig.data[0].y) == [0.6, 1.2]
    assert list(fig.data[1].y) == [1e-5, 2e-5]
    assert fig.layout.yaxis.type == "log" and fig.layout.shapes[0].y0 == 1.0  # one plain forward
    fig = refresh_seconds_figure(refresh, {"counter_causal": 2.0, "sliding": float("nan")})
    assert [t.name for t in fig.data] == ["counter_causal · n^2.00", "sliding", "one plain forward"]
    assert list(fig.data[0].y) == [0.03, 0.12] and list(fig.data[2].y) == [0.05, 0.1]
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"


def test_figures_of_frames_without_evicting_rows_are_empty_not_errors():
    only_full = RETENTION[RETENTION.policy == "full"]
    assert not rate_figure(only_full, "survival").data
    assert not rate_figure(RETENTION.iloc[0:0], "survival").layout.shapes  # no full cache: no line


def _meta(settings: dict, threads: int = 1) -> dict:
    return {"commit": "abc1234", "torch_threads": threads, "settings": settings}


def test_the_reproduce_command_is_rebuilt_from_the_recorded_settings():
    defaults = {"model": "SmolLM2-135M-Instruct", **asdict(RetentionSettings())}
    meta = {"retention": _meta(json.loads(json.dumps(defaults)))}
    everything = {
        "sliding",
        "streaming_llm",
        "tova",
        "h2o",
        "snapkv",
        "importance_keyproxy",
        "counter_causal",
        "counter_causal:paper=True",
        "counter_causal_fast",
        "counter_causal_fast:paper=True",
        "kvzip",
        "expected_attention",
        "keydiff",
        "full",
    }
    command = reproduce_command("retention", meta, everything, results_dir(environ={}), complete=True)
    assert command == "python -m ccviz bench retention"

    changed = {"retention": _meta({**defaults, "cases": 20, "budgets": [0.1, 0.5]}, threads=2)}
    command = reproduce_command("retention", changed, {"full", "sliding", "h2o"}, Path("/tmp/r"), complete=True)
    assert command == (
        "python -m ccviz bench retention --set cases=20 --set budgets=0.1,0.5 "
        "--policy h2o --policy sliding --threads 2 --out /tmp/r"
    )
    # While partial, the rows may not have reached every policy yet: no --policy guessed from them.
    partial = reproduce_command("retention", changed, {"full", "sliding"}, Path("/tmp/r"), complete=False)
    assert "--policy" not in partial
    assert "--policy tova:normalize=True --threads" in reproduce_command(
        "retention", changed, {"tova:normalize=True"}, Path("/tmp/r"), complete=False
    )

    # The ruler task's defaults are the registered policies and its two span variants: all of them, no --policy.
    ruler = {"ruler": _meta(json.loads(json.dumps({"model": "SmolLM2-135M-Instruct", **asdict(RulerSettings())})))}
    with_variants = everything | {spec.label for spec in RULER_VARIANTS}
    assert (
        reproduce_command("ruler", ruler, with_variants, results_dir(environ={}), complete=True)
        == "python -m ccviz bench ruler"
    )
    assert "--policy counter_causal_fast --policy" in reproduce_command(
        "ruler", ruler, everything, Path("/r"), complete=True
    )

    quick = {"model": "tiny-random", **asdict(replace(RetentionSettings.quick(), budgets=(RETENTION_BUDGET,)))}
    corners = {ablation_specs()[0].label, ablation_specs()[-1].label}
    command = reproduce_command(
        "ablation", {"ablation_retention": _meta(json.loads(json.dumps(quick)))}, corners, Path("/tmp/a"), complete=True
    )
    assert command == "python -m ccviz bench ablation --quick --model tiny-random --out /tmp/a"


# --- the page ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_results(quick_bench) -> Path:
    """Every task, quick, on the tiny model (the session's one run)."""
    return quick_bench[0]


def _page(monkeypatch, folder: Path) -> AppTest:
    monkeypatch.setenv("CCVIZ_MODEL", "tiny-random")
    monkeypatch.setenv("CCVIZ_BENCH_RESULTS", str(folder))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/benchmarks.py").run()
    assert not at.exception
    return at


def _commands(at: AppTest) -> list[str]:
    return [code.value for code in at.code]


def _every_tab(at: AppTest) -> dict[str, dict[str, list]]:
    """Each tab's label: what the page draws with that tab open (only the open tab is drawn), tab by tab.

    Per tab: the charts' specs (parsed), the code blocks, markdown, captions and warnings in its panel."""
    seen = {}
    for label in [tab.label for tab in at.tabs]:
        at.session_state["bench.tab"] = label
        at.run()
        assert not at.exception
        (panel,) = [tab for tab in at.tabs if tab.label == label]
        seen[label] = {
            "charts": [json.loads(chart.proto.spec) for chart in panel.get("plotly_chart")],
            "code": [code.value for code in panel.code],
            "markdown": [m.value for m in panel.markdown],
            "caption": [c.value for c in panel.caption],
            "warning": [w.value for w in panel.warning],
            "error": [e.value for e in panel.error],
        }
        others = [tab for tab in at.tabs if tab.label != label]
        assert not any(
            tab.get("plotly_chart") or tab.code or tab.markdown for tab in others
        )  # drawn: the open one only
        assert len(at.get("plotly_chart")) == len(seen[label]["charts"])
    return seen


def _all(seen: dict[str, dict[str, list]], kind: str) -> list:
    """``kind`` of every tab, in the tabs' order."""
    return [item for tab in seen.values() for item in tab[kind]]


def _policy(trace: dict) -> str:
    """A line's policy spec: its legend name without the line breaks that keep long specs narrow."""
    return trace["name"].replace("<br>", "")


def test_page_plots_a_quick_run_with_provenance_tables_and_commands(monkeypatch, quick_results):
    at = _page(monkeypatch, quick_results)
    first = [json.loads(chart.proto.spec) for chart in at.get("plotly_chart")]
    seen = _every_tab(at)
    assert not at.error and not _all(seen, "error") and not at.warning and not _all(seen, "warning")
    assert [tab.label for tab in at.tabs] == [
        "Rare-fact retention",
        "Long-text perplexity",
        "Decode-heavy generation",
        "Efficiency",
        "Score-variant ablation",
        "Budget allocation over layers and heads",
        "Needle in a haystack",
        "RULER-style tasks",
    ]
    meta = json.loads((quick_results / "retention.json").read_text())
    captions = " ".join(_all(seen, "caption"))
    assert f"`{meta['commit']}`" in captions and meta["machine"] in captions and "tiny-random" in captions
    flags = f"--quick --model tiny-random --out {quick_results}"
    assert _all(seen, "code") == [f"python -m ccviz bench {task} {flags}" for task in TASKS]

    charts = _all(seen, "charts")
    assert first == seen["Rare-fact retention"]["charts"] and len(first) == 2  # the first run: the first tab's only
    titles = [chart["layout"]["title"]["text"] for chart in charts]
    assert [t.split(" ")[0] for t in titles] == [
        "Answer",  # answers lead; survival is the diagnosis
        "Fact",
        "Long-text",
        "Where",
        "Refresh",
        "Refresh",
        "Answer",
        "Fact",
        "Required",
        "Answer",
    ]  # the needle map (answers first), then RULER's three
    summary = pd.read_csv(quick_results / "retention_summary.csv")
    for trace in charts[1]["data"]:  # what is drawn is what the harness summarised
        rows = summary[summary.policy == _policy(trace)]
        assert trace["y"] == pytest.approx(list(rows.survival), abs=1e-5)
    full = summary[summary.policy == "full"]
    assert charts[1]["layout"]["shapes"][0]["y0"] == pytest.approx(full.survival.iloc[0])
    refresh = pd.read_csv(quick_results / "efficiency_refresh.csv")
    assert {_policy(t) for t in charts[4]["data"]} == set(refresh.policy)
    assert sorted(y for t in charts[4]["data"] for y in t["y"]) == pytest.approx(sorted(refresh.ratio))
    exponents = pd.read_csv(quick_results / "efficiency_summary.csv").set_index("policy")["refresh_exponent"]
    named = {_policy(t) for t in charts[5]["data"]}
    assert all(f"{policy} · n^{slope:.2f}" in named for policy, slope in exponents.dropna().items())

    text = " ".join(_all(seen, "markdown"))
    assert "Fact survival" in text and "full cache" in text and "refresh / forward" in text  # the report's tables
    assert "Rare-fact retention per cell" in text and "layers holding the fact" in text and "vs uniform" in text
    assert text.count("What differs from the paper") == 8


def test_page_switches_to_a_follow_up_folder_and_gives_its_own_command(monkeypatch, quick_results, tmp_path):
    root = tmp_path / "results"
    shutil.copytree(quick_results, root)
    sinks = root / "sinks"
    bench_quick("perplexity", sinks, "--set", "frozen=4")  # a follow-up with its own setting
    (root / "notes").mkdir()  # a folder without result files is not offered
    at = _page(monkeypatch, root)
    box = at.selectbox(key="bench.folder")
    assert box.options == [str(root), str(sinks)] and box.value == str(root)
    assert len(at.tabs) == len(TASKS) and any("Everything on this page" in m.value for m in at.markdown)

    box.select(str(sinks)).run()
    assert not at.exception and not at.error and not at.warning
    assert [tab.label for tab in at.tabs] == ["Long-text perplexity"]  # only what the folder holds
    assert _commands(at) == [
        f"python -m ccviz bench perplexity --quick --set frozen=4 --model tiny-random --out {sinks}"
    ]
    text = " ".join(m.value for m in at.markdown)
    assert "follow-up measurements" in text and "Everything on this page" not in text  # `all` would not repeat it
    meta = json.loads((sinks / "perplexity.json").read_text())
    assert any("frozen=4" in c.value and meta["commit"] in c.value for c in at.caption)


def test_page_shows_partial_missing_and_unreadable_results_plainly(monkeypatch, quick_results, tmp_path):
    folder = tmp_path / "partial"
    shutil.copytree(quick_results, folder)
    rows = pd.read_csv(folder / "retention.csv")
    rows[rows.case == 0].to_csv(folder / "retention.csv", index=False)  # as if stopped after the first case
    needles = pd.read_csv(folder / "needle.csv")
    needles[needles.length == needles.length.min()].to_csv(folder / "needle.csv", index=False)  # the short column only
    for name in ("perplexity", "ablation_perplexity"):
        for path in folder.glob(f"{name}*"):
            path.unlink()
    at = _page(monkeypatch, folder)
    seen = _every_tab(at)
    assert not at.warning  # each is in its task's tab
    warnings = _all(seen, "warning")
    assert len(warnings) == 3 and "retention: 1 of 2 cases so far" in warnings[0]
    assert "ablation_perplexity: not started yet" in warnings[1]
    assert "needle: 3 of 6 cells per policy so far (contexts up to 300 tokens)" in warnings[2]
    assert any(f"No results in `{folder}` yet" in m for m in _all(seen, "markdown"))
    assert f"python -m ccviz bench perplexity --quick --model tiny-random --out {folder}" in _all(seen, "code")
    assert not at.error and not _all(seen, "error")

    (folder / "decode.csv").write_text("prompt,policy\n0,full,extra,fields\n")
    errors = _all(_every_tab(_page(monkeypatch, folder)), "error")
    assert errors and "could not read" in errors[0]


def test_efficiency_gaps_name_the_sizes_and_end_to_end_runs_a_rerun_adds():
    from ccviz_bench.registry import find_task
    from ccviz_bench.tasks.efficiency import efficiency_gaps

    task = find_task("efficiency")
    settings = {"sizes": [512, 1024]}

    def gaps(refresh: pd.DataFrame, e2e: pd.DataFrame) -> list[str]:
        return efficiency_gaps(task, task.parts[0], [refresh, e2e], pd.DataFrame(), settings)

    refresh = pd.DataFrame({"policy": ["sliding", "sliding", "tova"], "n": [512, 1024, 512]})
    assert gaps(refresh, pd.DataFrame()) == [
        "refresh cost: tova not yet at every size it is timed at",
        "end to end: nothing measured yet",
    ]
    e2e = pd.DataFrame({"policy": ["full", "sliding"]})
    assert gaps(refresh[refresh.n == 512], e2e) == [
        "refresh cost: every policy not yet at every size it is timed at",
        "end to end: tova not measured yet",
    ]
    assert gaps(pd.concat([refresh, refresh.assign(policy="tova")]), e2e.assign(policy=["full", "tova"])) == [
        "end to end: sliding not measured yet"
    ]
    assert gaps(pd.DataFrame(), pd.DataFrame())[0] == "refresh cost: nothing measured yet"


def test_bench_report_of_a_stopped_run_summarises_its_rows_says_what_is_missing_and_matches_the_page(
    quick_results, tmp_path, capsys
):
    """A stopped run leaves its rows and a stale summary (or none): the report, its charts and the page
    all show the rows measured so far, and the report names the gaps the page warns of."""
    from ccviz.cli import main
    from ccviz_bench import browse
    from ccviz_bench.plots import write_plots
    from ccviz_bench.progress import current_results, read_tasks
    from ccviz_bench.report import report_results
    from ccviz_bench.results import load_results

    folder = tmp_path / "stopped"
    shutil.copytree(quick_results, folder)
    rows = pd.read_csv(folder / "retention.csv")
    rows[rows.case == 0].to_csv(folder / "retention.csv", index=False)  # the summary file still holds 2 cases
    for path in [folder / "efficiency_summary.csv", *folder.glob("efficiency_e2e.*")]:
        path.unlink()  # stopped before the end-to-end runs, which write the summary

    assert main(["bench", "report", "--out", str(folder)]) == 0
    printed = capsys.readouterr().out
    sections = {section.task: section for section in browse.load_sections(folder)}
    for task, title in (("retention", "Rare-fact retention"), ("efficiency", "Efficiency")):
        section = sections[task]
        assert section.incomplete
        text = printed.split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]
        assert f"Partial run, still to measure: {'; '.join(section.incomplete)}." in text
        assert section.tables[0] in text  # the page's tables, from the same rows
    assert "retention: 1 of 2 cases so far" in sections["retention"].incomplete
    assert "1 cases per cell" in sections["retention"].tables[0]  # the rows' cells, not the stale file's 2
    assert any(gap.startswith("end to end: ") for gap in sections["efficiency"].incomplete)
    results = load_results(folder)
    current = current_results(results)
    pd.testing.assert_frame_equal(current["retention_summary"], sections["retention"].summaries["retention"])
    tasks = read_tasks(results)  # what `bench report` reads once for its tables and its charts
    assert report_results(results, tasks) == report_results(results)
    assert current_results(results, tasks).keys() == current.keys()
    drawn = {path.name: path.read_text() for path in write_plots(current, tmp_path)}
    assert drawn["survival.svg"] == (folder / "survival.svg").read_text()  # the charts, redrawn from the rows too
    assert drawn["survival.svg"] != (quick_results / "survival.svg").read_text()

    whole = browse.load_sections(quick_results)
    assert not any(section.incomplete for section in whole)
    assert main(["bench", "report", "--out", str(quick_results)]) == 0
    assert "Partial run" not in capsys.readouterr().out


def test_a_budget_some_policies_lack_is_named_with_those_policies():
    """A folder's recorded budgets are the union of its runs: a policy missing one of them leaves a hole
    the tables show as a dash, so the gaps name it (a budget no policy has yet keeps its own line)."""
    from ccviz_bench.progress import cell_gaps
    from ccviz_bench.registry import find_task

    entry = find_task("retention")
    part = entry.parts[0]
    settings = {"budgets": [0.1, 0.25, 0.5], part.setting: 2}
    grid = [{"policy": p, "budget": b} for p in ("sliding", "tova", "kvzip") for b in (0.25, 0.5)]
    summary = pd.DataFrame([{"policy": "full", "budget": 1.0}, *grid]).assign(**{part.count: 2})
    assert cell_gaps(entry, part, [], summary, settings) == ["retention: budget 0.1 not measured yet"]

    holes = summary.drop(index=[4, 5])  # tova at 0.5 and kvzip at 0.25
    assert cell_gaps(entry, part, [], holes, settings) == [
        "retention: budget 0.1 not measured yet",
        "retention: budget 0.25 not measured yet for kvzip",
        "retention: budget 0.5 not measured yet for tova",
    ]
    whole = {**settings, "budgets": [0.25, 0.5]}
    assert cell_gaps(entry, part, [], summary, whole) == []


def test_a_folder_is_read_once_per_change_of_its_files_and_a_growing_run_shows_its_new_rows(
    monkeypatch, quick_results, tmp_path
):
    from ccviz_bench import browse

    folder = tmp_path / "growing"
    shutil.copytree(quick_results, folder)
    rows = pd.read_csv(folder / "retention.csv")
    rows[rows.case == 0].to_csv(folder / "retention.csv", index=False)  # a run that has written its first case
    reads = []
    read = browse.load_sections
    monkeypatch.setattr(browse, "load_sections", lambda directory: reads.append(1) or read(directory))
    first = browse.cached_sections(folder)
    assert browse.cached_sections(folder) is first and len(reads) == 1  # a rerun: nothing read again
    assert any("1 of 2 cases so far" in gap for gap in first[0].incomplete)

    rows.to_csv(folder / "retention.csv", index=False)  # the run writes its second case
    grown = browse.cached_sections(folder)
    assert len(reads) == 2 and grown is not first and not grown[0].incomplete
    cases = [int(sections[0].summaries["retention"]["survival_n"].max()) for sections in (first, grown)]
    assert cases[1] > cases[0]
    assert browse.cached_sections(folder) is grown and len(reads) == 2


def test_page_on_an_empty_folder_says_which_command_produces_results(monkeypatch, tmp_path):
    at = _page(monkeypatch, tmp_path)
    seen = _every_tab(at)
    assert not at.error and not _all(seen, "error") and not _all(seen, "charts")
    assert f"python -m ccviz bench all --out {tmp_path}" in at.info[0].value
    assert _all(seen, "code") == [f"python -m ccviz bench {task} --out {tmp_path}" for task in TASKS]


def test_page_reads_the_published_results_wherever_the_server_started(monkeypatch, tmp_path):
    """Without CCVIZ_BENCH_RESULTS the page shows bench/results next to app.py, not under the working directory."""
    monkeypatch.delenv("CCVIZ_BENCH_RESULTS", raising=False)
    monkeypatch.setenv("CCVIZ_MODEL", "tiny-random")
    monkeypatch.chdir(tmp_path)
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/benchmarks.py").run()
    assert not at.exception and not at.error
    assert at.selectbox(key="bench.folder").value == str(ROOT / "bench" / "results")
    assert [tab.label for tab in at.tabs][0] == "Rare-fact retention"


def test_needle_tab_draws_each_policys_map_and_its_difference_from_the_summary(monkeypatch, quick_results):
    at = _page(monkeypatch, quick_results)
    at.session_state["bench.tab"] = "Needle in a haystack"
    at.run()
    summary = pd.read_csv(quick_results / "needle_summary.csv")
    picker = at.selectbox(key="bench.needle.policy")
    assert picker.options == ["sliding", "streaming_llm", "tova", "full"]  # the quick run's policies, the ceiling last
    picker.select("tova").run()
    assert at.segmented_control(key="bench.needle.measure").value == "accuracy"  # answers lead
    at.selectbox(key="bench.needle.against").select("sliding").run()
    assert not at.exception and not at.error
    figures = [plotly.io.from_json(c.proto.spec) for c in at.get("plotly_chart")]
    charts = {fig.layout.title.text.replace("<br>", " "): fig for fig in figures}  # long titles wrap
    heat = charts["Answer accuracy: tova at J = 50% of the document"].data[0]
    tova = summary[summary.policy == "tova"].sort_values(["depth", "length"])
    assert [v for row in heat.z for v in row] == pytest.approx(list(tova.accuracy))
    difference = charts["Answer accuracy: tova minus sliding"].data[0]
    sliding = summary[summary.policy == "sliding"].sort_values(["depth", "length"])
    assert [v for row in difference.z for v in row] == pytest.approx(
        list(tova.accuracy.to_numpy() - sliding.accuracy.to_numpy())
    )
    at.segmented_control(key="bench.needle.measure").set_value("survival").run()
    titles = [plotly.io.from_json(c.proto.spec).layout.title.text.replace("<br>", " ") for c in at.get("plotly_chart")]
    assert "Fact survival: tova at J = 50% of the document" in titles
    text = " ".join(_all(_every_tab(at), "markdown"))
    assert "Survival by depth of the needle" in text and "multikey" in text and "variable_tracking" in text
    at.session_state["bench.tab"] = "Needle in a haystack"  # back from the other tabs: the picks are kept
    at.run()
    assert at.selectbox(key="bench.needle.policy").value == "tova"
    assert at.segmented_control(key="bench.needle.measure").value == "survival"
    assert at.selectbox(key="bench.needle.against").value == "sliding"


def test_the_published_retention_tab_draws_answers_against_cost_with_each_policy_named_on_hover():
    from ccviz_bench.browse import cached_sections

    retention = next(s for s in cached_sections(ROOT / "bench" / "results") if s.task == "retention")
    fig = retention.frontier
    assert fig is not None
    points = [trace for trace in fig.data if trace.mode == "markers"]
    lines = [trace for trace in fig.data if trace.name == "Pareto frontier"]
    assert points and all(f"<b>{trace.name}</b>" in trace.hovertemplate for trace in points)
    assert len(lines) == len({trace.xaxis for trace in points})  # one frontier per budget's panel
    assert fig.layout.xaxis.type == "log"
