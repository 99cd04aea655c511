"""Task 3, decode-heavy generation: a long self-generated continuation under a small cache.

Reasoning models fill the cache with their own output (the paper's AIME setting). Here each prompt
asks for several hundred tokens of story or explanation; every policy's greedy output is compared
with the full cache's: the first token where they differ, and the share of repeated 4-grams (a
degeneration signal: a policy that lost the thread starts looping).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ccviz.engine import generate
from ccviz.fields import Validated, whole
from ccviz.models import LoadedModel

from ..figures import divergence_figure
from ..metrics import first_divergence, repeated_ngram_rate
from ..registry import BenchTask, Frames, Part, TaskRun
from ..reports.decode import decode_section
from ..results import ResultTable, write_summary
from ..specs import PolicySpec, registered_labels, registered_specs

if TYPE_CHECKING:
    import plotly.graph_objects as go

PROMPTS = (
    "Write a long, detailed story about a lighthouse keeper who finds a message in a bottle.",
    "Explain step by step how to bake a loaf of bread at home, from choosing the flour to the first slice.",
    "Write a long story about a girl who builds a small robot to help her grandfather in his garden.",
    "Explain in detail, step by step, how the water cycle works and why it matters for farming.",
    "Write a long adventure story about two friends who get lost in a forest and find their way home.",
    "Explain step by step how a bicycle works, part by part, and how to keep each part in good repair.",
)
COLUMNS = ["prompt", "policy", "budget", "new_tokens", "first_divergence", "repeated_4grams", "seconds", "token_ids"]
KEY = ["prompt", "policy", "budget"]
NGRAM = 4


@dataclass(frozen=True)
class DecodeSettings(Validated):
    prompts: int = whole("prompts", 1, default=4, maximum=len(PROMPTS))
    max_new_tokens: int = whole("max new tokens", 1, default=400)
    budgets: tuple[int, ...] = whole(
        "budgets", 1, default=(64, 128), each=True
    )  # J in tokens (h = J/4); the prompts are about 50 tokens

    @classmethod
    def quick(cls) -> DecodeSettings:
        return cls(prompts=1, max_new_tokens=24, budgets=(16,))


def _ids(cell: str) -> list[int]:
    return [int(t) for t in str(cell).split()]


def run(
    lm: LoadedModel,
    specs: list[PolicySpec],
    settings: DecodeSettings,
    out: Path,
    *,
    name: str = "decode",
    fresh: bool = False,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Generate under every policy and budget; ``full`` first, as the reference of each prompt."""
    table = ResultTable(out, name, COLUMNS, KEY, {"model": lm.name, **asdict(settings)}, fresh=fresh)
    table.pin_policies([PolicySpec("full"), *specs])
    full_budget = settings.max_new_tokens  # the full cache never evicts: J only sets its (irrelevant) chunk size
    cells = [(PolicySpec("full"), full_budget)] + [(s, b) for s in specs if s.name != "full" for b in settings.budgets]
    for index, prompt in enumerate(PROMPTS[: settings.prompts]):
        reference: list[int] | None = None
        for spec, budget in cells:
            if table.has(prompt=index, policy=spec.label, budget=budget):
                continue
            if reference is None and spec.name != "full":
                frame = table.frame()
                reference = _ids(frame[(frame.prompt == index) & (frame.policy == "full")]["token_ids"].iloc[0])
            trace = generate(
                lm,
                prompt,
                policy=spec.build(),
                cache_size=budget,
                max_new_tokens=settings.max_new_tokens,
                **spec.run_settings(budget),
            )
            ids = [tok.id for tok in trace.tokens if tok.source == "generated"]
            if spec.name == "full":
                reference = ids
            table.add(
                {
                    "prompt": index,
                    "policy": spec.label,
                    "budget": budget,
                    "new_tokens": len(ids),
                    "first_divergence": first_divergence(reference, ids),
                    "repeated_4grams": round(repeated_ngram_rate(ids, NGRAM), 4),
                    "seconds": round(trace.timings["total_seconds"], 3),
                    "token_ids": " ".join(map(str, ids)),
                }
            )
        log(f"{name}: prompt {index + 1}/{settings.prompts} done")
    summary = summarise(table.frame())
    write_summary(out, name, summary)
    return summary


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per policy x budget: first divergence (mean, median), outputs identical to the full
    cache's, mean repeated-4-gram share (and the full cache's on the same prompts), mean length."""
    if rows.empty:
        return pd.DataFrame()
    full = rows[rows.policy == "full"].set_index("prompt")
    out = []
    for (policy, budget), group in rows.groupby(["policy", "budget"], sort=False):
        reference = full.reindex(group["prompt"])
        out.append(
            {
                "policy": policy,
                "budget": budget,
                "prompts": len(group),
                "first_divergence_mean": group["first_divergence"].mean(),
                "first_divergence_median": group["first_divergence"].median(),
                "identical": int((group["token_ids"].values == reference["token_ids"].values).sum()),
                "repeated_4grams": group["repeated_4grams"].mean(),
                "full_repeated_4grams": reference["repeated_4grams"].mean(),
                "new_tokens_mean": group["new_tokens"].mean(),
                "seconds_mean": group["seconds"].mean(),
            }
        )
    return pd.DataFrame(out)


def run_task(task: TaskRun) -> None:
    """``bench decode``: every registered policy unless ``--policy`` names others."""
    run(task.lm, task.specs or registered_specs(), task.settings, task.out, fresh=task.fresh, log=task.log)


def figures(frames: Frames) -> list[go.Figure]:
    return [divergence_figure(frames.summaries["decode"])]


TASK = BenchTask(
    "decode",
    "Decode-heavy generation",
    run_task,
    (Part("decode", DecodeSettings, summarise, "prompts", "prompts"),),
    decode_section,
    registered_labels,
    figures,
)
