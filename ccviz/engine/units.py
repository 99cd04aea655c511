"""Units of the keep decision: a refresh can keep or evict whole words or sentences instead of tokens.

A fact such as ``KX-4817`` or `` 4817`` is several tokens, and it survives only if every one of
them does; single digits score as unsurprising, so a token-level top-J keeps the fact's start and
drops its end. Grouping candidates into units, scoring each unit by a pool (max or mean) of its
tokens' scores, and keeping units whole, is the span-level fix the paper names as future work
(docs/policies.md#granularity). It works with any policy's per-token scores.

Units come from the token texts alone, through per-vocabulary tables built once per tokenizer:
- a *word* starts at a token that begins with whitespace, at a special token, and after a token
  that ends with a newline or is special; every other token continues the word before, and so does
  any token after a token of spaces alone (SmolLM2 writes `` 4817`` as ``" "``, ``"4"``, ...);
- a *sentence* ends after a token that contains a newline, after a special token, and after a token
  ending in ``.``, ``!`` or ``?`` that the next token does not continue (so ``3.14`` stays whole).

Everything per refresh is vectorised over the candidates (cumulative sums and scatter-reductions).
Which units survive is decided with every other keep rule in :mod:`ccviz.engine.survivors`
(:func:`~ccviz.engine.survivors.select_units`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

from ..choices import Granularity, Pool

_SENTENCE_ENDS = (".", "!", "?")


@dataclass(frozen=True)
class TokenClasses:
    """Per-vocabulary flags, bool ``[vocab]``, that grouping looks up by token id."""

    opens: torch.Tensor  # starts with whitespace, or is special: always begins a word
    closes: torch.Tensor  # ends with a newline, or is special: the next token begins a word
    glues: torch.Tensor  # blank but for spaces (no newline): the next token continues its word
    breaks: torch.Tensor  # contains a newline, or is special: ends a sentence
    stops: torch.Tensor  # ends in . ! ? (whitespace aside): ends a sentence when the next token begins a word
    special: torch.Tensor  # a special token (chat template): a unit of its own at every granularity


_classes: weakref.WeakKeyDictionary[Any, TokenClasses] = weakref.WeakKeyDictionary()


def token_classes(tokenizer: Any, vocab_size: int) -> TokenClasses:
    """The flags of every id below ``vocab_size`` (ids the tokenizer does not know are units of their own);
    built once per tokenizer (one batch decode of the vocabulary) and remembered."""
    known = _classes.get(tokenizer)
    if known is not None and known.opens.numel() >= vocab_size:
        return known
    size = min(len(tokenizer), vocab_size)
    texts = tokenizer.batch_decode(
        [[i] for i in range(size)], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )
    special = set(getattr(tokenizer, "all_special_ids", ()))
    rows = [
        (
            i in special or text[:1].isspace(),
            i in special or text.endswith("\n"),
            i not in special and text != "" and text.isspace() and "\n" not in text,
            i in special or "\n" in text,
            text.rstrip().endswith(_SENTENCE_ENDS),
            i in special,
        )
        for i, text in enumerate(texts)
    ]
    table = torch.tensor(rows, dtype=torch.bool).reshape(size, 6)
    unknown = torch.tensor([[True, True, False, True, False, True]]).expand(vocab_size - size, 6)
    table = torch.cat([table, unknown])
    classes = TokenClasses(*table.T.contiguous())
    _classes[tokenizer] = classes
    return classes


def group_units(tok: torch.Tensor, classes: TokenClasses, granularity: Granularity) -> torch.Tensor:
    """The unit number of each of ``tok`` ``[n]`` (token ids in cache order): long ``[n]``, 0, 1, ...
    non-decreasing, one number per word or sentence; under ``token`` every token is its own unit."""
    n = tok.numel()
    if granularity == "token" or n == 0:
        return torch.arange(n)
    tok = tok.cpu()
    word_start = classes.opens[tok].clone()
    word_start[1:] |= classes.closes[tok[:-1]]
    word_start[1:] &= ~classes.glues[tok[:-1]]
    if granularity == "word":
        starts = word_start
    else:
        next_starts_word = torch.ones(n, dtype=torch.bool)
        next_starts_word[:-1] = word_start[1:]
        ends = classes.breaks[tok] | (classes.stops[tok] & next_starts_word)
        starts = torch.ones(n, dtype=torch.bool)
        starts[1:] = ends[:-1] | classes.special[tok[1:]]
    starts[0] = True
    return torch.cumsum(starts.long(), 0) - 1


def pool_scores(scores: torch.Tensor, units: torch.Tensor, pool: Pool) -> torch.Tensor:
    """Each unit's score ``[units]``: the max or the mean of its tokens' scores ``[n]``."""
    count = int(units[-1]) + 1 if units.numel() else 0
    reduce = "amax" if pool == "max" else "mean"
    out = torch.zeros(count, dtype=scores.dtype)
    return out.scatter_reduce(0, units, scores, reduce=reduce, include_self=False)
