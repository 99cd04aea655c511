"""What-if phrases: the prompt tokens a run pins (never evicted) or drops (evicted at their first refresh).

``RunConfig.pin`` and ``RunConfig.drop`` name phrases; here they become tokens, by the rule the explain
search and the phrase-survival view use (:func:`ccviz.phrases.phrase_spans`): every occurrence, case
ignored, each token that overlaps the phrase's characters, searched in the document: the prompt after
the frozen prefix (frozen tokens are kept anyway) and before a question given apart (kept too). A
pinned token joins the frozen entries in never being evicted, but takes one of the J places, so a
refresh still keeps at most J candidates; :class:`~ccviz.engine.survivors.SurvivorSelector` applies
both at every refresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import CcvizError
from ..phrases import phrase_mask
from .config import RunConfig


@dataclass(frozen=True)
class Marks:
    """bool ``[prompt tokens]`` by position: which prompt tokens are pinned, and which dropped."""

    pinned: torch.Tensor
    dropped: torch.Tensor

    def at(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """bool ``[candidates]`` twice, for the candidates' positions ``pos`` (generated tokens: neither)."""
        inside = pos < self.pinned.numel()
        pinned, dropped = torch.zeros_like(inside), torch.zeros_like(inside)
        pinned[inside], dropped[inside] = self.pinned[pos[inside]], self.dropped[pos[inside]]
        return pinned, dropped


def phrase_tokens(pieces: Sequence[str], phrase: str, frozen: int, end: int | None = None) -> np.ndarray:
    """bool ``[len(pieces)]``: the prompt tokens (texts ``pieces``) a pinned or dropped ``phrase`` covers,
    every occurrence after the ``frozen`` prefix (and before ``end``, when given)."""
    found = np.zeros(len(pieces), dtype=bool)
    end = len(pieces) if end is None else end
    found[frozen:end] = phrase_mask(pieces[frozen:end], phrase)
    return found


NO_MARKS = Marks(torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.bool))


def find_marks(
    tokenizer: Any, prompt_ids: Sequence[int], config: RunConfig, question_start: int | None = None
) -> Marks:
    """The tokens ``config``'s (resolved) pins and drops cover in the prompt ``prompt_ids`` (in its document,
    before ``question_start`` when the question is kept apart); a one-line :class:`CcvizError` for a phrase
    not in the document, or pins that with the recent window fill J."""
    if not (config.pin or config.drop):
        return NO_MARKS
    frozen, recent = config.frozen, config.recent
    assert isinstance(frozen, int) and recent is not None, "a resolved config: frozen and recent are numbers"
    end = question_start if config.protect_question else None
    pieces = tokenizer.batch_decode(
        [[i] for i in prompt_ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )  # as the trace decodes its tokens, so a trace's texts find the same tokens

    def covered(phrases: tuple[str, ...], verb: str) -> torch.Tensor:
        mask = np.zeros(len(prompt_ids), dtype=bool)
        for phrase in phrases:
            found = phrase_tokens(pieces, phrase, frozen, end)
            if not found.any():
                raise CcvizError(f"cannot {verb} {phrase!r}: it is not in the document")
            mask |= found
        return torch.from_numpy(mask)

    marks = Marks(covered(config.pin, "pin"), covered(config.drop, "drop"))
    if bool((marks.pinned & marks.dropped).any()):
        raise CcvizError("a pinned phrase and a dropped phrase share tokens: pin or drop them, not both")
    count = int(marks.pinned.sum())
    if count + recent >= config.cache_size:
        raise CcvizError(
            f"the pinned phrases cover {count} tokens and the recent window keeps {recent}: together they fill "
            f"the cache size J ({config.cache_size}), leaving no place to score: pin less or raise J"
        )
    return marks
