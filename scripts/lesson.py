"""Record the Lesson page's runs into assets/lesson/: greedy runs, one trace each, and the lesson's manifest.

    python scripts/lesson.py                                  # every run, SmolLM2, into assets/lesson/
    python scripts/lesson.py --step 3 --out /tmp/lesson       # only the runs step 3 draws
    python scripts/lesson.py --model tiny-random --out /tmp/l # another model (the tests' tiny one)

The lesson teaches on SAMPLE_FILE, an entry of assets/samples/index.json: its question asked apart, its
expected answer, and its budget (the entry's ``cache_size``, else DEFAULT_CACHE; h = J/4). To teach on another
sample, change SAMPLE_FILE and record again: the steps' words name the document only through what is recorded.

Step 6's document is BENCH_CASE, a measured retention case (a row of bench/results/retention.csv where the full
cache answered and a policy kept the fact without answering), rebuilt by the harness's own generator and run as
the harness runs it (``ccviz_bench.tasks.survival.run_case``): the trace is the run behind that row. Every run
is deterministic (greedy), so recording again gives the same kept sets. At the end each step says whether the
recording tells its story (the full cache answers, the window misses, ...), so a new sample is checked at once.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's ccviz

from ccviz.ui.lesson import CASE, LESSON_DIR, MANIFEST, RECORDINGS, SAMPLE, STEPS, Recording, Step  # noqa: E402

SAMPLES = ROOT / "assets" / "samples"
DEFAULT_CACHE = 128  # J of a sample whose index entry names none


@dataclass(frozen=True)
class BenchCase:
    """A row of a retention result file: the case's index, the policy spec (its label) and the budget share."""

    index: int
    policy: str
    budget: float


SAMPLE_FILE = "tenancy_agreement.md"  # the lesson's document: one setting, then record again
# bench/results/retention.csv, question kept: the full cache answers "Marisol"; KeyDiff keeps the name, its
# sentence evicted around it (sentence_kept 0, isolated), and answers "the dietitian".
BENCH_CASE = BenchCase(index=3, policy="keydiff", budget=0.25)


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def sample_document(name: str) -> dict[str, Any]:
    """The lesson's sample as a manifest entry: its text, question, answer, template and budget."""
    entry = next(e for e in json.loads((SAMPLES / "index.json").read_text(encoding="utf-8")) if e["file"] == name)
    if not entry.get("question") or not entry.get("answer"):
        raise SystemExit(f"lesson.py: sample {name} has no question and expected answer to teach with")
    return dict(
        title=entry["title"],
        source=f"assets/samples/{name}",
        text=(SAMPLES / name).read_text(encoding="utf-8"),
        question=entry["question"],
        answer=entry["answer"],
        chat=bool(entry["chat"]),
        cache_size=int(entry.get("cache_size", DEFAULT_CACHE)),
        max_new_tokens=int(entry["max_new_tokens"]),
    )


def record_sample(lm: Any, document: dict[str, Any], recording: Recording) -> Any:
    """One run on the sample: ``recording``'s policy at the sample's J, the question asked apart and kept."""
    from ccviz import generate

    return generate(
        lm,
        document["text"],
        question=document["question"],
        policy=recording.policy,
        cache_size=document["cache_size"],
        max_new_tokens=document["max_new_tokens"],
        chat=document["chat"],
        pin=(document["answer"],) if recording.pin_answer else (),
    )


def record_case(lm: Any, case: BenchCase, full: bool) -> tuple[dict[str, Any], Any]:
    """The benchmark case as a manifest entry, and its run as the harness measured it: the row's policy at its
    budget, or the full cache (the harness's ceiling, run once per case)."""
    from ccviz.cases.documents import make_case
    from ccviz.cases.spans import prepare
    from ccviz.engine.budget import cache_size_for
    from ccviz_bench.specs import parse_spec
    from ccviz_bench.tasks.retention import RetentionSettings
    from ccviz_bench.tasks.survival import FULL, FULL_BUDGET, run_case

    settings = RetentionSettings()
    made = make_case(case.index, words=settings.words, seed=settings.seed)
    prepared = prepare(lm.tokenizer, made.prompt, made.question_start, [made.answer_span])
    spec, budget = (FULL, FULL_BUDGET) if full else (parse_spec(case.policy), case.budget)
    trace = run_case(lm, prepared, spec, budget, settings.max_new_tokens).trace
    document = dict(
        title=f"retention case {made.index}: a {made.kind} document, its fact a {made.fact_type}",
        source=f"bench/results/retention.csv: case {made.index}, {case.policy} at J = {case.budget:.0%}",
        text=prepared.document,
        question=prepared.question,
        answer=made.answer,
        chat=True,
        cache_size=cache_size_for(case.budget, prepared.doc_tokens),
        max_new_tokens=settings.max_new_tokens,
    )
    return document, trace


