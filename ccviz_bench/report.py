"""Markdown tables of the benchmark summaries, with where and when they were measured
(docs/benchmarks.md#where-the-results-are). The caption of every table whose rows asked a question says
under which protocol (:func:`protocol_text`), and each task that asks one pairs every spec measured under
both (:func:`protocol_pairing`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from ccviz.engine.budget import budget_text

from .diagnosis import summarise_diagnosis
from .metrics import summarise_rates
from .pairing import default_decision, paired_protocols, paired_with, paired_with_defaults
from .progress import TaskFiles, read_tasks
from .registry import TASKS, Frames, load
from .results import load_results
from .specs import EVICTABLE, FULL, evicting, split_protocol, titled
from .tasks.retention import summarise as summarise_retention

KEPT_APART = "question kept apart (the field's protocol)"
STREAMED = "question evictable (the paper's protocol)"


def protocol_text(labels: Iterable[str]) -> str:
    """Under which question protocol the evicting rows of ``labels`` ran, as a caption says it."""
    kept = {split_protocol(label)[1] for label in labels if label != FULL}
    if kept == {False}:
        return STREAMED
    if False in kept:
        return f"{KEPT_APART}; rows labelled `{EVICTABLE}`: {STREAMED}"
    return KEPT_APART


def percent_text(value: float, low: float | None = None, high: float | None = None) -> str:
    if pd.isna(value):
        return "-"
    text = f"{100 * value:.0f}%"
    return text if low is None else f"{text} ({100 * low:.0f}-{100 * high:.0f})"


def _ratio(value: float) -> str:
    """Three decimals, or two significant digits for the sub-millisecond refreshes (1e-4 of a forward)."""
    if pd.isna(value):
        return "-"
    return f"{value:.3f}x" if value >= 0.01 else f"{value:.1e}x"


def markdown_table(frame: pd.DataFrame) -> str:
    """``frame`` as a markdown table; its ``policy`` column in plain words, each with its spec."""
    if "policy" in frame.columns:
        frame = frame.assign(policy=frame["policy"].map(titled))
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *rows])


def _pivot(summary: pd.DataFrame, cell: Callable[[pd.Series], str], column: Callable[[Any], str]) -> pd.DataFrame:
    """Policies as rows (in the rows' order: :func:`.results.read_frame` puts them in policy order), budgets as
    columns from the smallest (a results file that grew a smaller budget later still reads left to right)."""
    cells = summary.assign(cell=summary.apply(cell, axis=1), column=summary["budget"].map(column))
    table = cells.pivot(index="policy", columns="column", values="cell")
    order = [c for c in dict.fromkeys(cells.sort_values("budget", kind="stable")["column"]) if c in table.columns]
    return table.reindex(index=list(dict.fromkeys(cells["policy"])), columns=order).fillna("-").reset_index()


def provenance_line(meta: dict[str, Any]) -> str:
    """Where a results file's rows come from: its dates, the commit of each run that wrote rows (files before
    ``runs`` was recorded name their latest run's), the machine and the settings. Runs record their machine
    (the header's is only the latest run's): unless every run recorded the same one, each run names its own
    where it was recorded, as a file resumed on another machine must not claim one machine for all its rows."""
    first, last = meta.get("started", meta["date"])[:10], meta["date"][:10]
    dates = last if first == last else f"{first} to {last}"
    runs = meta.get("runs") or [{"commit": meta["commit"], "dirty": meta.get("dirty"), "rows": None}]
    machines = [run.get("machine") for run in runs]
    recorded = list(dict.fromkeys(filter(None, machines)))
    one_machine = len(recorded) <= 1 and (all(machines) or not recorded)
    commits = ", ".join(
        f"`{run['commit']}`"
        + (" and earlier commits" if run.get("earlier") else "")
        + (" + uncommitted changes" if run.get("dirty") else "")
        + _parenthesised(
            ([] if run["rows"] is None else [f"{run['rows']} rows"])
            + ([] if one_machine or not run.get("machine") else [run["machine"]])
        )
        for run in runs
    )
    which = "the latest run at commit" if "runs" not in meta else "runs at commits" if len(runs) > 1 else "at commit"
    if not recorded:  # runs from before machines were recorded: the header's, the latest run's
        machine = meta["machine"]
    elif one_machine:
        machine = recorded[0]
    else:
        names = " and ".join(recorded)
        where = "each run names its own" if all(machines) else "where a run names it; the others did not record theirs"
        machine = f"{names} ({where})"
    return (
        f"_Measured {dates}, {which} {commits}, on {machine}, "
        f"torch {meta['torch']} "
        f"({meta['torch_threads']} threads), {meta['settings'].get('model', '?')}; settings: "
        + ", ".join(f"{k}={v}" for k, v in meta["settings"].items() if k != "model")
        + "._"
    )


def _parenthesised(parts: list[str]) -> str:
    return f" ({'; '.join(parts)})" if parts else ""


def retention_tables(summary: pd.DataFrame, rows: pd.DataFrame | None = None) -> str:
    """Answers, then survival (the diagnosis), per policy x budget; given the measured rows, also the
    breakdown by fact and the paired tests on answers."""
    measured = evicting(summary)
    accuracy, accuracy_count = _rate_table(measured, "accuracy")
    survival, survival_count = _rate_table(measured, "survival")
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


def _rate_table(evicting: pd.DataFrame, rate: str) -> tuple[pd.DataFrame, str]:
    """Policies x budgets of one Wilson rate (``accuracy`` or ``survival``), and how many cases a cell has. A cell
    of an unfinished run says its own count (``n=K``), so its interval is not read as the others'."""
    counts = evicting[f"{rate}_n"]
    most = int(counts.max())

    def cell(row: pd.Series) -> str:
        n = row[f"{rate}_n"]
        text = percent_text(row[rate], row[f"{rate}_low"], row[f"{rate}_high"])
        return text + (f", n={int(n)}" if 0 < n < most else "")

    table = _pivot(evicting, cell, lambda b: f"J={b:.0%}")
    if counts[counts > 0].nunique() <= 1:
        return table, f"{most} cases per cell"
    return table, f"{most} cases per cell (n= marks a cell with fewer, from a run that has not finished)"


def sign_cell(row: Any) -> str:
    return f"+{row.wins} / -{row.losses} (p {row.p:.2g})"


def protocol_pairing(
    rows: pd.DataFrame,
    measure: str = "answered",
    case: tuple[str, ...] = ("case",),
    by: tuple[str, ...] = ("budget",),
    what: str = "answers",
) -> str:
    """Each spec measured under both question protocols, on the same cases (:func:`.pairing.paired_protocols`):
    its ``measure`` (``what``) with the question kept apart and with it evictable, and the cases gained and
    lost by keeping it apart with the exact sign test; per ``by`` group. Empty without such a pair."""
    paired = paired_protocols(rows, measure, case, by)
    paired = paired[paired.cases > 0]
    if paired.empty:
        return ""
    groups = {key: paired[key].map(budget_text) if key == "budget" else paired[key] for key in by}
    frame = pd.DataFrame(
        {
            "policy": paired.policy,
            **groups,
            "cases": paired.cases,
            f"{what}, {KEPT_APART}": (paired.total / paired.cases).map(percent_text),
            f"{what}, {STREAMED}": (paired.reference_total / paired.cases).map(percent_text),
            "gained / lost (sign test)": [sign_cell(r) for r in paired.itertuples(index=False)],
        }
    )
    return (
        f"The question's protocol, spec by spec: {what} with the question kept apart against the same spec with "
        f"it evictable (`{EVICTABLE}`), on the same cases; gained / lost: the cases where it scored higher / "
        f"lower with the question kept apart (exact sign test):\n\n{markdown_table(frame)}"
    )


def retention_pairing(rows: pd.DataFrame) -> str:
    """Paired sign tests on answers: every policy against the recency window (per budget, and over case x
    budget pooled), and each variant against its policy's default; empty when neither can be paired."""
    parts, asked = [], protocol_text(rows.policy)
    against = paired_with(rows)
    if not against.empty:
        against = against[against.policy != against.default]
        pooled = paired_with(rows, case=("case", "budget"), by=()).set_index("policy")
        table = _pivot(against, sign_cell, lambda b: f"J={b:.0%}")
        table["pooled"] = table["policy"].map(lambda label: sign_cell(pooled.loc[label]))
        parts.append(
            "Answers against `sliding` under the same protocol on the same cases: answered where it did not / "
            f"not where it did (exact sign test; pooled: case x budget), {asked}:\n\n{markdown_table(table)}"
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
    return (
        "Defaults by answers: a variant meets the rule for replacing its policy's default when it answers "
        "significantly more over case x budget pooled (sign test, p < 0.05), significantly fewer at no budget, "
        f"and was measured on every case and budget its default was; {protocol_text(rows.policy)}:\n\n"
        f"{markdown_table(frame)}"
    )


def _number(value: float, spec: str) -> str:
    return "-" if pd.isna(value) else format(value, spec)


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
            "answered": [_number(v, ".3g") for v in overall.mean_answered],
            "unanswered": [_number(v, ".3g") for v in overall.mean_unanswered],
            "AUC (p)": ["-" if pd.isna(a) else f"{a:.2f} ({p:.2g})" for a, p in zip(overall.auc, overall.p_value)],
        }
    )
    n_yes, n_no = int(overall.n_answered.max()), int(overall.n_unanswered.max())
    per = summary[(summary.policy != "all") & summary.measure.isin(DIAGNOSIS_BY_POLICY)]
    cells = per.assign(
        cell=[f"{_number(a, '.2g')} / {_number(u, '.2g')}" for a, u in zip(per.mean_answered, per.mean_unanswered)]
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


def perplexity_table(summary: pd.DataFrame) -> str:
    full = summary[summary.policy == FULL]
    table = _pivot(evicting(summary), lambda r: f"{r.nll:.3f} ({r.delta_nll:+.3f})", lambda b: f"J={b}")
    reference = f"{full.nll.iloc[0]:.3f} (perplexity {full.perplexity.iloc[0]:.2f})" if len(full) else "-"
    return (
        f"Mean next-token NLL in nats (gap to the full cache); full cache: **{reference}**, "
        f"{int(summary.tokens.max())} predicted tokens per cell:\n\n{markdown_table(table)}"
    )


def decode_table(summary: pd.DataFrame) -> str:
    table = _pivot(
        evicting(summary),
        lambda r: f"{r.first_divergence_median:.0f} / {100 * r.repeated_4grams:.0f}%",
        lambda b: f"J={b}",
    )
    full = summary[summary.policy == FULL]
    reference = f"{100 * full.repeated_4grams.iloc[0]:.0f}%" if len(full) else "-"
    return (
        "Median first divergent token from the full cache's output / repeated 4-grams "
        f"(full cache: {reference}), {int(summary.prompts.max())} prompts:\n\n{markdown_table(table)}"
    )


def efficiency_table(summary: pd.DataFrame) -> str:
    frame = summary.copy()
    columns = {
        c: c.replace("refresh_ratio_n", "refresh / forward, n=")
        for c in frame.columns
        if c.startswith("refresh_ratio_n")
    }
    for column in columns:
        frame[column] = frame[column].map(_ratio)
    for column, fmt in (
        ("total_seconds", "{:.1f} s"),
        ("time_vs_full", "{:.2f}x"),
        ("peak_rss_mb", "{:.0f} MB"),
        ("rss_growth_mb", "{:+.0f} MB"),
        ("refresh_exponent", "n^{:.2f}"),
        ("forward_exponent", "n^{:.2f}"),
        ("largest_n", "{:.0f}"),
        ("refresh_peak_mb", "{:.0f} MB"),
    ):
        if column in frame:
            frame[column] = frame[column].map(lambda v, f=fmt: "-" if pd.isna(v) else f.format(v))
    names = {
        **columns,
        "total_seconds": "end to end",
        "time_vs_full": "vs full",
        "peak_rss_mb": "peak RSS",
        "rss_growth_mb": "RSS growth during the run",
        "refresh_exponent": "refresh cost ~",
        "forward_exponent": "forward ~",
        "largest_n": "largest n",
        "refresh_peak_mb": "refresh peak memory there",
    }
    return markdown_table(frame.rename(columns=names))


def _against_default(paired: pd.DataFrame, name: str = "vs its default: kept / lost (sign test)") -> pd.Series:
    cells = ["default" if row.policy == row.default else sign_cell(row) for row in paired.itertuples(index=False)]
    return pd.Series(cells, index=paired.policy, name=name)


FACT_TYPES_OF_INTEREST = ("identifier", "number")  # the facts token-level scoring never kept whole


def _survival_by_type(rows: pd.DataFrame, types: tuple[str, ...]) -> pd.DataFrame:
    """Kept / cases per policy for each of ``types`` (all budgets of the rows together)."""
    cells = rows[(rows.policy != FULL) & rows.fact_type.isin(types)]
    counts = cells.groupby(["policy", "fact_type"], sort=False).survived.agg(["sum", "size"])
    frame = counts.apply(lambda r: f"{int(r['sum'])}/{int(r['size'])}", axis=1).unstack("fact_type")
    return frame.reindex(columns=list(types)).rename(columns=lambda t: f"{t}s kept")


def _by_spec(values: pd.Series, labels: list[str]) -> pd.Series:
    """``values`` of a part that asks no question (perplexity), by label, set on the ``labels`` of one that does:
    each label takes its spec's value under either protocol (without a question the protocol changes nothing);
    a value no label takes keeps its own row."""
    bases = values.groupby(values.index.map(lambda label: split_protocol(label)[0]), sort=False).first()
    taken = {label: split_protocol(label)[0] for label in labels if split_protocol(label)[0] in bases.index}
    own = pd.Series({label: bases[base] for label, base in taken.items()}, dtype=object)
    return pd.concat([own, bases.drop(index=list(set(taken.values())))])


def ablation_table(
    retention: pd.DataFrame | None, perplexity: pd.DataFrame | None, retention_rows: pd.DataFrame | None = None
) -> str:
    """The grid's survival (and, given the measured rows, each variant paired with its default) and NLL gap,
    and the specs measured under both question protocols."""
    parts, caption, twins = [], "The perplexity gap, per spec:", ""
    if retention is not None and not retention.empty:
        r = evicting(retention).set_index("policy")
        columns = {
            "survival": [
                percent_text(*v) for v in r[["survival", "survival_low", "survival_high"]].itertuples(index=False)
            ],
            "fact tokens kept": r.kept_share.map(percent_text).tolist(),
        }
        answers = {}
        if r.accuracy.notna().any():  # answers lead; a survival-only screen shows none
            answers["answers"] = [
                "-" if pd.isna(v[0]) else percent_text(*v)
                for v in r[["accuracy", "accuracy_low", "accuracy_high"]].itertuples(index=False)
            ]
        parts.append(pd.DataFrame(answers | columns, index=r.index))
        caption = f"Rare-fact retention, {protocol_text(r.index)}, and the perplexity gap, per spec:"
        if retention_rows is not None and not retention_rows.empty:
            answered = paired_with_defaults(retention_rows, measure="answered")
            answered = answered[answered.cases > 0]  # a spec screened before answers were measured
            parts.append(_against_default(answered, "answers vs its default (sign test)").to_frame())
            parts.append(_against_default(paired_with_defaults(retention_rows)).to_frame())
            parts.append(_survival_by_type(retention_rows, FACT_TYPES_OF_INTEREST))
            twins = protocol_pairing(retention_rows)
    if perplexity is not None and not perplexity.empty:
        p = evicting(perplexity).set_index("policy")
        gaps = _by_spec(p.delta_nll.map(lambda v: f"{v:+.3f}"), list(parts[0].index) if parts else [])
        parts.append(gaps.rename("NLL gap to full").to_frame())
    if not parts:
        return ""
    table = markdown_table(pd.concat(parts, axis=1).fillna("-").rename_axis("policy").reset_index())
    return "\n\n".join(filter(None, [f"{caption}\n\n{table}", twins]))


def _allocation_cell(label: str) -> tuple[str, str]:
    """A spec label's policy (with any other options) and its allocation."""
    name, _, rest = label.partition(":")
    options = [part for part in rest.split(",") if part]
    allocation = next((o.split("=", 1)[1] for o in options if o.startswith("allocation=")), "uniform")
    others = [o for o in options if not o.startswith("allocation=")]
    return name + (":" + ",".join(others) if others else ""), allocation


def _allocation_costs(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean peak K/V MiB and refresh seconds per cell, and the peak against the same policy's uniform cell."""
    cells = rows.groupby(keys, sort=False)[["peak_cache_mb", "refresh_seconds"]].mean().reset_index()
    cells[["name", "allocation"]] = pd.DataFrame(cells["policy"].map(_allocation_cell).tolist(), index=cells.index)
    uniform = cells[cells.allocation == "uniform"].set_index(["name", "budget"])["peak_cache_mb"]
    base = [uniform.get((n, b), float("nan")) for n, b in zip(cells["name"], cells["budget"])]
    cells["peak_vs_uniform"] = cells["peak_cache_mb"] / pd.Series(base, index=cells.index)
    return cells


def _cell_columns(summary: pd.DataFrame, costs: pd.DataFrame, refresh_format: str) -> tuple[dict, dict]:
    """The columns every allocation table shares: its cells' policy and allocation first, and last what
    they cost (``costs`` from :func:`_allocation_costs`, indexed by policy and budget)."""
    cells = [costs.loc[(r.policy, r.budget)] for r in summary.itertuples()]
    first = {"policy": [c["name"] for c in cells], "allocation": [c["allocation"] for c in cells]}
    last = {
        "peak K/V MiB": [f"{c['peak_cache_mb']:.2f}" for c in cells],
        "vs uniform": [_ratio(c["peak_vs_uniform"]) for c in cells],
        "refresh s": [format(c["refresh_seconds"], refresh_format) for c in cells],
    }
    return first, last


def allocation_tables(
    retention_rows: pd.DataFrame | None,
    perplexity_summary: pd.DataFrame | None = None,
    perplexity_rows: pd.DataFrame | None = None,
) -> str:
    """Per policy x allocation x budget: survival (what any layer holds), the share of layers (and
    heads) holding the whole fact, accuracy, NLL gap, and what the cell cost (peak K/V, refresh time)."""
    parts = []
    if retention_rows is not None and not retention_rows.empty:
        rows = evicting(retention_rows)
        summary = summarise_retention(rows)
        first, last = _cell_columns(
            summary, _allocation_costs(rows, ["policy", "budget"]).set_index(["policy", "budget"]), ".3f"
        )
        shares = rows.groupby(["policy", "budget"], sort=False)["layer_share"].mean()
        table = pd.DataFrame(
            {
                **first,
                "J": [f"{r.budget:.0%}" for r in summary.itertuples()],
                "cases": summary.survival_n.astype(int).tolist(),
                "survival (any layer)": [
                    percent_text(r.survival, r.survival_low, r.survival_high) for r in summary.itertuples()
                ],
                "layers holding the fact": [percent_text(shares[(r.policy, r.budget)]) for r in summary.itertuples()],
                "accuracy": [
                    f"{percent_text(r.accuracy)} of {int(r.accuracy_n)}" if r.accuracy_n else "-"
                    for r in summary.itertuples()
                ],
                **last,
            }
        )
        parts.append(f"Rare-fact retention per cell, {protocol_text(rows.policy)}:\n\n" + markdown_table(table))
        parts.append(protocol_pairing(retention_rows))
    if perplexity_summary is not None and not perplexity_summary.empty and perplexity_rows is not None:
        summary = evicting(perplexity_summary)
        costs = _allocation_costs(evicting(perplexity_rows), ["policy", "budget"]).set_index(["policy", "budget"])
        first, last = _cell_columns(summary, costs, ".2f")
        table = pd.DataFrame(
            {
                **first,
                "J": summary.budget.astype(int).tolist(),
                "segments": summary.segments.astype(int).tolist(),
                "NLL gap to full": [f"{v:+.3f}" for v in summary.delta_nll],
                **last,
            }
        )
        parts.append("Perplexity with 4 attention sinks per cell:\n\n" + markdown_table(table))
    return "\n\n".join(filter(None, parts))


def _rate_cell(successes: int, trials: int) -> str:
    return f"{100 * successes / trials:.0f}% ({successes}/{trials})" if trials else "-"


def needle_tables(rows: pd.DataFrame) -> str:
    """The maps in numbers: per policy and budget over the whole map, then by length, by depth and by kind."""
    if rows.empty:
        return ""
    measured = evicting(rows)
    overall = summarise_rates(rows, ["policy", "budget"])
    full = overall[overall.policy == FULL]
    ceiling = (
        percent_text(full.accuracy.iloc[0], full.accuracy_low.iloc[0], full.accuracy_high.iloc[0]) if len(full) else "-"
    )
    cells = evicting(overall)
    table = pd.DataFrame(
        {
            "policy": cells.policy.tolist(),
            "J": cells.budget.map(budget_text).tolist(),
            "cells": cells.n.astype(int).tolist(),
            "survival": [percent_text(r.survival, r.survival_low, r.survival_high) for r in cells.itertuples()],
            "accuracy": [percent_text(r.accuracy, r.accuracy_low, r.accuracy_high) for r in cells.itertuples()],
        }
    )

    def by(column: str, label: Callable[[Any], str]) -> str:
        counts = summarise_rates(measured, ["policy", "budget", column])
        counts = counts.assign(
            row=counts.policy + " " + counts.budget.map(budget_text),
            column=counts[column].map(label),
            cell=[_rate_cell(int(r.survived), int(r.n)) for r in counts.itertuples()],
        )
        order = [label(v) for v in sorted(measured[column].unique())]
        frame = counts.pivot(index="row", columns="column", values="cell").reindex(list(dict.fromkeys(counts.row)))
        return markdown_table(frame.reindex(columns=order).fillna("-").reset_index().rename(columns={"row": "policy"}))

    asked = protocol_text(measured.policy)
    parts = [
        f"Over the whole map (every depth x length), Wilson 95% intervals, {asked}; full-cache accuracy: "
        f"**{ceiling}**:\n\n{markdown_table(table)}",
        f"Survival by context length (tokens), {asked}:\n\n{by('length', lambda v: str(int(v)))}",
        f"Survival by depth of the needle, {asked}:\n\n{by('depth', lambda v: f'{float(v):.0%}')}",
        f"Survival by what the needle states, {asked}:\n\n{by('kind', str)}",
        protocol_pairing(rows, case=("length", "depth", "trial")),
    ]
    return "\n\n".join(filter(None, parts))


def ruler_tables(rows: pd.DataFrame) -> str:
    """Per task: survival, RULER's ``string_match_all`` (the share of expected values found in the output;
    ours matches normalised words, :func:`.metrics.answer_matches`, where RULER matches lower-cased
    substrings) and the share of required tokens kept, per policy x budget (lengths pooled). The last
    reads a task no policy keeps whole (variable tracking's chain)."""
    if rows.empty:
        return ""
    parts = []
    for task, group in rows.groupby("task", sort=False):
        pooled = summarise_rates(group, ["policy", "budget"])
        full = pooled[pooled.policy == FULL]
        ceiling = f"{100 * full.answer_share.iloc[0]:.0f}%" if len(full) else "-"
        cells = evicting(pooled).assign(
            cell=lambda f: [
                f"{_rate_cell(int(r.survived), int(r.n))} · {100 * r.answer_share:.0f}% · {100 * r.kept_share:.0f}%"
                for r in f.itertuples()
            ]
        )
        table = _pivot(cells, lambda r: r.cell, budget_text)
        lengths = ", ".join(str(int(v)) for v in sorted(group.length.unique()))
        parts.append(
            f"**{task}** ({lengths} tokens; survival (kept/cases) · string_match_all (share of expected "
            f"values found in the output) · required tokens kept; full cache's string_match_all "
            f"**{ceiling}**; {protocol_text(group.policy)}):\n\n{markdown_table(table)}"
        )
    twins = protocol_pairing(
        rows, "answer_share", case=("length", "trial"), by=("task", "budget"), what="string_match_all"
    )
    return "\n\n".join(filter(None, [*parts, ruler_pairing(rows), twins]))


def ruler_pairing(rows: pd.DataFrame) -> str:
    """Each policy variant (a span unit, a recency share, the paper's score) against its policy's default
    on the same cases, per task and budget, by the share of the required tokens kept: the measure that
    still separates forms where no policy keeps a whole variable-tracking chain. Empty without variants."""
    paired = paired_with_defaults(rows, measure="kept_share", case=("length", "trial"), by=("task", "budget"))
    variants = paired[paired.policy != paired.default]
    if variants.empty:
        return ""
    variants = variants.assign(policy=variants.task + ": " + variants.policy + " vs " + variants.default)
    table = _pivot(variants, lambda r: f"+{r.wins} / -{r.losses} (p {r.p:.2g})", budget_text)
    return (
        "Each variant against its policy's default on the same cases: cases where it kept more / less "
        f"of the required tokens (exact sign test), {protocol_text(rows.policy)}:\n\n{markdown_table(table)}"
    )


def report(directory: str | Path | None = None) -> str:
    """All available summaries of a results folder as markdown."""
    return report_results(load_results(directory))


def report_results(results: dict[str, Any], tasks: dict[str, TaskFiles] | None = None) -> str:
    """:func:`report` of results already loaded with :func:`load_results`: one section per task with an
    evicting policy measured, in the registry's order, under the provenance of its first result file.
    Each part is summarised from the rows measured so far (:mod:`.progress`; ``tasks`` is
    :func:`.progress.read_tasks` of ``results`` when already read), so a stopped or running run reports
    what it has, and says what a rerun of its command would still measure."""
    meta, sections = results["meta"], []
    found_by_task = read_tasks(results) if tasks is None else tasks
    for entry in TASKS:
        found = found_by_task[entry.name]
        if found.measured:
            provenance = provenance_line(meta[next(stem for stem in entry.files if stem in meta)])
            partial = f"Partial run, still to measure: {'; '.join(found.incomplete)}.\n\n" * bool(found.incomplete)
            body = load(entry.tables)(Frames(found.summaries, found.rows))
            sections.append(f"### {entry.title}\n\n{provenance}\n\n{partial}{body}")
    return "\n\n".join(sections) if sections else "no results yet"


# ----- each task's tables, from its frames (:class:`.registry.Frames`): what the report and the page print -----
def retention_section(frames: Frames) -> str:
    return retention_tables(frames.summaries["retention"], frames.rows.get("retention"))


def perplexity_section(frames: Frames) -> str:
    return perplexity_table(frames.summaries["perplexity"])


def decode_section(frames: Frames) -> str:
    return decode_table(frames.summaries["decode"])


def efficiency_section(frames: Frames) -> str:
    return efficiency_table(frames.summaries["efficiency"])


def ablation_section(frames: Frames) -> str:
    return ablation_table(
        frames.summaries.get("ablation_retention"),
        frames.summaries.get("ablation_perplexity"),
        frames.rows.get("ablation_retention"),
    )


def allocation_section(frames: Frames) -> str:
    return allocation_tables(
        frames.rows.get("allocation_retention"),
        frames.summaries.get("allocation_perplexity"),
        frames.rows.get("allocation_perplexity"),
    )


def needle_section(frames: Frames) -> str:
    return needle_tables(frames.rows["needle"])


def ruler_section(frames: Frames) -> str:
    return ruler_tables(frames.rows["ruler"])
