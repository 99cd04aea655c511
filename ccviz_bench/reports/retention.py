"""The rare-fact retention task's tables: answers and survival per budget, pairings against recency and against
each default, the defaults rule, the diagnosis of why a kept fact goes unanswered, and the breakdown."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..diagnosis import summarise_diagnosis
from ..pairing import default_decision, paired_with, paired_with_defaults
from ..registry import Frames
from ..specs import FULL, evicting
from ..tables import (
    markdown_table,
    number_text,
    percent_text,
    pivot,
    protocol_pairing,
    protocol_text,
    rate_table,
    sign_cell,
)


def retention_tables(summary: pd.DataFrame, rows: pd.DataFrame | None = None) -> str:
    """Answers, then survival (the diagnosis), per policy x budget; given the measured rows, also the
    breakdown by fact and the paired tests on answers."""
    measured = evicting(summary)
    accuracy, accuracy_count = rate_table(measured, "accuracy")
    survival, survival_count = rate_table(measured, "survival")
    full = summary[summary.policy == FULL]
    ceiling = (
        percent_text(full.accuracy.iloc[0], full.accuracy_low.iloc[0], full.accuracy_high.iloc[0]) if len(full) else "-"
    )
    asked = protocol_text(measured.policy)
    tables = (
        f"Answers (the model's greedy answer contains the fact), {accuracy_count}, Wilson 95% "
        f"interval, {asked}; full-cache ceiling on the same cases: **{ceiling}**:\n\n{markdown_table(accuracy)}\n\n"
        f"Fact survival, the diagnosis (all of the fact's tokens cached when the question is read), "
        f"{survival_count}, {asked}:\n\n{markdown_table(survival)}"
    )
    if rows is None:
        return tables
    extras = [retention_pairing(rows), retention_diagnosis(rows), retention_breakdown(rows), protocol_pairing(rows)]
    return "\n\n".join([tables, *filter(None, extras)])


REFERENCES = ("sliding", "kvzip")  # what every policy is paired against: recency, and the policy that answers most


def retention_pairing(rows: pd.DataFrame) -> str:
    """Paired sign tests on answers: every policy against each of the :data:`REFERENCES` (per budget, and over
    case x budget pooled), and each variant against its policy's default; empty when none can be paired."""
    parts, asked = [], protocol_text(rows.policy)
    for reference in REFERENCES:
        against = paired_with(rows, reference)
        against = against[against.policy != against.default]
        if against.empty:
            continue
        pooled = paired_with(rows, reference, case=("case", "budget"), by=()).set_index("policy")
        table = pivot(against, sign_cell, lambda b: f"J={b:.0%}")
        table["pooled"] = [sign_cell(pooled.loc[label]) for label in table["policy"]]
        parts.append(
            f"Answers against `{reference}` under the same protocol on the same cases: answered where it did not"
            f" / not where it did (exact sign test; pooled: case x budget), {asked}:\n\n{markdown_table(table)}"
        )
    paired = paired_with_defaults(rows, measure="answered")
    variants = paired[(paired.policy != paired.default) & (paired.cases > 0)]
    if not variants.empty:
        frame = pd.DataFrame(
            {
                "policy": variants.policy,
                "budget": variants.budget.map(lambda b: f"J={b:.0%}"),
                "default": variants.default,
                "cases": variants.cases,
                "answered / not vs default": [sign_cell(r) for r in variants.itertuples(index=False)],
            }
        )
        parts.append(
            f"Each variant against its policy's default on answers (exact sign test), {asked}:\n\n"
            + markdown_table(frame)
        )
    decision = defaults_by_answers(rows)
    return "\n\n".join([*parts, decision] if decision else parts)


def defaults_by_answers(rows: pd.DataFrame) -> str:
    """The defaults rule (:func:`.pairing.default_decision`) as a table: which variant would replace its default."""
    decided = default_decision(rows)
    if decided.empty:
        return ""

    def verdict(row: Any) -> str:
        if row.replaces_default:
            return "meets the rule"
        if row.fewer_at:
            return "answers fewer at " + ", ".join(f"J={b:.0%}" for b in row.fewer_at)
        if row.p < 0.05 and row.losses > row.wins:
            return "answers fewer"
        better = row.p < 0.05 and row.wins > row.losses
        verdict = "significantly more so far" if better else "not significantly more"
        return verdict + (
            f" ({row.missing} of its default's case x budget cells still to measure)" if row.missing else ""
        )

    frame = pd.DataFrame(
        {
            "policy": decided.policy,
            "default": decided.default,
            "budgets": decided.budgets,
            "pooled vs default": [sign_cell(r) for r in decided.itertuples(index=False)],
            "verdict": [verdict(r) for r in decided.itertuples(index=False)],
        }
    )
    winners = decided[decided.replaces_default]
    verdict_line = (
        "Meets the rule: " + "; ".join(f"`{r.policy}` (replacing `{r.default}`)" for r in winners.itertuples()) + "."
        if not winners.empty
        else "No variant meets the rule: every default stands on these rows."
    )
    return (
        f"{verdict_line} "
        "Defaults by answers: a variant meets the rule for replacing its policy's default when it answers "
        "significantly more over case x budget pooled (sign test, p < 0.05), significantly fewer at no budget, "
        f"and was measured on every case and budget its default was; {protocol_text(rows.policy)}:\n\n"
        f"{markdown_table(frame)}"
    )


