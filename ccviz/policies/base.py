"""The policy interface: one score per candidate, higher = keep.

The engine owns everything else (which entries are candidates, the frozen prefix, the recent window,
top-k and gathering: :mod:`ccviz.engine.survivors`), so a policy is a small dataclass with one scoring
method, as in kvpress, that receives the candidates alone (:class:`~ccviz.cache.Candidates`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch

from ..cache import CacheState, Candidates
from ..capture import AttentionNeed, Capture
from ..choices import Granularity
from ..fields import Validated


@dataclass
class Policy(Validated):
    """Base class. Subclasses set ``name``, ``summary`` and ``signal`` (and ``title``, the name people read in
    headings) and implement :meth:`score_candidates`.

    (The method is not called ``score`` because ``score`` is an option name of the counter-causal policies.)

    Dataclass fields are the policy's options: declared with :mod:`ccviz.fields` (``whole``, ``flag``,
    ``choice``...), they are validated, shown in the CLI and the app (with their bounds), and recorded
    in the trace config.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    title: ClassVar[str | None] = None  # the policy's name in headings ("Sliding window"); None: ``name``
    signal: ClassVar[str | None] = None  # name of the score in the trace; None: the policy never scores
    evicts: ClassVar[bool] = True
    needs_hidden: ClassVar[bool] = False  # store H^(L-1) next to the cache (see residual_layers for other layers)
    sinks: ClassVar[int] = 0  # leading tokens that are always frozen, whatever ``frozen`` says
    attention: ClassVar[AttentionNeed | None] = None  # real attention weights read in :meth:`observe`
    default_granularity: ClassVar[Granularity] = "token"  # the unit kept whole when the run does not say
    default_left_context: ClassVar[int] = 0  # word units: the words before each kept with it, when the run does not say
    # Under a per-layer allocation, scores each layer's and KV head's entries by that head's own attention:
    # score_candidates then returns [candidates, layers, kv_heads] (ccviz.engine.survivors); "adaptive" needs it.
    head_scores: ClassVar[bool] = False

    @classmethod
    def human_name(cls) -> str:
        """The ``title`` this class sets itself, else its ``name``: a subclass registered under another name (a
        plugin's variant of a policy) is not called by its parent's title."""
        return cls.__dict__.get("title") or cls.name

    def unit_defaults(self) -> tuple[Granularity, int]:
        """The unit this policy keeps whole and (word units) the left context, when the run does not say:
        the class's own, unless an option changes them (the counter-causal policies' ``paper``)."""
        return self.default_granularity, self.default_left_context

    def default_recent(self, cache_size: int) -> int:
        """Trailing entries always kept when the user does not say (0 for most policies)."""
        return 0

    def residual_layers(self, num_layers: int) -> tuple[int, ...]:
        """Layers l whose input rows H^(l) the engine stores next to the cache for this policy (in
        ``Candidates.residuals``): the last one when ``needs_hidden``. May raise CcvizError for an option
        the model cannot serve; the session asks before any work."""
        return (num_layers - 1,) if self.needs_hidden else ()

    def observe(self, model: torch.nn.Module, state: CacheState, capture: Capture) -> None:
        """Called after every forward pass, once ``state`` holds the new entries (default: nothing).

        Per-run memory (e.g. H2O's accumulated attention) lives in ``state.extras``, one row per cache
        entry, so every refresh gathers it with the same indices as the cache.
        """

    def keeps_pass_state(self) -> bool:
        """Whether :meth:`observe` keeps state from every forward pass (H2O's sums, SnapKV's window): a cache
        filled under another policy cannot then stand in for this one's (the efficiency task's shared fills)."""
        return type(self).observe is not Policy.observe

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        """Score every candidate; the engine keeps the highest (a policy never selects).

        Parameters
        ----------
        model : torch.nn.Module
            The run's model, for a policy that runs passes of its own (counter-causal surprise, KVzip).
        candidates : Candidates
            The cache entries after the frozen prefix, alone: ``pos`` and ``tok`` ``[n]``, K/V rows
            ``[batch, kv_heads, n, head_dim]`` per layer, stored residual rows ``[n, d_model]``.

        Returns
        -------
        torch.Tensor
            float32 ``[n]``, higher = kept first; or ``[n, layers, kv_heads]`` from a ``head_scores``
            policy whose captures are ``per_head`` (per-head allocation reads them).
        """
        raise NotImplementedError

    def options(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
