"""Why a kept fact goes unanswered: per-row diagnosis measures of the survival tasks, and their summary.

Survival (every token of the fact cached when the question is read) and accuracy diverge: many
policies keep the fact yet the model does not answer. Each measure here is a pure function of the
row's trace, its prepared prompt (:class:`~.tasks.survival.Prepared`) and the tokenizer's unit
tables, read at the question (the cache when the first question token is read,
:func:`.metrics.cache_before`), and names one suspect:

- **context**: ``sentence_kept``, the share of the fact's sentence (without the fact) still cached;
  ``key_kept``, the share of its *key words* (the words it shares with the question) kept whole;
- **distractors**: ``distractors_kept``, cached document words of the fact's own kind;
- **islands**: ``gaps_around``, evicted runs near the fact; ``isolated``, both neighbours evicted;
- **reading**: ``reading``, the attention the first generated token pays to the fact, and
  ``reading_peak``, the most any generated token pays it (measured at run time by
  :class:`.reading.ReadingProbe`; passed in);
- **the question**: ``question_evicted``, 1 when part of the question (or of the turn's end after it) was
  no longer cached when the answer was generated: read from the trace, not assumed, since under the
  paper's protocol (``protect_question=False``) a refresh at the end of the prefill can evict it.

Units are the engine's own (:mod:`ccviz.engine.units`): a sentence or a word here is exactly what
``granularity="sentence"`` / ``"word"`` would keep whole. A word counts as *kept* (cached) only when
every one of its tokens is, as the fact itself survives only whole.

:func:`summarise_diagnosis` splits the survived rows into answered and unanswered and says, per
measure, how well it separates them (AUC with a Mann-Whitney test).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ccviz.cases.documents import INSTRUCTION
from ccviz.cases.spans import Prepared
from ccviz.engine.units import group_units, token_classes
from ccviz.trace import Trace

from .metrics import cache_before
from .specs import FULL, evicting

if TYPE_CHECKING:
    import pandas as pd

# Words that never make a key word: short function words, and the retention prompt's fixed frame
# ("Question: ... Answer with the exact value from the text.") that every question carries.
STOPWORDS = frozenset(
    "a an the is are was were be been of to in on at for by as and or with from that this it its "
    "what who whom which how many much did do does has have had his her their he she they we you i my "
    "me our your".split()
)
FRAME_WORDS = frozenset(re.findall(r"[a-z0-9]+", f"question: {INSTRUCTION}".lower()))
KINDS = ("identifier", "number", "name")
MEASURES = (
    "sentence_kept",
    "key_kept",
    "key_words",
    "distractors_kept",
    "gaps_around",
    "isolated",
    "reading",
    "reading_peak",
    "question_evicted",
)
FULL_READINGS = {"reading_full": "reading", "reading_peak_full": "reading_peak"}  # the full-cache row's, same case
SUMMARY_MEASURES = (*MEASURES, *FULL_READINGS)
WINDOW_SENTENCES = 1  # gaps_around looks at the fact's sentence and this many sentences either side


def normalised(word: str) -> str:
    """A word as key words compare: lower case, letters and digits only ("patient's" -> "patients")."""
    return re.sub(r"[\W_]", "", word.lower())


def word_kind(word: str) -> str | None:
    """The kind of a word, from its own text (surrounding punctuation stripped), first rule that holds:

    - ``identifier``: letters and digits mixed ("KX4817"), or a hyphenated code of capitals and digits
      ("KX-4817", "A-12");
    - ``number``: a digit and no letter ("4817", "4,817", "12:30");
    - ``name``: starts with a capital letter ("Ingrid");
    - None: anything else (an allergy such as "latex" has no kind: its distractors are not counted).
    """
    text = re.sub(r"^\W+|\W+$", "", word)
    letters, digits = any(c.isalpha() for c in text), any(c.isdigit() for c in text)
    if letters and digits or re.fullmatch(r"[A-Z0-9]+(-[A-Z0-9]+)+", text):
        return "identifier"
    if digits:
        return "number"
    if text[:1].isupper():
        return "name"
    return None


def diagnose(
    trace: Trace, prepared: Prepared, tokenizer: Any, readings: Sequence[float] = ()
) -> dict[str, float | int]:
    """Every diagnosis measure of one row (see the module doc). ``readings``: the probe's, one per decode
    pass (:meth:`.reading.ReadingProbe.readings` of the fact's timesteps); none: both readings NaN.

    ``prepared.required`` are the fact's timesteps (one contiguous span), ``prepared.question_start``
    the first question token; the question runs to the end of the text (the chat template's suffix
    aside), the document from ``prepared.tokens.text_start`` to the question. The document is read as the
    question finds it, the question (with the suffix) as the answer finds it. Undefined measures are
    NaN: ``sentence_kept`` of a fact that is its whole sentence, ``key_kept`` without key words,
    ``distractors_kept`` of a fact with no kind (:func:`word_kind`).
    """
    ids = torch.as_tensor(prepared.tokens.ids)
    n, question, text_end = len(ids), prepared.question_start, prepared.tokens.text_start + len(prepared.tokens.offsets)
    classes = token_classes(tokenizer, len(tokenizer))
    sentence = group_units(ids, classes, "sentence").numpy()  # [n] sentence number of each prompt token
    word = group_units(ids, classes, "word").numpy()  # [n] word number
    starts = np.flatnonzero(np.r_[True, word[1:] != word[:-1]])  # [words] each word's first token
    texts = np.asarray([record.text for record in trace.tokens[:n]], dtype=object)
    words = ["".join(part) for part in np.split(texts, starts[1:])]

    positions = np.arange(n)
    asked = positions >= question
    cached = np.zeros(n, dtype=bool)
    cached[sorted(cache_before(trace, question))] = True  # the document, when the question comes
    cached[sorted(t for t in cache_before(trace, n) if t >= question)] = True  # the question, when the answer does
    fact = np.isin(positions, prepared.required)
    document = (positions >= prepared.tokens.text_start) & (positions < question)
    context = np.isin(sentence, sentence[fact]) & ~fact  # the fact's sentence without the fact

    def per_word(mask: np.ndarray) -> np.ndarray:
        """bool [words]: which words have a token in ``mask``."""
        return np.bincount(word, weights=mask, minlength=len(words)) > 0

    word_kept, word_fact = ~per_word(~cached), per_word(fact)
    keys = {normalised(words[w]) for w in np.flatnonzero(per_word(asked & (positions < text_end)))}
    keys -= STOPWORDS | FRAME_WORDS | {""}
    is_key = np.isin([normalised(w) for w in words], list(keys))
    key_words = np.flatnonzero(per_word(context) & ~word_fact & is_key)

    kind = word_kind("".join(texts[fact]).strip())
    if kind is None:
        distractors: float | int = math.nan
    else:
        same = np.array([word_kind(w) == kind for w in words])
        if kind == "name":  # every sentence opens with a capital: a name must not open its sentence
            same &= np.r_[False, sentence[starts[1:]] == sentence[starts[1:] - 1]]
        distractors = int(np.count_nonzero(same & word_kept & ~word_fact & ~per_word(~document)))
    return {
        "sentence_kept": _share(cached[context]),
        "key_kept": _share(word_kept[key_words]),
        "key_words": len(key_words),
        "distractors_kept": distractors,
        "gaps_around": _gaps(sentence, fact, document, cached),
        "isolated": int(_evicted_neighbour(fact, cached, -1) and _evicted_neighbour(fact, cached, 1)),
        "reading": round(readings[0], 4) if readings else math.nan,
        "reading_peak": round(max(readings), 4) if readings else math.nan,
        "question_evicted": int(not cached[asked].all()),
    }


def _share(values: np.ndarray) -> float:
    return round(float(values.mean()), 4) if values.size else math.nan


def _gaps(sentence: np.ndarray, fact: np.ndarray, document: np.ndarray, cached: np.ndarray) -> int:
    """Maximal runs of evicted document tokens in the fact's sentence and WINDOW_SENTENCES either side."""
    near = sentence[fact]
    window = document & (sentence >= near.min() - WINDOW_SENTENCES) & (sentence <= near.max() + WINDOW_SENTENCES)
    evicted = window & ~cached
    return int(np.count_nonzero(evicted & ~np.r_[False, evicted[:-1]]))


def _evicted_neighbour(fact: np.ndarray, cached: np.ndarray, side: int) -> bool:
    """Whether the token just before (side -1) or after (+1) the fact was evicted (none there: no)."""
    at = np.flatnonzero(fact)
    t = at[0] - 1 if side < 0 else at[-1] + 1
    return 0 <= t < len(cached) and not cached[t]


def mann_whitney_auc(positive: np.ndarray, negative: np.ndarray) -> tuple[float, float]:
    """AUC of ``positive`` against ``negative`` (the chance that a positive value exceeds a negative one,
    ties counted half: Mann-Whitney U / (n1 n0)) and its two-sided p-value by the normal approximation
    with the tie correction and a continuity correction (as scipy's ``mannwhitneyu`` asymptotic method);
    NaN, NaN when a group is empty. All values tied: AUC 0.5, p 1."""
    positive, negative = np.asarray(positive, dtype=float), np.asarray(negative, dtype=float)
    n1, n0 = len(positive), len(negative)
    if n1 == 0 or n0 == 0:
        return math.nan, math.nan
    values = np.concatenate([positive, negative])
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2)[inverse]  # average ranks, 1-based
    u = float(ranks[:n1].sum()) - n1 * (n1 + 1) / 2
    n = n1 + n0
    variance = n1 * n0 / 12 * ((n + 1) - float((counts**3 - counts).sum()) / (n * (n - 1)))
    if variance <= 0:
        return 0.5, 1.0
    z = max(abs(u - n1 * n0 / 2) - 0.5, 0.0) / math.sqrt(variance)
    return u / (n1 * n0), math.erfc(z / math.sqrt(2))


