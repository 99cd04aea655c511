"""Task 4, efficiency (the paper's Table 1), measured on this machine.

*Refresh cost*: with n entries cached (real prose), the median time of one refresh decision (the
policy's scores plus the top-J selection) as a ratio to one plain forward pass over n tokens,
timed in the same process, so the ratio survives noisy, shared machines better than seconds do.
Work a policy does during every forward pass (H2O's attention bookkeeping) is not part of the
refresh: it shows in the end-to-end times.
*End to end*: a 1,000-token prompt plus 300 new tokens per policy, each in a fresh process: wall
time and peak resident memory (Linux: the peak is reset after the model is loaded and warmed up, so
``peak_rss_mb - rss_before_mb`` is what the run itself added).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import torch

from ..engine import CacheSession, RunConfig, generate
from ..fields import Validated, whole
from ..models import LoadedModel, load_model
from ..policies import select_survivors
from .processes import fresh_processes
from .results import ResultTable, write_summary
from .specs import PolicySpec
from .texts import prose_segments
from .timing import median_seconds

REFRESH_COLUMNS = ["policy", "n", "cache_size", "refresh_seconds", "forward_seconds", "ratio", "repeats"]
E2E_COLUMNS = [
    "policy", "prompt_tokens", "new_tokens", "cache_size", "total_seconds", "prefill_seconds", "decode_seconds",
    "refresh_seconds", "peak_cache_length", "rss_before_mb", "peak_rss_mb",
]
FILL_STEP = 256  # tokens per forward when filling the cache (bounds the attention captured per pass)


@dataclass(frozen=True)
class EfficiencySettings(Validated):
    sizes: tuple[int, ...] = whole("sizes", 2, default=(512, 1024, 2048, 4096), each=True)
    repeats: int = whole("repeats", 1, default=3)
    prompt_tokens: int = whole("prompt tokens", 1, default=1000)
    new_tokens: int = whole("new tokens", 1, default=300)
    cache_size: int = whole("cache size J", 1, default=256)  # J of the end-to-end runs (h = J/4)

    @classmethod
    def quick(cls) -> "EfficiencySettings":
        return cls(sizes=(64,), repeats=1, prompt_tokens=64, new_tokens=4, cache_size=16)


def _significant(value: float) -> float:
    return float(f"{value:.4g}")  # cheap policies cost 1e-5 of a forward: keep digits, not decimals


@torch.inference_mode()
def forward_seconds(lm: LoadedModel, ids: list[int], repeats: int) -> float:
    """Median time of one plain forward over ``ids`` (a prefill: cache built, last logits only)."""
    tokens = torch.tensor([ids], device=lm.device)
    return median_seconds(lambda: lm.model(input_ids=tokens, logits_to_keep=1), repeats)


def refresh_seconds(lm: LoadedModel, text: str, spec: PolicySpec, repeats: int) -> tuple[float, int]:
    """Median time of one refresh decision with every token of ``text`` cached, and the J it kept.

    J = 0.8 n, so the n candidates are the J + h of a refresh with the paper's h = J/4.
    """
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    session = filled_session(lm, ids, spec)
    keep = round(0.8 * len(ids))
    return median_seconds(lambda: decide(session, keep), repeats), keep


def filled_session(lm: LoadedModel, ids: list[int], spec: PolicySpec, *, cache_size: int | None = None) -> CacheSession:
    """A session under ``spec`` holding all of ``ids``, nothing evicted: J = h = len(ids), so its one
    refresh (after the last token) keeps everything; passes of at most ``FILL_STEP`` tokens.
    ``cache_size``: a larger J = h instead, so that tokens fed later do not refresh before it is reached."""
    n = len(ids)
    J = n if cache_size is None else max(cache_size, n)
    config = RunConfig(policy=spec.name, policy_options=spec.options, cache_size=J, chunk_size=J, frozen=0, chat=False,
                       prefill_step=min(FILL_STEP, n))
    session = CacheSession(lm, config)
    session.feed(ids)
    return session


@torch.inference_mode()
def decide(session: CacheSession, keep: int) -> torch.Tensor:
    """One refresh decision over the session's cache as it is: the policy's scores, then the top ``keep``
    (its default recent window always among them). Nothing is evicted: the timed part of a refresh."""
    policy = session.policy
    scores = policy.score_candidates(session.lm.model, session.cache).to(torch.float32).cpu()
    return select_survivors(scores, keep, policy.default_recent(keep))


def _memory_kb(field: str) -> float:
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), flags=re.MULTILINE)
    return float(match.group(1)) if match else float("nan")


def _reset_peak_memory() -> bool:
    """Reset this process's peak RSS (Linux >= 4.0), so each run's peak is its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def end_to_end(model_args: dict[str, Any], threads: int, spec: PolicySpec, settings: EfficiencySettings,
               prompt: str) -> dict[str, Any]:
    """One end-to-end run in this (fresh) process: wall times and peak RSS, after a short warm-up."""
    torch.set_num_threads(threads)
    lm = load_model(**model_args)
    kwargs = dict(cache_size=settings.cache_size, max_new_tokens=settings.new_tokens, chat=False, stop_at_eos=False)
    generate(lm, prompt[:200], policy=spec.build(), **{**kwargs, "max_new_tokens": 2})  # kernels, allocator
    reset = _reset_peak_memory()
    before = _memory_kb("VmRSS")
    trace = generate(lm, prompt, policy=spec.build(), **kwargs)
    t = trace.timings
    return {
        "policy": spec.label, "prompt_tokens": trace.prompt_length, "new_tokens": settings.new_tokens,
        "cache_size": settings.cache_size, "total_seconds": round(t["total_seconds"], 3),
        "prefill_seconds": round(t["prefill_seconds"], 3), "decode_seconds": round(t["decode_seconds"], 3),
        "refresh_seconds": round(t["refresh_seconds"], 3), "peak_cache_length": trace.peak_cache_length,
        "rss_before_mb": round(before / 1024, 1), "peak_rss_mb": round(_memory_kb("VmHWM") / 1024, 1) if reset else "",
    }


