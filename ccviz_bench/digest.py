"""The reader's results (docs/results.md and the README's headline): one generated table or figure per question
a user asks, with its sentences written from the same rows, so no number a reader sees can drift from them.

Every block is a pure function of the committed result folders (:func:`load_digest`); ``tests/test_docs.py``
checks each block against what these functions print and rewrites them with ``--write``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd

from ccviz.engine.budget import budget_text
from ccviz.policies.presses import is_scorer_spec

from .frontier import frontier_chart, frontier_points
from .metrics import sign_test
from .pairing import paired_protocols, paired_with
from .plots import PALETTE, line_chart
from .reports.retention import defaults_by_answers, diagnosis_overall
from .results import load_results
from .specs import FULL, evicting, parse_spec, split_protocol, with_protocol
from .tables import KEPT_APART, STREAMED, markdown_table, percent_text, sign_cell

PAPER = ("counter_causal:paper=True", "counter_causal_fast:paper=True")  # the paper's own form, one option away
MAIN = (
    "sliding",
    "tova",
    "snapkv",
    "h2o",
    "expected_attention",
    "keydiff",
    "kvzip",
    "counter_causal",
    "counter_causal_fast",
)
CHARTED = ("sliding", "tova", "h2o", "snapkv", "kvzip", "counter_causal", "counter_causal_fast", PAPER[1])
ATTENTION = ("h2o", "tova")  # the attention-based policies the paper argues against
ALPHA = 0.05


@dataclass(frozen=True)
class ModelResults:
    """One model's committed results: its name as the docs print it, the folder, and the tables read from it."""

    name: str
    folder: str
    results: dict[str, Any]

    @property
    def retention(self) -> pd.DataFrame:
        return self.results.get("retention", pd.DataFrame(columns=["policy", "budget", "case", "answered"]))

    @cached_property
    def protect(self) -> bool:
        """Whether the question-kept-apart rows cover every main policy at every budget the evictable ones do:
        then this model's results are read under the field's protocol, else under the paper's."""
        rows, cases = evicting(self.retention), _cases(self)
        evictable = rows.policy.map(lambda p: split_protocol(p)[0] in MAIN and not split_protocol(p)[1]).astype(bool)
        budgets = rows.loc[evictable, "budget"]
        counts = rows.groupby(["policy", "budget"]).case.nunique()
        return bool(cases) and all(counts.get((p, b), 0) >= cases for p in MAIN for b in set(budgets))

    @property
    def protocol(self) -> str:
        return KEPT_APART if self.protect else STREAMED

    def under_protocol(self) -> pd.DataFrame:
        """The retention rows of every spec measured under this model's protocol, and the full cache's."""
        rows, protect = self.retention, self.protect
        labels = [label for label in rows.policy.unique() if label == FULL or split_protocol(label)[1] == protect]
        return rows[rows.policy.isin(labels)]

    def label(self, spec: str) -> str:
        """The result label of ``spec`` under this model's protocol."""
        return with_protocol(spec, self.protect)

    @cached_property
    def frontier_rates(self) -> pd.DataFrame:
        """:func:`answer_rates` of the main policies, the paper's forms and every bridged scorer measured."""
        measured = [split_protocol(label)[0] for label in evicting(self.under_protocol()).policy.unique()]
        return answer_rates(self, (*MAIN, *PAPER, *(s for s in measured if is_scorer_spec(parse_spec(s).name))))

    @cached_property
    def frontier(self) -> pd.DataFrame:
        """Answers against refresh cost at every budget (:func:`.frontier.frontier_points`), for the
        :attr:`frontier_rates` with a cost measured: read once, for the chart and the table alike."""
        return frontier_points(self.frontier_rates, self.results.get("efficiency_summary"))


def load_digest(root: Path, folders: dict[str, str]) -> list[ModelResults]:
    """The models of ``folders`` (name -> result folder relative to ``root``) that have retention rows."""
    models = [ModelResults(name, folder, load_results(root / folder)) for name, folder in folders.items()]
    return [model for model in models if not model.retention.empty]


