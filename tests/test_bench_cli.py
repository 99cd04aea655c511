"""`python -m ccviz bench`: the CI-sized run of every task, its files, and one-line errors."""

import subprocess
import sys

import pytest

from ccviz import POLICIES
from ccviz_bench.results import load_results


def _bench(*args, timeout=900):  # a hang guard, not a speed check
    return subprocess.run(
        [sys.executable, "-m", "ccviz", "bench", *args], capture_output=True, text=True, timeout=timeout
    )


def _every_task_wrote_loadable_results(result: subprocess.CompletedProcess, folder) -> None:
    results = load_results(folder)
    evicting = [name for name, cls in POLICIES.items() if cls.evicts]
    for name in ("retention", "perplexity", "decode", "efficiency_refresh", "efficiency_e2e"):
        assert set(results[name]["policy"]) >= set(evicting), name
        assert results["meta"][name]["commit"] and results["meta"][name]["machine"], name
    for name in (
        "retention",
        "perplexity",
        "decode",
        "efficiency",
        "ablation_retention",
        "ablation_perplexity",
        "allocation_retention",
        "allocation_perplexity",
    ):
        assert not results[f"{name}_summary"].empty, name
    allocated = results["allocation_retention"]
    assert set(allocated.policy) == {"full", "snapkv", "snapkv:allocation=pyramid", "snapkv:allocation=adaptive"}
    assert allocated.layer_share.between(0, 1).all() and (allocated.peak_cache_mb > 0).all()
    per_cell = results["allocation_perplexity"].groupby("policy").peak_cache_mb.mean()
    assert per_cell["snapkv:allocation=pyramid"] <= per_cell["snapkv"]  # the same total, each layer its own length
    retention = results["retention"]
    assert set(retention["survived"]) <= {0, 1}
    assert (retention.loc[retention.policy == "full", "survived"] == 1).all()
    for title in (
        "Rare-fact retention",
        "Long-text perplexity",
        "Decode-heavy generation",
        "Efficiency",
        "ablation",
        "Budget allocation over layers and heads",
    ):
        assert title in result.stdout


def test_quick_runs_every_task_and_writes_loadable_results(quick_bench):
    """On the tiny model (the session's one quick run, which the Benchmarks page tests read too)."""
    folder, result = quick_bench
    _every_task_wrote_loadable_results(result, folder)


@pytest.mark.slow
def test_quick_runs_every_task_in_ci_time_on_smollm2(tmp_path):
    """The embedded SmolLM2 takes 2-3.5 minutes on 2 cores, over the default run's share (``-m slow``).
    Its duration is a benchmark matter (measured and reported), never a timed assertion."""
    result = _bench("all", "--quick", "--out", str(tmp_path))  # one thread: the default
    assert result.returncode == 0, result.stderr
    _every_task_wrote_loadable_results(result, tmp_path)


def test_a_rerun_resumes_instead_of_measuring_again(tmp_path, capsys):
    """In this process (three interpreter starts cost more than the runs); torch threads restored after."""
    import torch

    from ccviz.cli import main

    args = ["bench", "perplexity", "--quick", "--policy", "sliding", "--model", "tiny-random", "--out", str(tmp_path)]
    threads = torch.get_num_threads()
    try:
        assert main(args) == 0
        rows = len(load_results(tmp_path)["perplexity"])
        assert main(args) == 0 and len(load_results(tmp_path)["perplexity"]) == rows
        capsys.readouterr()
        assert main([*args, "--set", "tokens=100"]) == 2 and "other settings" in capsys.readouterr().err
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize(
    "args, message",
    [
        (["retention", "--policy", "nope"], "unknown policy 'nope'"),
        (["retention", "--policy", "sliding:window=3"], "has no option 'window'"),
        (["retention", "--set", "colour=red"], "--set takes FIELD=VALUE"),
        (["all", "--set", "cases=2"], "--set works with one task"),
        (["decode", "--threads", "0"], "--threads must be at least 1"),
        (["perplexity", "--workers", "2"], "--workers and --ray spread the cells of the needle, ruler, retention"),
        (["needle", "--workers", "0"], "--workers must be at least 1"),
        (["needle", "--set", "budgets=2.5"], "a budget is a share of the document (at most 1) or a whole J"),
        (["needle", "--set", "depths=0,1.5"], "depths must be at most 1"),
        (["ruler", "--set", "tasks=common_words"], "tasks must be one of multikey, multivalue, variable_tracking"),
        (["needle", "--workers", "2", "--model", "/no/such/folder"], "does not exist"),
    ],
)
def test_bad_bench_input_gives_one_line_error(args, message, tmp_path, capsys):
    """In this process: every case is refused before anything is measured (or torch threads set)."""
    from ccviz.cli import main

    assert main(["bench", *args, "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ccviz: error: ") and message in lines[0], lines


def test_ray_without_the_extra_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    import sys

    from ccviz.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    args = ["bench", "needle", "--quick", "--ray", "local", "--model", "tiny-random", "--out", str(tmp_path)]
    assert main(args) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1] == "ccviz: error: --ray needs Ray, an optional extra: pip install 'ccviz[cluster]'", lines


def test_retention_rows_spread_over_worker_processes_are_the_rows_of_one_process(quick_bench, tiny, tmp_path):
    """The allocation task's retention rows (its extra columns computed in the workers) with --workers 2."""
    import pandas as pd

    from ccviz_bench.dispatch import Workers
    from ccviz_bench.tasks import allocation

    allocation.run(
        tiny, True, tmp_path, workers=Workers(count=2), model_args={"name_or_path": "tiny-random"}, log=lambda _: None
    )
    timings, key = ["seconds", "refresh_seconds"], ["case", "policy", "budget"]
    here, spread = (
        load_results(folder)["allocation_retention"].drop(columns=timings).sort_values(key).reset_index(drop=True)
        for folder in (quick_bench[0], tmp_path)
    )
    pd.testing.assert_frame_equal(here, spread)
