"""CacheSession: a managed KV cache driven step by step, the engine every caller drives.

Feed it token ids and it returns their logits; after every h processed tokens it refreshes the
cache: the frozen prefix plus the J best-scored candidates survive (the last ``recent`` always among
them), one decision for all layers and heads (docs/method.md#the-refresh), or under a per-layer
``allocation`` one per layer (and KV head), each layer's K/V then holding only its own entries. Who
survives is decided in :mod:`.survivors`; the policy only scores the candidates (a
:class:`~ccviz.cache.Candidates` view). A question given apart from the document (``question_start``,
under ``protect_question``) is kept like the frozen prefix: never a candidate, no place of J, and its tokens
do not advance the refresh clock, so the document's refreshes fall where they would without it and the
question arrives after the document's last prefill refresh. Positions are the original absolute positions, passed
explicitly forever, so evicting entries never renumbers anything. :func:`ccviz.generate` is a loop
over a session; teacher-forced perplexity, the efficiency measures, the benchmark probes and
:func:`ccviz.explain.explain_token` (which pauses before a refresh) drive one directly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from ..cache import CacheState, Candidates, LayerMembership
from ..capture import CAPTURE_KWARG, Capture, captures_attention, decoder_layers, install_hooks
from ..choices import PHASES, Phase
from ..errors import CcvizError
from ..models import LoadedModel
from ..policies import Policy
from ..policies.companions import companions
from ..trace import Trace
from .callbacks import RefreshCallback
from .config import RunConfig
from .pins import find_marks
from .reads import AnswerReader
from .recorder import TraceRecorder
from .survivors import SurvivorSelector
from .units import pool_scores


class CacheSession:
    """One run's cache, its policy and its trace; created per run, so runs never share anything.

    ``config`` is resolved here (h, recent, every policy option; ``frozen="auto"`` freezes nothing:
    :func:`ccviz.engine.prepare` resolves it against a chat prompt first). ``policy``: an instance to
    use instead of building ``config.policy`` afresh (one with extra behaviour, e.g. a test's); the
    config still names it. ``on_refresh`` is called with the live trace after every refresh (see
    :data:`RefreshCallback`). ``prompt_length``: the prompt's length in tokens when known before it
    is fed, for the trace config's ``prompt_tokens`` (default: the prefill tokens fed so far).
    ``prompt_ids``: the prompt's token ids, when known before they are fed (they say its length too); a
    config that pins or drops phrases needs them, to find the phrases (:mod:`.pins`). ``question_start``:
    the prompt's first question token when a question was given apart (:func:`ccviz.prompts.encode_prompt`);
    under ``protect_question`` the prompt's tokens from there on (the question and the template's turn
    suffix) are kept apart from eviction; it needs the prompt's length.
    ``observers``: more policies to serve beside the run's own: each watches every forward pass (its
    ``observe`` runs, its attention and residual rows are captured) but never evicts, and nothing of
    it is recorded; score one yourself while a refresh is pending (``feed(..., refresh=False)``), as
    :func:`ccviz.explain.explain_token` does. (Per-entry state is shared in ``cache.extras``, so an
    observer must not be a second instance of a stateful policy already watching.)

    Parameters
    ----------
    lm : LoadedModel
        The model and tokenizer.
    config : RunConfig
        The run's settings.

    Attributes
    ----------
    cache : CacheState
        The managed cache: ``pos``, ``tok`` long ``[entries]`` and each layer's K/V
        ``[batch, kv_heads, entries, head_dim]`` (a per-layer allocation: each layer its own entries).
    trace : Trace
        The run's record so far.
    """

    def __init__(
        self,
        lm: LoadedModel,
        config: RunConfig,
        *,
        policy: Policy | None = None,
        on_refresh: RefreshCallback | None = None,
        prompt_length: int | None = None,
        observers: Sequence[Policy] = (),
        prompt_ids: Sequence[int] | None = None,
        question_start: int | None = None,
    ):
        self.lm = lm
        if prompt_ids is not None:
            prompt_length = len(prompt_ids)
        if question_start is not None and not (prompt_length is not None and 0 < question_start < prompt_length):
            raise CcvizError(
                f"question_start ({question_start}) must fall inside the prompt, whose length must be given"
            )
        self.policy: Policy = policy if policy is not None else config.build_policy()
        if policy is not None and policy.name != config.policy:
            raise CcvizError(f"the policy instance is {policy.name!r} but the config names {config.policy!r}")
        self.config = config.resolved(
            self.policy, prompt_tokens=prompt_length
        )  # sinks bounded by the prompt, as in prepare
        h, step, frozen = self.config.chunk_size, self.config.prefill_step, self.config.frozen
        assert h is not None and step is not None and isinstance(frozen, int), "resolved() makes them concrete"
        self.chunk_size, self.prefill_step = h, step
        self.on_refresh = on_refresh
        from transformers import DynamicCache

        self.cache = CacheState(kv=DynamicCache(), frozen=frozen)
        model: Any = lm.model  # a transformers model: its config and embeddings are not typed on torch.nn.Module
        model_config = model.config
        self.query_heads = int(model_config.num_attention_heads)
        kv_heads = int(getattr(model_config, "num_key_value_heads", None) or self.query_heads)
        num_layers = len(decoder_layers(lm.model))
        self.windows = lm.windows  # local layers read only their window of original positions
        allocation = self.config.allocation
        if allocation != "uniform":
            self.cache.layers = LayerMembership.empty(num_layers, kv_heads if allocation == "adaptive" else None)
        # Per-layer scores from each layer's (and KV head's) own attention, for the policies that have them.
        self.per_head = allocation != "uniform" and self.policy.head_scores
        self.processed = 0  # tokens fed so far = the position of the next one
        self.question_start = question_start
        # positions kept apart from eviction: the question and the turn suffix after it (protect_question)
        self.question: tuple[int, int] | None = None
        if question_start is not None and self.config.protect_question:
            assert prompt_length is not None, "checked above"
            self.question = (question_start, prompt_length)
        self.clock = 0  # tokens fed that count towards the next refresh: every one but the kept question's
        self.refresh_pending = False  # a refresh fell due and waits for refresh() (feed(..., refresh=False))
        self.vocab_size = int(model.get_input_embeddings().num_embeddings)
        if (self.config.pin or self.config.drop) and prompt_ids is None:
            raise CcvizError("a run that pins or drops phrases needs its prompt's token ids up front (prompt_ids)")
        marks = find_marks(lm.tokenizer, prompt_ids or (), self.config, question_start)
        self.selector = SurvivorSelector(self.config, lm.tokenizer, self.vocab_size, num_layers, marks)
        self.phase: Phase = "prefill"
        reader: AnswerReader | None = None
        if self.config.record_reads:  # from the pass that picks the first generated token: the prompt's last
            if prompt_length is None:
                raise CcvizError("record_reads needs the prompt's length (CacheSession(..., prompt_length=N))")
            reader = AnswerReader(timestep=prompt_length - 1)
        recorded = self.config.to_dict() | ({} if question_start is None else {"question_start": question_start})
        self.recorder = TraceRecorder(
            lm.tokenizer, lm.name, recorded, prompt_length, None if reader is None else reader.steps
        )
        # The policy and its companions all watch every forward pass; one capture serves them all.
        scorers = companions(self.policy, self.chunk_size) if self.config.record == "all" else []
        self.companions: list[Policy] = scorers
        self.observers = [self.policy, *scorers, *observers, *([] if reader is None else [reader])]
        self.residual_layers = sorted({layer for p in self.observers for layer in p.residual_layers(num_layers)})
        self.attention_needs = [p.attention for p in self.observers if p.attention is not None]
        install_hooks(lm.model)
        if self.windows is not None and not captures_attention(lm.model):
            raise CcvizError(
                "this model has sliding-window layers, whose masks ccviz sets on SDPA models only: "
                "load the model with ccviz.load_model (or attn_implementation='sdpa')"
            )
        if self.attention_needs and not captures_attention(lm.model):
            name = next(p.name for p in self.observers if p.attention is not None)
            raise CcvizError(
                f"{name!r} reads attention weights, which ccviz captures on SDPA models only: "
                "load the model with ccviz.load_model (or attn_implementation='sdpa')"
            )

    @property
    def trace(self) -> Trace:
        """The live trace: every refresh and every token fed so far; loadable at any moment."""
        return self.recorder.snapshot()

    def next_pass_length(self) -> int:
        """Tokens the next forward pass takes at most: up to the next refresh, and at most the prefill step;
        the kept question is a pass (or passes) of its own."""
        h, at = self.chunk_size, self.processed
        if self.question is not None:
            start, end = self.question
            if start <= at < end:
                return min(end - at, self.prefill_step)
            if at < start:
                return min(h - self.clock % h, self.prefill_step, start - at)
        return min(h - self.clock % h, self.prefill_step)

    def in_question(self, positions: torch.Tensor) -> torch.Tensor:
        """bool, the shape of ``positions``: which are the kept question's (none without one)."""
        if self.question is None:
            return torch.zeros_like(positions, dtype=torch.bool)
        start, end = self.question
        return (positions >= start) & (positions < end)

    def candidate_rows(self) -> torch.Tensor:
        """long ``[candidates]``: the cache rows a refresh decides on, ascending: every entry after the frozen
        prefix but the kept question's. The policy scores every entry after the frozen prefix (the question
        is context it may read); these rows of its scores are the ones ranked."""
        frozen = self.cache.frozen
        rows = torch.arange(frozen, max(frozen, len(self.cache)))  # none while the frozen prefix is still fed
        return rows[~self.in_question(self.cache.pos[frozen:])]

    def feed(
        self, token_ids: Sequence[int], *, phase: Phase = "prefill", all_logits: bool = False, refresh: bool = True
    ) -> torch.Tensor:
        """Process ``token_ids`` and return float32 logits: the last position's ``[vocab]``, or with
        ``all_logits`` every position's ``[len(token_ids), vocab]`` (teacher forcing).

        Forward passes end on multiples of h (never straddling a refresh) and take at most the prefill
        step; a refresh runs after each pass that ends on a multiple of h. ``phase`` labels the time
        and the tokens: prefill tokens are the prompt, decode tokens were generated. ``refresh=False``
        pauses before a refresh that falls due after the last of these tokens: the cache still holds
        every candidate of it (``refresh_pending``) until :meth:`refresh` runs it, as the next feed
        does first, so pausing never changes a decision.
        """
        ids = list(token_ids)
        if not ids:
            raise CcvizError("feed needs at least one token id")
        if phase not in PHASES:
            raise CcvizError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
        if phase == "prefill" and self.phase == "decode":
            raise CcvizError("prompt tokens cannot be fed after generated ones (phase='prefill' after 'decode')")
        try:
            tokens = torch.tensor(ids)
        except (TypeError, ValueError, RuntimeError):
            tokens = None
        if (
            tokens is None
            or tokens.dtype != torch.long
            or int(tokens.min()) < 0
            or int(tokens.max()) >= self.vocab_size
        ):
            raise CcvizError(f"token ids must be whole numbers from 0 to {self.vocab_size - 1}, got {ids[:8]!r}...")
        limit = self.lm.max_positions
        if self.processed + len(ids) > limit:
            raise CcvizError(f"{self.processed + len(ids)} tokens exceed the model's context of {limit} positions")
        if self.refresh_pending:
            self.refresh()
        self.phase = phase
        outputs, start = [], 0
        while start < len(ids):
            end = start + self.next_pass_length()
            clock = self.clock
            outputs.append(self._forward(ids[start:end], tokens[start:end], all_logits))
            start = end
            if self.clock != clock and self.clock % self.chunk_size == 0:
                if refresh or start < len(ids):
                    self.refresh()
                else:
                    self.refresh_pending = True
        return torch.cat(outputs) if all_logits else outputs[-1]

    @torch.inference_mode()
    def _forward(self, ids: list[int], tok: torch.Tensor, all_logits: bool) -> torch.Tensor:
        model = self.lm.model
        started = time.perf_counter()
        pos = torch.arange(self.processed, self.processed + len(ids), dtype=torch.long)
        layers, entries = self.cache.layers, len(self.cache)
        masks = self.cache.masks(pos, self.query_heads, self.windows, self.lm.device)
        layout: dict[str, Any] = {} if masks is None else {"masks": masks}
        if layers is not None:
            layout |= {"columns": layers.columns(entries, len(ids)), "entries": entries + len(ids)}
        capture = Capture.for_needs(model, self.attention_needs, self.residual_layers, per_head=self.per_head, **layout)
        out = model(
            input_ids=tok[None].to(self.lm.device),
            position_ids=pos[None].to(self.lm.device),
            past_key_values=self.cache.kv,
            use_cache=True,
            logits_to_keep=0 if all_logits else 1,
            **{CAPTURE_KWARG: capture},
        )
        self.cache.append(tok, pos, capture.residuals)
        self.processed += len(ids)
        self.clock += int((~self.in_question(pos)).sum())
        self.recorder.fed(
            ids, self.phase, len(self.cache), self.cache.kv_bytes()
        )  # before observing: a failing policy still leaves them recorded
        try:
            for observer in self.observers:
                observer.observe(model, self.cache, capture)
        finally:
            self.recorder.timed(self.phase, time.perf_counter() - started)
        return out.logits[0].float() if all_logits else out.logits[0, -1].float()

    def candidates(self) -> Candidates:
        """The candidates of the refresh to come, as a policy scores them."""
        return Candidates(self.cache, self.lm.tokenizer, self.config.cache_size)

    def _score(self, scorer: Policy, candidates: Candidates) -> torch.Tensor:
        score = scorer.score_candidates(self.lm.model, candidates).to(torch.float32).cpu()
        n = len(candidates)
        per_channel = self.per_head and scorer.head_scores and score.dim() == 3 and score.shape[0] == n
        if score.shape != (n,) and not per_channel:
            raise RuntimeError(f"policy {scorer.name!r} returned {tuple(score.shape)} scores for {n} candidates")
        if torch.isnan(score).any():
            raise RuntimeError(f"policy {scorer.name!r} returned NaN scores")
        return score

    def visible_candidates(self) -> torch.Tensor | None:
        """bool ``[layers, kv_heads, candidates]``: which candidates (:meth:`candidate_rows`) each layer's KV
        heads still see (None under ``uniform``, where all of them see every entry)."""
        layers = self.cache.layers
        return None if layers is None else layers.visible(len(self.cache))[:, :, self.candidate_rows()]

    @staticmethod
    def per_candidate(score: torch.Tensor, visible: torch.Tensor | None) -> torch.Tensor:
        """A per-layer, per-head score ``[candidates, layers, kv_heads]`` as the trace records it: each
        candidate's mean over the layers and heads that see it (``visible``, from
        :meth:`visible_candidates`); a per-token score as it is."""
        if score.dim() == 1:
            return score
        assert visible is not None, "per-head scores come under a per-layer allocation, which has the visibility"
        seen = visible.permute(2, 0, 1).to(score.dtype)
        return (score * seen).sum(dim=(1, 2)) / seen.sum(dim=(1, 2)).clamp(min=1)

    def units(self, score: torch.Tensor | None = None) -> torch.Tensor | None:
        """The unit number of every candidate (long ``[candidates]``), or None at token granularity;
        ``left_context`` units are made from the candidates' ``score`` too."""
        return self.selector.units(self.cache.tok[self.candidate_rows()], score)

    def survivors(
        self,
        score: torch.Tensor,
        cache_size: int | None = None,
        recent: int | None = None,
        units: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Indices (into the candidates, ascending) that one decision for every layer keeps given the
        candidates' ``score`` ``[candidates]`` (:meth:`SurvivorSelector.survivors`; a policy's score of its
        view: :meth:`ranked` of it); ``cache_size`` / ``recent`` default to the run's, ``units`` to :meth:`units`."""
        units = self.units(score) if units is None else units
        rows = self.candidate_rows()
        return self.selector.survivors(
            score, units, cache_size, recent, tok=self.cache.tok[rows], pos=self.cache.pos[rows]
        )

    def ranked(self, score: torch.Tensor) -> torch.Tensor:
        """The candidates' rows (:meth:`candidate_rows`) of a score over the policy's view (dim 0: every
        entry after the frozen prefix, as :meth:`candidates` gives it)."""
        return score[self.candidate_rows() - self.cache.frozen]

    @torch.inference_mode()
    def refresh(self) -> None:
        """Score the candidates (everything after the frozen prefix but the kept question) and keep the frozen
        prefix, the kept question and what
        :mod:`.survivors` decides (the J best, the last ``recent`` always among them; whole words or
        sentences under ``granularity``; per layer under ``allocation``); one gather evicts the rest from
        every layer and side table."""
        self.refresh_pending = False
        cache, policy, config = self.cache, self.policy, self.config
        view = self.candidates()
        rows = self.candidate_rows()
        candidates = cache.pos[rows]
        started = time.perf_counter()
        visible = self.visible_candidates()  # computed once: the policy, its companions and the eviction read it
        shared = time.perf_counter() - started
        # Companion signals see the same candidates; they are not timed as part of the policy's refresh.
        recorded = {
            _signal(scorer): self.per_candidate(self.ranked(self._score(scorer, view)), visible).tolist()
            for scorer in self.companions
        }
        started = time.perf_counter() - shared
        scores: dict[str, list[float]] = {}
        units = None
        if policy.evicts:
            score = self.ranked(self._score(policy, view))
            scores[_signal(policy)] = self.per_candidate(score, visible).tolist()
            units = self.selector.units(cache.tok[rows], score)
            if units is not None:  # what ranked each candidate: its unit's pooled score
                scores[f"{policy.signal}:{config.granularity}"] = pool_scores(score, units, config.pool)[units].tolist()
            self.selector.keep(cache, rows, score, units, visible)
        seconds = time.perf_counter() - started
        trace = self.recorder.refreshed(
            self.phase,
            candidates.tolist(),
            cache.pos.tolist(),
            {**scores, **recorded},
            seconds,
            None if units is None else units.tolist(),
            cache.layers,
        )
        if self.on_refresh is not None:
            self.on_refresh(trace)

    def finish(self, stop_reason: str, *, pending: Sequence[int] = (), error: str | None = None) -> Trace:
        """The final trace; ``pending`` are generated tokens never fed (a run's last pick)."""
        return self.recorder.finish(stop_reason, pending=pending, error=error)


def _signal(scorer: Policy) -> str:
    """The name ``scorer``'s scores are recorded under (register_policy refuses an evicting policy without one)."""
    if scorer.signal is None:
        raise CcvizError(f"policy {scorer.name!r} evicts, so it needs a signal: the name its scores are recorded under")
    return scorer.signal
