"""The efficiency task's table: refresh cost against one forward, end to end, memory."""

from __future__ import annotations

import pandas as pd

from ..registry import Frames
from ..tables import markdown_table, ratio_text


def efficiency_table(summary: pd.DataFrame) -> str:
    frame = summary.copy()
    columns = {
        c: c.replace("refresh_ratio_n", "refresh / forward, n=")
        for c in frame.columns
        if c.startswith("refresh_ratio_n")
    }
    for column in columns:
        frame[column] = frame[column].map(ratio_text)
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


def efficiency_section(frames: Frames) -> str:
    return efficiency_table(frames.summaries["efficiency"])
