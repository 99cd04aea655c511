"""Turn user text into token ids, and find the chat-template prefix that ``frozen="auto"`` freezes.

A model without a chat template (a base model such as Gemma 3 270M) gets the plain format instead: its
tokenizer's own start (Gemma: ``<bos>``), the text, then ``PLAIN_SUFFIX`` ("\nAnswer:"). The harness's
cases end with "Question: ... Answer with the exact value from the text.", so they read as "Question:
... Answer:", which a base model answers.

A question given apart from the document joins it in the same user turn, after a blank line
(``QUESTION_SEPARATOR``), and the turn is tokenized exactly as that one text would be: the prompt is
token for token the one a user who pasted both would get. ``EncodedPrompt.question_start`` says where
the question begins, so the engine can keep it (and the template's turn suffix after it) out of
eviction.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CcvizError

_SENTINEL = "\u2063CCVIZ-PROMPT\u2063"
PLAIN_SUFFIX = "\nAnswer:"  # after the text, for a model without a chat template
QUESTION_SEPARATOR = "\n\n"  # between the document and a question given apart from it


@dataclass
class EncodedPrompt:
    ids: list[int]
    template_prefix: int  # tokens up to and including the user-turn header (plain format: the tokenizer's start; 0 raw)
    question_start: int | None = None  # the question's first token, when one was given apart (None: no question)


def join_question(document: str, question: str) -> tuple[str, int]:
    """The one text of a turn that holds ``document`` then ``question``, and the character the question starts at."""
    if not isinstance(question, str) or not question.strip():
        raise CcvizError("the question is empty: give a question, or none")
    head = document.rstrip() + QUESTION_SEPARATOR
    return head + question.strip(), len(head)


def encode_prompt(tokenizer, text: str, *, chat: bool, question: str | None = None) -> EncodedPrompt:
    """Encode ``text`` as one user turn (chat: the model's chat template, or the plain format for a model
    without one) or as it is (raw); ``question``, when given, joins the text as :func:`join_question` says.

    The template is rendered around a sentinel and its prefix, the text and its suffix are tokenized
    separately, so the frozen prefix length is exact and never depends on merges across the boundary.
    The question is found in the text's tokens by their character offsets: its first token is the first
    that ends after the blank line before it.
    """
    if not isinstance(text, str) or not text.strip():
        raise CcvizError("the prompt is empty: give some text")
    start = None
    if question is not None:
        text, start = join_question(text, question)

    def encode(part: str, special: bool = False) -> tuple[list[int], int | None]:
        """The ids of ``part`` and, when a question starts in it, the index of the question's first token."""
        if start is None:
            return list(tokenizer(part, add_special_tokens=special)["input_ids"]), None
        found = tokenizer(part, add_special_tokens=special, return_offsets_mapping=True)
        first = next(i for i, (_, end) in enumerate(found["offset_mapping"]) if end > start)
        return list(found["input_ids"]), first

    if not chat:
        ids, first = encode(text, special=True)
        return EncodedPrompt(ids=ids, template_prefix=0, question_start=first)
    if getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": _SENTINEL}], add_generation_prompt=True, tokenize=False
        )
        prefix, _, suffix = rendered.partition(_SENTINEL)
        prefix_ids = list(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    else:  # the plain format: what the tokenizer itself starts a text with (a BOS), the text, "Answer:"
        prefix_ids, suffix = list(tokenizer("", add_special_tokens=True)["input_ids"]), PLAIN_SUFFIX
    text_ids, first = encode(text)
    suffix_ids = list(tokenizer(suffix, add_special_tokens=False)["input_ids"]) if suffix else []
    question_start = None if first is None else len(prefix_ids) + first
    return EncodedPrompt(prefix_ids + text_ids + suffix_ids, len(prefix_ids), question_start)
