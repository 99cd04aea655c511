"""The Lesson page's content: its steps in words, the recorded runs each step draws, and what Try it opens.

Plain Python (no Streamlit): ``pages/lesson.py`` lays it out (:mod:`.lesson_view`), and ``scripts/lesson.py``
records :data:`RECORDINGS` into ``assets/lesson/``. A step's words name its document only through
placeholders (``{answer}``, ``{J}``, ...) filled from what was recorded, so recording the lesson on another
sample changes no word here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

from ..trace import Trace
from .documents import document_hash
from .options import option_specs

LESSON_DIR = Path(__file__).resolve().parents[2] / "assets" / "lesson"
MANIFEST = "lesson.json"
SAMPLE, CASE = "sample", "case"  # the lesson's documents: a shipped sample, and a measured benchmark case

Figure = Literal["cache", "answer", "retention", "surprise", "context", "pinned"]
TryPage = Literal["run", "compare", "surprise"]


@dataclass(frozen=True)
class Recording:
    """One run the lesson draws: ``policy`` on one of its documents at that document's budget (None: the
    benchmark row's own policy, on the case); ``pin_answer``: the expected answer pinned, as What if does."""

    name: str
    policy: str | None
    document: str = SAMPLE
    pin_answer: bool = False


RECORDINGS = (
    Recording("full", "full"),  # at the document's J and h too: its refreshes evict nothing
    Recording("sliding", "sliding"),
    Recording("h2o", "h2o"),
    Recording("surprise", "counter_causal_fast"),
    Recording("kvzip", "kvzip"),
    Recording("pinned", "sliding", pin_answer=True),
    Recording("case_full", "full", CASE),
    Recording("case", None, CASE),
)


@dataclass(frozen=True)
class Step:
    """One step: a title, one paragraph (placeholders filled by :meth:`Lesson.words`), one figure drawn from
    ``runs`` (the full cache first: the verdicts' reference), and a Try it that opens ``try_page`` with the
    document and settings of ``try_runs`` (default: the last run); ``what_if``: with the answer in What if;
    ``try_switches``: the page's checkboxes it ticks (their link keys)."""

    title: str
    text: str
    figure: Figure
    runs: tuple[str, ...]
    try_page: TryPage = "run"
    try_runs: tuple[str, ...] = ()
    what_if: bool = False
    try_switches: tuple[str, ...] = ()

    @property
    def tried(self) -> tuple[str, ...]:
        return self.try_runs or self.runs[-1:]


STEPS = (
    Step(
        "What the cache holds, and why a long document must evict",
        "For every token it reads, the model keeps a key and a value at each layer: the KV cache. Each new "
        "token is computed from what the cache holds. The full cache grows with every token processed, {n} "
        "for this prompt. Under a budget J = {J}, a refresh every h = {h} tokens keeps J entries and evicts "
        "the rest. The policy, the rule that picks what is kept, decides what the model can still read.",
        "cache",
        ("full", "sliding"),
    ),
    Step(
        "The full cache answers",
        "First the reference, with nothing evicted. We ask “{question}” apart from the document, and a right "
        "answer contains “{answer}”. The line above the text says whether the full cache answered: the "
        "expected answer's words appear in its output, in order. When the full cache does not answer, no "
        "policy is to blame for a miss: the model cannot answer this document at all.",
        "answer",
        ("full",),
    ),
    Step(
        "A recency window evicts the fact",
        "A sliding window keeps the J most recent tokens. In the heatmap each row is a refresh (the first at "
        "the top) and each column a cache slot; colour is the token's place in the document, blue early, red "
        "late. The band moves right as the document streams by: everything older than J tokens is evicted, "
        "“{answer}” too. The line above says at which refresh it was evicted, and whether the answer survived.",
        "retention",
        ("full", "sliding"),
    ),
    Step(
        "Attention keeps early winners",
        "H2O keeps the tokens that received the most attention so far. Attention piles up on what came first, "
        "so the same early tokens win every refresh: the vertical stripes that never leave the heatmap, while "
        "the rest of the budget turns over like a window. A fact that arrives later must beat their head "
        "start. The line above says whether “{answer}” did. Try it compares the three policies.",
        "retention",
        ("full", "h2o"),
        "compare",
        ("sliding", "h2o", "surprise"),
    ),
    Step(
        "Counter-causal surprise",
        "Counter-causal surprise scores a token by how hard it is to predict from the text around it: names, "
        "numbers and allergies surprise, filler words do not. Below, the passage around “{answer}” shaded by "
        "the score the policy gave each token (darker: more surprising), the tokens kept to the end "
        "underlined. The line above says whether the fact was kept and the model answered.",
        "surprise",
        ("full", "surprise"),
        "surprise",
    ),
    Step(
        "Kept is not enough",
        "A measured benchmark case ({case_title}): the full cache answers “{case_answer}”. Under {case_policy} "
        "at J = {case_J} the answer's tokens are kept up to the question (outlined, at the last refresh before "
        "it), yet the model does not give it. Green is kept, grey evicted: the words that say what the value "
        "is were evicted around it. A kept fact needs its context: Try it shows what the answer read.",
        "context",
        ("case_full", "case"),
        try_switches=("run.record_reads", "run.full_cache"),  # what the answer read, beside the full cache's
    ),
    Step(
        "KVzip: what the model needs to repeat the text",
        "KVzip scores each token by the attention it receives while the model repeats the document back to "
        "itself: what it needs to rebuild the text, whatever the question. No question is needed to score, "
        "so one compressed cache can serve many questions. Its heatmap keeps pieces of the whole document, "
        "not one band or a few stripes. The line above says whether “{answer}” was among them.",
        "retention",
        ("full", "kvzip"),
    ),
    Step(
        "Your turn",
        "Open Run, paste your own document or keep this one, ask a question apart and type what a right "
        "answer contains. Under a run, What if pins a phrase: its tokens are never evicted, and take places "
        "of J. Here the sliding window of step 3 ran again with “{answer}” pinned, beside the first run. Does "
        "keeping the fact alone bring the answer back? Pin a phrase of your own and see.",
        "pinned",
        ("full", "sliding", "pinned"),
        try_runs=("sliding",),
        what_if=True,
    ),
)

