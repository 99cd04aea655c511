"""Turn user text into token ids, and find the chat-template prefix that ``frozen="auto"`` freezes.

A model without a chat template (a base model such as Gemma 3 270M) gets the plain format instead: its
tokenizer's own start (Gemma: ``<bos>``), the text, then ``PLAIN_SUFFIX`` ("\nAnswer:"). The harness's
cases end with "Question: ... Answer with the exact value from the text.", so they read as "Question:
... Answer:", which a base model answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CcvizError

_SENTINEL = "\u2063CCVIZ-PROMPT\u2063"
PLAIN_SUFFIX = "\nAnswer:"  # after the text, for a model without a chat template


@dataclass
class EncodedPrompt:
    ids: list[int]
    template_prefix: int  # tokens up to and including the user-turn header (plain format: the tokenizer's start; 0 raw)


def encode_prompt(tokenizer, text: str, *, chat: bool) -> EncodedPrompt:
    """Encode ``text`` as one user turn (chat: the model's chat template, or the plain format for a model
    without one) or as it is (raw).

    The template is rendered around a sentinel and its prefix, the text and its suffix are tokenized
    separately, so the frozen prefix length is exact and never depends on merges across the boundary.
    """
    if not isinstance(text, str) or not text.strip():
        raise CcvizError("the prompt is empty: give some text")
    if not chat:
        return EncodedPrompt(ids=list(tokenizer(text, add_special_tokens=True)["input_ids"]), template_prefix=0)

    def encode(part: str) -> list[int]:
        return list(tokenizer(part, add_special_tokens=False)["input_ids"]) if part else []

    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": _SENTINEL}], add_generation_prompt=True, tokenize=False
        )
        prefix, _, suffix = rendered.partition(_SENTINEL)
        prefix_ids = encode(prefix)
    else:  # the plain format: what the tokenizer itself starts a text with (a BOS), the text, "Answer:"
        prefix_ids, suffix = list(tokenizer("", add_special_tokens=True)["input_ids"]), PLAIN_SUFFIX
    return EncodedPrompt(ids=prefix_ids + encode(text) + encode(suffix), template_prefix=len(prefix_ids))