def _cases(model: ModelResults) -> int:
    """How many retention cases ``model``'s full cache answered or missed: what a complete cell holds."""
    return int(model.retention[model.retention.policy == FULL].case.nunique())


def _short(spec: str) -> str:
    return parse_spec(spec).title


def answer_rates(model: ModelResults, specs: tuple[str, ...] = MAIN) -> pd.DataFrame:
    """Answers per spec and budget under ``model``'s protocol: ``spec``, ``budget``, ``answered`` (share),
    ``cases``; the full cache at budget 1."""
    rows = model.retention
    wanted = {model.label(spec): spec for spec in specs} | {FULL: FULL}
    cells = rows[rows.policy.isin(wanted)].assign(answered=lambda f: pd.to_numeric(f.answered, errors="coerce"))
    rates = cells.groupby(["policy", "budget"], sort=False).answered.agg(["mean", "count"]).reset_index()
    rates = rates.rename(columns={"mean": "answered", "count": "cases"}).assign(spec=lambda f: f.policy.map(wanted))
    return rates[["spec", "budget", "answered", "cases"]]


def answers_chart(models: list[ModelResults]) -> str:
    """The lead figure: answers against budget for the main policies, one panel per model side by side (the
    full cache's share at J = 100%), each captioned with its protocol."""
    colours = {spec: PALETTE[i % len(PALETTE)] for i, spec in enumerate((*CHARTED, FULL))}
    panels = []
    for model in models:
        rates = answer_rates(model, CHARTED)
        series = {
            _short(spec) if spec != FULL else "Full cache": [
                (100 * b, 100 * a) for b, a in zip(cells.budget, cells.answered)
            ]
            for spec, cells in rates.groupby("spec", sort=False)
        }
        named = {(_short(spec) if spec != FULL else "Full cache"): colour for spec, colour in colours.items()}
        panels.append(
            line_chart(
                series,
                title=f"{model.name}: answers, {'question kept apart' if model.protect else 'question evictable'}",
                x_label="budget J (% of the document)",
                y_label="cases answered (%)",
                y_range=(0, 100),
                colours=named,
            )
        )
    return side_by_side(panels)


def side_by_side(svgs: list[str]) -> str:
    """SVG charts in one row, each in its own nested viewport."""
    return in_rows([svgs])


def _size(svg: str, name: str) -> int:
    return int(svg.split(f'{name}="', 1)[1].split('"', 1)[0])


def in_rows(rows: list[list[str]]) -> str:
    """SVG charts in rows, left to right then top to bottom, each in its own nested viewport."""
    width = max((sum(_size(svg, "width") for svg in row) for row in rows), default=0)
    heights = [max((_size(svg, "height") for svg in row), default=0) for row in rows]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{sum(heights)}">']
    y = 0
    for row, height in zip(rows, heights):
        x = 0
        for svg in row:
            out.append(svg.replace("<svg ", f'<svg x="{x}" y="{y}" ', 1))
            x += _size(svg, "width")
        y += height
    out.append("</svg>")
    return "\n".join(out)


def frontiers_chart(models: list[ModelResults]) -> str:
    """Answers against what a refresh costs, a panel per budget, a row per model, the Pareto frontier drawn."""
    rows = []
    for model in models:
        points = model.frontier
        if not points.empty:
            names = {spec: _short(spec) for spec in points.spec.unique()}
            rows.append(frontier_chart(points, names, f"{model.name}, {model.protocol}"))
    return in_rows(rows)


def answers_by_cost(results: dict[str, Any], directory: Path) -> Path | None:
    """Write ``answers-by-cost.svg`` (:func:`frontiers_chart`) into a results folder whose retention rows and
    efficiency summary place at least one policy; return its path, or None when they place none."""
    rows, costs = results.get("retention"), results.get("efficiency_summary")
    if rows is None or rows.empty or "budget" not in rows or costs is None or costs.empty:
        return None
    model = ModelResults(str(results["meta"].get("retention", {}).get("settings", {}).get("model", "")), "", results)
    if model.frontier.empty:
        return None
    path = Path(directory) / "answers-by-cost.svg"
    path.write_text(frontiers_chart([model]) + "\n", encoding="utf-8")
    return path


