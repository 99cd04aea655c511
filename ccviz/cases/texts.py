"""Real English prose available offline: the documentation text shipped with Python (``pydoc_data``).

Used where a benchmark needs long natural text (teacher-forced perplexity, refresh latency at n
tokens). Grammar blocks, code examples and heading underlines are dropped, so what remains is the
running prose of the language reference, in a fixed order: the same text on every machine with the
same Python minor version (recorded in the result metadata).
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..errors import CcvizError


def _is_prose(paragraph: str) -> bool:
    lines = paragraph.splitlines()
    if any(line[:1].isspace() for line in lines):  # indented: code, grammar or a nested listing
        return False
    if any(re.fullmatch(r"[*=\-~^]+", line.strip()) for line in lines):  # a heading
        return False
    return len(paragraph.split()) >= 20


@lru_cache(maxsize=1)
def prose_corpus() -> str:
    """All prose paragraphs of the Python language reference, reflowed, one blank line apart."""
    from pydoc_data.topics import topics

    paragraphs = []
    for key in sorted(topics):
        for paragraph in re.split(r"\n\s*\n", topics[key]):
            if _is_prose(paragraph):
                paragraphs.append(" ".join(line.strip() for line in paragraph.splitlines()))
    return "\n\n".join(paragraphs)


def prose_segments(tokenizer, n_tokens: int, count: int) -> list[str]:
    """``count`` consecutive, non-overlapping pieces of the corpus of about ``n_tokens`` tokens each."""
    ids = tokenizer(prose_corpus(), add_special_tokens=False)["input_ids"]
    if n_tokens * count > len(ids):
        raise CcvizError(f"the prose corpus has {len(ids)} tokens: {count} segments of {n_tokens} do not fit")
    return [tokenizer.decode(ids[i * n_tokens : (i + 1) * n_tokens]) for i in range(count)]


def long_document(tokenizer, n_tokens: int) -> str:
    """The raw documentation text (every topic, unfiltered), cut to about ``n_tokens`` tokens: the long
    prompt of the engine probes (:mod:`.overhead`, :mod:`.cost`, :mod:`.attention`), whose timings do
    not depend on what the text says."""
    from pydoc_data.topics import topics

    text = " ".join(topics[key] for key in sorted(topics))
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][:n_tokens]
    return tokenizer.decode(ids)