def summarise_diagnosis(rows: pd.DataFrame) -> pd.DataFrame:
    """Over the rows whose fact survived and whose answer was checked: one row per policy x measure (and
    per measure over ``all`` policies but ``full``, whose context is whole by construction) with n and
    the mean of the answered and the unanswered rows, and the AUC of answered against unanswered with
    its Mann-Whitney p (:func:`mann_whitney_auc`): AUC above 0.5, higher values go with answers.

    ``reading_full`` and ``reading_peak_full`` are joined from the full-cache row of the same case. Rows
    without diagnosis columns (all blank) are left out, and each measure's blank cells from its own statistics.
    """
    import pandas as pd

    present = [m for m in MEASURES if m in rows.columns]
    if rows.empty or not present:
        return pd.DataFrame()
    rows = rows.copy()
    for column in (*present, "survived", "answered"):
        rows[column] = pd.to_numeric(rows[column], errors="coerce")
    full = rows[rows.policy == FULL].drop_duplicates("case").set_index("case")
    for joined, measure in FULL_READINGS.items():
        if measure in present:
            rows[joined] = rows["case"].map(full[measure])
    measures = [m for m in SUMMARY_MEASURES if m in rows.columns]
    rows = rows[(rows.survived == 1) & rows.answered.notna() & rows[present].notna().any(axis=1)]
    groups = [(str(policy), group) for policy, group in rows.groupby("policy", sort=False)]
    groups.append(("all", evicting(rows)))
    out = []
    for policy, group in groups:
        answered = group.answered == 1
        for measure in measures:
            yes, no = group.loc[answered, measure].dropna(), group.loc[~answered, measure].dropna()
            auc, p = mann_whitney_auc(yes.to_numpy(), no.to_numpy())
            out.append(
                {
                    "policy": policy,
                    "measure": measure,
                    "n_answered": len(yes),
                    "n_unanswered": len(no),
                    "mean_answered": yes.mean(),
                    "mean_unanswered": no.mean(),
                    "auc": auc,
                    "p_value": p,
                }
            )
    return pd.DataFrame(out)
