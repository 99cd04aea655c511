"""Each allocation cell of ``bench/results/allocation`` against the same policy under ``uniform`` on the
same cases and segments, the uniform rows taken from the published main tables.

The uniform path is today's engine, bit for bit. On 2026-12-01 this machine reproduced the published
uniform rows: 24 of 24 retention rows on cases 0-1, exactly. Two perplexity rows of the sinks table
(measured on another CPU) came within 1e-5 nats per token. On 2026-12-02, on an Intel Xeon (the
allocation cells of that day ran there), ``--check-uniform 10,70`` matched 30 of 30 published rows
exactly (the five policies at three budgets, one answered case and one survival-only case). So the
allocation task need not measure uniform again before its cells can be compared. Paired counts: cases where one
keeps the fact and the other does not (exact two-sided sign test).

    python scripts/bench/allocation_vs_uniform.py [--results bench/results] [--check-uniform 10,70]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from ccviz_bench.pairing import sign_test  # noqa: E402
from ccviz_bench.reports.allocation import _allocation_cell  # noqa: E402
from ccviz_bench.results import read_frame  # noqa: E402


def _paired(
    cells: pd.DataFrame, uniform: pd.DataFrame, key: str
) -> Iterator[tuple[str, str, float, pd.DataFrame, pd.DataFrame]]:
    """Each allocation cell (policy, allocation, budget, its rows) with the same policy's uniform rows at
    that budget, on the same ``key`` values (cases or segments), in the same order."""
    for (label, budget), group in cells[cells.policy != "full"].groupby(["policy", "budget"], sort=False):
        name, allocation = _allocation_cell(label)
        base = uniform[(uniform.policy == name) & (uniform.budget == budget)].set_index(key).reindex(group[key])
        yield name, allocation, budget, group, base


def retention(results: Path) -> None:
    cells = read_frame(results / "allocation" / "allocation_retention.csv")
    uniform = read_frame(results / "retention.csv")
    print(
        "| policy | allocation | J | cases | survival: uniform / this | kept / lost vs uniform "
        "| layers holding the fact | answered: uniform / this (sign test) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, allocation, budget, group, base in _paired(cells, uniform, "case"):
        mine, theirs = group["survived"].astype(int).to_numpy(), base["survived"].astype(int).to_numpy()
        gained, lost = int(((mine == 1) & (theirs == 0)).sum()), int(((mine == 0) & (theirs == 1)).sum())
        answered = pd.to_numeric(group["answered"], errors="coerce").notna().to_numpy()
        mine_a = pd.to_numeric(group["answered"], errors="coerce").to_numpy()[answered]
        theirs_a = pd.to_numeric(base["answered"], errors="coerce").to_numpy()[answered]
        right, wrong = int(((mine_a == 1) & (theirs_a == 0)).sum()), int(((mine_a == 0) & (theirs_a == 1)).sum())
        print(
            f"| {name} | {allocation} | {budget:.0%} | {len(group)} | {theirs.mean():.0%} / {mine.mean():.0%} | "
            f"+{gained} / -{lost} (p {sign_test(gained, lost):.2g}) | {group['layer_share'].mean():.0%} | "
            f"{int(theirs_a.sum())} / {int(mine_a.sum())} of {int(answered.sum())} (p {sign_test(right, wrong):.2g}) |"
        )


def perplexity(results: Path) -> None:
    cells = read_frame(results / "allocation" / "allocation_perplexity.csv")
    uniform = read_frame(results / "sinks" / "perplexity.csv")
    full = uniform[uniform.policy == "full"].set_index("segment")
    print("\n| policy | allocation | J | segments | NLL gap to full: uniform / this |")
    print("|---|---|---|---|---|")
    for name, allocation, budget, group, base in _paired(cells, uniform, "segment"):
        reference = full.reindex(group["segment"])
        gaps = [_nll(rows) - _nll(reference) for rows in (base, group)]
        print(f"| {name} | {allocation} | {budget} | {len(group)} | {gaps[0]:+.3f} / {gaps[1]:+.3f} |")


def _nll(rows) -> float:
    """Mean negative log-likelihood per token over ``rows`` (a perplexity frame's segments)."""
    return rows["nll_sum"].sum() / rows["tokens"].sum()


def _same(new: object, published: object) -> bool:
    """Equal as numbers where both are (the CSV reads 0 back as 0.0), else as text."""
    try:
        return float(new) == float(published)
    except (TypeError, ValueError):
        return str(new).strip() == str(published).strip()


def check_uniform(results: Path, cases: list[int]) -> None:
    """Measure the published uniform retention rows of ``cases`` again here, for the policies the allocation
    task crosses, and count the rows that match exactly: the pairing assumes this machine's engine gives
    the rows the main table's machine gave. Both were measured with the question evictable (the paper's
    protocol), so that is the protocol measured here."""
    import torch

    from ccviz import load_model
    from ccviz_bench.specs import PolicySpec
    from ccviz_bench.tasks.allocation import ATTENTION_POLICIES, COUNTER_CAUSAL_POLICIES
    from ccviz_bench.tasks.retention import RetentionCell, measure_cell

    published = read_frame(results / "retention.csv")
    meta = json.loads((results / "retention.json").read_text())
    settings = meta["settings"]
    torch.set_num_threads(meta["torch_threads"])  # as published: a sum split over threads may round otherwise
    lm, same, differ = load_model(), 0, []
    for case in cases:
        answer = case < settings["accuracy_cases"]
        for name in (*ATTENTION_POLICIES, *COUNTER_CAUSAL_POLICIES):
            for budget in settings["budgets"]:
                spec = PolicySpec(name).in_protocol(False)
                cell = RetentionCell(
                    case,
                    settings["words"],
                    settings["seed"],
                    spec,
                    budget,
                    answer,
                    settings["max_new_tokens"],
                )
                row = measure_cell(lm, cell)
                old = published[
                    (published.case == case) & (published.policy == spec.label) & (published.budget == budget)
                ].iloc[0]
                fields = ["cache_size", "survived", "kept_share"] + (["answered", "output"] if answer else [])
                if all(_same(row[f], old[f]) for f in fields):
                    same += 1
                else:
                    differ.append(f"case {case} {name} J={budget}")
    print(
        f"uniform rows measured again here: {same} of {same + len(differ)} match the published rows exactly"
        + (f"; differ: {', '.join(differ)}" if differ else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--check-uniform",
        metavar="CASES",
        help="comma-separated cases: measure their published "
        "uniform rows again here and count exact matches (minutes per case), instead of the tables",
    )
    args = parser.parse_args()
    if args.check_uniform:
        check_uniform(args.results, [int(case) for case in args.check_uniform.split(",")])
        return
    retention(args.results)
    perplexity(args.results)


if __name__ == "__main__":
    main()
