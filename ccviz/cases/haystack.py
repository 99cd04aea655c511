"""Needle-in-a-haystack documents and RULER-style tasks, generated here from text the machine has.

The hay is the running prose of Python's own documentation (:func:`.texts.prose_corpus`), cut into
sentences; the needles are facts that can only come from the needle itself: a 7-digit number, an
identifier (``KX-4817``) or a word, stated for a key (``the amber lighthouse``). Tasks (after RULER's
definitions, our own code):

- ``needle``: one needle at a requested depth;
- ``multikey``: the needle plus distractor needles of the same form for other keys;
- ``multivalue``: one key with several values, all asked for;
- ``variable_tracking``: a chain ``VAR A = 48172`` ... ``VAR B = VAR A`` ..., and the question asks for
  every variable that holds the value.

A case is a function of ``(task, length, depth, trial, kind, seed)`` and the tokenizer, so every policy
reads identical inputs. The hay depends on ``(length, trial, seed)`` only: down a column of a needle
map only the needle moves. Lengths count the tokens of the user text (document and question), as the
engine reads them after the chat template; depth is where the needle starts, as a share of the
document's tokens, placed at the sentence boundary nearest to it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache

from ..errors import CcvizError
from .documents import INSTRUCTION
from .texts import prose_corpus

TASKS = ("needle", "multikey", "multivalue", "variable_tracking")
RULER_TASKS = TASKS[1:]
KINDS = ("number", "identifier", "word")  # what a needle states; variable tracking always chains numbers
NEEDLE_LENGTHS = (500, 1000, 2000, 3500, 5000, 7500)  # the needle map's context lengths, in tokens
NEEDLE_BUDGET = 0.25  # the needle map's budget: J as a share of the document
SENTENCE_TOKENS = (5, 64)  # hay sentences outside this range are skipped: depth stays precise to one sentence
DISTRACTORS = 3  # multikey: needles for other keys
VALUES = 4  # multivalue: values stated for the one key
CHAIN = 5  # variable tracking: variables in the chain
MAX_NEW_TOKENS = {"needle": 24, "multikey": 24, "multivalue": 48, "variable_tracking": 40}  # room for every answer

_ADJECTIVES = (
    "amber",
    "silent",
    "crimson",
    "hollow",
    "northern",
    "velvet",
    "copper",
    "frozen",
    "golden",
    "distant",
    "wandering",
    "emerald",
    "hidden",
    "scarlet",
    "ancient",
    "gentle",
    "iron",
    "lunar",
    "misty",
    "radiant",
)
_NOUNS = (
    "lighthouse",
    "falcon",
    "orchard",
    "harbour",
    "lantern",
    "glacier",
    "meadow",
    "compass",
    "violin",
    "canyon",
    "beacon",
    "monastery",
    "pebble",
    "windmill",
    "heron",
    "citadel",
    "tapestry",
    "sparrow",
    "quarry",
    "galleon",
)
_WORDS = (
    "marigold",
    "quokka",
    "tangerine",
    "zeppelin",
    "juniper",
    "saffron",
    "kumquat",
    "nightingale",
    "porcupine",
    "dandelion",
    "walrus",
    "mandolin",
    "pelican",
    "sycamore",
    "avalanche",
    "hazelnut",
    "flamingo",
    "gondola",
    "lavender",
    "meteorite",
    "narwhal",
    "origami",
    "pistachio",
    "rhubarb",
    "starfish",
    "toboggan",
    "umbrella",
    "volcano",
    "wombat",
    "xylophone",
)
_FORMS = {  # kind -> (statement, question, plural question) with {key} and {value}
    "number": (
        "The special magic number for the {key} is {value}.",
        "What is the special magic number for the {key}?",
        "What are all the special magic numbers for the {key}?",
    ),
    "identifier": (
        "The access code for the {key} is {value}.",
        "What is the access code for the {key}?",
        "What are all the access codes for the {key}?",
    ),
    "word": (
        "The secret word for the {key} is {value}.",
        "What is the secret word for the {key}?",
        "What are all the secret words for the {key}?",
    ),
}
_MULTIVALUE = {  # the statement when one key has several values
    "number": "One of the special magic numbers for the {key} is {value}.",
    "identifier": "One of the access codes for the {key} is {value}.",
    "word": "One of the secret words for the {key} is {value}.",
}
_TRACKING_QUESTION = (
    "Find all variables that are assigned the value {value} in the text above. "
    "Answer with their names, separated by commas."
)


@dataclass(frozen=True)
class HaystackCase:
    """One generated prompt. Spans are character offsets into ``prompt`` (the whole user turn)."""

    task: str
    length: int  # requested tokens of the user text
    depth: float | None  # requested depth of the needle (``needle`` and multikey's target); None: spread by the seed
    trial: int
    kind: str
    prompt: str  # the document, a blank line, then the question
    required: tuple[tuple[int, int], ...]  # what must all be cached to answer: values (or variable tracking's links)
    needles: tuple[tuple[int, int], ...]  # every needle sentence, distractors included, in document order
    target: str  # the sentence the question is about (the first of several): what the app highlights
    answers: tuple[str, ...]  # every one must appear in a correct answer
    question_start: int

    @property
    def max_new_tokens(self) -> int:
        return MAX_NEW_TOKENS[self.task]


@lru_cache(maxsize=4)
def _hay(tokenizer) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The corpus's sentences of a usable size, and each one's token count (as it reads after a space)."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", prose_corpus()) if s]
    counts = [len(ids) for ids in tokenizer([" " + s for s in sentences], add_special_tokens=False)["input_ids"]]
    low, high = SENTENCE_TOKENS
    kept = [(s, n) for s, n in zip(sentences, counts) if low <= n <= high]
    return tuple(s for s, _ in kept), tuple(n for _, n in kept)


def token_count(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _fill(tokenizer, budget: int, rng: random.Random) -> tuple[list[str], list[int]]:
    """Consecutive corpus sentences from a random start, skipping any that would overshoot ``budget``
    tokens, until the gap is smaller than the shortest sentence (or the corpus has been read once)."""
    sentences, counts = _hay(tokenizer)
    start, picked, sizes, total = rng.randrange(len(sentences)), [], [], 0
    for step in range(len(sentences)):
        i = (start + step) % len(sentences)
        if total + counts[i] <= budget:
            picked.append(sentences[i])
            sizes.append(counts[i])
            total += counts[i]
        if budget - total < SENTENCE_TOKENS[0]:
            break
    return picked, sizes


def _nearest_boundary(sizes: list[int], depth: float) -> int:
    """The sentence boundary (0 = before the first) whose token offset is nearest ``depth`` of the hay."""
    offsets, total = [0], 0
    for n in sizes:
        total += n
        offsets.append(total)
    goal = depth * total
    return min(range(len(offsets)), key=lambda b: (abs(offsets[b] - goal), b))


def _key(rng: random.Random, taken: set[str]) -> str:
    while True:
        key = f"{rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
        if key not in taken:
            taken.add(key)
            return key


def _value(kind: str, rng: random.Random) -> str:
    if kind == "number":
        return str(rng.randrange(1_000_000, 10_000_000))
    if kind == "identifier":
        letters = "BCDFGHJKLMNPQRSTVWXZ"
        return f"{rng.choice(letters)}{rng.choice(letters)}-{rng.randrange(1000, 10000)}"
    return rng.choice(_WORDS)


def _variable(rng: random.Random) -> str:
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))


@dataclass(frozen=True)
class _Plan:
    """What a task states: each needle with its depth and the spans in it that must survive (the question is
    about the first), and the question."""

    needles: list[
        tuple[float, str, list[tuple[int, int]]]
    ]  # (depth, sentence, required spans within it); the first is the target
    question: str  # with its instruction
    answers: tuple[str, ...]


def _stated(sentence: str, value: str) -> tuple[str, list[tuple[int, int]]]:
    at = sentence.rindex(value)
    return sentence, [(at, at + len(value))]


def _plan(task: str, kind: str, depth: float | None, rng: random.Random) -> _Plan:
    keys: set[str] = set()
    spread = lambda: rng.random()  # noqa: E731 - a needle placed by the seed
    if task == "variable_tracking":
        value, names = str(rng.randrange(10_000, 100_000)), []
        while len(names) < CHAIN:
            name = _variable(rng)
            if name not in names:
                names.append(name)
        depths = sorted(spread() for _ in names)
        links = [f"VAR {names[0]} = {value}."] + [f"VAR {b} = VAR {a}." for a, b in zip(names, names[1:])]
        needles = [(d, s, [(0, len(s) - 1)]) for d, s in zip(depths, links)]  # the whole link, its full stop aside
        return _Plan(needles, _TRACKING_QUESTION.format(value=value), tuple(names))
    statement, question, plural = _FORMS[kind]
    key = _key(rng, keys)
    if task == "multivalue":
        values: list[str] = []
        while len(values) < VALUES:
            candidate = _value(kind, rng)
            if candidate not in values:
                values.append(candidate)
        needles = [(spread(), *_stated(_MULTIVALUE[kind].format(key=key, value=v), v)) for v in values]
        return _Plan(needles, f"{plural.format(key=key)} {INSTRUCTION}", tuple(values))
    value = _value(kind, rng)
    target = (spread() if depth is None else depth, *_stated(statement.format(key=key, value=value), value))
    needles = [target]
    if task == "multikey":
        used = {value}
        for _ in range(DISTRACTORS):
            other = _value(kind, rng)
            while other in used:
                other = _value(kind, rng)
            used.add(other)
            sentence, _ = _stated(statement.format(key=_key(rng, keys), value=other), other)
            needles.append((spread(), sentence, []))  # a distractor: nothing of it is needed
    return _Plan(needles, f"{question.format(key=key)} {INSTRUCTION}", (value,))


def make_haystack_case(
    tokenizer,
    task: str,
    length: int,
    depth: float | None = None,
    *,
    trial: int = 0,
    kind: str = "number",
    seed: int = 0,
) -> HaystackCase:
    """Build one case of ``task`` with about ``length`` tokens of user text (``tokenizer``'s count).

    ``depth`` in [0, 1] places the needle (``needle``: required; ``multikey``: the target, the
    distractors spread by the seed); the other tasks spread their needles by the seed.
    """
    if task not in TASKS:
        raise CcvizError(f"no haystack task {task!r}: choose one of {', '.join(TASKS)}")
    if kind not in KINDS:
        raise CcvizError(f"no needle kind {kind!r}: choose one of {', '.join(KINDS)}")
    if task == "needle" and depth is None:
        raise CcvizError("a needle case needs a depth between 0 and 1")
    if depth is not None and not 0.0 <= float(depth) <= 1.0:
        raise CcvizError(f"the needle depth must be between 0 and 1, got {depth}")
    for redraw in range(20):  # a value the hay happens to contain is drawn again (never seen with these pools)
        case = _attempt(tokenizer, task, length, depth, trial, kind, seed, redraw)
        if case is not None:
            return case
    raise RuntimeError(f"generator bug: no unique values for {task} at {length} tokens")


def _attempt(
    tokenizer, task: str, length: int, depth: float | None, trial: int, kind: str, seed: int, redraw: int
) -> HaystackCase | None:
    hay_rng = random.Random(f"ccviz-haystack:{seed}:{length}:{trial}")
    rng = random.Random(f"ccviz-needle:{seed}:{task}:{kind}:{length}:{trial}:{depth}:{redraw}")
    plan = _plan(task, kind, depth, rng)
    question = f"Question: {plan.question}"
    fixed = token_count(tokenizer, question) + sum(token_count(tokenizer, " " + s) for _, s, _ in plan.needles)
    if fixed + SENTENCE_TOKENS[1] > length:
        raise CcvizError(
            f"{length} tokens is too short for a {task} case: it needs at least {fixed + SENTENCE_TOKENS[1]}"
        )
    hay, sizes = _fill(tokenizer, length - fixed - 2, hay_rng)  # 2: the blank line before the question
    slots = [_nearest_boundary(sizes, d) for d, _, _ in plan.needles]
    # Back to front, so earlier slots keep their index; needles at one slot keep their depth order
    # (variable tracking's depths are sorted, so each link comes after the one it names).
    order = sorted(range(len(plan.needles)), key=lambda i: (slots[i], plan.needles[i][0]))
    pieces: list[tuple[str, int | None]] = [(s, None) for s in hay]
    for i in reversed(order):
        pieces.insert(slots[i], (plan.needles[i][1], i))
    text, required, needles, target = "", [], [], ""
    for sentence, index in pieces:
        start = len(text) + bool(text)
        text += (" " if text else "") + sentence
        if index is not None:
            needles.append((start, start + len(sentence)))
            required += [(start + a, start + b) for a, b in plan.needles[index][2]]
            target = sentence if index == 0 else target
    question_start = len(text) + 2
    prompt = f"{text}\n\n{question}"
    stated = [sentence for _, sentence, _ in plan.needles]
    if not all(_only_in_needles(text, stated, answer) for answer in plan.answers):
        return None
    return HaystackCase(
        task,
        length,
        None if depth is None else float(depth),
        trial,
        kind,
        prompt,
        tuple(sorted(required)),
        tuple(needles),
        target,
        plan.answers,
        question_start,
    )


def _only_in_needles(document: str, needles: list[str], value: str) -> bool:
    """Whether ``value`` occurs in the document only where the needles state it: the hay never answers."""

    def count(text: str) -> int:
        return len(re.findall(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text))

    return count(document) == sum(count(n) for n in needles)
