"""The decode-heavy generation task's table."""

from __future__ import annotations

import pandas as pd

from ..registry import Frames
from ..specs import FULL, evicting
from ..tables import markdown_table, pivot


def decode_table(summary: pd.DataFrame) -> str:
    table = pivot(
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


def decode_section(frames: Frames) -> str:
    return decode_table(frames.summaries["decode"])
