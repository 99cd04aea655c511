"""Command line: ``python -m ccviz run|explain|policies|bench``.

Every user mistake ends with one line on stderr and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .choices import ALLOCATIONS, DEVICES, DTYPES, GRANULARITIES, POOLS, RECORDS
from .errors import CcvizError
from .fields import parse_value
from .plugins import load_plugins


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not usage + message
        raise CcvizError(message)


def _prog() -> str:
    """How this command was called: the console script, or ``python -m``."""
    return "ccviz" if Path(sys.argv[0]).name == "ccviz" else "python -m ccviz"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_prog(), description="KV-cache eviction laboratory")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="generate under a managed cache and print a summary")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="the prompt text")
    source.add_argument("--prompt-file", type=Path, help="read the prompt from a UTF-8 text file")
    asked = run.add_mutually_exclusive_group()
    asked.add_argument(
        "--question",
        help="a question about the prompt (the document), asked after it in the same turn; it and the turn's "
        "end are never evicted and take no place of J",
    )
    asked.add_argument("--question-file", type=Path, help="read the question from a UTF-8 text file")
    run.add_argument(
        "--expect",
        metavar="TEXT",
        help="the expected answer: print whether the output gives it (its words in order, case ignored) and, if "
        "not, whether and when the policy evicted it from the document, its rank and the cut-off. The full cache "
        "is not run beside it (that would double the run): the app's 'Beside the full cache' says whether it answers",
    )
    run.add_argument(
        "--protect-question",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the question apart from eviction (default); --no-protect-question streams it through the "
        "refreshes like the document (the paper's protocol)",
    )
    run.add_argument("--policy", required=True, help="eviction policy (see `python -m ccviz policies`)")
    run.add_argument("--cache-size", type=int, required=True, metavar="J", help="entries kept at each refresh")
    run.add_argument("--chunk-size", type=int, metavar="H", help="refresh every H tokens (default J/4)")
    run.add_argument("--frozen", type=parse_value, default="auto", metavar="N|auto", help="never-evicted prefix")
    run.add_argument("--recent", type=int, metavar="N", help="trailing entries always kept (default: policy's)")
    run.add_argument("--max-new-tokens", type=int, default=128, metavar="N")
    run.add_argument("--raw", action="store_true", help="no chat template: the prompt is used as it is")
    run.add_argument(
        "--model",
        help="local checkpoint folder, or gemma-3-270m (the extra gemma) (default: embedded SmolLM2-135M-Instruct)",
    )
    run.add_argument("--device", default="cpu", choices=DEVICES)
    run.add_argument("--dtype", default="float32", choices=DTYPES)
    run.add_argument("--seed", type=int, help="seed for sampling")
    run.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    run.add_argument("--temperature", type=float, default=1.0)
    run.add_argument("--top-p", type=float, default=1.0)
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="policy option (repeatable)")
    run.add_argument(
        "--record",
        default="policy",
        choices=RECORDS,
        help="scores kept in the trace: the policy's own, or also the cheap companion signals",
    )
    run.add_argument(
        "--record-reads",
        action="store_true",
        help="also record what each generated token read (last layer), for `explain TRACE --answer`",
    )
    run.add_argument(
        "--granularity",
        choices=GRANULARITIES,
        help="the unit a refresh keeps or evicts whole: a token, a word, a clause (split at , : ; too) or a "
        "sentence (default: the policy's)",
    )
    run.add_argument(
        "--left-context",
        type=int,
        metavar="K",
        help="word units: each word takes along up to K words before it in its clause (default: the policy's)",
    )
    run.add_argument(
        "--sentence-share",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="word units: this share of the scored places goes to the best whole sentences first, the rest by word",
    )
    run.add_argument(
        "--pool",
        default="max",
        choices=POOLS,
        help="a word's or sentence's score: the max or the mean of its tokens' scores",
    )
    run.add_argument(
        "--allocation",
        default="uniform",
        choices=ALLOCATIONS,
        help="the budget over layers and KV heads: the same J everywhere (uniform), shrinking with depth "
        "(pyramid, PyramidKV) or shared across each layer's KV heads (adaptive, Ada-KV)",
    )
    run.add_argument(
        "--pyramid-beta",
        type=float,
        default=20.0,
        metavar="BETA",
        help="pyramid: the last layer keeps (J - recent) / BETA scored entries, the first the rest of twice that mean",
    )
    run.add_argument("--pin", action="append", default=[], metavar="TEXT", help="never evict this phrase (repeatable)")
    run.add_argument(
        "--drop", action="append", default=[], metavar="TEXT", help="evict this phrase at once (repeatable)"
    )
    run.add_argument("--out", type=Path, help="save the trace as JSON")

    explain = sub.add_parser(
        "explain", help="why a token was kept or evicted at a refresh of a saved trace, or what the answer read"
    )
    explain.add_argument("trace", type=Path, help="a trace saved by `run --out` (or the app's download)")
    explain.add_argument("--refresh", type=int, metavar="R", help="the refresh (default: the last)")
    which = explain.add_mutually_exclusive_group(required=True)
    which.add_argument("--token", type=int, metavar="T", help="the token's original timestep")
    which.add_argument("--find", metavar="TEXT", help="the first token of the first place the text contains TEXT")
    which.add_argument(
        "--answer", action="store_true", help="what a generated token read most, and what was evicted beside it"
    )
    explain.add_argument(
        "--step",
        type=int,
        metavar="S",
        help="with --answer: the generated token, counted from 0 = the answer's first (the default), read by the "
        "pass that picked it (a trace saved by `run --record-reads`)",
    )
    explain.add_argument(
        "--model", help="the checkpoint folder or model name the trace was made with (default: the embedded model)"
    )
    explain.add_argument("--device", default="cpu", choices=DEVICES)
    explain.add_argument("--dtype", default="float32", choices=DTYPES)
    explain.add_argument("--json", action="store_true", help="print the whole explanation as JSON")

    sub.add_parser("policies", help="list the eviction policies")
    from ccviz_bench.command import add_parser as add_bench_parser

    add_bench_parser(sub)
    return parser


def _read_text(text: str | None, path: Path | None) -> str | None:
    """``text``, else the UTF-8 file at ``path`` (None: neither given)."""
    if text is not None or path is None:
        return text
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CcvizError(f"{path} is not UTF-8 text") from None
    except OSError as err:
        raise CcvizError(f"cannot read {path}: {err.strerror or err}") from None


def _parse_options(pairs: list[str]) -> dict[str, object]:
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise CcvizError(f"--option takes KEY=VALUE, got {pair!r}")
        options[key] = parse_value(raw)
    return options


class _ProgressBar:
    """A one-line progress bar on stderr, drawn only for a terminal and at most 10 times a second."""

    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, refreshes: int, processed: int, total: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.1:
            return
        self.last = now
        width = 30
        filled = int(width * processed / max(total, 1))
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {processed}/{total} tokens, {refreshes} refreshes"
        )
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 70 + "\r")


def _summary(trace) -> str:
    t = trace.timings
    kept = len(trace.cycles[-1].kept) if trace.cycles else len(trace.tokens)
    run = trace.run_config
    lines = [
        run.title(),
        f"policy {run.describe()} · {run.describe_budget()}",
        f"prompt {trace.prompt_length} tokens{_question_note(trace)}, "
        f"generated {len(trace.tokens) - trace.prompt_length} ({trace.stop_reason})",
        f"refreshes {len(trace.cycles)}, final cache {kept} entries, peak {trace.peak_cache_length} "
        f"({trace.peak_cache_bytes / 2**20:.1f} MiB of K/V)",
        f"time: prefill {t['prefill_seconds']:.2f} s, decode {t['decode_seconds']:.2f} s, "
        f"refresh {t['refresh_seconds']:.2f} s, total {t['total_seconds']:.2f} s",
    ]
    last = trace.cycles[-1] if trace.cycles else None
    if last is not None and last.num_layers:
        sizes = [len(last.kept_by(layer)) for layer in range(last.num_layers)]
        lines.insert(
            3,
            f"per layer: {sizes[0]} entries in the first, {sizes[-1]} in the last (of {last.num_layers}); "
            f"the final cache counts what any layer holds",
        )
    return "\n".join(lines)


def _verdict_line(trace, expected: str, out: Path | None) -> str:
    """The run's verdict (:func:`ccviz.explain.run_verdict`, without the full cache) and the command that
    explains the refresh that evicted the answer, or shows what the answer read."""
    from .explain import run_verdict

    verdict = run_verdict(trace, expected)
    assert verdict is not None, "_cmd_run checks --expect before the run"
    saved = f"{_prog()} explain {out}" if out is not None else None
    eviction = verdict.eviction
    if verdict.answered or verdict.fate == "absent":
        return verdict.text
    if eviction is not None and eviction.explainable:
        how = f"{saved} --refresh {eviction.refresh} --token {eviction.position}" if saved else "save it with --out"
        return f"{verdict.text} Explain that refresh: {how}"
    if verdict.fate == "kept":
        how = f"{saved} --answer" if saved and trace.answer_reads is not None else "run with --record-reads --out"
        return f"{verdict.text} ({how})"
    return verdict.text


def _question_note(trace) -> str:
    """How many of the prompt's tokens are the question asked apart (and the turn's end), and their fate."""
    start = trace.question_start
    if start is None:
        return ""
    fate = "kept apart from eviction" if trace.kept_question else "evictable"
    return f" (the last {trace.prompt_length - start} the question and the turn's end, {fate})"


def _cmd_policies() -> None:
    from .policies import POLICIES, press_policies

    presses = press_policies()
    width = max(len(name) for name in (*POLICIES, *presses))
    for name, cls in POLICIES.items():
        print(f"{name:<{width}}  {cls.summary}")
    for name in presses:  # their summaries would import kvpress (seconds): its docstrings say what each keeps
        print(f"{name:<{width}}  kvpress's {name.partition(':')[2]}, scored through its own score()")


def _save(trace, path: Path) -> None:
    try:
        trace.save(path)
    except OSError as err:
        raise CcvizError(f"cannot write {path}: {err.strerror or err}") from None


def _cmd_run(args: argparse.Namespace) -> None:
    from .engine import GenerationFailed, RunConfig, run_generation
    from .explain import expected_answer
    from .models import load_model

    prompt = _read_text(args.prompt, args.prompt_file)
    assert prompt is not None, "argparse requires --prompt or --prompt-file"
    question = _read_text(args.question, args.question_file)
    if question is not None and not question.strip():
        raise CcvizError("the question is empty: give a question, or none")
    if args.expect is not None and expected_answer(args.expect) is None:
        raise CcvizError(f"--expect {args.expect!r} holds no word to look for in the answer")
    # Every setting is checked here, before the model loads; the flags are named as its fields but these.
    same = {f.name: getattr(args, f.name) for f in dataclasses.fields(RunConfig) if hasattr(args, f.name)}
    own = {"policy_options": _parse_options(args.option), "chat": not args.raw, "do_sample": args.sample}
    config = RunConfig(**{**same, **own, "pin": tuple(args.pin), "drop": tuple(args.drop)})
    lm = load_model(args.model, device=args.device, dtype=args.dtype)
    bar = _ProgressBar()
    try:
        trace = run_generation(lm, prompt, config, progress=bar, question=question)
    except GenerationFailed as err:  # nothing computed is lost: the partial trace is saved where asked
        kept = ""
        if args.out is not None:
            _save(err.trace, args.out)
            kept = f"; its {len(err.trace.cycles)} completed refreshes are saved in {args.out}"
        raise CcvizError(f"the run failed part-way ({err}){kept}") from None
    finally:
        bar.close()
    print(trace.output_text)
    print("---")
    if args.expect is not None:
        print(_verdict_line(trace, args.expect, args.out))
    print(_summary(trace))
    if args.out is not None:
        _save(trace, args.out)
        print(f"trace saved to {args.out}")


def _cmd_explain(args: argparse.Namespace) -> None:
    from .explain import (
        answer_text,
        explain_token,
        explain_without_replay,
        explanation_json,
        explanation_text,
        matching_tokens,
    )
    from .models import load_model
    from .trace import Trace

    trace = Trace.load(args.trace)
    if args.step is not None and not args.answer:
        raise CcvizError("--step goes with --answer")
    if args.answer:
        if args.refresh is not None or args.json:
            raise CcvizError("--refresh and --json go with --token or --find, not --answer")
        print(answer_text(trace, 0 if args.step is None else args.step))
        return
    if not trace.cycles:
        raise CcvizError(f"{args.trace} has no refresh: nothing was ever kept or evicted")
    refresh = len(trace.cycles) - 1 if args.refresh is None else args.refresh
    if not 0 <= refresh < len(trace.cycles):
        raise CcvizError(f"--refresh must be 0 to {len(trace.cycles) - 1}, got {refresh}")
    note = ""
    token = args.token
    if args.find is not None:
        found = matching_tokens(trace, args.find, trace.cycles[refresh].step)
        if not found:
            raise CcvizError(f"nothing up to refresh {refresh} contains {args.find!r}")
        token = found[0]
        if len(found) > 1:
            note = (
                f"(the first of {len(found)} matching tokens: {', '.join(map(str, found[:12]))}; pick one with --token)"
            )
    explanation = explain_without_replay(trace, refresh, token)  # no model needed for these
    if explanation is None:
        explanation = explain_token(load_model(args.model, device=args.device, dtype=args.dtype), trace, refresh, token)
    print(explanation_json(explanation) if args.json else explanation_text(explanation, trace))
    if note and not args.json:
        print(note)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
        load_plugins()
        if args.command == "policies":
            _cmd_policies()
        elif args.command == "explain":
            _cmd_explain(args)
        elif args.command == "bench":
            from ccviz_bench.command import main as bench_main

            bench_main(args)
        else:
            _cmd_run(args)
    except CcvizError as err:
        print(f"ccviz: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ccviz: interrupted", file=sys.stderr)
        return 130
    return 0
