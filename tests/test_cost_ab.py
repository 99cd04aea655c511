"""scripts/bench/cost_ab.py: two checkouts timed interleaved, each child importing its own ccviz."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench" / "cost_ab.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.slow  # 8-12 s of four interpreters: a check of a benchmark's driver, not of ccviz (-m slow)
@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout to unpack HEAD from")
def test_head_against_this_tree_reports_ratios_and_identical_scores() -> None:
    done = _run("--against", "HEAD", "--n", "16", "--rounds", "1", "--model", "tiny-random")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# counter-causal cost, A/B interleaved: A = ")
    rows = [line.split() for line in lines if line.strip().startswith(("fast:logit", "full:logit"))]
    assert len(rows) == 4  # two cases, wall clock and CPU time
    for row in rows:
        assert row[-1] == "identical"  # the same code gives the same scores
        assert float(row[-2]) > 0  # B/A


def test_an_unknown_revision_is_one_line() -> None:
    done = _run("--against", "no-such-revision-xyz", "--n", "16", "--rounds", "1")
    assert done.returncode != 0
    assert done.stderr.strip().startswith("cost_ab: ") and len(done.stderr.strip().splitlines()) == 1
