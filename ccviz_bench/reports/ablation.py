"""The score-variant ablation's table."""

from __future__ import annotations

import pandas as pd

from ..pairing import paired_with_defaults
from ..registry import Frames
from ..specs import FULL, evicting, split_protocol
from ..tables import markdown_table, percent_text, protocol_pairing, protocol_text, sign_cell


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


def ablation_section(frames: Frames) -> str:
    return ablation_table(
        frames.summaries.get("ablation_retention"),
        frames.summaries.get("ablation_perplexity"),
        frames.rows.get("ablation_retention"),
    )
