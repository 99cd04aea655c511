"""Needle maps and RULER-style tasks: the generators against their contract (deterministic, the needle at
the requested depth within one sentence, lengths within 5%), survival against a direct check on the
trace, the maps and difference maps against the rows, and the same rows from every way of dispatching."""

from __future__ import annotations

import importlib.util
import math
import re
from dataclasses import replace

import pandas as pd
import pytest

from ccviz import generate
from ccviz.cases.haystack import KINDS, RULER_TASKS, SENTENCE_TOKENS, TASKS, make_haystack_case, token_count
from ccviz.engine.budget import cache_size_for, check_budget
from ccviz.errors import CcvizError
from ccviz.prompts import encode_prompt
from ccviz_bench.dispatch import Workers, measure_cells, threads_per_worker
from ccviz_bench.metrics import summarise_rates
from ccviz_bench.needle_figures import needle_difference_figure, needle_map_figure, ruler_figure
from ccviz_bench.specs import PolicySpec, parse_spec, registered_specs
from ccviz_bench.tasks.needle import (
    RULER_VARIANTS,
    NeedleSettings,
    RulerSettings,
    measure_cell,
    needle_cells,
    ruler_specs,
    run_needle,
    run_ruler,
    summarise_map,
)


@pytest.fixture(scope="module")
def tokenizer(tiny):
    return tiny.tokenizer  # SmolLM2's


def _document_tokens(tokenizer, case) -> list[tuple[int, int]]:
    """Character span of every token of the document part of a case (the slow, explicit way)."""
    document = case.prompt[: case.question_start].rstrip()
    encoded = tokenizer(document, add_special_tokens=False, return_offsets_mapping=True)
    return [tuple(span) for span in encoded["offset_mapping"]]


@pytest.mark.parametrize("task", TASKS)
def test_generators_are_deterministic_per_seed_and_state_each_answer_only_in_the_needles(tokenizer, task):
    depth = 0.4 if task in ("needle", "multikey") else None
    one = make_haystack_case(tokenizer, task, 1200, depth, kind="identifier", seed=3)
    assert make_haystack_case(tokenizer, task, 1200, depth, kind="identifier", seed=3) == one
    other = make_haystack_case(tokenizer, task, 1200, depth, kind="identifier", seed=4)
    assert other.prompt != one.prompt and other.answers != one.answers
    document = one.prompt[: one.question_start]
    needles = [one.prompt[a:b] for a, b in one.needles]
    assert one.target in needles and (task == "variable_tracking" or one.answers[0] in one.target)
    for answer in one.answers:  # the hay never states an answer: only the needles do
        count = len(re.findall(rf"(?<![\w-]){re.escape(answer)}(?![\w-])", document))
        assert count == sum(needle.count(answer) for needle in needles) >= 1
    for a, b in one.required:  # what must survive lies inside a needle
        assert any(x <= a and b <= y for x, y in one.needles)
    assert one.prompt[one.question_start :].startswith("Question: ")


def test_the_hay_depends_on_length_trial_and_seed_only_and_down_a_column_only_the_needle_moves(tokenizer):
    top = make_haystack_case(tokenizer, "needle", 1000, 0.0)
    bottom = make_haystack_case(tokenizer, "needle", 1000, 1.0)
    strip = lambda case: case.prompt[: case.question_start].replace(case.target, "")  # noqa: E731
    assert top.target != bottom.target  # the kind is the same, the value is drawn per cell
    assert re.sub(r"\s+", " ", strip(top)).strip() == re.sub(r"\s+", " ", strip(bottom)).strip()
    assert make_haystack_case(tokenizer, "needle", 1000, 0.0, trial=1).prompt != top.prompt


@pytest.mark.parametrize("length", [500, 2000, 7500])
def test_the_needle_lands_at_the_requested_depth_within_one_sentence(tokenizer, length):
    for depth in (0.0, 0.167, 0.5, 0.833, 1.0):
        for kind in KINDS:
            case = make_haystack_case(tokenizer, "needle", length, depth, kind=kind)
            spans = _document_tokens(tokenizer, case)
            start = case.needles[0][0]
            first = next(i for i, (a, b) in enumerate(spans) if b > start)  # the needle's first token
            assert abs(first - depth * len(spans)) <= SENTENCE_TOKENS[1], (depth, kind, first, len(spans))
    assert make_haystack_case(tokenizer, "needle", length, 0.0).needles[0][0] == 0  # the very first sentence
    last = make_haystack_case(tokenizer, "needle", length, 1.0)
    assert last.needles[0][1] == last.question_start - 2  # the last sentence before the question