GLOSSARY = (
    "**J**: the budget, the entries a refresh keeps (the frozen prefix and a kept question come on top). "
    "**h**: the tokens processed between two refreshes (J/4 unless set). **A refresh**: every h tokens the "
    "policy scores the cached tokens, keeps J of them and evicts the rest, for good. **Kept**: still cached; "
    "**evicted at refresh N**: dropped by that refresh; **answered**: the expected answer's words appear in "
    "the output. **The full cache**: the same run with nothing evicted."
)


@dataclass(frozen=True)
class Document:
    """A document of the lesson as recorded: its text, the question asked apart from it, the expected answer,
    and the budget its runs used (J; h is J/4)."""

    title: str
    source: str
    text: str
    question: str
    answer: str
    chat: bool
    cache_size: int
    max_new_tokens: int


class _Blank(dict):
    def __missing__(self, key: str) -> str:
        return "…"  # a document this folder lacks (a partial recording): its words stay blank


@dataclass(frozen=True)
class Lesson:
    """What ``scripts/lesson.py`` recorded: the documents, one trace per recording, and how it was made
    (``made``: model, commit, date, seconds)."""

    documents: dict[str, Document]
    traces: dict[str, Trace]
    made: dict[str, Any]

    @property
    def model(self) -> str:
        return str(self.made.get("model", ""))

    def document(self, run: str) -> Document:
        """The document a recording ran on."""
        return self.documents[next(r.document for r in RECORDINGS if r.name == run)]

    def missing(self, step: Step) -> list[str]:
        """The recordings ``step`` draws that this folder lacks."""
        return [run for run in (*step.runs, *step.tried) if run not in self.traces]

    def words(self) -> dict[str, str]:
        """The values of the steps' placeholders."""
        words: dict[str, str] = _Blank()
        sample, case = self.documents.get(SAMPLE), self.documents.get(CASE)
        if sample is not None:
            words |= dict(question=sample.question, answer=sample.answer, J=str(sample.cache_size))
            words["h"] = str(max(sample.cache_size // 4, 1))
        if "full" in self.traces:
            words["n"] = f"{self.traces['full'].prompt_length:,}"
        if case is not None:
            words |= dict(case_title=case.title, case_answer=case.answer, case_J=str(case.cache_size))
        if "case" in self.traces:
            words["case_policy"] = self.traces["case"].run_config.title(budget=False)
        return words

    def text(self, step: Step) -> str:
        return step.text.format_map(self.words())


def load_lesson(folder: Path = LESSON_DIR) -> Lesson:
    """The lesson recorded in ``folder`` (its manifest and every trace it names)."""
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    return Lesson(
        documents={key: Document(**entry) for key, entry in manifest["documents"].items()},
        traces={name: Trace.load(folder / file) for name, file in manifest["runs"].items()},
        made={key: value for key, value in manifest.items() if key not in ("documents", "runs")},
    )


def _encode(value: Any) -> str:
    return ("1" if value else "0") if isinstance(value, bool) else str(value)


def _policy_params(key: str, trace: Trace) -> dict[str, str]:
    """A page's policy widget (``key``) and its options off their defaults, as the run was recorded."""
    config = trace.run_config
    defaults = {spec.name: spec.default for spec in option_specs(config.policy)}
    return {key: config.policy} | {
        f"{key}.{config.policy}.{name}": _encode(value)
        for name, value in config.policy_options
        if name in defaults and value != defaults[name]
    }


def _budget_params(prefix: str, trace: Trace) -> dict[str, str]:
    config = trace.run_config
    params = {f"{prefix}.J": str(config.cache_size), f"{prefix}.h": str(config.chunk_size)}
    if prefix != "sur":  # the Surprise page's budget run generates one token and asks no question
        params[f"{prefix}.max_new"] = str(config.max_new_tokens)
        if not config.protect_question:
            params[f"{prefix}.protect_question"] = "0"
    return params


def try_link(step: Step, lesson: Lesson) -> str:
    """The link of ``step``'s Try it, relative to the lesson's page: the page it opens, with the document and
    question (by hash: the page holds their texts in the server's store) and the settings of its runs, read
    from their traces, as a shared link restores them (:mod:`.links`)."""
    runs = [lesson.traces[name] for name in step.tried]
    document = lesson.document(step.tried[0])
    params = {"doc": document_hash(document.text), "doc.chat": _encode(document.chat), "model": lesson.model}
    if step.try_page != "surprise":
        params |= {"question": document_hash(document.question), "doc.expect": document.answer}
    if step.try_page == "run":
        params |= _policy_params("run.policy", runs[0]) | _budget_params("run", runs[0])
        if step.what_if:
            params |= {"run.what_if.phrase": document.answer}
        params |= dict.fromkeys(step.try_switches, "1")
    elif step.try_page == "compare":
        params |= {"cmp.count": str(len(runs)), "cmp.phrase": document.answer} | _budget_params("cmp", runs[0])
        for i, trace in enumerate(runs):
            params |= _policy_params(f"cmp.p{i}", trace)
    else:
        params |= _policy_params("sur.policy", runs[0]) | _budget_params("sur", runs[0])
    return f"{step.try_page}?{urlencode(params)}"