def frontier_table(models: list[ModelResults]) -> str:
    """The specs on each model's frontier at each budget, cheapest first, and what is left off for want of a cost."""
    parts = []
    for model in models:
        points = model.frontier
        if points.empty:
            continue
        line = points[points.frontier].sort_values(["budget", "cost"])
        frame = pd.DataFrame(
            {
                "J": line.budget.map(budget_text),
                "policy": line.spec.map(_short),
                "answered": [f"{percent_text(a)} ({round(a * n)} of {n})" for a, n in zip(line.answered, line.cases)],
                "one refresh / one forward": line.cost.map(ratio_text),
            }
        )
        measured = set(model.frontier_rates.spec) - {FULL}
        uncosted = sorted(_short(spec) for spec in measured - set(points.spec))
        note = f" No refresh cost measured yet, so not placed: {', '.join(uncosted)}." if uncosted else ""
        parts.append(f"{model.name} ({model.protocol}).{note}\n\n{markdown_table(frame)}")
    return "\n\n".join(parts)


def answers_table(models: list[ModelResults]) -> str:
    """Which policy answers most at each budget, on each model: the main policies' answers (the leader of each
    column in bold, the full cache's as the ceiling of every column), and one sentence naming the leaders."""
    columns: dict[str, dict[str, str]] = {}
    leaders: dict[str, list[str]] = {}
    for model in models:
        rates = answer_rates(model)
        full = rates[rates.spec == FULL].answered
        for budget, cells in rates[rates.spec != FULL].groupby("budget"):
            best = cells.answered.max()
            where = f"{model.name} at {budget_text(budget)}"
            columns[f"{model.name}, {budget_text(budget)}"] = {
                r.spec: (f"**{percent_text(r.answered)}**" if r.answered == best else percent_text(r.answered))
                + (f" (n={r.cases})" if r.cases < rates.cases.max() else "")
                for r in cells.itertuples()
            } | {FULL: percent_text(full.iloc[0]) if not full.empty else "-"}
            leader = " and ".join(_short(s) for s in cells[cells.answered == best].spec)
            leaders.setdefault(leader, []).append(where)
    frame = pd.DataFrame(columns).reindex([*MAIN, FULL]).fillna("-")
    frame.insert(0, "policy", [_short(spec) if spec != FULL else "Full cache (the ceiling)" for spec in frame.index])
    ranked = sorted(leaders.items(), key=lambda item: -len(item[1]))
    sentence = f"{ranked[0][0]} answers most" + (
        "" if len(ranked) == 1 else " except " + "; ".join(f"{', '.join(w)} ({who})" for who, w in ranked[1:])
    )
    protocols = "; ".join(f"{model.name}, {model.protocol}" for model in models)
    cases = max(_cases(model) for model in models)
    return (
        f"{sentence}. Answers on the {cases} retention cases (the model's greedy answer contains the fact; "
        f"{protocols}):\n\n{markdown_table(frame.reset_index(drop=True))}"
    )


def protocol_table(models: list[ModelResults]) -> str:
    """What evicting the question costs each policy: answers with the question kept apart against the same
    spec with it evictable, on the same cases, per model and budget where both were measured."""
    parts = []
    for model in models:
        paired = paired_protocols(model.retention)
        paired = paired[(paired.cases >= _cases(model)) & paired.policy.isin(MAIN + PAPER)]
        if paired.empty:
            continue
        significant = paired[paired.p < ALPHA]
        gained = significant[significant.wins > significant.losses].policy.map(_short)
        lost = significant[significant.wins < significant.losses].policy.map(_short)
        frame = pd.DataFrame(
            {
                "policy": paired.policy.map(_short),
                "budget": paired.budget.map(budget_text),
                "cases": paired.cases,
                "kept apart": (paired.total / paired.cases).map(percent_text),
                "evictable": (paired.reference_total / paired.cases).map(percent_text),
                "gained / lost (sign test)": [sign_cell(r) for r in paired.itertuples(index=False)],
            }
        )
        parts.append(
            f"{model.name}: with the question kept apart, significantly more answers (p < {ALPHA}) for "
            f"{', '.join(dict.fromkeys(gained)) or 'no policy'}; significantly fewer for "
            f"{', '.join(dict.fromkeys(lost)) or 'no policy'}."
        )
        parts.append(markdown_table(frame))
        parts.append("\n".join(_question_costs(paired)))
    return "\n\n".join(parts)


