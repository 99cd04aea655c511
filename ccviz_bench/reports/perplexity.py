"""The long-text perplexity task's table."""

from __future__ import annotations

import pandas as pd

from ..registry import Frames
from ..specs import FULL, evicting
from ..tables import markdown_table, pivot


def perplexity_table(summary: pd.DataFrame) -> str:
    full = summary[summary.policy == FULL]
    table = pivot(evicting(summary), lambda r: f"{r.nll:.3f} ({r.delta_nll:+.3f})", lambda b: f"J={b}")
    reference = f"{full.nll.iloc[0]:.3f} (perplexity {full.perplexity.iloc[0]:.2f})" if len(full) else "-"
    return (
        f"Mean next-token NLL in nats (gap to the full cache); full cache: **{reference}**, "
        f"{int(summary.tokens.max())} predicted tokens per cell:\n\n{markdown_table(table)}"
    )


def perplexity_section(frames: Frames) -> str:
    return perplexity_table(frames.summaries["perplexity"])