@pytest.mark.parametrize("task", TASKS)
def test_lengths_are_within_five_percent_of_the_requested_token_counts(tokenizer, task):
    for length in (500, 1000, 3500, 7500):
        case = make_haystack_case(tokenizer, task, length, 0.5 if task == "needle" else None)
        assert abs(token_count(tokenizer, case.prompt) - length) <= 0.05 * length


def test_variable_tracking_states_the_chain_in_order(tokenizer):
    case = make_haystack_case(tokenizer, "variable_tracking", 2000, seed=7)
    links = [case.prompt[a:b] for a, b in case.needles]
    names = case.answers
    assert links[0] == f"VAR {names[0]} = {links[0].split('= ')[1]}" and links[0].rstrip(".").split("= ")[1].isdigit()
    assert links[1:] == [f"VAR {b} = VAR {a}." for a, b in zip(names, names[1:])]
    assert [case.prompt[a:b] for a, b in case.required] == [link[:-1] for link in links]  # every link, whole
    value = links[0].rstrip(".").split("= ")[1]
    assert f"assigned the value {value}" in case.prompt[case.question_start :]


def test_bad_generator_arguments_fail_in_one_line(tokenizer):
    for kwargs, message in (
        (dict(task="haystack", length=500, depth=0.5), "no haystack task"),
        (dict(task="needle", length=500, depth=0.5, kind="colour"), "no needle kind"),
        (dict(task="needle", length=500), "needs a depth"),
        (dict(task="needle", length=500, depth=1.5), "between 0 and 1"),
        (dict(task="multivalue", length=60), "too short"),
    ):
        with pytest.raises(CcvizError, match=message):
            make_haystack_case(tokenizer, **kwargs)
    with pytest.raises(CcvizError, match="whole J"):
        NeedleSettings(budgets=(2.5,))
    with pytest.raises(CcvizError, match="tasks must be one of"):
        RulerSettings(tasks=("common_words",))


def test_a_budget_is_a_share_of_the_document_or_a_fixed_j():
    assert cache_size_for(0.25, 1000) == 250 and cache_size_for(512, 1000) == 512 and cache_size_for(1.0, 7) == 7
    assert cache_size_for(0.0001, 1000) == 1  # a share never rounds to an empty cache
    check_budget(512)
    with pytest.raises(CcvizError, match="whole J"):
        check_budget(2.5)


