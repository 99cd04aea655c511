"""What every task's tables share: percentages, ratios, markdown, sign-test cells, the provenance line, and the
caption that says under which question protocol the rows ran (:func:`protocol_text`), with the pairing of every
spec measured under both (:func:`protocol_pairing`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd

from ccviz.engine.budget import budget_text

from .pairing import paired_protocols
from .specs import EVICTABLE, FULL, split_protocol, titled

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


def ratio_text(value: float) -> str:
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


def pivot(summary: pd.DataFrame, cell: Callable[[pd.Series], str], column: Callable[[Any], str]) -> pd.DataFrame:
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
    runs = _merged(meta.get("runs") or [{"commit": meta["commit"], "dirty": meta.get("dirty"), "rows": None}])
    machines = [run.get("machine") for run in runs]
    recorded = list(dict.fromkeys(filter(None, machines)))
    one_machine = len(recorded) <= 1 and (all(machines) or not recorded)
    commits = ", ".join(
        f"`{run['commit']}`"
        + (" and earlier commits" if run.get("earlier") else "")
        + (" + uncommitted changes" if run.get("dirty") else "")
        + parenthesised(
            (
                []
                if run["rows"] is None
                else [f"{run['rows']} rows" + (f" in {run['count']} runs" if run["count"] > 1 else "")]
            )
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


def _merged(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive runs at one commit, state and machine as one (``count`` runs, their rows summed): a file
    resumed step by step names its commit once."""
    same = ("commit", "dirty", "earlier", "machine")
    merged: list[dict[str, Any]] = []
    for run in runs:
        last = merged[-1] if merged else None
        if (
            last
            and last["rows"] is not None
            and run["rows"] is not None
            and all(last.get(k) == run.get(k) for k in same)
        ):
            last.update(rows=last["rows"] + run["rows"], count=last["count"] + 1)
        else:
            merged.append({**run, "count": 1})
    return merged


def parenthesised(parts: list[str]) -> str:
    return f" ({'; '.join(parts)})" if parts else ""


def rate_table(evicting: pd.DataFrame, rate: str) -> tuple[pd.DataFrame, str]:
    """Policies x budgets of one Wilson rate (``accuracy`` or ``survival``), and how many cases a cell has. A cell
    of an unfinished run says its own count (``n=K``), so its interval is not read as the others'."""
    counts = evicting[f"{rate}_n"]
    most = int(counts.max())

    def cell(row: pd.Series) -> str:
        n = row[f"{rate}_n"]
        text = percent_text(row[rate], row[f"{rate}_low"], row[f"{rate}_high"])
        return text + (f", n={int(n)}" if 0 < n < most else "")

    table = pivot(evicting, cell, lambda b: f"J={b:.0%}")
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


def number_text(value: float, spec: str) -> str:
    return "-" if pd.isna(value) else format(value, spec)


def rate_cell(successes: int, trials: int) -> str:
    return f"{100 * successes / trials:.0f}% ({successes}/{trials})" if trials else "-"