def _question_costs(paired: pd.DataFrame) -> list[str]:
    """One sentence per policy: what evicting the question cost it, pooled over the budgets in ``paired``."""
    sentences = []
    for policy, cells in paired.groupby("policy", sort=False):
        wins, losses = int(cells.wins.sum()), int(cells.losses.sum())
        p = sign_test(wins, losses)
        cost = wins - losses
        verdict = "significantly" if p < ALPHA else "not significantly"
        answers = f"{abs(cost)} answer{'s' * (abs(cost) != 1)}"
        what = f"cost it {answers}" if cost > 0 else f"gained it {answers}" if cost < 0 else "changed no count"
        budgets = ", ".join(cells.budget.map(budget_text))
        sentences.append(
            f"- {_short(policy)}: evicting the question {what} at {budgets} "
            f"(+{wins} / -{losses} with it kept, p {p:.2g}; {verdict})."
        )
    return sentences


FAMILY_REFERENCES = {"sliding": "recency", "kvzip": "KVzip"}  # what each policy faces on both families


def families_table(models: list[ModelResults], prose: list[ModelResults]) -> str:
    """Does the ranking hold on another kind of document: every spec measured on the prose family, its answers on
    both families at each budget measured there, and each against recency and KVzip on each family (sign test,
    case x budget pooled over those budgets), naming every finding that holds on one family only."""
    parts = []
    records = {model.name: model for model in models}
    for second in prose:
        first = records.get(second.name)
        measured = evicting(second.under_protocol())
        if first is None or measured.empty:
            continue
        if first.protect != second.protect:
            parts.append(f"{second.name}: its two families are read under different protocols, so not compared yet.")
            continue
        order = MAIN + PAPER
        specs = sorted(
            dict.fromkeys(split_protocol(label)[0] for label in measured.policy),
            key=lambda s: order.index(s) if s in order else len(order),
        )
        budgets = sorted(set(measured.budget))
        families = {"records": first, "prose": second}
        rates = {name: answer_rates(m, tuple(specs)).set_index(["spec", "budget"]) for name, m in families.items()}
        frame = pd.DataFrame({"policy": [_short(spec) for spec in specs] + ["Full cache (the ceiling)"]})
        for budget in budgets:
            for name, rate in rates.items():
                frame[f"{name}, {budget_text(budget)}"] = [_rate_cell(rate, spec, budget) for spec in specs] + [
                    _rate_cell(rate, FULL, 1.0)
                ]
        pairs = _family_pairs(families, specs, budgets)
        one_family = [
            f"- {row['policy']} against {row['against']}: "
            + "; ".join(f"{_verdict(cell)} on {name}" for name, cell in row["cells"].items())
            for row in pairs
            if len({_verdict(cell) for cell in row["cells"].values()}) > 1
        ]
        holds = (
            f"Findings on one family only ('holds': more, p < {ALPHA}; 'reversed': fewer; 'not shown': neither):\n\n"
            + "\n".join(one_family)
            if one_family
            else "Every paired finding below holds alike on both families."
        )
        table = pd.DataFrame(
            [
                {"policy": row["policy"], "against": row["against"], "pooled over": row["budgets"]}
                | {f"on {name}": f"{sign_cell(cell)} {_verdict(cell)}" for name, cell in row["cells"].items()}
                for row in pairs
            ]
        )
        parts.append(
            f"{second.name}, {second.protocol}. Answering most: {_family_leaders(rates, budgets)}.\n\n{holds}\n\n"
            f"{markdown_table(frame)}\n\nEach policy against recency and KVzip on each family, case x budget "
            f"pooled over the budgets both families have measured on every case:\n\n{markdown_table(table)}"
        )
    return "\n\n".join(parts)