def claims(step: Step, full: Any, runs: list[Any]) -> list[tuple[str, bool]]:
    """What ``step``'s words say of its runs' verdicts (``full``: the full cache's), each with whether it holds."""
    last = runs[-1] if runs else full
    said = {
        "cache": [],
        "answer": [("the full cache answers", full.answered)],
        "retention": [("the full cache answers", full.answered)],
        "surprise": [("the fact is kept", last.fate == "kept"), ("it answers", last.answered)],
        "context": [
            ("the full cache answers", full.answered),
            ("the fact is kept", last.fate == "kept"),
            ("it does not answer", not last.answered),
        ],
        "pinned": [("the window misses", not runs[0].answered if runs else False)],  # pinned: the step asks
    }[step.figure]
    if step.figure == "retention" and step.runs[-1] == "sliding":
        said += [("the window evicts the fact", last.fate == "evicted"), ("it misses", not last.answered)]
    return said


def story(lesson: Any) -> list[str]:
    """One line per recorded step: whether its runs show what its words say."""
    from ccviz.explain import run_verdict

    lines = []
    for number, step in enumerate(STEPS, start=1):
        if lesson.missing(step):
            continue
        answer = lesson.document(step.runs[0]).answer
        full, *runs = [run_verdict(lesson.traces[name], answer) for name in step.runs]
        missed = [claim for claim, holds in claims(step, full, runs) if not holds]
        lines.append(f"step {number} ({step.title}): " + (f"NOT: {', '.join(missed)}" if missed else "tells its story"))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="the model to record with (default: the embedded SmolLM2)")
    parser.add_argument("--step", type=int, action="append", default=[], help="only the runs of these steps (1-8)")
    parser.add_argument("--out", type=Path, default=LESSON_DIR, help="the lesson's folder")
    args = parser.parse_args(argv)
    if any(not 1 <= n <= len(STEPS) for n in args.step):
        parser.error(f"--step is 1 to {len(STEPS)}")

    from ccviz import load_model
    from ccviz.ui.lesson import load_lesson

    wanted = {run for n in args.step for run in (*STEPS[n - 1].runs, *STEPS[n - 1].tried)}
    recordings = [r for r in RECORDINGS if not wanted or r.name in wanted]
    lm = load_model(args.model)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / MANIFEST
    manifest = json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.exists() else {}
    if manifest.get("model") not in (None, lm.name):
        manifest = {}  # another model's recording: start again
    documents, runs = manifest.get("documents", {}), manifest.get("runs", {})
    started = time.perf_counter()
    for recording in recordings:
        began = time.perf_counter()
        if recording.document == SAMPLE:
            documents[SAMPLE] = sample_document(SAMPLE_FILE)
            trace = record_sample(lm, documents[SAMPLE], recording)
        else:
            documents[CASE], trace = record_case(lm, BENCH_CASE, full=recording.policy == "full")
        trace.save(args.out / f"{recording.name}.json")
        runs[recording.name] = f"{recording.name}.json"
        kb = (args.out / runs[recording.name]).stat().st_size / 1024
        print(f"{recording.name}: {time.perf_counter() - began:.1f} s, {len(trace.cycles)} refreshes, {kb:.0f} KB")
    seconds = round(time.perf_counter() - started, 1)
    made = dict(model=lm.name, commit=_commit(), date=datetime.date.today().isoformat(), seconds=seconds)
    manifest = made | {"documents": documents, "runs": runs}
    manifest_path.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"recorded {len(recordings)} runs in {seconds} s into {args.out}")
    print("\n".join(story(load_lesson(args.out))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
