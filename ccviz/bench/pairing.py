"""Each policy variant against its own policy's default, on the same cases.

Two variants measured on the same cases mostly agree, so comparing their Wilson intervals hides real
differences: what counts are the discordant cases, where one kept the fact and the other did not.
A variant is paired with whichever label in the same results means its policy with default options
(``counter_causal`` in the retention table; the same options spelt out, as in
``counter_causal:score=logprob,min_gap=0,smooth=0``, in the ablation grid), so the pairing works for any
results folder, and follows the defaults when they change.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd

from .metrics import sign_test
from .specs import PolicySpec, parse_spec

COLUMNS = ["policy", "budget", "default", "cases", "wins", "losses", "p"]


def default_labels(labels: Iterable[str]) -> dict[str, str]:
    """For each label, the label among ``labels`` that resolves to its policy's default options
    (itself for a default); labels whose policy's default was not measured are left out. Where several
    labels mean the default (``counter_causal`` and ``counter_causal:score=logprob``), the shortest names it."""
    labels = list(dict.fromkeys(labels))
    specs = {label: parse_spec(label) for label in labels}
    defaults: dict[str, str] = {}
    for label in sorted(labels, key=len):
        if specs[label].meaning() == PolicySpec(specs[label].name).meaning():
            defaults.setdefault(specs[label].name, label)
    return {label: defaults[spec.name] for label, spec in specs.items() if spec.name in defaults}


def paired_with_defaults(rows: pd.DataFrame) -> pd.DataFrame:
    """Per budget, each variant against its default on the same cases: the cases where only the variant
    kept the fact (``wins``), where only the default did (``losses``), and the exact sign test's p."""
    evicting = rows[rows.policy != "full"]
    reference = default_labels(evicting.policy)
    out = []
    for budget, cells in evicting.groupby("budget", sort=True):
        survived = cells.pivot_table(index="case", columns="policy", values="survived", aggfunc="first")
        for label in dict.fromkeys(cells.policy):
            default = reference.get(label)
            if default not in survived:
                continue
            paired = survived[label].notna() & survived[default].notna()
            mine, theirs = survived.loc[paired, label].astype(int), survived.loc[paired, default].astype(int)
            wins, losses = int(((mine == 1) & (theirs == 0)).sum()), int(((mine == 0) & (theirs == 1)).sum())
            out.append({"policy": label, "budget": budget, "default": default, "cases": int(paired.sum()),
                        "wins": wins, "losses": losses, "p": sign_test(wins, losses)})
    return pd.DataFrame(out, columns=COLUMNS)

