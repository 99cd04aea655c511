"""Task 4, efficiency (the paper's Table 1), measured on this machine.

*Refresh cost*: with n entries cached (real prose), the median time of one refresh decision (the
policy's scores plus the top-J selection) as a ratio to one plain forward pass over n tokens,
timed in the same process, so the ratio survives noisy, shared machines better than seconds do,
and the peak memory the decision adds. Work a policy does during every forward pass (H2O's
attention bookkeeping) is not part of the refresh: it shows in the end-to-end times. n goes to
32,768, past SmolLM2's 8,192 positions: RoPE extends to any position, so the times are real though
the model's outputs there mean nothing. The quadratic passes stop earlier (``full_max_n``,
``attention_max_n``), and the summary fits each policy's exponent of cost against n. Beyond
``real_fill_max_n`` (8,192) the cache holds random K/V of the real shapes instead of a real fill
(:func:`synthetic_session`): the decision's cost does not depend on the values, and a real 32K fill
takes tens of minutes of CPU on 2 cores.
*End to end*: a 1,000-token prompt plus 300 new tokens per policy, each in a fresh process: wall
time and peak resident memory (Linux: the peak is reset after the model is loaded and warmed up, so
``peak_rss_mb - rss_before_mb`` is what the run itself added).
"""

from __future__ import annotations

import dataclasses
import gc
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch

from ccviz.capture import decoder_layers
from ccviz.cases.texts import prose_segments
from ccviz.engine import CacheSession, RunConfig, generate
from ccviz.fields import Validated, whole
from ccviz.models import LoadedModel, load_model
from ccviz.policies import Policy
from ccviz.policies.kvzip import KVzip

from ..figures import refresh_cost_figure, refresh_seconds_figure
from ..plots import refresh_charts
from ..processes import fresh_processes
from ..registry import BenchTask, Charts, Frames, Part, TaskRun
from ..reports.efficiency import efficiency_section
from ..results import ResultTable, write_summary
from ..specs import FULL, PolicySpec, labels_of, parse_spec, registered_specs
from ..timing import median_seconds

if TYPE_CHECKING:
    import plotly.graph_objects as go

REFRESH_COLUMNS = ["policy", "n", "cache_size", "refresh_seconds", "forward_seconds", "ratio", "repeats", "peak_mb"]
E2E_COLUMNS = [
    "policy",
    "prompt_tokens",
    "new_tokens",
    "cache_size",
    "total_seconds",
    "prefill_seconds",
    "decode_seconds",
    "refresh_seconds",
    "peak_cache_length",
    "rss_before_mb",
    "peak_rss_mb",
]
FILL_STEP = 256  # tokens per forward when filling the cache (bounds the attention captured per pass)
# Beyond the registered policies: the other fast score and the banded pass, timed at every n.
LONG_CONTEXT_SPECS = (
    "counter_causal_fast:window=128",
    "counter_causal_fast:window=512",
    "counter_causal:window=512",
)


@dataclass(frozen=True)
class EfficiencySettings(Validated):
    sizes: tuple[int, ...] = whole("sizes", 2, default=(512, 1024, 2048, 4096, 8192, 16384, 32768), each=True)
    repeats: int = whole("repeats", 1, default=3)
    long_repeats: int = whole("repeats beyond long_from", 1, default=1)  # one forward at 32K takes minutes
    long_from: int = whole("long_from", 2, default=4096)  # n above this: long_repeats, and no untimed warm-up forward
    forward_max_n: int = whole(
        "forward_max_n", 2, default=8192
    )  # the plain forward baseline (a ratio's denominator) up to here
    real_fill_max_n: int = whole(
        "real_fill_max_n", 2, default=8192
    )  # beyond: random K/V of the right shapes (see synthetic_session)
    full_max_n: int = whole("full variant's largest n", 2, default=8192)  # all L layers re-run: O(L n^2) unbanded
    attention_max_n: int = whole(
        "attention policies' largest n", 2, default=4096
    )  # their fill captures attention weights
    prompt_tokens: int = whole("prompt tokens", 1, default=1000)
    new_tokens: int = whole("new tokens", 1, default=300)
    cache_size: int = whole("cache size J", 1, default=256)  # J of the end-to-end runs (h = J/4)

    @classmethod
    def quick(cls) -> EfficiencySettings:
        return cls(
            sizes=(64, 128), repeats=1, prompt_tokens=64, new_tokens=4, cache_size=16, full_max_n=64, attention_max_n=64
        )


