"""Cache-managed generation: chunked prefill, decode, and a refresh every h processed tokens.

This is method.md section 1. Every new token is attended with everything cached; a refresh then
keeps the frozen prefix plus the J best-scored candidates (the last ``recent`` always among them),
one decision for all layers and heads. Positions are original absolute positions, passed explicitly
forever, so evicting entries never renumbers anything.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import __version__
from .cache import CacheState
from .capture import CAPTURE_KWARG, Capture, captures_attention, install_hooks
from .errors import CcvizError
from .models import LoadedModel
from .policies import Policy, make_policy, select_survivors
from .policies.companions import companions
from .prompts import encode_prompt
from .trace import Cycle, TokenRecord, Trace

ProgressCallback = Callable[[int, int, int], None]
"""Called as ``progress(refreshes_done, tokens_processed, tokens_total)`` after every forward pass."""
RefreshCallback = Callable[[Trace], None]
"""Called as ``on_refresh(trace)`` after every refresh with the live trace: its config, every cycle so
far and the records of every token up to the newest cycle's step, i.e. a loadable partial trace (the app's
worker process streams it to the page as the run goes)."""
RECORD_CHOICES = ("policy", "all")


class GenerationFailed(RuntimeError):
    """A run broke part-way; ``trace`` holds every cycle completed before the error."""

    def __init__(self, message: str, trace: Trace):
        super().__init__(message)
        self.trace = trace


@dataclass
class _Settings:
    policy: Policy
    cache_size: int
    chunk_size: int
    frozen: int
    recent: int
    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_p: float
    seed: int | None
    prefill_step: int
    stop_at_eos: bool
    companions: list[Policy] = field(default_factory=list)  # scored for the trace only (record="all")
    config: dict[str, Any] = field(default_factory=dict)


def _require_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CcvizError(f"{name} must be a whole number, got {value!r}")
    if value < minimum:
        raise CcvizError(f"{name} must be at least {minimum}, got {value}")
    return value


def _eos_ids(lm: LoadedModel) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(lm.model, "generation_config", None), lm.model.config, lm.tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids


class _Run:
    """The mutable state of one generation; created per call, so runs never share anything."""

    def __init__(self, lm: LoadedModel, prompt_ids: list[int], settings: _Settings):
        self.started = time.perf_counter()  # total_seconds counts from here (generate runs the run at once)
        self.lm = lm
        self.model = lm.model
        self.s = settings
        self.prompt_ids = prompt_ids
        self.device = lm.device
        from transformers import DynamicCache

        self.state = CacheState(kv=DynamicCache(), frozen=settings.frozen)
        self.eos = _eos_ids(lm)
        self.processed = 0
        self.generated: list[int] = []  # the last one is picked but not yet processed
        self.on_refresh: RefreshCallback | None = None
        self.total = len(prompt_ids) + settings.max_new_tokens
        self.generator = torch.Generator(device="cpu")
        if settings.seed is not None:
            self.generator.manual_seed(settings.seed)
        self.trace = Trace(config=settings.config)
        self.timings = {"prefill_seconds": 0.0, "decode_seconds": 0.0, "refresh_seconds": 0.0}
        install_hooks(self.model)
        # The policy and its companions all watch every forward pass; one capture serves them all.
        self.observers = [settings.policy, *settings.companions]
        self.needs_hidden = any(p.needs_hidden for p in self.observers)
        self.attention_needs = [p.attention for p in self.observers if p.attention is not None]
        if self.attention_needs and not captures_attention(self.model):
            reader = next(p.name for p in self.observers if p.attention is not None)
            raise CcvizError(
                f"{reader!r} reads attention weights, which ccviz captures on SDPA models only: "
                "load the model with ccviz.load_model (or attn_implementation='sdpa')"
            )

    # ----- one forward over new tokens -------------------------------------------------------
    @torch.inference_mode()
    def _forward(self, ids: list[int], logits_to_keep: int = 1) -> torch.Tensor:
        """Process ``ids``; return the last position's logits, or ``[k, vocab]`` for ``logits_to_keep`` k != 1
        (0: every position, as teacher-forced perplexity needs)."""
        start = self.processed
        tok = torch.tensor(ids, dtype=torch.long)
        pos = torch.arange(start, start + len(ids), dtype=torch.long)
        capture = Capture.for_needs(self.model, self.attention_needs, hidden=self.needs_hidden)
        out = self.model(
            input_ids=tok[None].to(self.device),
            position_ids=pos[None].to(self.device),
            past_key_values=self.state.kv,
            use_cache=True,
            logits_to_keep=logits_to_keep,
            **{CAPTURE_KWARG: capture},
        )
        self.state.append(tok, pos, capture.hidden_states)
        for observer in self.observers:
            observer.observe(self.model, self.state, capture)
        self.processed += len(ids)
        self.trace.peak_cache_length = max(self.trace.peak_cache_length, len(self.state))
        return out.logits[0, -1].float() if logits_to_keep == 1 else out.logits[0].float()

    # ----- refresh ---------------------------------------------------------------------------
    def _score(self, scorer: Policy, candidates: torch.Tensor) -> torch.Tensor:
        score = scorer.score_candidates(self.model, self.state).to(torch.float32).cpu()
        if score.shape != candidates.shape:
            raise RuntimeError(f"policy {scorer.name!r} returned {tuple(score.shape)} scores for {candidates.numel()} candidates")
        if torch.isnan(score).any():
            raise RuntimeError(f"policy {scorer.name!r} returned NaN scores")
        return score

    @torch.inference_mode()
    def _refresh(self, phase: str) -> None:
        state, policy = self.state, self.s.policy
        candidates = state.pos[state.frozen :]
        # Companion signals see the same candidates; they are not timed as part of the policy's refresh.
        recorded = {scorer.signal: self._score(scorer, candidates).tolist() for scorer in self.s.companions}
        started = time.perf_counter()
        scores: dict[str, list[float]] = {}
        if policy.evicts:
            score = self._score(policy, candidates)
            scores[policy.signal] = score.tolist()
            if candidates.numel() > self.s.cache_size:
                survivors = select_survivors(score, self.s.cache_size, self.s.recent)
                state.keep(torch.cat([torch.arange(state.frozen), state.frozen + survivors]))
        seconds = time.perf_counter() - started
        self.timings["refresh_seconds"] += seconds
        scores.update(recorded)
        self.trace.cycles.append(
            Cycle(
                index=len(self.trace.cycles),
                step=self.processed,
                phase=phase,
                candidates=candidates.tolist(),
                kept=state.pos.tolist(),
                scores=scores,
                seconds=seconds,
            )
        )
        self._record_tokens(self.processed)
        if self.on_refresh is not None:
            self.on_refresh(self.trace)

    def _after_forward(self, phase: str, progress: ProgressCallback | None) -> None:
        if self.processed % self.s.chunk_size == 0:
            self._refresh(phase)
        if progress is not None:
            progress(len(self.trace.cycles), self.processed, self.total)

    # ----- decoding --------------------------------------------------------------------------
    def _pick(self, logits: torch.Tensor) -> int:
        if not self.s.do_sample:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.cpu() / self.s.temperature, dim=-1)
        if self.s.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            outside = torch.cumsum(sorted_probs, dim=-1) - sorted_probs >= self.s.top_p
            sorted_probs[outside] = 0.0
            probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def run(self, progress: ProgressCallback | None, should_stop: Callable[[], bool] | None) -> Trace:
        h, prompt, generated = self.s.chunk_size, self.prompt_ids, self.generated
        stop_reason = "max_new_tokens"
        logits = None
        while self.processed < len(prompt):
            if should_stop is not None and should_stop():
                stop_reason = "cancelled"
                break
            # Chunks end on multiples of h (where refreshes happen), at most prefill_step tokens each.
            end = min(len(prompt), (self.processed // h + 1) * h, self.processed + self.s.prefill_step)
            t0 = time.perf_counter()
            logits = self._forward(prompt[self.processed : end])
            self.timings["prefill_seconds"] += time.perf_counter() - t0
            self._after_forward("prefill", progress)
        if stop_reason != "cancelled":
            generated.append(self._pick(logits))
            while True:
                if self.s.stop_at_eos and generated[-1] in self.eos:
                    stop_reason = "eos"
                    break
                if len(generated) >= self.s.max_new_tokens:
                    break
                if should_stop is not None and should_stop():
                    stop_reason = "cancelled"
                    break
                t0 = time.perf_counter()
                logits = self._forward([generated[-1]])
                self.timings["decode_seconds"] += time.perf_counter() - t0
                self._after_forward("decode", progress)
                generated.append(self._pick(logits))
        self.finish(stop_reason)
        return self.trace

    def _record_tokens(self, end: int) -> None:
        """Append the records of timesteps up to ``end`` (prompt, then generated) to the trace's tokens."""
        start = len(self.trace.tokens)
        n_prompt = len(self.prompt_ids)
        ids = self.prompt_ids[start:end] + self.generated[max(start - n_prompt, 0) : max(end - n_prompt, 0)]
        pieces = self.lm.tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        self.trace.tokens.extend(
            TokenRecord(t=t, id=i, text=piece, source="prompt" if t < n_prompt else "generated")
            for t, (i, piece) in enumerate(zip(ids, pieces), start=start)
        )

    def finish(self, stop_reason: str, error: str | None = None) -> None:
        """Complete the trace with every token so far; also after an error, so a failed run still loads."""
        self._record_tokens(len(self.prompt_ids) + len(self.generated))
        self.trace.output_text = self.lm.tokenizer.decode(self.generated, skip_special_tokens=True)
        self.trace.stop_reason = stop_reason
        self.trace.status = "error" if error else "cancelled" if stop_reason == "cancelled" else "complete"
        self.trace.error = error
        self.timings["total_seconds"] = time.perf_counter() - self.started
        self.trace.timings = dict(self.timings)


