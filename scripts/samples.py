"""Measure every sample meant to demonstrate (its index entry names a question, an answer and the budget it
is meant for, ``cache_size``) on every shipped policy, and record it beside the samples.

    python scripts/samples.py                       # SmolLM2, every sample: assets/samples/outcomes.json
    python scripts/samples.py --model gemma-3-270m  # the same on Gemma 3 270M (its own section)
    python scripts/samples.py --sample ward_handover.md --out /tmp/check.json
    python scripts/samples.py --docs                # only rewrite the table in docs/app.md from the file

A sample demonstrates on a model when three things hold there, at its ``cache_size`` with the question
kept apart (the default protocol):

- **unguessable**: with every sentence that holds the answer removed, the full cache does not give it;
- **the full cache answers**;
- **policies split**: among the shipped policies, at least one answers and at least one misses.

Each policy's entry says whether it answered and, when an answer token was evicted, the refresh that
evicted the first of them. The file keeps one section per model, each with its commit and date; the
script then lists in ``index.json`` the models each sample demonstrates on (``models``), which the app
reads, and rewrites the table of docs/app.md between its markers. The samples' own test checks the file
against ``index.json`` and the table against the file.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "assets" / "samples"
POLICIES = ("sliding", "tova", "h2o", "snapkv", "kvzip", "counter_causal", "counter_causal_fast")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
DOCS = ROOT / "docs" / "app.md"
TABLE = re.compile(r"(<!-- samples: begin -->\n)(.*?)(<!-- samples: end -->)", re.S)


def without_answer(text: str, answer: str) -> str:
    """``text`` with every sentence (or line) that holds ``answer`` removed: what the model would read had
    the document never stated it."""
    from ccviz.phrases import answer_matches

    kept = [part for part in SENTENCE_END.split(text) if part.strip() and not answer_matches(part, answer)]
    return "\n".join(kept)


def answer_left(trace: Any, answer: str) -> dict[str, int | str] | None:
    """The refresh that evicted the first of the answer's prompt tokens (its index, phase and step), or None
    when every one of them stayed cached."""
    from ccviz.explain import matching_tokens

    tokens = matching_tokens(trace, answer, trace.prompt_length)
    evicted = trace.eviction_refreshes()
    gone = sorted(int(evicted[t]) for t in tokens if evicted[t] >= 0)
    if not gone:
        return None
    cycle = trace.cycles[gone[0]]
    return {"refresh": cycle.index, "phase": cycle.phase, "step": cycle.step}


def measure(lm: Any, entry: dict[str, Any], policies: tuple[str, ...]) -> dict[str, Any]:
    """One sample's outcomes on ``lm``: the full cache, the full cache without the answer, every policy."""
    from ccviz import generate
    from ccviz.phrases import answer_matches

    text = (SAMPLES / entry["file"]).read_text(encoding="utf-8")
    question, answer = entry["question"], entry["answer"]
    settings = dict(question=question, max_new_tokens=entry["max_new_tokens"], chat=entry["chat"])

    def run(document: str, policy: str, cache_size: int) -> tuple[Any, dict[str, Any]]:
        started = time.perf_counter()
        trace = generate(lm, document, policy=policy, cache_size=cache_size, **settings)
        row = {"output": trace.output_text, "answered": answer_matches(trace.output_text, answer)}
        return trace, row | {"seconds": round(time.perf_counter() - started, 1)}

    context = lm.max_positions
    full_trace, full = run(text, "full", context)
    _, blank = run(without_answer(text, answer), "full", context)
    rows = {}
    for policy in policies:
        trace, row = run(text, policy, entry["cache_size"])
        rows[policy] = row | {"answer_left": answer_left(trace, answer)}
    answered = [row["answered"] for row in rows.values()]
    return {
        "question": question,
        "answer": answer,
        "cache_size": entry["cache_size"],
        "prompt_tokens": full_trace.prompt_length,
        "full": full,
        "without_answer": blank,
        "policies": rows,
        "unguessable": not blank["answered"],
        "full_answers": full["answered"],
        "policies_split": any(answered) and not all(answered),
    }


