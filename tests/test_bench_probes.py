"""The engine probes (`python -m ccviz bench overhead|memory|cost|attention`), in process on the tiny model:
each prints its report and saves it; bad settings are one line; results go to --out, else
$CCVIZ_BENCH_RESULTS, else ./bench/results."""

import re

import pytest
import torch

from ccviz.cli import main
from ccviz_bench.command import PROBES, TASKS
from ccviz_bench.results import RESULTS_ENV, results_dir

TINY = ("--quick", "--model", "tiny-random")
RATIOS = {  # what each report compares, against a baseline measured in the same run
    "overhead": [r"^ratio \(ccviz / model\.generate\): \d+\.\d{3}   target >= 0\.9$"],
    "memory": [
        r"^policy +N=4 +N=16 +ratio$",
        r"^sliding +\d+\.\d +\d+\.\d +\d+\.\d\d$",
        r"^full +\d+\.\d +\d+\.\d +\d+\.\d\d$",
    ],
    "cost": [
        r"^ +32 +\d+\.\d{3} +\d+\.\d{3} +(\d+\.\d{3}x \(\d+\.\d\dx\) +){6}\d+\.\d{3}x \(\d+\.\d\dx\)$",
        r"^H\^\(L-1\) buffer: .* = \d+\.\d%$",
    ],
    "attention": [
        r"ratio \d+\.\d{3}$",
        r"^ +\d+ +\d+\.\d{3} +\d+\.\d{3} +(\d\.\de[-+]\d\dx \( *\d+\.\d\dx\) *){4}$",  # e+00 on a loaded machine
        r"^ +h2o +\d+\.\d tokens/s   \d+\.\d\dx full$",
    ],
}


@pytest.fixture
def bench(capsys, monkeypatch):
    """``python -m ccviz bench ARGS`` in this process: (exit code, stdout, stderr); torch threads restored."""
    monkeypatch.delenv(RESULTS_ENV, raising=False)
    threads = torch.get_num_threads()

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["bench", *args])
        out, err = capsys.readouterr()
        return code, out, err

    yield run
    torch.set_num_threads(threads)


def test_the_probes_are_not_part_of_all():
    assert set(RATIOS) == set(PROBES) and not set(PROBES) & set(TASKS)


@pytest.mark.parametrize("probe", [pytest.param(p, marks=pytest.mark.slow) if p == "memory" else p for p in PROBES])
def test_each_probe_prints_its_ratios_under_a_header_and_saves_the_report(bench, probe, tmp_path):
    code, out, err = bench(probe, *TINY, "--out", str(tmp_path))
    assert code == 0, err
    title, provenance, settings, *_ = out.splitlines()
    assert title.startswith("# ") and re.fullmatch(r"# \d{4}-\d\d-\d\d  commit \w+  .+ \(1 threads\)", provenance)
    assert settings.startswith("# model tiny-random (cpu, float32); ")
    for pattern in RATIOS[probe]:
        assert re.search(pattern, out, flags=re.M), (pattern, out)
    assert (tmp_path / f"{probe}.txt").read_text(encoding="utf-8") == out
    assert f"{probe}: report in {tmp_path / f'{probe}.txt'}" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["cost", "--set", "repeats=two"], "--set repeats must be a whole number, got 'two'"),
        (["attention", "--set", "sizes=64,many"], "sizes must be a whole number, got 'many'"),
        (["overhead", "--set", "new_tokens=1"], "new tokens must be at least 2, got 1"),
        (["memory", "--set", "policies=sliding,nope"], "unknown policy 'nope'"),
        (["memory", "--set", "colour=red"], "--set takes FIELD=VALUE with FIELD one of short_tokens"),
        (["attention", "--policy", "tova"], "--policy and --fresh are for the quality tasks"),
    ],
)
def test_bad_probe_settings_give_one_line_error(bench, args, message, tmp_path):
    code, out, err = bench(*args, "--out", str(tmp_path))
    lines = err.strip().splitlines()
    assert code == 2 and not out and len(lines) == 1, err
    assert lines[0].startswith("ccviz: error: ") and message in lines[0], err
    assert not any(tmp_path.iterdir())  # refused before anything was measured


def test_results_go_to_out_else_the_environment_else_bench_results_here(bench, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (
        results_dir() == tmp_path / "bench" / "results"
        and results_dir(True) == tmp_path / "bench" / "results" / "quick"
    )
    assert bench("cost", *TINY)[0] == 0
    assert (tmp_path / "bench" / "results" / "quick" / "cost.txt").is_file()

    monkeypatch.setenv(RESULTS_ENV, str(tmp_path / "env"))
    assert results_dir() == tmp_path / "env" and results_dir(environ={}) == tmp_path / "bench" / "results"
    assert bench("cost", *TINY)[0] == 0
    assert (tmp_path / "env" / "quick" / "cost.txt").is_file()

    assert bench("cost", *TINY, "--out", "given")[0] == 0
    assert (tmp_path / "given" / "cost.txt").is_file()
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.txt")) == [
        "bench/results/quick/cost.txt",
        "env/quick/cost.txt",
        "given/cost.txt",
    ]
