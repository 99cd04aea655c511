"""Turn user text into token ids, and find the chat-template prefix that ``frozen="auto"`` freezes."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CcvizError

_SENTINEL = "\u2063CCVIZ-PROMPT\u2063"


@dataclass
class EncodedPrompt:
    ids: list[int]
    template_prefix: int  # tokens up to and including the user-turn header (0 in raw mode)


def encode_prompt(tokenizer, text: str, *, chat: bool) -> EncodedPrompt:
    """Encode ``text`` as one user turn (chat) or as it is (raw).

    The template is rendered around a sentinel and its prefix, the text and its suffix are tokenized
    separately, so the frozen prefix length is exact and never depends on merges across the boundary.
    """
    if not isinstance(text, str) or not text.strip():
        raise CcvizError("the prompt is empty: give some text")
    if not chat:
        return EncodedPrompt(ids=list(tokenizer(text, add_special_tokens=True)["input_ids"]), template_prefix=0)
    if not getattr(tokenizer, "chat_template", None):
        raise CcvizError("this model's tokenizer has no chat template: use raw mode (--raw)")
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": _SENTINEL}], add_generation_prompt=True, tokenize=False
    )
    prefix, _, suffix = rendered.partition(_SENTINEL)

    def encode(part: str) -> list[int]:
        return list(tokenizer(part, add_special_tokens=False)["input_ids"]) if part else []

    prefix_ids = encode(prefix)
    return EncodedPrompt(ids=prefix_ids + encode(text) + encode(suffix), template_prefix=len(prefix_ids))
