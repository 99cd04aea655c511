"""Generation: a loop over a :class:`CacheSession` (chunked prefill, then decode), and ``generate``.

:func:`prepare` validates everything (the config, the prompt, the model's context) before any model
work, so bad input fails at once; :func:`run_generation` then feeds the prompt pass by pass and
decodes, polling ``should_stop`` and reporting progress between forward passes.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CcvizError
from ..models import LoadedModel
from ..policies import Policy
from ..prompts import encode_prompt
from ..trace import Trace
from .callbacks import GenerationFailed, Listeners, ProgressCallback, RefreshCallback, StopCheck
from .config import RunConfig, settings_names
from .pins import find_marks
from .sampling import Sampler, eos_ids
from .session import CacheSession


@dataclass(frozen=True)
class PreparedRun:
    """A validated run: the prompt's token ids, where its question starts (None: no question given apart)
    and the config with every default resolved."""

    prompt_ids: list[int]
    config: RunConfig
    question_start: int | None = None


def prepare(
    lm: LoadedModel, prompt: str, config: RunConfig, policy: Policy | None = None, *, question: str | None = None
) -> PreparedRun:
    """Encode the prompt (the document, and ``question`` after it in the same turn) and resolve the config
    against it and the model (and ``policy``, when a built one will run); no model work."""
    encoded = encode_prompt(lm.tokenizer, prompt, chat=config.chat, question=question)
    n = len(encoded.ids)
    resolved = config.resolved(policy, template_prefix=encoded.template_prefix, prompt_tokens=n)
    limit, h = lm.max_positions, resolved.chunk_size
    assert h is not None, "resolved() makes it concrete"
    if h > limit:
        raise CcvizError(f"chunk size h ({h}) exceeds the model's context of {limit} positions")
    if n + config.max_new_tokens > limit:
        raise CcvizError(
            f"the prompt has {n} tokens; with {config.max_new_tokens} new tokens that exceeds the model's "
            f"{limit} positions: shorten the prompt or lower max new tokens"
        )
    find_marks(lm.tokenizer, encoded.ids, resolved, encoded.question_start)  # a phrase not there fails now
    return PreparedRun(encoded.ids, resolved, encoded.question_start)


def run_generation(
    lm: LoadedModel,
    prompt: str,
    config: RunConfig,
    *,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
    on_refresh: RefreshCallback | None = None,
    policy: Policy | None = None,
    observers: Sequence[Policy] = (),
    question: str | None = None,
) -> Trace:
    """Generate from ``prompt`` (and ``question``, asked after it in the same turn) under ``config`` and
    return the :class:`Trace` of the run.

    A stopped run returns its partial trace (status "cancelled"); a run that breaks raises
    :class:`GenerationFailed` carrying every token and refresh up to the error. ``policy``: a built
    instance to run instead of a fresh ``config.policy``; ``observers``: policies that watch every
    forward pass without evicting or being recorded, e.g. a probe (see :class:`CacheSession`).
    """
    prepared = prepare(lm, prompt, config, policy, question=question)
    session = CacheSession(
        lm,
        prepared.config,
        policy=policy,
        on_refresh=on_refresh,
        prompt_ids=prepared.prompt_ids,
        observers=observers,
        question_start=prepared.question_start,
    )
    prompt_ids = prepared.prompt_ids
    generated: list[int] = []
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


def _loop(
    session: CacheSession,
    prompt: list[int],
    generated: list[int],
    eos: set[int],
    progress: ProgressCallback | None,
    should_stop: StopCheck | None,
) -> str:
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
    assert logits is not None, "the prompt is never empty (encode_prompt refuses one): the loop above fed it"
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
    config: RunConfig | None = None,
    *,
    question: str | None = None,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
    on_refresh: RefreshCallback | None = None,
    observers: Sequence[Policy] = (),
    **settings: Any,
) -> Trace:
    """Generate from ``prompt`` under a managed cache and return the :class:`Trace` of the run.

    ``question``: a question about ``prompt`` (the document), asked after it in the same user turn (a
    blank line between them). It and the template's turn suffix are appended after the document's last
    prefill refresh and never evicted, taking no place of J (``protect_question=False``: they stream
    through the refreshes like the document, the paper's protocol); the trace's config records where it
    starts (``question_start``). The full cache's prompt is the same, token for token.

    The run is ``config``, a :class:`RunConfig`, or the ``settings``: the keywords are exactly its fields
    (``policy``, ``cache_size``, ``chunk_size``, ``frozen``, ``recent``, ``max_new_tokens``, ...; see
    there, or ``help(generate)``), and next to a ``config`` they replace its fields:
    ``generate(lm, p, config, max_new_tokens=8)``. ``policy`` is a registered name or a built
    :class:`Policy`, registered or not (its class is recorded in the trace); a new ``policy`` does not
    keep the config's options. ``cache_size`` is J, ``chunk_size`` h (default J/4), ``frozen`` the
    never-evicted prefix ("auto": the chat template up to the user-turn header), ``recent`` the
    trailing entries always kept (default: the policy's). Greedy unless ``do_sample``.
    ``record="all"`` also records the cheap companion signals at every refresh; ``granularity`` and ``pool``
    make words or sentences the unit kept (:mod:`ccviz.engine.units`); ``allocation`` splits the budget over
    layers and KV heads (:mod:`ccviz.engine.allocation`); ``pin`` and ``drop`` name phrases of the prompt that
    are never evicted (taking places of J) or evicted at once (:mod:`ccviz.engine.pins`). ``should_stop`` is
    polled between forward passes; a stopped run returns its partial trace with status "cancelled".
    ``on_refresh`` streams each refresh as it happens (see :data:`RefreshCallback`). ``observers`` (not a
    setting: nothing of them is recorded) are built policies that watch every forward pass beside the run's own
    and never evict, e.g. the benchmarks' reading probe (:mod:`ccviz_bench.reading`); the trace is the same
    without them.

    Parameters
    ----------
    lm : LoadedModel
        The model and tokenizer (:func:`ccviz.load_model`).
    prompt : str
        The document (or the whole prompt); wrapped in the model's chat template unless ``chat=False``.
    config : RunConfig, optional
        The run's settings; ``settings`` keywords replace its fields.
    question : str, optional
        Asked after ``prompt`` in the same user turn, kept apart from eviction by default.

    Returns
    -------
    Trace
        Every refresh: the candidates' positions and scores ``[n]``, the survivors, and the output text and ids.
    """
    names = settings_names()
    unknown = sorted(set(settings) - set(names))
    if unknown:
        valid = ", ".join(names)
        raise CcvizError(f"generate() has no setting {unknown[0]!r}: the settings are RunConfig's fields, {valid}")
    if config is not None and not isinstance(config, RunConfig):
        raise CcvizError(f"config must be a RunConfig, got {type(config).__name__}")
    strays = [type(o).__name__ for o in observers if not isinstance(o, Policy)]
    if strays:
        raise CcvizError(f"observers must be built Policy instances, got {strays[0]}")
    if config is not None:
        recorded = {name: getattr(config, name) for name in names}
        if "policy" in settings:  # a new policy: the old one's options and class do not apply to it
            del recorded["policy_options"], recorded["policy_class"]
        settings = {**recorded, **settings}
    missing = [name for name in ("policy", "cache_size") if name not in settings]
    if missing:
        raise CcvizError(f"generate() needs a config, or {' and '.join(missing)}")
    policy = settings.pop("policy")
    instance = policy if isinstance(policy, Policy) else None
    run = RunConfig.of(policy, **settings)
    listeners = Listeners(progress, should_stop, on_refresh)
    return run_generation(lm, prompt, run, policy=instance, observers=observers, question=question, **vars(listeners))


def _generate_signature() -> inspect.Signature:
    """``generate``'s signature with RunConfig's fields as its keywords, for ``help`` and editors that ask."""
    own = inspect.signature(generate)
    fixed = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    settings = [
        inspect.Parameter(
            f.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=f.type,
            default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
        )
        for f in dataclasses.fields(RunConfig)
    ]
    return own.replace(parameters=fixed + settings)


generate.__signature__ = _generate_signature()  # type: ignore[attr-defined]
