"""Each allocation cell of ``bench/results/allocation`` against the same policy under ``uniform`` on the
same cases and segments, the uniform rows taken from the published main tables.

The uniform path is today's engine, bit for bit. On 2026-12-01 this machine reproduced the published
uniform rows: 24 of 24 retention rows on cases 0-1, exactly. Two perplexity rows of the sinks table
(measured on another CPU) came within 1e-5 nats per token. So the allocation task need not measure
uniform again before its cells can be compared. Paired counts: cases where one
keeps the fact and the other does not (exact two-sided sign test).

    python scripts/bench/allocation_vs_uniform.py [--results bench/results]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from ccviz.bench.pairing import sign_test  # noqa: E402
from ccviz.bench.report import _allocation_cell  # noqa: E402
from ccviz.bench.results import read_frame  # noqa: E402


def _paired(cells: pd.DataFrame, uniform: pd.DataFrame, key: str) -> Iterator[tuple[str, str, float, pd.DataFrame, pd.DataFrame]]:
    """Each allocation cell (policy, allocation, budget, its rows) with the same policy's uniform rows at
    that budget, on the same ``key`` values (cases or segments), in the same order."""
    for (label, budget), group in cells[cells.policy != "full"].groupby(["policy", "budget"], sort=False):
        name, allocation = _allocation_cell(label)
        base = uniform[(uniform.policy == name) & (uniform.budget == budget)].set_index(key).reindex(group[key])
        yield name, allocation, budget, group, base


def retention(results: Path) -> None:
    cells = read_frame(results / "allocation" / "allocation_retention.csv")
    uniform = read_frame(results / "retention.csv")
    print("| policy | allocation | J | cases | survival: uniform / this | kept / lost vs uniform | layers holding the fact | answered: uniform / this (sign test) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, allocation, budget, group, base in _paired(cells, uniform, "case"):
        mine, theirs = group["survived"].astype(int).to_numpy(), base["survived"].astype(int).to_numpy()
        gained, lost = int(((mine == 1) & (theirs == 0)).sum()), int(((mine == 0) & (theirs == 1)).sum())
        answered = pd.to_numeric(group["answered"], errors="coerce").notna().to_numpy()
        mine_a = pd.to_numeric(group["answered"], errors="coerce").to_numpy()[answered]
        theirs_a = pd.to_numeric(base["answered"], errors="coerce").to_numpy()[answered]
        right, wrong = int(((mine_a == 1) & (theirs_a == 0)).sum()), int(((mine_a == 0) & (theirs_a == 1)).sum())
        print(f"| {name} | {allocation} | {budget:.0%} | {len(group)} | {theirs.mean():.0%} / {mine.mean():.0%} | "
              f"+{gained} / -{lost} (p {sign_test(gained, lost):.2g}) | {group['layer_share'].mean():.0%} | "
              f"{int(theirs_a.sum())} / {int(mine_a.sum())} of {int(answered.sum())} (p {sign_test(right, wrong):.2g}) |")


def perplexity(results: Path) -> None:
    cells = read_frame(results / "allocation" / "allocation_perplexity.csv")
    uniform = read_frame(results / "sinks" / "perplexity.csv")
    full = uniform[uniform.policy == "full"].set_index("segment")
    print("\n| policy | allocation | J | segments | NLL gap to full: uniform / this |")
    print("|---|---|---|---|---|")
    for name, allocation, budget, group, base in _paired(cells, uniform, "segment"):
        reference = full.reindex(group["segment"])
        gap = lambda rows: rows["nll_sum"].sum() / rows["tokens"].sum() - reference["nll_sum"].sum() / reference["tokens"].sum()  # noqa: E731
        print(f"| {name} | {allocation} | {budget} | {len(group)} | {gap(base):+.3f} / {gap(group):+.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    retention(args.results)
    perplexity(args.results)


if __name__ == "__main__":
    main()
