"""The needle maps' and the RULER-style tasks' tables."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from ccviz.engine.budget import budget_text

from ..metrics import summarise_rates
from ..pairing import paired_with_defaults
from ..registry import Frames
from ..specs import FULL, evicting
from ..tables import markdown_table, percent_text, pivot, protocol_pairing, protocol_text, rate_cell


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
            cell=[rate_cell(int(r.survived), int(r.n)) for r in counts.itertuples()],
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
                f"{rate_cell(int(r.survived), int(r.n))} · {100 * r.answer_share:.0f}% · {100 * r.kept_share:.0f}%"
                for r in f.itertuples()
            ]
        )
        table = pivot(cells, lambda r: r.cell, budget_text)
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
    table = pivot(variants, lambda r: f"+{r.wins} / -{r.losses} (p {r.p:.2g})", budget_text)
    return (
        "Each variant against its policy's default on the same cases: cases where it kept more / less "
        f"of the required tokens (exact sign test), {protocol_text(rows.policy)}:\n\n{markdown_table(table)}"
    )


def needle_section(frames: Frames) -> str:
    return needle_tables(frames.rows["needle"])


def ruler_section(frames: Frames) -> str:
    return ruler_tables(frames.rows["ruler"])