def _family_pairs(families: dict[str, ModelResults], specs: list[str], budgets: list[float]) -> list[dict[str, Any]]:
    """Each spec against each of :data:`FAMILY_REFERENCES` on every family, case x budget pooled over the
    ``budgets`` where every family has the pair on all its cases (``budgets``, as text): ``cells`` holds each
    family's wins, losses and sign test; a pair with no such budget is left out, and the two references paired
    once."""
    paired = {}
    for name, model in families.items():
        rows, cases = model.under_protocol(), _cases(model)
        for reference in FAMILY_REFERENCES:
            for cell in paired_with(rows, reference).itertuples(index=False):
                if cell.budget in budgets and cell.cases >= cases:  # a budget still being measured waits
                    paired[(name, reference, split_protocol(cell.policy)[0], cell.budget)] = cell
    out = []
    for position, (reference, named) in enumerate(FAMILY_REFERENCES.items()):
        for spec in specs:
            common = [b for b in budgets if all((name, reference, spec, b) in paired for name in families)]
            if spec in tuple(FAMILY_REFERENCES)[: position + 1] or not common:
                continue
            cells = {}
            for name in families:
                wins = sum(paired[(name, reference, spec, b)].wins for b in common)
                losses = sum(paired[(name, reference, spec, b)].losses for b in common)
                cells[name] = SimpleNamespace(wins=wins, losses=losses, p=sign_test(wins, losses))
            budgets_text = ", ".join(budget_text(b) for b in common)
            out.append({"policy": _short(spec), "against": named, "budgets": budgets_text, "cells": cells})
    return out


def _family_leaders(rates: dict[str, pd.DataFrame], budgets: list[float]) -> str:
    """Which spec answers most at each budget on each family (:func:`answer_rates` indexed by spec and budget)."""
    sentences = []
    for budget in budgets:
        leaders = []
        for name, rate in rates.items():
            at = rate[rate.index.get_level_values("budget") == budget].droplevel("budget").drop(FULL, errors="ignore")
            best = at.answered.max() if not at.empty else 0
            who = " and ".join(_short(s) for s in at.index[at.answered == best]) if best else "none"
            leaders.append(f"{who} on {name}")
        sentences.append(f"at {budget_text(budget)}, " + ", ".join(leaders))
    return "; ".join(sentences)


def _rate_cell(rates: pd.DataFrame, spec: str, budget: float) -> str:
    """One spec's answers at one budget, from :func:`answer_rates` indexed by spec and budget; with its count of
    cases when fewer than the most measured, '-' when none."""
    if (spec, budget) not in rates.index:
        return "-"
    cell = rates.loc[(spec, budget)]
    return percent_text(cell.answered) + (f" (n={int(cell.cases)})" if cell.cases < rates.cases.max() else "")


def cost_table(models: list[ModelResults]) -> str:
    """What each policy costs: one refresh in multiples of one forward over the same cache, and a whole run
    end to end against the full cache's, from the efficiency task."""
    parts = []
    for model in models:
        summary = model.results.get("efficiency_summary")
        if summary is None or summary.empty:
            continue
        settings = model.results["meta"].get("efficiency_e2e", {}).get("settings", {})
        rows = summary.set_index("policy").reindex([s for s in (*MAIN, *PAPER) if s in set(summary.policy)])
        frame = pd.DataFrame(
            {
                "policy": rows.index.map(_short),
                "refresh / forward, n=1024": rows.refresh_ratio_n1024.map(ratio_text),
                "refresh / forward, n=8192": rows.refresh_ratio_n8192.map(ratio_text),
                "end to end vs full cache": rows.time_vs_full.map(lambda v: "-" if pd.isna(v) else f"{v:.2f}x"),
            }
        )
        missing = [_short(s) for s in rows.index[rows.time_vs_full.isna()]]
        run = f"{settings.get('prompt_tokens', '?')}-token prompt, {settings.get('new_tokens', '?')} new tokens"
        note = f" End to end not measured yet: {', '.join(missing)}." if missing else ""
        parts.append(f"{model.name} (end to end: {run}).{note}\n\n{markdown_table(frame)}")
    return "\n\n".join(parts)


