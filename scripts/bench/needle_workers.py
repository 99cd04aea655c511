"""How much --workers buys on this machine: one small needle grid measured in this process and then with
N worker processes, in the same run, on the embedded SmolLM2. Prints both wall times and their ratio,
and checks that both wrote the same rows (the timings column aside).

    python scripts/bench/needle_workers.py --workers 2 --lengths 1000,2000 --depths 0,0.5,1 \\
        --policy sliding --policy snapkv
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from ccviz.models import load_model
from ccviz_bench.dispatch import Workers
from ccviz_bench.specs import parse_spec
from ccviz_bench.tasks.needle import NeedleSettings, run_needle
from ccviz_bench.timing import header


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lengths", default="1000,2000")
    parser.add_argument("--depths", default="0,0.5,1")
    parser.add_argument("--policy", action="append", default=[])
    args = parser.parse_args()
    torch.set_num_threads(1)
    specs = [parse_spec(s) for s in args.policy or ["sliding", "snapkv"]]
    settings = NeedleSettings(
        lengths=tuple(int(v) for v in args.lengths.split(",")), depths=tuple(float(v) for v in args.depths.split(","))
    )
    print(header(f"needle grid, this process against {args.workers} worker processes"))
    print(
        f"# {len(settings.lengths)} lengths x {len(settings.depths)} depths, "
        f"{', '.join(s.label for s in specs)} and the full cache"
    )
    lm = load_model()
    with tempfile.TemporaryDirectory() as folder:
        here, there = Path(folder) / "serial", Path(folder) / "workers"
        start = time.perf_counter()
        run_needle(lm, specs, settings, here, log=lambda _: None)
        serial = time.perf_counter() - start
        start = time.perf_counter()
        run_needle(None, specs, settings, there, workers=Workers(count=args.workers), model_args={}, log=lambda _: None)
        parallel = time.perf_counter() - start
        rows = [
            pd.read_csv(p / "needle.csv")
            .drop(columns="seconds")
            .sort_values(["length", "depth", "policy"])
            .reset_index(drop=True)
            for p in (here, there)
        ]
    print(f"this process      {serial:8.1f} s")
    print(
        f"{args.workers} workers         {parallel:8.1f} s   "
        f"({serial / parallel:.2f}x faster, workers' model loading included)"
    )
    print(f"same rows: {rows[0].equals(rows[1])}")


if __name__ == "__main__":
    main()
