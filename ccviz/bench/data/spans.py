"""Map character spans of a prompt to the timesteps of the tokens that carry them.

The engine encodes a chat prompt as template prefix + the user's text + template suffix, each
tokenized on its own (``ccviz.prompts.encode_prompt``), so a character of the text maps to timestep
``prefix length + index of its token`` in every trace of that prompt.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...prompts import encode_prompt


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
