"""The reader's results (ccviz_bench.digest) on hand-built rows whose answers are known: the protocol a model is
read under, the leaders, the claim's verdicts and the headline."""

from __future__ import annotations

import pandas as pd

from ccviz_bench.digest import MAIN, ModelResults, answers_table, claim_frame, families_table, headline, protocol_table

CASES = 20


def _rows(answers: dict[str, list[int]], budgets=(0.25,)) -> pd.DataFrame:
    """Retention rows: each label answers the cases listed (1) and misses the rest, at every budget."""
    records = [{"case": case, "policy": "full", "budget": 1.0, "answered": 1, "survived": 1} for case in range(CASES)]
    for label, answered in answers.items():
        for budget in budgets:
            for case in range(CASES):
                hit = int(case in answered)
                records.append({"case": case, "policy": label, "budget": budget, "answered": hit, "survived": hit})
    return pd.DataFrame(records)


def _model(rows: pd.DataFrame) -> ModelResults:
    return ModelResults("Tiny", "nowhere", {"retention": rows, "meta": {}})


def _evictable(answers: dict[str, list[int]]) -> dict[str, list[int]]:
    return {
        f"{spec}:protect_question=False" if ":" not in spec else f"{spec},protect_question=False": hit
        for spec, hit in answers.items()
    }


SPREAD = {spec: list(range(i % 5)) for i, spec in enumerate(MAIN)} | {
    "kvzip": list(range(12)),
    "h2o": [0],
    "tova": [0, 1],
    "counter_causal": list(range(10)),
    "counter_causal_fast": list(range(9)),
    "counter_causal:paper=True": [],
    "counter_causal_fast:paper=True": [],
}


def test_a_model_is_read_under_the_question_kept_apart_only_once_every_main_policy_has_it_at_every_budget():
    evictable = _evictable(SPREAD)
    assert not _model(_rows(evictable)).protect
    partly = _rows(evictable | {"kvzip": list(range(12))})
    assert not _model(partly).protect
    both = _rows(evictable | SPREAD)
    assert _model(both).protect and _model(both).label("h2o") == "h2o"
    assert _model(_rows(evictable)).label("h2o") == "h2o:protect_question=False"


def test_the_leader_is_bold_and_named_and_the_full_cache_is_the_ceiling():
    text = answers_table([_model(_rows(SPREAD | _evictable(SPREAD)))])
    assert text.startswith("KVzip answers most.")
    assert "| KVzip | **60%** |" in text
    assert "| Full cache (the ceiling) | 100% |" in text


def test_the_claim_holds_where_ours_answers_more_and_is_reversed_where_the_paper_form_answers_fewer():
    claims = claim_frame([_model(_rows(SPREAD | _evictable(SPREAD)))])
    answered = claims[claims.measure == "answered"].set_index(["spec", "rival"]).verdict
    assert answered[("counter_causal", "h2o")] == "holds"  # +9 / -0: p = 0.004
    assert answered[("counter_causal:paper=True", "h2o")] == "not shown"  # +0 / -1
    lines = headline([_model(_rows(SPREAD | _evictable(SPREAD)))], "chart.svg", "results.md").splitlines()
    assert lines[0].startswith(f"ccviz measures answers, not only survival: {CASES} cases")
    assert any("KVzip answers 60%" in line for line in lines)
    assert lines[-1] == "![Answers against budget for the main policies, on both models](chart.svg)"


def test_the_protocol_table_pairs_each_spec_with_its_evictable_twin_on_complete_cells_only():
    kept = SPREAD | {"h2o": list(range(8)), "tova": [0, 1, 2]}
    text = protocol_table([_model(_rows(kept | _evictable(SPREAD)))])
    assert "| H2O heavy hitters | J=25% | 20 | 40% | 5% | +7 / -0 (p 0.016) |" in text
    assert text.startswith("Tiny: with the question kept apart, significantly more answers (p < 0.05) for H2O")
    assert (
        "- H2O heavy hitters: evicting the question cost it 7 answers at J=25% (+7 / -0 with it kept, p 0.016; " in text
    )
    assert "- TOVA: evicting the question cost it 1 answer at J=25% (+1 / -0 with it kept, p 1; not" in text
    assert "- KVzip: evicting the question changed no count at J=25% (+0 / -0 with it kept, p 1; not" in text
    assert protocol_table([_model(_rows(_evictable(SPREAD)))]) == ""


