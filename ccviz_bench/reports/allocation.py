"""The budget-allocation task's tables."""

from __future__ import annotations

import pandas as pd

from ..registry import Frames
from ..specs import evicting
from ..tables import markdown_table, percent_text, protocol_pairing, protocol_text, ratio_text
from ..tasks.retention import summarise as summarise_retention


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
        "vs uniform": [ratio_text(c["peak_vs_uniform"]) for c in cells],
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


def allocation_section(frames: Frames) -> str:
    return allocation_tables(
        frames.rows.get("allocation_retention"),
        frames.summaries.get("allocation_perplexity"),
        frames.rows.get("allocation_perplexity"),
    )