def test_survival_of_a_cell_equals_a_direct_check_on_its_trace(tiny):
    """The row's survival is what the trace's cache held when the question started, computed here from
    the prompt's characters by a slow token walk instead of the harness's span helpers."""
    tokenizer = tiny.tokenizer
    for policy, depth, task in (
        ("sliding", 0.0, "needle"),
        ("sliding", 1.0, "needle"),
        ("snapkv", 0.5, "needle"),
        ("tova", None, "variable_tracking"),
        ("h2o", None, "multivalue"),
    ):
        cell = needle_cells([PolicySpec(policy)], replace(NeedleSettings.quick(), lengths=(400,), depths=(0.5,)))[1]
        cell = replace(cell, depth=depth, task=task)
        row = measure_cell(tiny, cell)
        case = cell.case(tokenizer)
        trace = generate(
            tiny, case.prompt, policy=policy, cache_size=row["cache_size"], max_new_tokens=case.max_new_tokens
        )
        text_start = encode_prompt(tokenizer, case.prompt, chat=True).template_prefix
        offsets = tokenizer(case.prompt, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        required = [
            text_start + i
            for i, (a, b) in enumerate(offsets)
            if any(a < end and b > start for start, end in case.required)
        ]
        question = text_start + next(i for i, (a, b) in enumerate(offsets) if b > case.question_start)
        assert row["question_start"] == question and row["required_tokens"] == len(required)
        cached = _cached(trace, question)
        assert row["survived"] == int(all(t in cached for t in required)), (policy, depth, task)
        assert row["kept_share"] == pytest.approx(sum(t in cached for t in required) / len(required), abs=1e-4)


def _cached(trace, timestep: int) -> set[int]:
    """The slow way: replay the refreshes' kept sets up to ``timestep``."""
    held = set(range(timestep))
    for cycle in trace.cycles:
        if cycle.step > timestep:
            break
        held = set(cycle.kept) | set(range(cycle.step, timestep))
    return held


@pytest.fixture(scope="module")
def quick_map(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("needle")
    specs = [PolicySpec("sliding"), PolicySpec("snapkv")]
    summary = run_needle(tiny, specs, NeedleSettings.quick(), out, log=lambda _: None)
    return out, specs, summary, pd.read_csv(out / "needle.csv")


def test_the_full_cache_keeps_every_needle_and_the_maps_plot_the_rows(quick_map):
    out, specs, summary, rows = quick_map
    settings = NeedleSettings.quick()
    assert len(rows) == settings.cells_per_policy * (len(specs) + 1) - settings.cells_per_policy * (
        len(settings.budgets) - 1
    )
    full = rows[rows.policy == "full"]
    assert len(full) == len(settings.lengths) * len(settings.depths) and full.survived.eq(1).all()
    assert set(rows.kind) <= set(KINDS)
    figure = needle_map_figure(summary, "sliding", 0.5)
    heat = figure.data[0]
    assert list(heat.x) == [str(n) for n in settings.lengths] and list(heat.y) == ["0%", "50%", "100%"]
    for i, depth in enumerate(settings.depths):
        for j, length in enumerate(settings.lengths):
            row = rows[(rows.policy == "sliding") & (rows.depth == depth) & (rows.length == length)].iloc[0]
            assert heat.z[i][j] == row.survived and heat.text[i][j] == f"{row.survived}/1"
    difference = needle_difference_figure(summary, "sliding", "full", 0.5).data[0]
    assert [[v for v in r] for r in difference.z] == [[v - 1 for v in r] for r in heat.z]  # the full cache keeps all
    against = needle_difference_figure(summary, "sliding", "snapkv", 0.5).data[0]
    snap = needle_map_figure(summary, "snapkv", 0.5).data[0]
    assert [[a for a in r] for r in against.z] == [[a - b for a, b in zip(x, y)] for x, y in zip(heat.z, snap.z)]
    assert "%{customdata[0]}" in figure.data[0].hovertemplate and heat.customdata[0][0][0].endswith("%")


def test_a_rerun_resumes_and_refuses_other_settings(quick_map, tiny):
    out, specs, summary, rows = quick_map
    lines: list[str] = []
    again = run_needle(tiny, specs, NeedleSettings.quick(), out, log=lines.append)
    assert lines[0] == f"needle: 0 of {len(rows)} cells to measure" and again.equals(summary)
    with pytest.raises(CcvizError, match="other settings"):
        run_needle(tiny, specs, replace(NeedleSettings.quick(), seed=1), out, log=lines.append)


def test_worker_processes_give_the_rows_this_process_gives(quick_map, tmp_path):
    out, specs, _, rows = quick_map
    run_needle(
        None,
        specs,
        NeedleSettings.quick(),
        tmp_path,
        workers=Workers(count=2),
        model_args={"name_or_path": "tiny-random"},
        log=lambda _: None,
    )
    _same_rows(rows, pd.read_csv(tmp_path / "needle.csv"))


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> None:
    key = ["task", "length", "depth", "trial", "policy", "budget"]
    ordered = [frame.drop(columns="seconds").sort_values(key).reset_index(drop=True) for frame in (a, b)]
    pd.testing.assert_frame_equal(*ordered)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is an optional extra (pip install 'ccviz[cluster]')"
)
def test_a_local_ray_instance_gives_the_rows_this_process_gives(quick_map, tmp_path):
    out, specs, _, rows = quick_map
    run_needle(
        None,
        specs,
        NeedleSettings.quick(),
        tmp_path,
        workers=Workers(count=2, ray="local"),
        model_args={"name_or_path": "tiny-random"},
        log=lambda _: None,
    )
    _same_rows(rows, pd.read_csv(tmp_path / "needle.csv"))


def _flaky(lm, cell):
    if cell == "bad":
        raise ValueError("this cell cannot be measured")
    return {"cell": cell}


def test_a_failed_cell_loses_no_other_row_and_says_so_in_one_line(tiny):
    rows, lines = [], []
    with pytest.raises(
        CcvizError, match=r"1 of 3 cells failed \(first: bad: ValueError: this cell cannot be measured\)"
    ):
        measure_cells(
            ["a", "bad", "c"], _flaky, rows.append, lm=tiny, model_args={}, workers=Workers(), log=lines.append
        )
    assert rows == [{"cell": "a"}, {"cell": "c"}] and lines == ["failed: bad: ValueError: this cell cannot be measured"]


def test_workers_never_oversubscribe_the_cores():
    assert threads_per_worker(1, 2, cores=2) == 1 and threads_per_worker(4, 2, cores=2) == 1
    assert threads_per_worker(4, 2, cores=16) == 4 and threads_per_worker(8, 3, cores=16) == 5
    assert threads_per_worker(2, 8, cores=2) == 1  # never zero


def test_ruler_tasks_run_for_every_policy_with_the_full_cache_as_ceiling(tiny, tmp_path):
    summary = run_ruler(tiny, [PolicySpec("sliding")], RulerSettings.quick(), tmp_path, log=lambda _: None)
    rows = pd.read_csv(tmp_path / "ruler.csv")
    assert set(rows.task) == set(RULER_TASKS) and set(rows.policy) == {"full", "sliding"}
    assert rows[rows.policy == "full"].survived.eq(1).all()
    assert (rows.depth.isna()).all()  # RULER's needles are placed by the seed
    pooled = summarise_rates(rows, ["task", "policy", "budget"])
    bars = ruler_figure(pooled).data  # one panel per task, one bar series per budget in each
    assert [b.name for b in bars] == ["J = 50% of the document"] * len(RULER_TASKS)
    assert [b.showlegend for b in bars] == [True] + [False] * (len(RULER_TASKS) - 1)
    sliding = pooled[pooled.policy == "sliding"]
    assert [list(b.x) for b in bars] == [[rate] for rate in sliding.survival] and all(
        list(b.y) == ["sliding"] for b in bars
    )
    ceilings = [shape.x0 for shape in ruler_figure(pooled).layout.shapes]
    assert ceilings == list(pooled[pooled.policy == "full"].survival) == [1.0] * len(RULER_TASKS)
    kept = ruler_figure(pooled, "kept_share").data  # the mean share per case, from the rows themselves
    by_case = rows[rows.policy == "sliding"].groupby("task", sort=False).kept_share.mean()
    assert [list(b.x) for b in kept] == [[pytest.approx(by_case[task])] for task in sliding.task]
    assert [[row[0] for row in b.customdata] for b in kept] == [[n] for n in sliding.n]
    assert set(summary.columns) >= {"task", "policy", "budget", "length", "survival", "survival_low", "answer_share"}


def test_ruler_defaults_add_a_word_unit_and_a_recency_hybrid_that_round_trip_as_labels():
    # the rows are keyed by label: a label that did not parse back to its spec could not be resumed
    assert ruler_specs() == [*registered_specs(), *RULER_VARIANTS]
    assert [parse_spec(v.label) for v in RULER_VARIANTS] == list(RULER_VARIANTS)
    assert [v.run_settings(100) for v in RULER_VARIANTS] == [{"granularity": "word", "pool": "max"}, {"recent": 25}]


def test_map_summary_pools_trials_with_wilson_intervals():
    rows = pd.DataFrame(
        {
            "policy": ["snapkv"] * 4,
            "budget": [0.25] * 4,
            "length": [500] * 4,
            "depth": [0.5] * 4,
            "survived": [1, 1, 1, 0],
            "answered": [1, 0, 0, 0],
            "answer_share": [1, 0, 0, 0],
            "kept_share": [1, 1, 1, 0.5],
            "cache_size": [120] * 4,
            "seconds": [1.0] * 4,
        }
    )
    (cell,) = summarise_map(rows).itertuples()
    assert (cell.n, cell.survived, cell.survival, cell.answered) == (4, 3, 0.75, 1)
    assert cell.survival_low == pytest.approx(0.3006, abs=1e-3) and cell.survival_high == pytest.approx(
        0.9544, abs=1e-3
    )


def test_bench_report_draws_one_svg_map_per_policy(quick_map, tmp_path):
    from ccviz_bench.plots import write_plots
    from ccviz_bench.results import load_results

    out, specs, summary, rows = quick_map
    written = {path.name: path.read_text() for path in write_plots(load_results(out), tmp_path)}
    assert {"needle-full.svg", "needle-sliding.svg", "needle-snapkv.svg"} <= set(written)
    sliding = written["needle-sliding.svg"]
    cells = summary[summary.policy == "sliding"]
    assert sliding.count("<rect") == 1 + len(cells) and "Needle survival: sliding at J = 50%" in sliding
    labels = re.findall(r'fill="white">(\d+/\d+)</text>', sliding)
    assert sorted(labels) == sorted(f"{int(k)}/{int(n)}" for k, n in zip(cells.survived, cells.n))


def test_a_partial_map_leaves_unmeasured_cells_blank_and_without_hover():
    cell = dict(
        policy="tova",
        budget=0.25,
        n=1,
        answered=0,
        accuracy=0.0,
        accuracy_low=0.0,
        accuracy_high=0.79,
        survival_low=0.0,
        survival_high=0.79,
        cache_size_mean=120.0,
    )
    summary = pd.DataFrame(
        [
            {**cell, "length": 500, "depth": 0.0, "survived": 1, "survival": 1.0},
            {**cell, "length": 500, "depth": 1.0, "survived": 0, "survival": 0.0},
            {**cell, "length": 1000, "depth": 0.0, "survived": 0, "survival": 0.0},  # (1000, 100%) not measured yet
        ]
    )
    heat = needle_map_figure(summary, "tova", 0.25).data[0]
    assert [list(r) for r in heat.text] == [["1/1", "0/1"], ["0/1", ""]] and heat.hoverongaps is False
    assert math.isnan(heat.z[1][1]) and list(heat.customdata[1][1]) == ["", "", ""]
    difference = needle_difference_figure(summary, "tova", "tova", 0.25).data[0]
    assert [list(r) for r in difference.text] == [["+0%", "+0%"], ["+0%", ""]]