def ratio_text(value: float) -> str:
    if pd.isna(value):
        return "-"
    return f"{value:.3f}x" if value >= 0.01 else f"{value:.0e}x"


def predictors_table(models: list[ModelResults]) -> str:
    """What predicts an answer once the fact is kept: the diagnosis's measures, best first, per model (a measure
    that never varies under the model's protocol, such as the question's eviction with the question kept apart,
    is left out)."""
    parts = []
    for model in models:
        measures = diagnosis_overall(model.under_protocol())
        varies = ~((measures.mean_answered == 0) & (measures.mean_unanswered == 0)) & measures.auc.notna()
        if not varies.any():
            continue
        top = measures[varies].sort_values("auc", ascending=False)
        best = top.iloc[0]
        frame = pd.DataFrame(
            {
                "measure": top.measure,
                "answered (mean)": top.mean_answered.map(lambda v: f"{v:.3g}"),
                "unanswered (mean)": top.mean_unanswered.map(lambda v: f"{v:.3g}"),
                "AUC (p)": [f"{a:.2f} ({p:.2g})" for a, p in zip(top.auc, top.p_value)],
            }
        )
        parts.append(
            f"{model.name}, {model.protocol}: over the {int(best.n_answered) + int(best.n_unanswered)} runs that kept "
            "the fact, "
            f"`{best.measure}` tells answered from unanswered best (AUC {best.auc:.2f}).\n\n{markdown_table(frame)}"
        )
    return "\n\n".join(parts)


def claim_frame(models: list[ModelResults]) -> pd.DataFrame:
    """Counter-causal surprise, in the paper's form and in ours, against each attention-based policy on keeping
    the fact and on answering, pooled over case x budget: one row per model, measure, spec and rival with the
    sign test's counts and its verdict (``holds``: more, p < :data:`ALPHA`; ``reversed``: fewer; else ``not
    shown``)."""
    records = []
    for model in models:
        for measure in ("survived", "answered"):
            for rival in ATTENTION:
                paired = paired_with(model.retention, rival, measure, case=("case", "budget"), by=())
                for spec in (*PAPER, "counter_causal", "counter_causal_fast"):
                    cell = paired[paired.policy == model.label(spec)]
                    if not cell.empty:
                        row = cell.iloc[0]
                        records.append(
                            {"model": model.name, "measure": measure, "spec": spec, "rival": rival}
                            | {"wins": row.wins, "losses": row.losses, "p": row.p, "verdict": _verdict(row)}
                        )
    return pd.DataFrame(records, columns=["model", "measure", "spec", "rival", "wins", "losses", "p", "verdict"])


def _verdict(row: Any) -> str:
    if row.p >= ALPHA:
        return "not shown"
    return "holds" if row.wins > row.losses else "reversed"


def claim_table(models: list[ModelResults]) -> str:
    """Where the paper's claim holds: :func:`claim_frame` as a table, one column per rival."""
    claims = claim_frame(models)
    if claims.empty:
        return ""
    claims = claims.assign(cell=[f"{sign_cell(r)} {r.verdict}" for r in claims.itertuples(index=False)])
    frame = claims.pivot_table(
        index=["model", "measure", "spec"], columns="rival", values="cell", aggfunc="first", sort=False
    ).reset_index()
    frame = pd.DataFrame(
        {
            "model": frame.model,
            "measure": frame.measure.map({"survived": "keeps the fact", "answered": "answers"}),
            "policy": frame.spec.map(_short),
            **{f"vs {_short(rival)}": frame[rival] for rival in ATTENTION if rival in frame},
        }
    )
    held = int((claims.verdict == "holds").sum())
    return (
        f"The claim holds (more, p < {ALPHA}) in {held} of {len(claims)} comparisons; 'reversed' marks significantly "
        f"fewer, 'not shown' no significant difference.\n\n{markdown_table(frame)}"
    )