def _significant(value: float) -> float:
    return float(f"{value:.4g}")  # cheap policies cost 1e-5 of a forward: keep digits, not decimals


@torch.inference_mode()
def forward_seconds(lm: LoadedModel, ids: list[int], repeats: int, warmup: int = 1) -> float:
    """Median time of one plain forward over ``ids`` (a prefill: cache built, last logits only)."""
    tokens = torch.tensor([ids], device=lm.device)
    return median_seconds(lambda: lm.model(input_ids=tokens, logits_to_keep=1), repeats, warmup)


def largest_n(policy: Policy, settings: EfficiencySettings) -> int | None:
    """The largest n a policy's refresh is timed at: quadratic passes stop early (None: every n). The full
    counter-causal variant and kvzip (whose repeat is a forward over as many tokens as the cache holds)
    re-run every layer over the cache at each refresh."""
    if policy.attention is not None or policy.keeps_pass_state():
        return settings.attention_max_n
    if getattr(policy, "variant", None) == "full" or isinstance(policy, KVzip):
        return settings.full_max_n
    return None


def timed_sizes(label: str, settings: dict[str, Any]) -> list[int]:
    """The sizes a results folder's settings (its metadata, any version) time the policy ``label`` at."""
    known = {f.name for f in dataclasses.fields(EfficiencySettings)}
    chosen = EfficiencySettings(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in known}
    )
    limit = largest_n(parse_spec(label).build(), chosen)
    return [n for n in chosen.sizes if limit is None or n <= limit]


def fill_groups(specs: list[PolicySpec], policies: dict[str, Policy], num_layers: int) -> list[list[PolicySpec]]:
    """Specs whose refreshes can be timed on one filled cache, the first of each group filling it.

    A policy that only reads the cache (no attention captured, no per-pass state) can be timed on a
    cache filled under any policy at the same granularity that stores at least the residual rows it
    reads: filling 32K tokens takes minutes, so such policies share fills. The others fill their own.
    """
    groups: list[list[PolicySpec]] = []
    shared: dict[tuple, list[PolicySpec]] = {}
    for spec in specs:
        policy = policies[spec.label]
        if policy.attention is not None or policy.keeps_pass_state():
            groups.append([spec])
        else:
            shared.setdefault(tuple(spec.engine.items()), []).append(spec)
    layers = {s.label: set(policies[s.label].residual_layers(num_layers)) for s in specs if s.label in policies}
    for members in shared.values():
        while members:
            filler = max(members, key=lambda s: len(layers[s.label]))
            covered = [s for s in members if layers[s.label] <= layers[filler.label]]
            groups.append([filler, *(s for s in covered if s is not filler)])
            members = [s for s in members if s not in covered]
    return groups