def _settings(lm: LoadedModel, n_prompt: int, template_prefix: int, **kw: Any) -> _Settings:
    options = kw["policy_options"] or {}
    policy = kw["policy"] if isinstance(kw["policy"], Policy) else make_policy(str(kw["policy"]), **options)
    cache_size = _require_int("cache size J", kw["cache_size"], 1)
    if kw["chunk_size"] is None:
        chunk_size = max(cache_size // 4, 1)  # the paper's default h = J/4
    else:
        chunk_size = _require_int("chunk size h", kw["chunk_size"], 1)
    if chunk_size > cache_size:
        raise CcvizError(f"chunk size h ({chunk_size}) must not exceed the cache size J ({cache_size})")
    max_new = _require_int("max new tokens", kw["max_new_tokens"], 1)
    limit = lm.max_positions
    if chunk_size > limit:
        raise CcvizError(f"chunk size h ({chunk_size}) exceeds the model's context of {limit} positions")
    if n_prompt + max_new > limit:
        raise CcvizError(
            f"the prompt has {n_prompt} tokens; with {max_new} new tokens that exceeds the model's "
            f"{limit} positions: shorten the prompt or lower max new tokens"
        )
    frozen = kw["frozen"]
    if frozen == "auto":
        frozen = template_prefix
    else:
        frozen = _require_int("frozen", frozen, 0)
        if frozen > n_prompt:
            raise CcvizError(f"frozen ({frozen}) is larger than the prompt ({n_prompt} tokens)")
    frozen = max(frozen, min(policy.sinks, n_prompt))
    recent = policy.default_recent(cache_size) if kw["recent"] is None else _require_int("recent", kw["recent"], 0)
    if recent > cache_size:
        raise CcvizError(f"recent ({recent}) must not exceed the cache size J ({cache_size})")
    do_sample = bool(kw["do_sample"])
    temperature, top_p = float(kw["temperature"]), float(kw["top_p"])
    if do_sample and not temperature > 0:
        raise CcvizError(f"temperature must be above 0 when sampling, got {temperature}")
    if do_sample and not 0 < top_p <= 1:
        raise CcvizError(f"top-p must be in (0, 1], got {top_p}")
    seed = kw["seed"]
    if seed is not None:
        seed = _require_int("seed", seed, 0)
    prefill_step = chunk_size if kw["prefill_step"] is None else _require_int("prefill step", kw["prefill_step"], 1)
    stop_at_eos = bool(kw.get("stop_at_eos", True))
    record = kw.get("record", "policy")
    if record not in RECORD_CHOICES:
        raise CcvizError(f"record must be one of {', '.join(RECORD_CHOICES)}, got {record!r}")
    config = {
        "model": lm.name,
        "policy": policy.name,
        "policy_options": policy.options(),
        "cache_size": cache_size,
        "chunk_size": chunk_size,
        "frozen": frozen,
        "recent": recent,
        "max_new_tokens": max_new,
        "chat": kw["chat"],
        "do_sample": do_sample,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "stop_at_eos": stop_at_eos,
        "record": record,
        "prompt_tokens": n_prompt,
        "ccviz_version": __version__,
    }
    return _Settings(
        policy, cache_size, chunk_size, frozen, recent, max_new, do_sample, temperature, top_p, seed, prefill_step, stop_at_eos,
        companions(policy, chunk_size) if record == "all" else [], config,
    )


def prepare_run(lm: LoadedModel, prompt: str, **kw: Any) -> _Run:
    """Validate everything and build the run, before any model work (errors come out here)."""
    encoded = encode_prompt(lm.tokenizer, prompt, chat=kw["chat"])
    return _Run(lm, encoded.ids, _settings(lm, len(encoded.ids), encoded.template_prefix, **kw))


def generate(
    lm: LoadedModel,
    prompt: str,
    *,
    policy: str | Policy,
    cache_size: int,
    chunk_size: int | None = None,
    frozen: int | str = "auto",
    recent: int | None = None,
    max_new_tokens: int = 128,
    chat: bool = True,
    seed: int | None = None,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_p: float = 1.0,
    policy_options: dict[str, Any] | None = None,
    prefill_step: int | None = None,
    stop_at_eos: bool = True,
    record: str = "policy",
    progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_refresh: RefreshCallback | None = None,
) -> Trace:
    """Generate from ``prompt`` under a managed cache and return the :class:`Trace` of the run.

    ``cache_size`` is J, ``chunk_size`` h (default J/4), ``frozen`` the never-evicted prefix ("auto":
    the chat template up to the user-turn header), ``recent`` the trailing entries always kept (default:
    the policy's). Greedy unless ``do_sample``. ``prefill_step`` caps tokens per prefill forward
    (default h; 1 processes the prompt token by token, with identical results). ``stop_at_eos=False``
    always generates ``max_new_tokens`` (benchmarks need fixed lengths). ``record="all"`` also records
    the cheap companion signals (attention_last, attention_chunk, surprise) at every refresh, next to
    the policy's own; they never change what is kept. ``should_stop`` is
    polled between forward passes; a stopped run returns its partial trace with status "cancelled".
    ``on_refresh`` streams each refresh as it happens (see :data:`RefreshCallback`).
    """
    run = prepare_run(
        lm, prompt, policy=policy, cache_size=cache_size, chunk_size=chunk_size, frozen=frozen, recent=recent,
        max_new_tokens=max_new_tokens, chat=chat, seed=seed, do_sample=do_sample, temperature=temperature,
        top_p=top_p, policy_options=policy_options, prefill_step=prefill_step,
        stop_at_eos=stop_at_eos, record=record,
    )
    run.on_refresh = on_refresh
    try:
        return run.run(progress, should_stop)
    except CcvizError:
        raise
    except Exception as err:  # keep what was computed: the caller can still show completed cycles
        run.finish("error", error=f"{type(err).__name__}: {err}")
        raise GenerationFailed(run.trace.error, run.trace) from err
