"""The retention benchmark's second family of cases: real prose, one fact and two distractors of its form.

The records of :mod:`.documents` are generated filler; a ranking measured on one generator may be the
generator's. Here the document is a stretch of real English prose (Python's language reference,
:mod:`.texts`), and three statements of one form are set between its sentences, each for another key
with another value ("The access code for the north archive is 1382."). The question asks for one key,
so a policy that keeps a distractor instead of the fact answers with the wrong value. The same
``(index, seed, words, position)`` always gives the same case.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from .documents import INSTRUCTION, Case, fact_position, occurrences
from .texts import prose_corpus
from .vocabulary import FACT_VALUES

FAMILY = "prose"
FORMS = (  # (statement, question): each case uses one form for its fact and both distractors
    ("The access code for the {key} is {value}.", "What is the access code for the {key}?"),
    (
        "The delivery for the {key} is booked under reference {value}.",
        "Under which reference is the delivery for the {key} booked?",
    ),
    ("Visitors to the {key} must show pass number {value}.", "Which pass number must visitors to the {key} show?"),
)
KEYS = (
    "north archive",
    "east workshop",
    "river depot",
    "old observatory",
    "glass pavilion",
    "stone library",
    "harbour office",
    "west laboratory",
    "upper gallery",
    "cedar hall",
)
FACT_TYPES = ("number", "identifier")
DISTRACTORS = 2


@lru_cache(maxsize=1)
def _sentences() -> tuple[str, ...]:
    """The corpus's sentences of 5 to 60 words, in order (split after a full stop, question or exclamation
    mark): a longer one is a listing run together, which would make one document far longer than the rest."""
    split = re.split(r"(?<=[.!?])\s+", prose_corpus().replace("\n\n", " "))
    return tuple(s for s in split if 5 <= len(s.split()) <= 60)


def make_prose_case(index: int, *, words: int = 400, position: float | None = None, seed: int = 0) -> Case:
    """Build prose case ``index``: a window of about ``words`` words of prose with the fact at ``position``
    (default: spread evenly, as the records) and two distractors a third and two thirds further round."""
    position = fact_position(index, words, position)
    rng = random.Random(f"ccviz-prose:{seed}:{index}")
    sentences = _sentences()
    start = rng.randrange(len(sentences))
    window: list[str] = []
    while sum(len(s.split()) for s in window) < words:
        window.append(sentences[(start + len(window)) % len(sentences)])
    text = " ".join(window)
    fact_type = FACT_TYPES[index % len(FACT_TYPES)]
    statement, question = FORMS[(index // len(FACT_TYPES)) % len(FORMS)]
    keys = rng.sample(KEYS, 1 + DISTRACTORS)
    values = rng.sample([v for v in FACT_VALUES[fact_type] if v not in text], 1 + DISTRACTORS)
    places = [(position + k / (1 + DISTRACTORS)) % 1.0 for k in range(1 + DISTRACTORS)]
    inserted = [statement.format(key=key, value="\0" if k == 0 else values[k]) for k, key in enumerate(keys)]
    for place, sentence in sorted(zip(places, inserted), reverse=True):  # from the back: earlier places hold
        window.insert(round(place * len(window)), sentence)
    prompt = " ".join(window)
    answer_start = prompt.index("\0")
    prompt = prompt.replace("\0", values[0])
    question_start = len(prompt) + 2
    prompt += f"\n\nQuestion: {question.format(key=keys[0])} {INSTRUCTION}"
    for value in values:  # the fact and each distractor stated exactly once
        if len(occurrences(prompt, value)) != 1:
            raise RuntimeError(f"generator bug: {value!r} is not stated exactly once in prose case {index}")
    return Case(
        index,
        FAMILY,
        fact_type,
        position,
        prompt,
        values[0],
        (answer_start, answer_start + len(values[0])),
        question_start,
    )
