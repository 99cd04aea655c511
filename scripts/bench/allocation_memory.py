"""Peak K/V memory and refresh time of each allocation against uniform, on the same text and budget.

Every cell of ``ccviz bench allocation`` (each policy under each allocation it supports) teacher-forces
the same prose segment through the engine with 4 attention sinks, and the script prints, per policy
and J, the peak bytes the keys and values of all layers held together (each layer at its own length)
and the refresh seconds, both as ratios to the same policy's uniform cell measured in this run.
Memory is exact (tensor sizes, not RSS); the refresh seconds are one run each, so only their ratios
to each other mean anything on a noisy machine.

    python scripts/bench/allocation_memory.py [--tokens 1024] [--budgets 64,128] [--threads 1]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from ccviz import load_model  # noqa: E402
from ccviz.cases.texts import prose_segments  # noqa: E402
from ccviz_bench.tasks.allocation import SINKS, allocation_specs, costs  # noqa: E402
from ccviz_bench.tasks.perplexity import measured_nll  # noqa: E402
from ccviz_bench.timing import header  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--budgets", default="64,128")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lm = load_model()
    text = prose_segments(lm.tokenizer, args.tokens, 1)[0]
    budgets = [int(b) for b in args.budgets.split(",")]
    print(header(f"peak K/V memory and refresh time per allocation, {args.tokens} tokens, sinks {SINKS}"))
    print("| policy | allocation | J | peak K/V MiB | vs uniform | refresh s | vs uniform |")
    print("|---|---|---|---|---|---|---|")
    uniform: dict[tuple[str, int], dict] = {}
    worst = 0.0
    for spec in allocation_specs():
        allocation = dict(spec.options).get("allocation", "uniform")
        for budget in budgets:
            _, _, trace = measured_nll(
                lm, text, policy=spec.build(), cache_size=budget, frozen=SINKS, **spec.run_settings(budget)
            )
            cell = costs(trace)
            base = uniform.setdefault((spec.name, budget), cell)
            memory = cell["peak_cache_mb"] / base["peak_cache_mb"]
            if allocation == "pyramid":
                worst = max(worst, memory)
            print(
                f"| {spec.name} | {allocation} | {budget} | {cell['peak_cache_mb']:.2f} | {memory:.3f}x | "
                f"{cell['refresh_seconds']:.2f} | "
                f"{cell['refresh_seconds'] / max(base['refresh_seconds'], 1e-9):.2f}x |",
                flush=True,
            )
    print(
        f"\npyramid's largest peak against uniform: {worst:.3f}x ({'no more' if worst <= 1 else 'MORE'} than uniform)"
    )


if __name__ == "__main__":
    main()
