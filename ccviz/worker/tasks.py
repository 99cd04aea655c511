"""The tasks the model worker runs: plain picklable dataclasses, sent by the server and executed here.

Each is frozen (so it is its own key in the app's result store) and picklable (so it crosses the jobs
pipe); :mod:`ccviz.worker.process` calls ``task.execute(lm, listeners)`` and,
on the checks pipe, ``task.check(lm)``. They live with the worker, not the app: the model's process
imports nothing of the UI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..engine import CacheSession, Listeners, RunConfig, prepare, run_generation
from ..explain import Explanation, explain_token
from ..models import LoadedModel
from ..signals import document_attention, document_surprise
from ..trace import Trace


class Task(Protocol):
    """One unit of model work; a frozen dataclass, so it is its own cache key, and picklable, so it runs
    in the worker. One task computes at a time: torch already spreads one forward pass over every core,
    and two runs at once would oversubscribe them (on 2 cores, small forward passes get up to 100x slower)."""

    @property
    def label(self) -> str: ...

    def execute(self, lm: LoadedModel, listeners: Listeners) -> Any: ...


@dataclass(frozen=True)
class RunTask:
    """One generation: the model, the prompt (the document, and ``question`` when one is asked apart from it)
    and the :class:`RunConfig`, which together decide its result."""

    model: str
    prompt: str
    config: RunConfig
    question: str | None = None

    @property
    def label(self) -> str:
        return self.config.describe()

    def check(self, lm: LoadedModel) -> int:
        """Validate everything without running (the config, the prompt against the model's context, what
        the policy reads); return the prompt's token count. The app adds its own token limit."""
        prepared = prepare(lm, self.prompt, self.config, question=self.question)
        CacheSession(
            lm, prepared.config, prompt_ids=prepared.prompt_ids, question_start=prepared.question_start
        )  # cheap: no forward pass
        return len(prepared.prompt_ids)

    def execute(self, lm: LoadedModel, listeners: Listeners) -> Trace:
        return run_generation(lm, self.prompt, self.config, question=self.question, **vars(listeners))


@dataclass(frozen=True)
class FullCacheTask:
    """The full cache's run of the same document with the same decoding as a run (:meth:`beside`), recording
    what its answer read: what the model says when nothing is evicted.

    Its key holds only the document (and question), the model and the decoding (``RunConfig.decoding``), so
    every budget and policy run on one document shares one full-cache run. The cache size is the model's
    context (one prefill pass of up to a quarter of it: no refresh ever runs)."""

    model: str
    prompt: str
    decoding: tuple[tuple[str, Any], ...]
    question: str | None = None

    @classmethod
    def beside(cls, run: RunTask) -> FullCacheTask:
        return cls(run.model, run.prompt, run.config.decoding, run.question)

    @property
    def label(self) -> str:
        return "the full cache's answer"

    def config(self, lm: LoadedModel) -> RunConfig:
        return RunConfig(policy="full", cache_size=lm.max_positions, record_reads=True, **dict(self.decoding))

    def execute(self, lm: LoadedModel, listeners: Listeners) -> Trace:
        watch = {"progress": listeners.progress, "should_stop": listeners.should_stop}  # no refresh ever runs
        return run_generation(lm, self.prompt, self.config(lm), question=self.question, **watch)


@dataclass(frozen=True)
class SurpriseTask:
    """Counter-causal surprise of every token of a whole document (one variant and score)."""

    model: str
    prompt: str
    chat: bool
    variant: str = "fast"
    score: str = "logit"
    min_gap: int = 0

    @property
    def label(self) -> str:
        return f"surprise ({self.variant}, {self.score}, min_gap={self.min_gap})"

    def execute(self, lm: LoadedModel, listeners: Listeners) -> list[float]:
        return document_surprise(
            lm, self.prompt, chat=self.chat, variant=self.variant, score=self.score, min_gap=self.min_gap
        )


@dataclass(frozen=True)
class AttentionTask:
    """Attention received and H2O accumulation over a whole document (a no-eviction run)."""

    model: str
    prompt: str
    chat: bool
    frozen: int | str = "auto"

    @property
    def label(self) -> str:
        return "attention over the whole document"

    def execute(self, lm: LoadedModel, listeners: Listeners) -> Trace:
        return document_attention(lm, self.prompt, chat=self.chat, frozen=self.frozen, **vars(listeners))


@dataclass(frozen=True, eq=False)
class ExplainTask:
    """Why one token was kept or evicted at one refresh of a finished run (:func:`ccviz.explain.explain_token`).

    Keyed by the trace's identity: the page hands the same trace object on every rerun, so a result
    is found again in the store, and no trace is hashed.
    """

    model: str
    trace: Trace
    refresh: int
    position: int

    @property
    def label(self) -> str:
        return f"explaining t={self.position} at refresh {self.refresh} (replaying the run)"

    def _key(self) -> tuple:
        # the store holds the task (and so the trace): the id stays unique while the entry lives
        return (self.model, id(self.trace), self.refresh, self.position)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExplainTask) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def execute(self, lm: LoadedModel, listeners: Listeners) -> Explanation:
        return explain_token(lm, self.trace, self.refresh, self.position)
