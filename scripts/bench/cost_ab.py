"""Counter-causal refresh cost of two checkouts, interleaved in one run: does a change slow the hot path?

Two revisions (A, the baseline, and B) are unpacked from git (``.`` is this working tree as it stands) and
each gets one long-lived child process that imports *its own* ccviz and loads the model once. The parent
then alternates them, one at a time, for ``--rounds`` rounds (A B A B ...): in a round a child times, for
each case, one plain forward over the n tokens (``logits_to_keep=1``, as generate's prefill) and then the
case right after it. A case is ``VARIANT:SCORE``, timed as ``counter_causal_surprise`` (the causal pass
included, as a policy pays it on a prompt), or ``causal`` (``causal_pass`` alone, the K/V and H^(L-1)).

Each case is reported as its ratio to the forward it was paired with (the median over rounds), per
checkout, and B/A of those medians: a ratio to a forward timed in the same process a moment before
survives a noisy, shared machine far better than seconds do, and alternating the checkouts spreads any
drift of the machine over both. Medians of the seconds are printed too (a change of the forward itself
shows there). Before timing, each child computes every case's scores once, and the report says whether
A and B gave the same scores (bit for bit, or the largest difference).

Only the public functions of ``ccviz.scoring`` and ``ccviz.models.load_model`` are used, so any revision
that has them can be measured. Run from the repository root:

    python scripts/bench/cost_ab.py --against 85706cf            # 85706cf (A) against this working tree (B)
    python scripts/bench/cost_ab.py --against 85706cf --rev HEAD --n 1280 --rounds 7 --threads 2
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
WORKING_TREE = "."
DEFAULT_CASES = ("fast:logit", "full:logit")
CLOCKS = {"wall": "wall clock", "cpu": "process CPU time (user + system: waiting for a shared core left out)"}


# --- the child: one checkout's ccviz, driven over stdin/stdout -------------------------------------------------


def child(checkout: Path, n: int, cases: list[str], threads: int, model_name: str | None) -> None:
    """Load the model with ``checkout``'s ccviz, answer the scores once, then one JSON line of timings per
    ``round`` line read from stdin."""
    sys.path.insert(0, str(checkout))
    import torch

    import ccviz
    from ccviz.models import load_model
    from ccviz.scoring import causal_pass, counter_causal_surprise

    if not Path(ccviz.__file__).resolve().is_relative_to(checkout.resolve()):
        raise SystemExit(f"cost_ab: the child imported {ccviz.__file__}, not the ccviz of {checkout}")
    torch.set_num_threads(threads)
    lm = load_model(model_name)
    from pydoc_data.topics import topics  # the cost probe's long document: timings do not depend on the text

    ids = torch.tensor(
        [lm.tokenizer(" ".join(topics[k] for k in sorted(topics)), add_special_tokens=False)["input_ids"][:n]]
    )
    if ids.shape[1] < n:
        raise SystemExit(f"cost_ab: the document has only {ids.shape[1]} tokens, fewer than --n {n}")
    pos = torch.arange(n)[None]
    on_device = {"input_ids": ids.to(lm.device), "position_ids": pos.to(lm.device)}

    def run(case: str) -> Any:
        if case == "causal":
            return causal_pass(lm.model, ids, pos)
        variant, score = case.split(":")
        return counter_causal_surprise(lm.model, ids, variant=variant, score=score)

    def forward() -> None:
        with torch.inference_mode():
            lm.model(**on_device, logits_to_keep=1)

    scores = {case: run(case).tolist() for case in cases if case != "causal"}  # also installs ccviz's hooks
    forward()  # warm-up: allocation and kernel choice
    _answer({"ids": ids[0].tolist(), "scores": scores, "torch": torch.__version__, "threads": torch.get_num_threads()})
    for line in sys.stdin:
        if line.strip() != "round":
            break
        timings = {}
        for case in cases:
            (forward_wall, forward_cpu), (case_wall, case_cpu) = _seconds(forward), _seconds(lambda c=case: run(c))
            timings[case] = {"wall": (forward_wall, case_wall), "cpu": (forward_cpu, case_cpu)}
        _answer(timings)


def _seconds(fn) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds of one call of ``fn``."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _answer(message: object) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


# --- the parent: checkouts, alternation, report ----------------------------------------------------------------


def git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"cost_ab: git {' '.join(args)} failed: {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout.strip()


def describe(rev: str) -> str:
    """The short commit of ``rev``; for the working tree, HEAD's, marked ``+changes`` when it differs."""
    if rev != WORKING_TREE:
        return git("rev-parse", "--short", f"{rev}^{{commit}}")
    head = git("rev-parse", "--short", "HEAD")
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def unpack(rev: str, into: Path) -> Path:
    """``rev``'s tree in the folder ``into``, one per checkout (A and B may be the same revision: an A/A run
    shows the machine's noise); git archive, so nothing is checked out in this repository."""
    if rev == WORKING_TREE:
        return ROOT
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"cost_ab: cannot unpack {rev!r}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


