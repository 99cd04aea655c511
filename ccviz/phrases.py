"""Finding a phrase in a trace's text: the tokens each occurrence covers.

One rule for the explain search (:func:`ccviz.explain.matching_tokens`) and the Compare page's
phrase survival (:func:`ccviz.figures.phrase_survival`): case is ignored by the regular expression
on the text itself, so every offset is the text's own. (Lower-casing the text first can change a
piece's length, ``"İ".lower()`` is two characters, and then needs a second map back to the pieces.)

And one rule for whether an output gives an expected answer (:func:`answer_matches`), which the
benchmarks and the app's verdict on a run share.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import numpy as np


def phrase_spans(pieces: Sequence[str], phrase: str) -> Iterator[tuple[int, int]]:
    """Every occurrence of ``phrase`` in ``"".join(pieces)`` (token texts), case-insensitive and overlapping
    ones included, in text order, as the (first, last) indices of the pieces it overlaps (inclusive).
    An empty phrase occurs nowhere. A generator: a caller that needs only some occurrences stops early."""
    if not phrase:
        return
    ends = np.cumsum([len(piece) for piece in pieces])
    for match in re.finditer(f"(?=({re.escape(phrase)}))", "".join(pieces), flags=re.IGNORECASE):
        first, last = np.searchsorted(ends, [match.start(1), match.end(1) - 1], side="right")
        yield int(first), int(last)


def phrase_mask(pieces: Sequence[str], phrase: str) -> np.ndarray:
    """bool ``[len(pieces)]``: the pieces that overlap any occurrence of ``phrase`` (:func:`phrase_spans`)."""
    mask = np.zeros(len(pieces), dtype=bool)
    for first, last in phrase_spans(pieces, phrase):
        mask[first : last + 1] = True
    return mask


def _words(text: str) -> list[str]:
    """Lower-case alphanumeric words; hyphens, commas and apostrophes inside a value are dropped first,
    so "QX-5821", "qx5821" and "4,817" / "4817" compare equal."""
    text = re.sub(r"(?<=\w)[-,'’](?=\w)", "", text.lower())
    return re.findall(r"[^\W_]+", text)


def answer_matches(output: str, answer: str) -> bool:
    """Normalised string match: the answer's words appear, contiguously, among the output's words."""
    target, words = _words(answer), _words(output)
    n = len(target)
    return n > 0 and any(words[i : i + n] == target for i in range(len(words) - n + 1))
