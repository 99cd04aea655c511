"""Map character spans of a prompt to the timesteps of the tokens that carry them.

The engine encodes a chat prompt as template prefix + the user's text + template suffix, each
tokenized on its own (``ccviz.prompts.encode_prompt``), so a character of the text maps to timestep
``prefix length + index of its token`` in every trace of that prompt.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..prompts import encode_prompt, join_question


@dataclass(frozen=True)
class PromptTokens:
    """The prompt's ids as the engine sees them, and where each character of the text went."""

    ids: list[int]
    text_start: int  # timestep of the text's first token (the frozen template prefix comes before)
    offsets: list[tuple[int, int]]  # character span of each text token

    def timesteps(self, start: int, end: int) -> list[int]:
        """Timesteps of every token that overlaps characters [start, end) of the text."""
        hits = [self.text_start + j for j, (a, b) in enumerate(self.offsets) if a < end and b > start]
        if not hits:
            raise ValueError(f"no token covers characters {start}..{end}")
        return hits

    def first_timestep(self, char: int) -> int:
        """Timestep of the first token that ends after character ``char``: where reading it begins."""
        return next(self.text_start + j for j, (_, b) in enumerate(self.offsets) if b > char)


def prompt_tokens(tokenizer, text: str, *, chat: bool = True) -> PromptTokens:
    """Encode ``text`` exactly as the engine will, with the character offsets of the text's tokens."""
    encoded = encode_prompt(tokenizer, text, chat=chat)
    text_part = tokenizer(text, add_special_tokens=not chat, return_offsets_mapping=True)
    ids, offsets = list(text_part["input_ids"]), [tuple(o) for o in text_part["offset_mapping"]]
    start = encoded.template_prefix
    if encoded.ids[start : start + len(ids)] != ids:
        raise RuntimeError("the tokenizer's offsets do not match the engine's encoding of the prompt")
    return PromptTokens(ids=encoded.ids, text_start=start, offsets=offsets)


@dataclass(frozen=True)
class Prepared:
    """A prompt as the engine encodes it, and what survival is measured against."""

    tokens: PromptTokens
    question_start: int  # timestep of the first question token: where survival is read
    doc_tokens: int  # tokens of the document before the question: what a budget share is a share of
    required: list[int]  # timesteps (ascending) of every token the answer needs
    document: str  # the prompt's text before the blank line and its question: asked apart, the same tokens
    question: str

    @property
    def text_tokens(self) -> int:
        """The prompt's tokens without the chat template's prefix."""
        return len(self.tokens.ids) - self.tokens.text_start


def prepare(tokenizer: Any, prompt: str, question_start: int, spans: Iterable[tuple[int, int]]) -> Prepared:
    """``prompt``'s timesteps, with ``question_start`` and the required ``spans`` given in characters. The
    question must follow the document after a blank line, as :func:`ccviz.prompts.join_question` joins them,
    so that asking it apart gives the prompt's own text, token for token."""
    document, asked = prompt[:question_start].rstrip(), prompt[question_start:]
    if join_question(document, asked) != (prompt, question_start):
        raise ValueError("the question must follow the document after a blank line, with no space around it")
    tokens = prompt_tokens(tokenizer, prompt)
    question = tokens.first_timestep(question_start)
    required = sorted({t for start, end in spans for t in tokens.timesteps(start, end)})
    return Prepared(tokens, question, question - tokens.text_start, required, document, asked)