class Checkout:
    """One revision's child process."""

    def __init__(self, label: str, rev: str, folder: Path, args: argparse.Namespace) -> None:
        self.label, self.commit = label, describe(rev)
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(folder),
            "--n",
            str(args.n),
            "--cases",
            ",".join(args.cases),
            "--threads",
            str(args.threads),
        ]
        if args.model:
            command += ["--model", args.model]
        env = {**os.environ, "PYTHONPATH": str(folder)}
        self.process = subprocess.Popen(
            command, cwd=folder, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.timings: list[dict[str, dict[str, list[float]]]] = []

    def read(self) -> Any:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"cost_ab: the child of {self.label} ({self.commit}) ended early (see its error above)")
        return json.loads(line)

    def round(self) -> None:
        self.process.stdin.write("round\n")
        self.process.stdin.flush()
        self.timings.append(self.read())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()

    def median(self, case: str, what: str, clock: str) -> float:
        """Median over rounds of the forward's seconds, the case's seconds, or their ratio, on ``clock``."""
        pick = {"forward": lambda f, c: f, "case": lambda f, c: c, "ratio": lambda f, c: c / f}[what]
        return statistics.median(pick(*t[case][clock]) for t in self.timings)


def same_scores(a: list[float], b: list[float]) -> str:
    if a == b:
        return "identical"
    diff = max(abs(x - y) for x, y in zip(a, b) if x != y)
    return f"max |diff| {diff:.3g} ({sum(x != y for x, y in zip(a, b))} of {len(a)} differ)"


def this_cpu() -> str:
    """The processor's name, as the harness's provenance gives it (imported late: each child imports its own ccviz)."""
    from ccviz_bench.timing import cpu_name

    return cpu_name()


def report(a: Checkout, b: Checkout, ready: dict[str, Any], args: argparse.Namespace, minutes: float) -> None:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(
        f"# counter-causal cost, A/B interleaved: A = {a.commit}, B = {b.commit}; {when}; {this_cpu()}, "
        f"{os.cpu_count()} cores, torch {ready['torch']} ({ready['threads']} threads)"
    )
    print(
        f"# n = {args.n}, {args.rounds} rounds alternating A B, each case paired with a forward just before it "
        f"(logits_to_keep=1); medians over rounds; {minutes:.1f} min"
    )
    for clock, name in CLOCKS.items():
        print(f"{name}:")
        print(
            f"{'case':>12} {'A forward s':>11} {'A case s':>9} {'A x fwd':>8} {'B forward s':>11} {'B case s':>9} "
            f"{'B x fwd':>8} {'B/A':>6}  scores B vs A"
        )
        for case in args.cases:
            ra, rb = a.median(case, "ratio", clock), b.median(case, "ratio", clock)
            check = same_scores(ready["A"]["scores"][case], ready["B"]["scores"][case]) if case != "causal" else "-"
            print(
                f"{case:>12} {a.median(case, 'forward', clock):>11.3f} {a.median(case, 'case', clock):>9.3f} "
                f"{ra:>7.3f}x {b.median(case, 'forward', clock):>11.3f} {b.median(case, 'case', clock):>9.3f} "
                f"{rb:>7.3f}x {rb / ra:>6.3f}  {check}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="REV", help="the baseline revision A (required)")
    parser.add_argument("--rev", default=WORKING_TREE, metavar="REV", help="revision B (default: this working tree)")
    parser.add_argument("--n", type=int, default=1280, help="tokens (default 1280)")
    parser.add_argument("--rounds", type=int, default=5, help="alternations A B (default 5)")
    parser.add_argument(
        "--cases",
        default=",".join(DEFAULT_CASES),
        help=f"comma-separated VARIANT:SCORE or 'causal' (default {','.join(DEFAULT_CASES)})",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per child (default 1)")
    parser.add_argument("--model", help="local checkpoint folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for case in args.cases:
        if case != "causal" and len(case.split(":")) != 2:
            parser.error(f"a case is VARIANT:SCORE or 'causal', got {case!r}")
    for name in ("n", "rounds", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.child:
        child(args.child, args.n, args.cases, args.threads, args.model)
        return
    if not args.against:
        parser.error("--against REV is required (the baseline revision)")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cost_ab_") as tmp:
        a = Checkout("A", args.against, unpack(args.against, Path(tmp) / "A"), args)
        b = Checkout("B", args.rev, unpack(args.rev, Path(tmp) / "B"), args)
        try:
            ready = {"A": a.read(), "B": b.read()}  # both loaded the model and warmed up
            if ready["A"]["ids"] != ready["B"]["ids"]:
                raise SystemExit("cost_ab: the two checkouts tokenised the document differently")
            ready.update(torch=ready["B"]["torch"], threads=ready["B"]["threads"])
            for index in range(args.rounds):
                a.round()
                b.round()
                print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            a.close()
            b.close()
    report(a, b, ready, args, (time.perf_counter() - started) / 60)


if __name__ == "__main__":
    main()