def synthetic_session(lm: LoadedModel, ids: list[int], spec: PolicySpec) -> CacheSession:
    """A session under ``spec`` whose cache holds ``ids`` with random K/V (and residual rows) of the real
    shapes and dtype, nothing computed: a refresh decision costs the same whatever the values (no
    kernel here branches on them), and a real fill of 32K tokens is tens of minutes of CPU. Only
    policies that read nothing but the cache can be timed this way (:func:`fill_groups`' shared ones)."""
    from transformers import DynamicCache

    n, model = len(ids), lm.model
    session = filled_session(lm, ids[:1], spec, cache_size=n)  # the config, with J = h = n
    config, generator = model.config, torch.Generator().manual_seed(0)
    dtype, device = next(model.parameters()).dtype, lm.device
    kv_heads, head_dim = (
        config.num_key_value_heads,
        getattr(config, "head_dim", config.hidden_size // config.num_attention_heads),
    )
    session.cache.kv = DynamicCache()
    for layer in range(len(decoder_layers(model))):
        keys, values = (torch.randn(1, kv_heads, n, head_dim, generator=generator).to(device, dtype) for _ in range(2))
        session.cache.kv.update(keys, values, layer)
    residuals = {
        layer: torch.randn(n, config.hidden_size, generator=generator).to(device, dtype)
        for layer in session.residual_layers
    }
    session.cache.tok, session.cache.pos, session.cache.residuals = torch.tensor(ids), torch.arange(n), residuals
    return session


def refresh_cost(session: CacheSession, policy: Policy, keep: int, repeats: int) -> tuple[float, float]:
    """Median seconds of one refresh decision by ``policy`` over the session's cache, and the peak memory
    (MB) one decision adds above what was resident (NaN where the peak cannot be reset)."""
    seconds = median_seconds(lambda: decide(session, keep, policy), repeats)
    gc.collect()
    reset = _reset_peak_memory()
    before = _memory_kb("VmRSS")
    decide(session, keep, policy)
    peak = (_memory_kb("VmHWM") - before) / 1024 if reset else float("nan")
    return seconds, peak


def filled_session(lm: LoadedModel, ids: list[int], spec: PolicySpec, *, cache_size: int | None = None) -> CacheSession:
    """A session under ``spec`` (its run settings too) holding all of ``ids``, nothing evicted: J = h =
    len(ids), so its one refresh (after the last token) keeps everything; passes of at most
    ``FILL_STEP`` tokens. ``cache_size``: a larger J = h instead, so that tokens fed later do not
    refresh before it is reached."""
    n = len(ids)
    J = n if cache_size is None else max(cache_size, n)
    settings = {k: v for k, v in spec.run_settings(J).items() if k != "recent"}
    config = RunConfig(
        policy=spec.name,
        policy_options=spec.build().options(),
        cache_size=J,
        chunk_size=J,
        frozen=0,
        chat=False,
        prefill_step=min(FILL_STEP, n),
        **settings,
    )
    session = CacheSession(lm, config)
    session.feed(ids)
    return session


@torch.inference_mode()
def decide(session: CacheSession, keep: int, policy: Policy | None = None) -> torch.Tensor:
    """One refresh decision over the session's cache as it is: the scores of ``policy`` (default: the
    session's), then the best ``keep`` at the session's granularity (the policy's default recent
    window always among them). Nothing is evicted: the timed part of a refresh."""
    policy = policy or session.policy
    scores = policy.score_candidates(session.lm.model, session.candidates()).to(torch.float32).cpu()
    return session.survivors(scores, keep, policy.default_recent(keep))


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


def end_to_end(
    model_args: dict[str, Any], threads: int, spec: PolicySpec, settings: EfficiencySettings, prompt: str
) -> dict[str, Any]:
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
        "policy": spec.label,
        "prompt_tokens": trace.prompt_length,
        "new_tokens": settings.new_tokens,
        "cache_size": settings.cache_size,
        "total_seconds": round(t["total_seconds"], 3),
        "prefill_seconds": round(t["prefill_seconds"], 3),
        "decode_seconds": round(t["decode_seconds"], 3),
        "refresh_seconds": round(t["refresh_seconds"], 3),
        "peak_cache_length": trace.peak_cache_length,
        "rss_before_mb": round(before / 1024, 1),
        "peak_rss_mb": round(_memory_kb("VmHWM") / 1024, 1) if reset else "",
    }


