"""Each policy variant against its own policy's default, or every policy against one reference, on the same cases.

Two variants measured on the same cases mostly agree, so comparing their Wilson intervals hides real
differences: what counts are the discordant cases, where one kept the fact and the other did not.
A variant is paired with whichever label in the same results means its policy with default options
(``counter_causal`` in the retention table; the same options spelt out, as in
``counter_causal:score=logprob,min_gap=0,smooth=0``, in the ablation grid), so the pairing works for any
results folder, and follows the defaults when they change. Every pairing stays within one question protocol
(:mod:`.specs`: the question kept apart, or evictable under ``protect_question=False``), except
:func:`paired_protocols`, which pairs each spec with itself under the other.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from .metrics import sign_test
from .specs import PolicySpec, evicting, parse_spec, split_protocol, with_protocol

COUNTS = ["default", "cases", "wins", "losses", "p"]
TOTALS = ["total", "reference_total"]  # each side's sum of the measure over the paired cases


def default_labels(labels: Iterable[str]) -> dict[str, str]:
    """For each label, the label among ``labels`` that resolves to its policy's default options under the
    same question protocol (itself for a default); labels whose policy's default was not measured are left
    out. Where several labels mean the default (``counter_causal`` and ``counter_causal:score=logprob``), the
    shortest names it."""
    labels = list(dict.fromkeys(labels))
    specs = {label: parse_spec(label) for label in labels}
    defaults: dict[tuple[str, bool], str] = {}
    for label in sorted(labels, key=len):
        spec = specs[label]
        if spec.meaning(asked=True) == PolicySpec(spec.name).in_protocol(spec.protects_question).meaning(asked=True):
            defaults.setdefault((spec.name, spec.protects_question), label)
    keys = {label: (spec.name, spec.protects_question) for label, spec in specs.items()}
    return {label: defaults[key] for label, key in keys.items() if key in defaults}


def paired_with_defaults(
    rows: pd.DataFrame, measure: str = "survived", case: tuple[str, ...] = ("case",), by: tuple[str, ...] = ("budget",)
) -> pd.DataFrame:
    """Per ``by`` group, each variant against its default on the same cases (rows alike in ``case``): the
    cases where the variant's ``measure`` is higher (``wins``; for survival, only the variant kept the
    fact), where it is lower (``losses``), and the exact sign test's p. A share (``kept_share``) pairs the
    same way, so a task no policy keeps whole still shows which form keeps more of it."""
    measured = evicting(rows)
    return _paired(measured, default_labels(measured.policy), measure, case, by)


def paired_with(
    rows: pd.DataFrame,
    reference: str = "sliding",
    measure: str = "answered",
    case: tuple[str, ...] = ("case",),
    by: tuple[str, ...] = ("budget",),
) -> pd.DataFrame:
    """Every policy against one ``reference`` policy (the recency window) under its own question protocol on
    the same cases, as :func:`paired_with_defaults` pairs each with its default; ``by=()`` pools every group,
    pairing on ``case`` (pass ``case=("case", "budget")`` to pair case x budget). Empty if ``reference`` was
    measured under neither protocol."""
    measured = evicting(rows)
    labels = set(measured.policy)
    references = {label: with_protocol(reference, split_protocol(label)[1]) for label in labels}
    return _paired(measured, {k: v for k, v in references.items() if v in labels}, measure, case, by)


def paired_protocols(
    rows: pd.DataFrame, measure: str = "answered", case: tuple[str, ...] = ("case",), by: tuple[str, ...] = ("budget",)
) -> pd.DataFrame:
    """Each spec measured under both question protocols, on the same cases: ``policy`` the label with the
    question kept apart, ``default`` its twin with the question evictable (``protect_question=False``),
    ``wins`` the cases where keeping the question apart scored higher (an answer gained), ``losses`` lower,
    ``total`` / ``reference_total`` each one's sum of ``measure`` over the paired cases. Empty without a twin."""
    measured = evicting(rows)
    labels = set(measured.policy)
    twins = {label: with_protocol(label, False) for label in labels if split_protocol(label)[1]}
    return _paired(measured, {k: v for k, v in twins.items() if v in labels}, measure, case, by)


def _paired(
    rows: pd.DataFrame, reference: dict[str, str], measure: str, case: tuple[str, ...], by: tuple[str, ...]
) -> pd.DataFrame:
    """Each label against ``reference[label]`` on the same cases, per ``by`` group (the :data:`COUNTS` and
    :data:`TOTALS`). Cells left blank (an answer not measured) pair with nothing."""
    rows = rows.assign(**{measure: pd.to_numeric(rows[measure], errors="coerce")})
    groups = rows.groupby(list(by), sort=True) if by else [((), rows)]
    out = []
    for group, cells in groups:
        values = cells.pivot_table(index=list(case), columns="policy", values=measure, aggfunc="first")
        for label in dict.fromkeys(cells.policy):
            default = reference.get(label)
            if default not in values or label not in values:
                continue
            paired = values[label].notna() & values[default].notna()
            mine, theirs = values.loc[paired, label], values.loc[paired, default]
            wins, losses = int((mine > theirs).sum()), int((mine < theirs).sum())
            out.append(
                {
                    **dict(zip(by, group if isinstance(group, tuple) else (group,))),
                    "policy": label,
                    "default": default,
                    "cases": int(paired.sum()),
                    "wins": wins,
                    "losses": losses,
                    "p": sign_test(wins, losses),
                    "total": float(mine.sum()),
                    "reference_total": float(theirs.sum()),
                }
            )
    return pd.DataFrame(out, columns=[*by, "policy", *COUNTS, *TOTALS])


DECISION = ["policy", "default", "budgets", "missing", "cases", "wins", "losses", "p", "fewer_at", "replaces_default"]


def default_decision(rows: pd.DataFrame, measure: str = "answered", alpha: float = 0.05) -> pd.DataFrame:
    """The project's rule for changing a default, applied to every variant measured next to its default:
    it replaces the default when, over case x budget pooled, it is higher significantly more often than
    lower (exact sign test, p < ``alpha``), at no single budget significantly lower, and measured on every
    case and budget its default was (``missing``: how many of those it lacks; until they are measured the
    rule cannot decide). ``fewer_at`` names the budgets where it was significantly lower; ``budgets`` how
    many were pooled. Perplexity and survival are reported beside it, never part of it."""
    pooled = paired_with_defaults(rows, measure=measure, case=("case", "budget"), by=())
    per_budget = paired_with_defaults(rows, measure=measure)
    measured = rows.assign(**{measure: pd.to_numeric(rows[measure], errors="coerce")}).dropna(subset=[measure])
    cells = {label: set(zip(group.case, group.budget)) for label, group in measured.groupby("policy")}
    out = []
    for row in pooled[(pooled.policy != pooled.default) & (pooled.cases > 0)].itertuples(index=False):
        mine = per_budget[(per_budget.policy == row.policy) & (per_budget.cases > 0)]
        fewer = mine[(mine.losses > mine.wins) & (mine.p < alpha)].budget.tolist()
        missing = len(cells[row.default] - cells[row.policy])
        better = row.wins > row.losses and row.p < alpha
        out.append(
            {
                "policy": row.policy,
                "default": row.default,
                "budgets": len(mine),
                "missing": missing,
                "cases": row.cases,
                "wins": row.wins,
                "losses": row.losses,
                "p": row.p,
                "fewer_at": fewer,
                "replaces_default": bool(better and not fewer and not missing),
            }
        )
    return pd.DataFrame(out, columns=DECISION)
