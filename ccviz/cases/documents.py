"""Deterministic documents with one load-bearing fact: the retention benchmark's cases.

A miniature of LongHealth / LoCoMo: a clinical record, a multi-session chat or a set of meeting notes,
made of varied filler sentences (no line is ever repeated), with one fact (an allergy, an
identifier, a number or a name) stated exactly once at a chosen position, and a question about it at
the very end. The same ``(index, seed, words, position)`` always gives the same case, on any machine,
so every policy is measured on identical inputs.
"""

from __future__ import annotations

import datetime
import random
import re
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..errors import CcvizError
from .vocabulary import (
    CHAT_EXCHANGES,
    CLINICAL_CORES,
    CLINICAL_OPENINGS,
    FACT_VALUES,
    FACTS,
    MEETING_CORES,
    MEETING_OPENINGS,
    POOLS,
)

KINDS = tuple(FACTS)
COMBINATIONS = tuple((kind, fact) for kind in KINDS for fact in FACTS[kind])
_GOLDEN = 0.6180339887498949
_PRONOUNS = (
    {"pron": "she", "obj": "her", "poss": "her", "title": "Ms."},
    {"pron": "he", "obj": "him", "poss": "his", "title": "Mr."},
)
INSTRUCTION = "Answer with the exact value from the text."
_SECTION = {"clinical": 6, "chat": 3, "meeting": 6}  # units (sentences, exchanges) per visit / session / meeting


@dataclass(frozen=True)
class Case:
    """One retention case. Spans are character offsets into ``prompt`` (the whole user turn)."""

    index: int
    kind: str
    fact_type: str
    position: float  # requested place of the fact, as a fraction of the document body
    prompt: str  # the document, a blank line, then the question: the question is always last
    answer: str
    answer_span: tuple[int, int]
    question_start: int


def default_position(index: int) -> float:
    """Spread facts evenly over [0.05, 0.95] (a golden-ratio sequence), so any run of cases is balanced."""
    return 0.05 + 0.9 * ((index * _GOLDEN) % 1.0)


class _Filler:
    """Fills templates from the pools, never producing the same line twice in one document."""

    def __init__(self, rng: random.Random, fixed: dict[str, str]):
        self.rng = rng
        self.fixed = fixed
        self.used: set[str] = set()

    def fill(self, template: str) -> str:
        values: dict[str, str] = {}
        for _, name, _, _ in string.Formatter().parse(template):
            if name is None or name in values:
                continue
            if name in self.fixed:
                values[name] = self.fixed[name]
                continue
            base = name if name in POOLS else name.removesuffix("2")
            pool, first = POOLS[base], values.get(base)
            values[name] = self.rng.choice([v for v in pool if v != first])
        text = template.format(**values).strip()
        return text[0].upper() + text[1:]

    def fresh(self, templates: Iterator[str]) -> str:
        """A sentence not used before in this document, from the next template that can still give one."""
        for _ in range(200):
            template = next(templates)
            for _ in range(10):
                sentence = self.fill(template)
                lines = sentence.splitlines()
                if self.used.isdisjoint(lines):
                    self.used.update(lines)
                    return sentence
        raise CcvizError("the filler vocabulary is exhausted: ask for a shorter document")


def _cycle(rng: random.Random, items: tuple[str, ...]) -> Iterator[str]:
    """Every item once in random order, then again in a new order: templates are used evenly."""
    while True:
        order = list(items)
        rng.shuffle(order)
        yield from order


def _sentence_units(
    openings: tuple[str, ...], cores: tuple[str, ...]
) -> Callable[[random.Random, _Filler], Iterator[str]]:
    """Units (sentences, chat exchanges): an optional opening phrase plus a core, cores used evenly."""

    def units(rng: random.Random, filler: _Filler) -> Iterator[str]:
        order = _cycle(rng, cores)
        templates = (f"{rng.choice(openings)} {core}" for core in order)
        while True:
            yield filler.fresh(templates)

    return units


