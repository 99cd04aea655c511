"""How much of the question is still cached when the answer is generated, on the retention cases, next to
whether the published row answered. Only the paper's protocol (``:protect_question=False``) can evict any of
it: a refresh at the end of the prefill scores the question like the document. The retention diagnosis says
whether it did (``question_evicted``); this says how much.

    python scripts/bench/question_kept.py --policy counter_causal_fast:protect_question=False --budget 0.25

Rows go to bench/results/question_kept/question_kept.csv (resumable, with a JSON of provenance); the split
by survived x answered is printed. ``answered`` and ``survived`` are the published retention row's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # this checkout's ccviz

from ccviz.cases.documents import make_case  # noqa: E402
from ccviz.cases.spans import prepare  # noqa: E402
from ccviz.models import load_model  # noqa: E402
from ccviz_bench.metrics import cache_before  # noqa: E402
from ccviz_bench.results import ResultTable, read_frame  # noqa: E402
from ccviz_bench.specs import parse_spec  # noqa: E402
from ccviz_bench.tasks.retention import RetentionSettings  # noqa: E402
from ccviz_bench.tasks.survival import run_case  # noqa: E402

COLUMNS = ["case", "policy", "budget", "question_tokens", "question_kept", "survived", "answered"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", action="append", required=True)
    parser.add_argument("--budget", type=float, default=0.25)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--results", default="bench/results")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lm = load_model()
    settings = RetentionSettings()
    published = read_frame(Path(args.results) / "retention.csv").set_index(["case", "policy", "budget"])
    table = ResultTable(
        Path(args.results) / "question_kept",
        "question_kept",
        COLUMNS,
        ["case", "policy", "budget"],
        {"model": lm.name, "words": settings.words, "seed": settings.seed},
    )
    specs = [parse_spec(label) for label in args.policy]
    table.pin_policies(specs, asked=True)
    for index in range(args.cases):
        case = make_case(index, words=settings.words, seed=settings.seed)
        prepared = prepare(lm.tokenizer, case.prompt, case.question_start, [case.answer_span])
        end = len(prepared.tokens.ids)
        for spec in specs:
            if table.has(case=index, policy=spec.label, budget=args.budget):
                continue
            trace = run_case(lm, prepared, spec, args.budget, 1).trace
            cached = cache_before(trace, end)  # what the answer's tokens read
            question = range(prepared.question_start, end)
            row = published.loc[(index, spec.label, args.budget)]
            table.add(
                {
                    "case": index,
                    "policy": spec.label,
                    "budget": args.budget,
                    "question_tokens": len(question),
                    "question_kept": round(sum(t in cached for t in question) / len(question), 4),
                    "survived": row["survived"],
                    "answered": row["answered"],
                }
            )
    rows = table.frame()
    split = rows.groupby(["policy", "budget", "survived", "answered"])["question_kept"].agg(["mean", "count"])
    whole = rows.assign(whole=rows.question_kept == 1).groupby(["policy", "budget", "answered"])["whole"].mean()
    with pd.option_context("display.width", 200):
        print(split.round(3).to_string())
        print(whole.round(3).to_string())


if __name__ == "__main__":
    main()