def headline(models: list[ModelResults], image: str, results_link: str) -> str:
    """The README's headline: what ccviz found, in at most eight lines, with the lead chart."""
    lines = []
    for model in models:
        rates = answer_rates(model)
        middle = sorted(set(rates[rates.spec != FULL].budget))
        budget = middle[len(middle) // 2]
        at = rates[rates.budget == budget].set_index("spec").answered
        full = rates[rates.spec == FULL].answered
        ours = max(("counter_causal", "counter_causal_fast"), key=lambda s: at.get(s, -1))
        best = at.idxmax()
        protocol = "question kept apart" if model.protect else "question evictable"
        ceiling = percent_text(full.iloc[0]) if not full.empty else "-"
        lines.append(
            f"- On {model.name} ({protocol}; full cache {ceiling}), at {budget_text(budget)} {_short(best)} answers "
            f"{percent_text(at[best])}, our best default ({_short(ours)}) {percent_text(at[ours])}, the recency "
            f"window {percent_text(at.get('sliding', float('nan')))}."
        )
    claims = claim_frame(models)
    answers = claims[claims.measure == "answered"]
    for forms, who in ((PAPER, "The paper's exact form"), (("counter_causal", "counter_causal_fast"), "Ours")):
        verdicts = answers[answers.spec.isin(forms)].verdict
        lines.append(
            f"- {who}, against H2O and TOVA on answers: more in {int((verdicts == 'holds').sum())} of {len(verdicts)} "
            f"comparisons, fewer in {int((verdicts == 'reversed').sum())}."
        )
    cases = max(_cases(model) for model in models)
    return "\n".join(
        [
            f"ccviz measures answers, not only survival: {cases} cases, each one fact stated once and one question.",
            "",
            *lines,
            "",
            f"Which policy to use at which budget, what it costs, why answers are lost: [the results]({results_link}).",
            "",
            f"![Answers against budget for the main policies, on both models]({image})",
        ]
    )


FOLDERS = {"SmolLM2-135M": "bench/results", "Gemma 3 270M": "bench/results/gemma"}  # the published rows
PROSE_FOLDERS = {  # the second family of retention cases (real prose), by model
    "SmolLM2-135M": "bench/results/prose",
    "Gemma 3 270M": "bench/results/gemma/prose",
}
CHART = Path("docs") / "images" / "answers-by-budget.svg"
FRONTIER_CHART = Path("docs") / "images" / "answers-by-cost.svg"
BLOCK = re.compile(r"(<!-- results (?P<name>[a-z]+): begin -->\n).*?(<!-- results (?P=name): end -->)", re.S)


def charts(models: list[ModelResults]) -> dict[Path, str]:
    """Every generated figure of the reader's pages, by its path in the repository."""
    return {CHART: answers_chart(models), FRONTIER_CHART: frontiers_chart(models)}


def blocks(models: list[ModelResults], prose: list[ModelResults] | None = None) -> dict[str, str]:
    """Every generated block by the name its markers carry: the results page's tables and the README's headline;
    ``prose``: the same models' rows on the second family of cases, where measured."""
    prose = prose or []
    return {
        "answers": answers_table(models),
        "protocol": protocol_table(models),
        "cost": cost_table(models),
        "frontier": frontier_table(models),
        "predictors": predictors_table(models),
        "claim": claim_table(models),
        "families": families_table(models, prose),
        "defaults": "\n\n".join(
            [f"**{m.name}.** {defaults_by_answers(m.retention)}" for m in models]
            + [f"**{m.name}, prose family.** {text}" for m in prose if (text := defaults_by_answers(m.retention))]
        ),
        "headline": headline(models, CHART.as_posix(), "docs/results.md"),
    }


def filled(text: str, generated: dict[str, str]) -> str:
    """``text`` with every ``<!-- results NAME: begin/end -->`` block replaced by ``generated[NAME]``, set off by
    blank lines so the markers never join a table."""
    return BLOCK.sub(lambda m: f"{m.group(1)}\n{generated[m.group('name')]}\n\n{m.group(3)}", text)