DIAGNOSIS_BY_POLICY = (
    "key_kept",
    "sentence_kept",
    "distractors_kept",
    "gaps_around",
    "reading_peak",
    "question_evicted",
)


def diagnosis_overall(rows: pd.DataFrame) -> pd.DataFrame:
    """The diagnosis's measures over every evicting policy and budget (:func:`.diagnosis.summarise_diagnosis`'s
    ``all`` rows); empty before rows carry the diagnosis."""
    summary = summarise_diagnosis(rows)
    if summary.empty or summary.n_answered.add(summary.n_unanswered).max() == 0:
        return summary.iloc[0:0]
    return summary[summary.policy == "all"]


def retention_diagnosis(rows: pd.DataFrame) -> str:
    """Why a kept fact goes unanswered (:mod:`.diagnosis`): over the rows whose fact survived, each measure's
    mean among answered and unanswered rows and how well it separates them (AUC, Mann-Whitney p), over every
    evicting policy; then per policy. Empty before rows carry the diagnosis."""
    overall = diagnosis_overall(rows)
    if overall.empty:
        return ""
    summary = summarise_diagnosis(rows)
    table = pd.DataFrame(
        {
            "measure": overall.measure,
            "answered": [number_text(v, ".3g") for v in overall.mean_answered],
            "unanswered": [number_text(v, ".3g") for v in overall.mean_unanswered],
            "AUC (p)": ["-" if pd.isna(a) else f"{a:.2f} ({p:.2g})" for a, p in zip(overall.auc, overall.p_value)],
        }
    )
    n_yes, n_no = int(overall.n_answered.max()), int(overall.n_unanswered.max())
    per = summary[(summary.policy != "all") & summary.measure.isin(DIAGNOSIS_BY_POLICY)]
    cells = per.assign(
        cell=[
            f"{number_text(a, '.2g')} / {number_text(u, '.2g')}" for a, u in zip(per.mean_answered, per.mean_unanswered)
        ]
    )
    by_policy = cells.pivot(index="policy", columns="measure", values="cell")
    counts = per.groupby("policy", sort=False)[["n_answered", "n_unanswered"]].max()
    by_policy.insert(0, "kept: answered / not", [f"{int(a)} / {int(u)}" for a, u in counts.loc[by_policy.index].values])
    order = [p for p in dict.fromkeys(rows.policy) if p in by_policy.index]
    shown = [m for m in DIAGNOSIS_BY_POLICY if m in set(per.measure)]  # a measure the rows predate: no column
    by_policy = by_policy.reindex(index=order, columns=["kept: answered / not", *shown]).fillna("-")
    asked = protocol_text(rows.policy)
    return (
        f"Why a kept fact goes unanswered: over the rows whose fact survived ({n_yes} answered, {n_no} not; every "
        "evicting policy and budget), each measure's mean and how well it tells them apart (AUC above 0.5: "
        f"higher with answers; Mann-Whitney p), {asked}:\n\n{markdown_table(table)}\n\n"
        f"Per policy, mean among answered / unanswered rows, {asked}:\n\n{markdown_table(by_policy.reset_index())}"
    )


def retention_breakdown(rows: pd.DataFrame) -> str:
    """Survival by fact type and by where the fact sits in the document, at the middle budget: what a
    policy keeps (recency keeps late facts only; a score that ignores position can keep early ones)."""
    measured = evicting(rows)
    if measured.empty:
        return ""
    budgets = sorted(measured.budget.unique())
    budget = budgets[len(budgets) // 2]
    cells = measured[measured.budget == budget]
    cells = cells.assign(
        third=pd.cut(cells.position, [-0.01, 1 / 3, 2 / 3, 1.0], labels=["first third", "middle third", "last third"])
    )
    order = list(dict.fromkeys(cells.policy))

    def table(column: str) -> str:
        rates = cells.groupby(["policy", column], observed=True).survived.agg(["mean", "size"])
        frame = rates.apply(lambda r: f"{100 * r['mean']:.0f}% ({int(r['size'])})", axis=1).unstack(column)
        return markdown_table(frame.reindex(order).fillna("-").reset_index())

    return (
        f"Fact survival at J={budget:.0%} by the fact's type and by where it sits (cases in brackets), "
        f"{protocol_text(order)}:\n\n{table('fact_type')}\n\n{table('third')}"
    )


# ----- each task's tables, from its frames (:class:`.registry.Frames`): what the report and the page print -----
def retention_section(frames: Frames) -> str:
    return retention_tables(frames.summaries["retention"], frames.rows.get("retention"))
