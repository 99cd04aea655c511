"""The trace recorder: the tokens, refreshes and times of one run, loadable at every moment.

It owns the token ids (whatever was fed, in position order, plus generated tokens picked but not
yet fed), so a run that stops for any reason (finished, cancelled, or an exception anywhere) still
yields a trace that :meth:`ccviz.Trace.load` accepts, with every token up to that point and the real
elapsed time. Token texts are decoded lazily, at each refresh and at the end, not per forward pass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..cache import LayerMembership
from ..choices import Phase
from ..trace import AnswerRead, Cycle, TokenRecord, Trace, pack_members
from ..version import __version__

TIMINGS = ("prefill_seconds", "decode_seconds", "refresh_seconds")


class TraceRecorder:
    def __init__(
        self,
        tokenizer: Any,
        model_name: str,
        config: dict[str, Any],
        prompt_length: int | None = None,
        answer_reads: list[AnswerRead] | None = None,
    ):
        """``prompt_length``: the prompt's length when known before it is fed (the trace config says it from
        the first refresh on, as a streamed partial trace needs); otherwise the prefill tokens fed so far.
        ``answer_reads``: the list an :class:`~ccviz.engine.reads.AnswerReader` fills, one per generated token."""
        self.started = time.perf_counter()  # total_seconds counts from here
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        self.trace = Trace(
            config={"model": model_name, **config, "prompt_tokens": prompt_length or 0, "ccviz_version": __version__}
        )
        self.ids: list[int] = []
        self.prompt_tokens = 0  # tokens fed in the prefill phase come first; every later token is generated
        self.answer_reads = answer_reads
        self.timings = dict.fromkeys(TIMINGS, 0.0)

    def fed(self, ids: Sequence[int], phase: Phase, cache_length: int, cache_bytes: int = 0) -> None:
        """Tokens the model has just processed (their K/V are in the cache, which now holds ``cache_bytes``)."""
        if phase == "prefill":  # CacheSession.feed refuses prefill after decode before any model work
            self.prompt_tokens += len(ids)
        self.ids.extend(ids)
        self.trace.peak_cache_length = max(self.trace.peak_cache_length, cache_length)
        self.trace.peak_cache_bytes = max(self.trace.peak_cache_bytes, cache_bytes)

    def timed(self, phase: Phase, seconds: float) -> None:
        """Time spent in one forward pass (and its policies' observation) of ``phase``."""
        self.timings[f"{phase}_seconds"] += seconds

    def refreshed(
        self,
        phase: Phase,
        candidates: list[int],
        kept: list[int],
        scores: dict[str, list[float]],
        seconds: float,
        units: list[int] | None = None,
        layers: LayerMembership | None = None,
    ) -> Trace:
        """Record a refresh at the current step; return the live trace (loadable: its tokens cover every step).
        ``units``: the candidates' unit numbers under word or sentence granularity; ``layers``: what each
        layer (and KV head) holds of ``kept``, under a per-layer allocation."""
        self.timings["refresh_seconds"] += seconds
        layer_kept = head_kept = None
        if layers is not None:
            layer_kept = [pack_members(row) for row in layers.held(len(kept)).numpy()]
            if layers.heads is not None:
                head_kept = [[pack_members(row) for row in heads] for heads in layers.visible(len(kept)).numpy()]
        self.trace.cycles.append(
            Cycle(
                index=len(self.trace.cycles),
                step=len(self.ids),
                phase=phase,
                candidates=candidates,
                kept=kept,
                scores=scores,
                seconds=seconds,
                units=units,
                layer_kept=layer_kept,
                head_kept=head_kept,
            )
        )
        return self.snapshot()

    def snapshot(self, pending: Sequence[int] = ()) -> Trace:
        """The live trace with every token so far (and ``pending``: generated, not yet fed) and the times so far."""
        ids = [*self.ids, *pending]
        start = len(self.trace.tokens)
        pieces = self.tokenizer.batch_decode(
            [[i] for i in ids[start:]], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        self.trace.tokens.extend(
            TokenRecord(t=t, id=i, text=piece, source="prompt" if t < self.prompt_tokens else "generated")
            for t, (i, piece) in enumerate(zip(ids[start:], pieces), start=start)
        )
        self.trace.config["prompt_tokens"] = self.prompt_tokens if self.prompt_length is None else self.prompt_length
        if self.answer_reads is not None:  # a pass read before its pick is made (or fails): only picked tokens'
            self.trace.answer_reads = self.answer_reads[: len(ids) - self.prompt_tokens if self.prompt_tokens else 0]
        self.trace.timings = {**self.timings, "total_seconds": time.perf_counter() - self.started}
        return self.trace

    def finish(self, stop_reason: str, *, pending: Sequence[int] = (), error: str | None = None) -> Trace:
        """The final trace: every token (``pending``: generated tokens never fed, e.g. the last one picked)."""
        trace = self.snapshot(pending)
        generated = [tok.id for tok in trace.tokens[self.prompt_tokens :]]
        trace.output_text = self.tokenizer.decode(generated, skip_special_tokens=True)
        trace.stop_reason = stop_reason
        trace.status = "error" if error else "cancelled" if stop_reason == "cancelled" else "complete"
        trace.error = error
        return trace