def _slow_frontier(points: pd.DataFrame) -> list[bool]:
    """A point is on the frontier unless another answers at least as many at no more cost, better in one."""
    rows = list(zip(points.answered, points.cost))
    return [
        not any(a2 >= a and c2 <= c and (a2 > a or c2 < c) for a2, c2 in rows)
        for a, c in rows
    ]  # fmt: skip


def test_the_frontier_is_the_undominated_points_of_each_budget_and_a_policy_without_a_cost_is_left_out():
    from ccviz_bench.frontier import frontier_points, on_frontier

    rates = pd.DataFrame(
        {
            "spec": ["sliding", "tova", "kvzip", "counter_causal_fast", "keydiff", "sliding", "kvzip", "snapkv"],
            "budget": [0.25] * 5 + [0.5] * 3,
            "answered": [0.19, 0.19, 0.43, 0.24, 0.10, 0.48, 0.68, 0.40],
            "cases": [100] * 8,
        }
    )
    efficiency = pd.DataFrame(
        {
            "policy": ["sliding", "tova", "kvzip", "counter_causal_fast", "keydiff"],
            "refresh_ratio_n1024": [5e-6, 8e-6, 3.05, 0.016, 0.004],
        }
    )
    points = frontier_points(rates, efficiency)
    assert "snapkv" not in set(points.spec)  # no cost measured: not placed
    quarter = points[points.budget == 0.25]
    assert dict(zip(quarter.spec, quarter.frontier)) == {
        "sliding": True,  # the cheapest
        "tova": False,  # answers no more than sliding, costs more
        "kvzip": True,  # answers most
        "counter_causal_fast": True,
        "keydiff": False,
    }
    for _, group in points.groupby("budget"):
        assert on_frontier(group).tolist() == _slow_frontier(group)


def test_each_family_is_tabled_side_by_side_and_a_finding_on_one_family_only_is_named():
    records = _model(_rows(SPREAD))
    prose_answers = {"sliding": list(range(10)), "kvzip": list(range(3)), "counter_causal_fast": list(range(9))}
    prose = ModelResults("Tiny", "elsewhere", {"retention": _rows(prose_answers), "meta": {}})
    text = families_table([records], [prose])
    assert text.startswith("Tiny, question kept apart (the field's protocol). Answering most: at J=25%, KVzip on ")
    assert "records, Sliding window on prose." in text
    # by clause: +9 / -0 against recency on records (p 0.004), +0 / -1 on prose; KVzip answers 12 / 3.
    assert "| Counter-causal surprise (fast) · by clause | 45% | 45% |" in text
    assert "| Full cache (the ceiling) | 100% | 100% |" in text
    assert "- Counter-causal surprise (fast) · by clause against recency: holds on records; not shown on prose" in text
    assert "- KVzip against recency: holds on records; reversed on prose" in text  # +12 / -0, then +0 / -7
    assert "Sliding window | KVzip" not in text  # the two references are paired once
    assert "Expected attention" not in text  # measured on records only: not a row of the comparison
    assert families_table([records], []) == ""


def test_a_pair_is_pooled_only_over_the_budgets_both_families_measured():
    records = _model(_rows({"sliding": [], "kvzip": list(range(12))}, budgets=(0.25, 0.5)))
    prose_rows = pd.concat(
        [_rows({"sliding": [], "kvzip": list(range(6))}), _rows({"sliding": []}, budgets=(0.5,))]
    ).drop_duplicates(["case", "policy", "budget"])
    text = families_table([records], [ModelResults("Tiny", "elsewhere", {"retention": prose_rows, "meta": {}})])
    # KVzip on prose at J=25% only: records pooled over J=25% alone (+12 / -0), not both budgets (+24 / -0)
    assert "| KVzip | recency | J=25% | +12 / -0 (p 0.00049) holds | +6 / -0 (p 0.031) holds |" in text
    assert "| KVzip | 60% | 30% | 60% | - |" in text


def test_a_budget_measured_on_some_cases_only_is_not_pooled():
    records = _model(_rows({"sliding": [], "kvzip": list(range(12))}, budgets=(0.25, 0.5)))
    partial = _rows({"sliding": [], "kvzip": list(range(6))}, budgets=(0.25, 0.5))
    partial = partial[~((partial.policy == "kvzip") & (partial.budget == 0.5) & (partial.case >= 5))]
    text = families_table([records], [ModelResults("Tiny", "elsewhere", {"retention": partial, "meta": {}})])
    assert "| KVzip | recency | J=25% | +12 / -0 (p 0.00049) holds | +6 / -0 (p 0.031) holds |" in text
    assert "| KVzip | 60% | 30% | 60% | 100% (n=5) |" in text