def demonstrates(outcome: dict[str, Any]) -> bool:
    """The three properties a sample ships on."""
    return bool(outcome["unguessable"] and outcome["full_answers"] and outcome["policies_split"])


def outcomes_table(outcomes: dict[str, Any], index: list[dict[str, Any]]) -> str:
    """The measured samples as a markdown table: each sample's question, answer and J, and per model whether the
    full cache answers and which shipped policies answer (a model it was not measured on: a dash)."""
    models = list(outcomes.get("models", {}))
    header = ["sample", "question", "answer", "J", *models]
    rows = []
    for entry in (e for e in index if "cache_size" in e):
        cells = [entry["title"], entry["question"], f"`{entry['answer']}`", str(entry["cache_size"])]
        for model in models:
            outcome = outcomes["models"][model]["samples"].get(entry["file"])
            if outcome is None:
                cells.append("-")
                continue
            answering = [name for name, row in outcome["policies"].items() if row["answered"]]
            full = "full cache answers" if outcome["full_answers"] else "**full cache misses**"
            guess = "" if outcome["unguessable"] else "; **guessable**"
            who = ", ".join(f"`{name}`" for name in answering) or "none"
            cells.append(f"{full}{guess}; {len(answering)} of {len(outcome['policies'])} answer: {who}")
        rows.append(cells)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows]) + "\n"


def write_docs(outcomes: dict[str, Any], index: list[dict[str, Any]]) -> None:
    """The table of docs/app.md, between its markers, from ``outcomes``."""
    text = DOCS.read_text(encoding="utf-8")
    DOCS.write_text(
        TABLE.sub(lambda m: m.group(1) + outcomes_table(outcomes, index) + m.group(3), text), encoding="utf-8"
    )


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="the model to measure on (default: the embedded SmolLM2)")
    parser.add_argument("--sample", action="append", default=[], metavar="FILE", help="only these samples")
    parser.add_argument("--out", type=Path, default=SAMPLES / "outcomes.json", help="the outcomes file")
    parser.add_argument("--docs", action="store_true", help="only rewrite docs/app.md's table from the outcomes")
    args = parser.parse_args(argv)
    if args.docs:
        index = json.loads((SAMPLES / "index.json").read_text(encoding="utf-8"))
        write_docs(json.loads((SAMPLES / "outcomes.json").read_text(encoding="utf-8")), index)
        return 0

    from ccviz import load_model

    index = json.loads((SAMPLES / "index.json").read_text(encoding="utf-8"))
    asked = [entry for entry in index if "cache_size" in entry and (not args.sample or entry["file"] in args.sample)]
    unknown = set(args.sample) - {entry["file"] for entry in asked}
    if unknown:
        print(
            f"samples.py: no sample with a question, an answer and a budget named {sorted(unknown)[0]}", file=sys.stderr
        )
        return 2
    lm = load_model(args.model)
    outcomes = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
    section = outcomes.setdefault("models", {}).setdefault(lm.name, {"samples": {}})
    outcomes["protocol"] = "the question asked apart from the document and kept out of eviction"
    for entry in asked:
        outcome = measure(lm, entry, POLICIES)
        section["samples"][entry["file"]] = outcome
        section |= {"commit": _commit(), "date": datetime.date.today().isoformat()}
        args.out.write_text(json.dumps(outcomes, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        verdicts = " ".join(f"{p}={'yes' if r['answered'] else 'no'}" for p, r in outcome["policies"].items())
        print(f"{entry['file']}: demonstrates={demonstrates(outcome)} full={outcome['full_answers']} "
              f"unguessable={outcome['unguessable']} {verdicts}", flush=True)  # fmt: skip
    if args.out == SAMPLES / "outcomes.json":
        for entry in index:
            shown = [model for model, found in outcomes["models"].items() if entry["file"] in found["samples"]]
            if shown:
                entry["models"] = [m for m in shown if demonstrates(outcomes["models"][m]["samples"][entry["file"]])]
        (SAMPLES / "index.json").write_text(json.dumps(index, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        write_docs(outcomes, index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
