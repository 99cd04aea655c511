"""Generation: a loop over a :class:`CacheSession` (chunked prefill, then decode), and ``generate``.

:func:`prepare` validates everything (the config, the prompt, the model's context) before any model
work, so bad input fails at once; :func:`run_generation` then feeds the prompt pass by pass and
decodes, polling ``should_stop`` and reporting progress between forward passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CcvizError
from ..models import LoadedModel
from ..policies import Policy
from ..prompts import encode_prompt
from ..trace import Trace
from .callbacks import GenerationFailed, ProgressCallback, RefreshCallback, StopCheck
from .config import RunConfig
from .sampling import Sampler, eos_ids
from .session import CacheSession


@dataclass(frozen=True)
class PreparedRun:
    """A validated run: the prompt's token ids and the config with every default resolved."""

    prompt_ids: list[int]
    config: RunConfig


def prepare(lm: LoadedModel, prompt: str, config: RunConfig, policy: Policy | None = None) -> PreparedRun:
    """Encode the prompt and resolve the config against it and the model (and ``policy``, when a built
    one will run); no model work."""
    encoded = encode_prompt(lm.tokenizer, prompt, chat=config.chat)
    n = len(encoded.ids)
    resolved = config.resolved(policy, template_prefix=encoded.template_prefix, prompt_tokens=n)
    limit = lm.max_positions
    if resolved.chunk_size > limit:
        raise CcvizError(f"chunk size h ({resolved.chunk_size}) exceeds the model's context of {limit} positions")
    if n + config.max_new_tokens > limit:
        raise CcvizError(
            f"the prompt has {n} tokens; with {config.max_new_tokens} new tokens that exceeds the model's "
            f"{limit} positions: shorten the prompt or lower max new tokens"
        )
    return PreparedRun(encoded.ids, resolved)


def run_generation(
    lm: LoadedModel,
    prompt: str,
    config: RunConfig,
    *,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
    on_refresh: RefreshCallback | None = None,
    policy: Policy | None = None,
) -> Trace:
    """Generate from ``prompt`` under ``config`` and return the :class:`Trace` of the run.

    A stopped run returns its partial trace (status "cancelled"); a run that breaks raises
    :class:`GenerationFailed` carrying every token and refresh up to the error. ``policy``: a built
    instance to run instead of a fresh ``config.policy`` (see :class:`CacheSession`).
    """
    prepared = prepare(lm, prompt, config, policy)
    session = CacheSession(lm, prepared.config, policy=policy, on_refresh=on_refresh, prompt_length=len(prepared.prompt_ids))
    prompt_ids, generated = prepared.prompt_ids, []
    try:
        stop_reason = _loop(session, prompt_ids, generated, eos_ids(lm), progress, should_stop)
    except CcvizError:
        raise
    except Exception as err:  # keep what was computed: the caller can still show every completed refresh
        error = f"{type(err).__name__}: {err}"
        trace = session.finish("error", pending=_unfed(session, prompt_ids, generated), error=error)
        raise GenerationFailed(error, trace) from err
    return session.finish(stop_reason, pending=_unfed(session, prompt_ids, generated))


def _unfed(session: CacheSession, prompt_ids: list[int], generated: list[int]) -> list[int]:
    """Generated tokens the session has not processed (the last pick; after an error, maybe more)."""
    return generated[max(session.processed - len(prompt_ids), 0) :]


def _loop(session: CacheSession, prompt: list[int], generated: list[int], eos: set[int],
          progress: ProgressCallback | None, should_stop: StopCheck | None) -> str:
    """Prefill, then decode until EOS or the token budget; return the stop reason."""
    config = session.config
    total = len(prompt) + config.max_new_tokens

    def report() -> None:
        if progress is not None:
            progress(len(session.recorder.trace.cycles), session.processed, total)

    logits = None
    while session.processed < len(prompt):
        if should_stop is not None and should_stop():
            return "cancelled"
        start = session.processed
        logits = session.feed(prompt[start : start + session.next_pass_length()])
        report()
    sampler = Sampler(config)
    generated.append(sampler.pick(logits))
    while True:
        if config.stop_at_eos and generated[-1] in eos:
            return "eos"
        if len(generated) >= config.max_new_tokens:
            return "max_new_tokens"
        if should_stop is not None and should_stop():
            return "cancelled"
        logits = session.feed(generated[-1:], phase="decode")
        report()
        generated.append(sampler.pick(logits))


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
    granularity: str | None = None,
    pool: str = "max",
    allocation: str = "uniform",
    pyramid_beta: float = 20.0,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
    on_refresh: RefreshCallback | None = None,
) -> Trace:
    """Generate from ``prompt`` under a managed cache and return the :class:`Trace` of the run.

    The keywords are the fields of :class:`RunConfig` (see there): ``cache_size`` is J, ``chunk_size``
    h (default J/4), ``frozen`` the never-evicted prefix ("auto": the chat template up to the
    user-turn header), ``recent`` the trailing entries always kept (default: the policy's). Greedy
    unless ``do_sample``. ``prefill_step`` caps tokens per prefill forward (default h; 1 processes the
    prompt token by token, with identical results). ``stop_at_eos=False`` always generates
    ``max_new_tokens`` (benchmarks need fixed lengths). ``record="all"`` also records the cheap
    companion signals (attention_last, attention_chunk, surprise) at every refresh, next to the
    policy's own; they never change what is kept. ``granularity`` ("token", "word" or "sentence"; default:
    the policy's) is the unit a refresh keeps or evicts whole, scored by the ``pool`` ("max" or "mean") of its tokens'
    scores (:mod:`ccviz.units`). ``allocation`` ("uniform", "pyramid" or "adaptive") splits the budget
    over layers and KV heads (:mod:`ccviz.allocation`; ``pyramid_beta``: the last layer keeps (J - R) /
    beta scored entries). ``should_stop`` is polled between forward passes;
    a stopped run returns its partial trace with status "cancelled". ``on_refresh`` streams each
    refresh as it happens (see :data:`RefreshCallback`).
    """
    config = RunConfig.of(
        policy, cache_size=cache_size, chunk_size=chunk_size, frozen=frozen, recent=recent, max_new_tokens=max_new_tokens,
        chat=chat, seed=seed, do_sample=do_sample, temperature=temperature, top_p=top_p, policy_options=policy_options,
        prefill_step=prefill_step, stop_at_eos=stop_at_eos, record=record, granularity=granularity, pool=pool,
        allocation=allocation, pyramid_beta=pyramid_beta,
    )
    instance = policy if isinstance(policy, Policy) else None
    return run_generation(lm, prompt, config, progress=progress, should_stop=should_stop, on_refresh=on_refresh, policy=instance)
