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
  ending in ``.``, ``!`` or ``?`` that the next token does not continue (so ``3.14`` stays whole);
- a *clause* ends where a sentence does, and also after a token ending in ``,``, ``:`` or ``;`` that the
  next token does not continue (so ``4,817`` stays whole).

Two forms decide with the scores as well (:func:`left_context_units`): every word takes along up to k
words before it in its clause (``left_context``), so a surprising value is kept with the words that say
what it is.

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
_CLAUSE_ENDS = (",", ":", ";")


@dataclass(frozen=True)
class TokenClasses:
    """Per-vocabulary flags, bool ``[vocab]``, that grouping looks up by token id."""

    opens: torch.Tensor  # starts with whitespace, or is special: always begins a word
    closes: torch.Tensor  # ends with a newline, or is special: the next token begins a word
    glues: torch.Tensor  # blank but for spaces (no newline): the next token continues its word
    breaks: torch.Tensor  # contains a newline, or is special: ends a sentence
    stops: torch.Tensor  # ends in . ! ? (whitespace aside): ends a sentence when the next token begins a word
    special: torch.Tensor  # a special token (chat template): a unit of its own at every granularity
    pauses: torch.Tensor  # ends in , : ; (whitespace aside): ends a clause when the next token begins a word


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
            text.rstrip().endswith(_CLAUSE_ENDS),
        )
        for i, text in enumerate(texts)
    ]
    table = torch.tensor(rows, dtype=torch.bool).reshape(size, 7)
    unknown = torch.tensor([[True, True, False, True, False, True, False]]).expand(vocab_size - size, 7)
    table = torch.cat([table, unknown])
    classes = TokenClasses(*table.T.contiguous())
    _classes[tokenizer] = classes
    return classes


def group_units(tok: torch.Tensor, classes: TokenClasses, granularity: Granularity) -> torch.Tensor:
    """The unit number of each of ``tok`` ``[n]`` (token ids in cache order): long ``[n]``, 0, 1, ...
    non-decreasing, one number per word, clause or sentence; under ``token`` every token is its own unit.
    Every clause and sentence starts on a word start, so words nest in clauses and clauses in sentences."""
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
        stops = classes.stops[tok] | (classes.pauses[tok] if granularity == "clause" else False)
        ends = classes.breaks[tok] | (stops & next_starts_word)
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


def left_context_units(
    scores: torch.Tensor, words: torch.Tensor, clauses: torch.Tensor, context: int, pool: Pool
) -> torch.Tensor:
    """Units of a word and up to ``context`` words before it in its clause: long ``[n]`` like :func:`group_units`.

    Each word looks at itself and the ``context`` words after it in its clause and joins the best of
    them by pooled score (ties: the later one). That choice never goes back as the words go on, so
    the words that chose the same one are a run: the chosen word with some of the words before it,
    at most ``context + 1`` words, never across a clause end. Pooled by max, a unit scores as its
    best word, so a surprising value is kept with the words that introduce it (the key of a question
    about it) rather than alone. ``scores`` ``[n]``; ``words``, ``clauses``: :func:`group_units` of the
    same tokens (words nest in clauses).
    """
    pooled = pool_scores(scores, words, pool)  # [W]
    count = pooled.numel()
    if count == 0 or context == 0:
        return words
    starts = torch.ones(words.numel(), dtype=torch.bool)
    starts[1:] = words[1:] != words[:-1]
    clause = clauses[starts]  # [W]: the clause of each word
    span = context + 1
    # Ranks instead of scores: no two alike (equal scores rank the later word higher) and every one above
    # the -1 of a place outside the clause, whatever the scores are (+inf or -inf included).
    rank = torch.empty(count).scatter_(0, torch.argsort(pooled, stable=True), torch.arange(count, dtype=torch.float))
    values = torch.cat([rank, rank.new_full((context,), -1.0)]).unfold(0, span, 1)  # [W, span]
    same = torch.cat([clause, clause.new_full((context,), -1)]).unfold(0, span, 1) == clause[:, None]
    best = torch.arange(count) + values.masked_fill(~same, -1.0).argmax(dim=1)  # the chosen word
    first = torch.ones(count, dtype=torch.bool)
    first[1:] = best[1:] != best[:-1]
    return (torch.cumsum(first.long(), 0) - 1)[words]
