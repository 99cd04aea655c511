"""Task 2, long-text perplexity under eviction (the StreamingLLM-style measure).

A long real text is teacher-forced through the engine in chunks of h tokens, refreshing after each
chunk exactly as in generation; the logits of every position are kept, so each token is predicted
from what the cache held at that moment. Under ``full`` this is the model's own teacher-forced NLL.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from ccviz.cases.texts import prose_segments
from ccviz.engine import CacheSession, RunConfig, prepare
from ccviz.fields import Validated, whole
from ccviz.models import LoadedModel
from ccviz.policies import Policy
from ccviz.trace import Trace

from ..figures import perplexity_figure
from ..plots import perplexity_charts
from ..registry import BenchTask, Charts, Frames, Part, TaskRun
from ..reports.perplexity import perplexity_section
from ..results import ResultTable, write_summary
from ..specs import PolicySpec, registered_labels, registered_specs

if TYPE_CHECKING:
    import plotly.graph_objects as go

COLUMNS = ["segment", "policy", "budget", "tokens", "nll_sum", "nll_mean", "seconds"]  # budget: J (h = J/4)
KEY = ["segment", "policy", "budget"]


def sequence_nll(lm: LoadedModel, text: str, **settings: Any) -> tuple[float, int]:
    """Summed next-token NLL (nats) of ``text`` (raw, no chat template) under eviction, and the token
    count; the keywords are :func:`measured_nll`'s."""
    total, count, _ = measured_nll(lm, text, **settings)
    return total, count


def measured_nll(
    lm: LoadedModel,
    text: str,
    *,
    policy: str | Policy,
    cache_size: int,
    chunk_size: int | None = None,
    frozen: int | str = "auto",
    policy_options: dict[str, Any] | None = None,
    **run_settings: Any,
) -> tuple[float, int, Trace]:
    """Summed next-token NLL (nats) of ``text`` (raw, no chat template) under eviction, the token count,
    and the run's trace (its refreshes, times and peak cache).

    ``frozen="auto"`` freezes nothing in raw text (only StreamingLLM keeps its 4 sinks); an int gives
    every policy that many never-evicted leading tokens. ``run_settings``: other RunConfig fields
    (``recent``, ``granularity``, ``pool``, ``allocation``...)."""
    config = RunConfig.of(
        policy,
        cache_size=cache_size,
        chunk_size=chunk_size,
        frozen=frozen,
        chat=False,
        max_new_tokens=1,
        policy_options=policy_options,
        **run_settings,
    )
    instance = policy if isinstance(policy, Policy) else None  # a built policy is what runs
    prepared = prepare(lm, text, config, instance)
    session = CacheSession(lm, prepared.config, policy=instance, prompt_ids=prepared.prompt_ids)
    ids = prepared.prompt_ids
    total, count = 0.0, 0
    while session.processed < len(ids) - 1:  # each pass ends where a refresh happens, or at the text's end
        start = session.processed
        chunk = ids[start : min(start + session.next_pass_length(), len(ids) - 1)]
        targets = torch.tensor(ids[start + 1 : start + 1 + len(chunk)], device=lm.device)
        logits = session.feed(chunk, all_logits=True)
        total += float(torch.nn.functional.cross_entropy(logits, targets, reduction="sum"))
        count += len(targets)
    return total, count, session.finish("complete")


@dataclass(frozen=True)
class PerplexitySettings(Validated):
    tokens: int = whole("tokens", 2, default=2048)  # per segment of prose
    segments: int = whole("segments", 1, default=4)
    budgets: tuple[int, ...] = whole("budgets", 1, default=(64, 128, 256, 512), each=True)  # J in tokens; h = J/4
    frozen: int | str = whole(
        "frozen", 0, default="auto", words=("auto",)
    )  # "auto": nothing frozen in raw text; 4: attention sinks for every policy

    @classmethod
    def quick(cls) -> PerplexitySettings:
        return cls(tokens=128, segments=1, budgets=(32,))


def run(
    lm: LoadedModel,
    specs: list[PolicySpec],
    settings: PerplexitySettings,
    out: Path,
    *,
    name: str = "perplexity",
    fresh: bool = False,
    log: Callable[[str], None] = print,
    extra: Callable[[Trace], dict] | None = None,
    extra_columns: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Measure every missing (segment, policy, budget) row; ``full`` runs once per segment. ``extra``
    adds the ``extra_columns`` to every row, from its run's trace."""
    table = ResultTable(
        out, name, COLUMNS + list(extra_columns), KEY, {"model": lm.name, **asdict(settings)}, fresh=fresh
    )
    table.pin_policies([PolicySpec("full"), *specs])
    texts = prose_segments(lm.tokenizer, settings.tokens, settings.segments)
    cells = [(PolicySpec("full"), settings.tokens)] + [
        (s, b) for s in specs if s.name != "full" for b in settings.budgets
    ]
    for segment, text in enumerate(texts):
        for spec, budget in cells:
            if table.has(segment=segment, policy=spec.label, budget=budget):
                continue
            started = time.perf_counter()
            total, count, trace = measured_nll(
                lm, text, policy=spec.build(), cache_size=budget, frozen=settings.frozen, **spec.run_settings(budget)
            )
            table.add(
                {
                    "segment": segment,
                    "policy": spec.label,
                    "budget": budget,
                    "tokens": count,
                    "nll_sum": round(total, 4),
                    "nll_mean": round(total / count, 5),
                    "seconds": round(time.perf_counter() - started, 3),
                }
                | ({} if extra is None else extra(trace))
            )
        log(f"{name}: segment {segment + 1}/{settings.segments} done")
    summary = summarise(table.frame())
    write_summary(out, name, summary)
    return summary


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per policy x budget: token-weighted mean NLL, perplexity, and the gap to the full cache
    on the same segments."""
    if rows.empty:
        return pd.DataFrame()
    full = rows[rows.policy == "full"].set_index("segment")
    out = []
    for (policy, budget), group in rows.groupby(["policy", "budget"], sort=False):
        nll = group["nll_sum"].sum() / group["tokens"].sum()
        reference = full.reindex(group["segment"])
        full_nll = reference["nll_sum"].sum() / reference["tokens"].sum()
        out.append(
            {
                "policy": policy,
                "budget": budget,
                "segments": len(group),
                "tokens": int(group["tokens"].sum()),
                "nll": nll,
                "perplexity": math.exp(nll),
                "full_nll": full_nll,
                "delta_nll": nll - full_nll,
                "seconds_mean": group["seconds"].mean(),
            }
        )
    return pd.DataFrame(out)


def run_task(task: TaskRun) -> None:
    """``bench perplexity``: every registered policy unless ``--policy`` names others."""
    run(task.lm, task.specs or registered_specs(), task.settings, task.out, fresh=task.fresh, log=task.log)


def figures(frames: Frames) -> list[go.Figure]:
    return [perplexity_figure(frames.summaries["perplexity"])]


PART = Part("perplexity", PerplexitySettings, summarise, "segments", "segments")
TASK = BenchTask(
    "perplexity",
    "Long-text perplexity",
    run_task,
    (PART,),
    perplexity_section,
    registered_labels,
    figures,
    Charts("perplexity_summary", perplexity_charts),
)
