"""scripts/bench/question_kept.py: the share of the question cached when the answer is generated, which the
retention task's diagnosis (read at the question) cannot see."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench" / "question_kept.py"
PUBLISHED = ROOT / "bench" / "results"


FAST, SLIDING = "counter_causal_fast:protect_question=False", "sliding:protect_question=False"  # the paper's protocol


@pytest.mark.slow  # 15-25 s of SmolLM2: a check of a benchmark's driver against its published rows (-m slow)
def test_the_question_kept_reproduces_the_published_row_where_the_fast_default_evicts_part_of_it(tmp_path):
    shutil.copy(PUBLISHED / "retention.csv", tmp_path / "retention.csv")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--policy", FAST, "--policy", SLIDING, "--cases", "1",
         "--results", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_csv(tmp_path / "question_kept" / "question_kept.csv").set_index("policy")
    published = pd.read_csv(PUBLISHED / "question_kept" / "question_kept.csv")
    published = published[published.case == 0].set_index("policy")
    for policy in (FAST, SLIDING):
        assert rows.loc[policy, "question_tokens"] == published.loc[policy, "question_tokens"]
        assert rows.loc[policy, "question_kept"] == pytest.approx(published.loc[policy, "question_kept"], abs=1e-4)
    assert rows.loc[SLIDING, "question_kept"] == 1.0  # the question is the newest text a window keeps
    assert rows.loc[FAST, "question_kept"] < 1.0  # the end-of-prefill refresh evicts part of it