def run(
    lm: LoadedModel,
    specs: list[PolicySpec],
    settings: EfficiencySettings,
    out: Path,
    *,
    name: str = "efficiency",
    fresh: bool = False,
    log: Callable[[str], None] = print,
    model_args: dict[str, Any] | None = None,
) -> dict[str, pd.DataFrame]:
    """Refresh cost in this process; end to end in one fresh process per policy, which loads the model
    with ``model_args`` (``load_model``'s arguments; default: the embedded model on the CPU)."""
    model_args = model_args or {}
    saved = {"model": lm.name, "threads": torch.get_num_threads(), **asdict(settings)}
    refresh = ResultTable(out, f"{name}_refresh", REFRESH_COLUMNS, ["policy", "n"], saved, fresh=fresh)
    # end to end depends on these settings only, so growing the refresh sizes keeps its rows
    e2e_saved = {k: saved[k] for k in ("model", "threads", "prompt_tokens", "new_tokens", "cache_size")}
    e2e = ResultTable(out, f"{name}_e2e", E2E_COLUMNS, ["policy"], e2e_saved, fresh=fresh)
    refresh.pin_policies(specs)
    e2e.pin_policies(specs)
    policies = {s.label: s.build() for s in specs}
    evicting = [s for s in specs if policies[s.label].evicts]
    long_lm = dataclasses.replace(lm, context=max(lm.max_positions, *settings.sizes))  # timing only past 8K
    num_layers = len(decoder_layers(lm.model))
    for size in settings.sizes:
        todo = [
            s
            for s in evicting
            if not refresh.has(policy=s.label, n=size) and (largest_n(policies[s.label], settings) or size) >= size
        ]
        if not todo:
            continue
        text = prose_segments(lm.tokenizer, size, 1)[0]
        ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
        keep = round(0.8 * len(ids))  # J = 0.8 n: the n candidates are the J + h of a refresh with h = J/4
        long = size > settings.long_from
        repeats = settings.long_repeats if long else settings.repeats
        forward = (
            forward_seconds(long_lm, ids, repeats, warmup=0 if long else 1)
            if size <= settings.forward_max_n
            else float("nan")
        )
        for group in fill_groups(todo, policies, num_layers):
            real = size <= settings.real_fill_max_n
            if not real and (
                policies[group[0].label].attention is not None or policies[group[0].label].keeps_pass_state()
            ):
                continue  # a policy with per-pass state needs a real fill (attention_max_n keeps it below this)
            session = (filled_session if real else synthetic_session)(long_lm, ids, group[0])
            for spec in group:
                seconds, peak = refresh_cost(session, policies[spec.label], keep, repeats)
                refresh.add(
                    {
                        "policy": spec.label,
                        "n": size,
                        "cache_size": keep,
                        "refresh_seconds": _significant(seconds),
                        "forward_seconds": _significant(forward),
                        "ratio": _significant(seconds / forward),  # NaN past forward_max_n
                        "repeats": repeats,
                        "peak_mb": round(peak, 1),
                    }
                )
            del session
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


def default_specs() -> list[PolicySpec]:
    """Every registered policy (and the paper's forms), plus the banded pass."""
    return [*registered_specs(), *(parse_spec(text) for text in LONG_CONTEXT_SPECS)]