def run(lm: LoadedModel, specs: list[PolicySpec], settings: EfficiencySettings, out: Path, *, name: str = "efficiency",
        fresh: bool = False, log: Callable[[str], None] = print, model_args: dict[str, Any] | None = None,
        ) -> dict[str, pd.DataFrame]:
    """Refresh cost in this process; end to end in one fresh process per policy, which loads the model
    with ``model_args`` (``load_model``'s arguments; default: the embedded model on the CPU)."""
    model_args = model_args or {}
    saved = {"model": lm.name, "threads": torch.get_num_threads(), **asdict(settings)}
    refresh = ResultTable(out, f"{name}_refresh", REFRESH_COLUMNS, ["policy", "n"], saved, fresh=fresh)
    e2e = ResultTable(out, f"{name}_e2e", E2E_COLUMNS, ["policy"], saved, fresh=fresh)
    refresh.pin_policies(specs)
    e2e.pin_policies(specs)
    evicting = [s for s in specs if s.build().evicts]
    for size in settings.sizes:
        todo = [s for s in evicting if not refresh.has(policy=s.label, n=size)]
        if not todo:
            continue
        text = prose_segments(lm.tokenizer, size, 1)[0]
        ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
        forward = forward_seconds(lm, ids, settings.repeats)
        for spec in todo:
            seconds, keep = refresh_seconds(lm, text, spec, settings.repeats)
            refresh.add({
                "policy": spec.label, "n": size, "cache_size": keep, "refresh_seconds": _significant(seconds),
                "forward_seconds": _significant(forward), "ratio": _significant(seconds / forward),
                "repeats": settings.repeats,
            })
        log(f"{name}: refresh cost at n={size} done")
    prompt = prose_segments(lm.tokenizer, settings.prompt_tokens, 1)[0]
    todo = [s for s in specs if not e2e.has(policy=s.label)]
    with fresh_processes(__name__) as pool:  # one per policy
        for spec in todo:
            e2e.add(pool.submit(end_to_end, model_args, torch.get_num_threads(), spec, settings, prompt).result())
            log(f"{name}: end to end {spec.label} done")
    summary = summarise(refresh.frame(), e2e.frame())
    write_summary(out, name, summary)
    return {"refresh": refresh.frame(), "e2e": e2e.frame(), "summary": summary}


def summarise(refresh: pd.DataFrame, e2e: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 1 in one frame: one row per policy, refresh/forward ratio at each n, then the
    end-to-end time (and its ratio to the full cache's), the peak RSS and how much it grew during the run."""
    if e2e.empty and refresh.empty:
        return pd.DataFrame()
    table = pd.DataFrame(index=pd.Index(list(dict.fromkeys([*e2e.get("policy", []), *refresh.get("policy", [])])), name="policy"))
    if not refresh.empty:
        ratios = refresh.pivot_table(index="policy", columns="n", values="ratio", aggfunc="median")
        table = table.join(ratios.rename(columns=lambda n: f"refresh_ratio_n{n}"))
    if not e2e.empty:
        e = e2e.set_index("policy")
        table["total_seconds"] = e["total_seconds"]
        if "full" in e.index:
            table["time_vs_full"] = table["total_seconds"] / e.loc["full", "total_seconds"]
        table["peak_rss_mb"] = pd.to_numeric(e["peak_rss_mb"], errors="coerce")
        table["rss_growth_mb"] = table["peak_rss_mb"] - e["rss_before_mb"]
    return table.reset_index()