_UNITS = {
    "clinical": _sentence_units(CLINICAL_OPENINGS, CLINICAL_CORES),
    "chat": _sentence_units(("",), tuple(f"{{speaker}}: {a}\n{{friend}}: {b}" for a, b in CHAT_EXCHANGES)),
    "meeting": _sentence_units(MEETING_OPENINGS, MEETING_CORES),
}
_HEADERS = {
    "clinical": "Clinical record of {title} {surname}, age {tens}. Attending physician: Dr. {surname2}.",
    "chat": "Chat log between {speaker} and {friend}, over several sessions.",
    "meeting": "Minutes of the {committee} meetings.",
}
_SECTIONS = {
    "clinical": "Visit {number}, {date}:",
    "chat": "Session {number}, {date}:",
    "meeting": "Meeting {number}, {date}:",
}


def _dates(rng: random.Random) -> Iterator[str]:
    """Chronological dates a few days to a few weeks apart, so sections read like a real history."""
    day = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(300))
    while True:
        yield f"{day:%A} {day.day} {day:%B} {day.year}"
        day += datetime.timedelta(days=rng.randrange(4, 30))


def fact_position(index: int, words: int, position: float | None) -> float:
    """Case ``index``'s fact position in [0, 1] (given, or spread evenly), once ``words`` and it are checked."""
    if words < 40:
        raise CcvizError(f"a document needs at least 40 words, got {words}")
    position = default_position(index) if position is None else float(position)
    if not 0.0 <= position <= 1.0:
        raise CcvizError(f"the fact position must be between 0 and 1, got {position}")
    return position


def occurrences(prompt: str, value: str) -> list[int]:
    """Where ``value`` stands in ``prompt`` as a whole word, in any case: a fact must stand there once."""
    return [m.start() for m in re.finditer(rf"(?<!\w){re.escape(value)}(?!\w)", prompt, flags=re.IGNORECASE)]


def make_case(
    index: int,
    *,
    words: int = 400,
    position: float | None = None,
    kind: str | None = None,
    fact_type: str | None = None,
    seed: int = 0,
) -> Case:
    """Build case ``index``: by default the kind and fact type cycle and the position is spread evenly.

    ``words`` is the length of the document body in words (400 words: about 660 SmolLM2 tokens in all);
    ``position`` in [0, 1] puts the fact that far through the body.
    """
    if kind is None and fact_type is None:
        kind, fact_type = COMBINATIONS[index % len(COMBINATIONS)]
    if kind not in FACTS or fact_type not in FACTS[kind]:
        choices = ", ".join(f"{k}/{f}" for k, f in COMBINATIONS)
        raise CcvizError(f"no document kind/fact {kind}/{fact_type}: choose one of {choices}")
    position = fact_position(index, words, position)
    rng = random.Random(f"ccviz-retention:{seed}:{index}:{kind}:{fact_type}")
    speaker, friend = rng.sample(POOLS["speaker"], 2)
    filler = _Filler(rng, rng.choice(_PRONOUNS) | {"speaker": speaker, "friend": friend})
    fact = FACTS[kind][fact_type]
    value = rng.choice(FACT_VALUES[fact_type])
    statement = filler.fill(rng.choice(fact["statements"]).replace("{value}", "\0"))
    header = filler.fill(_HEADERS[kind])

    units, count = [], 0
    source = _UNITS[kind](rng, filler)
    while count < words:
        units.append(next(source))
        count += len(units[-1].split())
    units.insert(round(position * len(units)), statement)

    separator, dates, prompt = ("\n" if kind == "chat" else " "), _dates(rng), header
    size = _SECTION[kind]
    for number, start in enumerate(range(0, len(units), size), start=1):
        title = _SECTIONS[kind].format(number=number, date=next(dates))
        prompt += f"\n\n{title}\n" + separator.join(units[start : start + size])
    answer_start = prompt.index("\0")  # the placeholder is one character, so offsets survive the swap
    prompt = prompt.replace("\0", value)
    question_start = len(prompt) + 2
    prompt += f"\n\nQuestion: {filler.fill(fact['question'])} {INSTRUCTION}"
    answer_span = (answer_start, answer_start + len(value))
    _check(prompt, value, answer_span)
    return Case(index, kind, fact_type, position, prompt, value, answer_span, question_start)


def _check(prompt: str, value: str, span: tuple[int, int]) -> None:
    """The fact must be stated exactly once: the vocabulary guarantees it, this proves it per case."""
    hits = occurrences(prompt, value)
    if hits != [span[0]]:
        raise RuntimeError(f"generator bug: {value!r} found at {hits}, expected once at {span[0]}")