def fitted_exponent(n: pd.Series, seconds: pd.Series) -> float:
    """The slope of log(seconds) against log(n), least squares: cost ~ n^slope (NaN with under 2 sizes)."""
    measured = pd.to_numeric(seconds, errors="coerce") > 0
    x, y = n[measured].astype(float).map(math.log), seconds[measured].astype(float).map(math.log)
    if x.nunique() < 2:
        return float("nan")
    return float(((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum())


def summarise(refresh: pd.DataFrame, e2e: pd.DataFrame) -> pd.DataFrame:
    """The paper's Table 1 in one frame: one row per policy, refresh/forward ratio at each n, the fitted
    exponent of refresh cost against n (and of the plain forward's, for scale), the largest n timed and
    the peak memory a refresh added there, then the end-to-end time (and its ratio to the full
    cache's), the peak RSS and how much it grew during the run."""
    if e2e.empty and refresh.empty:
        return pd.DataFrame()
    table = pd.DataFrame(
        index=pd.Index(list(dict.fromkeys([*e2e.get("policy", []), *refresh.get("policy", [])])), name="policy")
    )
    if not refresh.empty:
        ratios = refresh.pivot_table(index="policy", columns="n", values="ratio", aggfunc="median")
        table = table.join(ratios.rename(columns=lambda n: f"refresh_ratio_n{n}"))
        fits = {}
        for policy, rows in refresh.groupby("policy", sort=False):
            largest = rows.loc[rows["n"].astype(int).idxmax()]
            fits[policy] = {
                "refresh_exponent": fitted_exponent(rows["n"], rows["refresh_seconds"]),
                "forward_exponent": fitted_exponent(rows["n"], rows["forward_seconds"]),
                "largest_n": int(largest["n"]),
                "refresh_peak_mb": pd.to_numeric(pd.Series([largest.get("peak_mb")]), errors="coerce")[0],
            }
        table = table.join(pd.DataFrame.from_dict(fits, orient="index"))
    if not e2e.empty:
        e = e2e.set_index("policy")
        table["total_seconds"] = e["total_seconds"]
        if "full" in e.index:
            table["time_vs_full"] = table["total_seconds"] / e.loc["full", "total_seconds"]
        table["peak_rss_mb"] = pd.to_numeric(e["peak_rss_mb"], errors="coerce")
        table["rss_growth_mb"] = table["peak_rss_mb"] - e["rss_before_mb"]
    return table.reset_index()


def run_task(task: TaskRun) -> None:
    """``bench efficiency``: :func:`default_specs` unless ``--policy`` names others."""
    run(
        task.lm,
        task.specs or default_specs(),
        task.settings,
        task.out,
        model_args=task.model_args,
        fresh=task.fresh,
        log=task.log,
    )


def efficiency_gaps(
    task: BenchTask, part: Part, rows: list[pd.DataFrame], summary: pd.DataFrame, settings: dict[str, Any]
) -> list[str]:
    """What an efficiency run still lacks: sizes a policy's refresh is not yet timed at, end-to-end runs."""
    refresh, e2e = rows
    gaps = []
    if refresh.empty:
        gaps.append("refresh cost: nothing measured yet")
    else:
        done = refresh.groupby("policy")["n"].nunique()
        expected = {policy: len(timed_sizes(policy, settings)) for policy in done.index}
        short = [policy for policy, count in done.items() if count < expected[policy]]
        if short:
            which = ", ".join(short) if len(short) < len(done) else "every policy"
            gaps.append(f"refresh cost: {which} not yet at every size it is timed at")
    wanted = set(refresh.get("policy", [])) | {FULL}
    missing = sorted(wanted - set(e2e.get("policy", [])))
    if e2e.empty:
        gaps.append("end to end: nothing measured yet")
    elif missing:
        gaps.append(f"end to end: {', '.join(missing)} not measured yet")
    return gaps


def default_labels(measured: set[str], quick: bool) -> set[str]:
    return labels_of(default_specs())


def figures(frames: Frames) -> list[go.Figure]:
    """The page's figures: each refresh's cost in multiples of one forward, and in seconds with its fitted growth."""
    refresh = frames.rows.get("efficiency_refresh", pd.DataFrame())
    if refresh.empty:
        return []
    summary = frames.summaries.get("efficiency", pd.DataFrame())
    exponents = dict(zip(summary["policy"], summary["refresh_exponent"])) if "refresh_exponent" in summary else {}
    return [refresh_cost_figure(refresh), refresh_seconds_figure(refresh, exponents)]


TASK = BenchTask(
    "efficiency",
    "Efficiency",
    run_task,
    (
        Part(
            "efficiency",
            EfficiencySettings,
            summarise,
            gaps=efficiency_gaps,
            rows=("efficiency_refresh", "efficiency_e2e"),
        ),
    ),
    efficiency_section,
    default_labels,
    figures,
    Charts("efficiency_refresh", refresh_charts),
)
