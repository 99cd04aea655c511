"""The question asked apart from the document: the Question box, the hint that splits a question off the
document's end, and the toggle that keeps it out of eviction; and the Expected answer box, whose text the
verdict on each run looks for (:func:`ccviz.explain.run_verdict`).

A question asked apart joins the document in the same user turn (:func:`ccviz.prompts.join_question`):
the model reads what it would read had both been pasted together. What changes is that the run knows
where the question starts, so it can keep it (``RunConfig.protect_question``), which a document ending
with its question cannot: there the question streams through the refreshes like any other text.
"""

from __future__ import annotations

import re

import streamlit as st

from .keys import EXPECT_KEY, QUESTION_KEY
from .landing import landed
from .links import QUESTION_PARAM, as_bool, link_problems, link_text, linked, linked_text

PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")


def split_question(text: str) -> tuple[str, str] | None:
    """``text`` as (document, question) when its last paragraph ends with "?" and a document comes before it;
    else None. Only the blank line between the two is dropped, which :func:`ccviz.prompts.join_question` puts back."""
    body = text.rstrip()
    breaks = list(PARAGRAPH_BREAK.finditer(body))
    if not body.endswith("?") or not breaks:
        return None
    document, question = body[: breaks[-1].start()].rstrip(), body[breaks[-1].end() :].strip()
    return (document, question) if document.strip() else None


def _split_off() -> None:
    """The hint's button: the document's last paragraph moves into the (empty) Question box."""
    split = split_question(st.session_state.get("doc.text", ""))
    if split is not None:
        st.session_state["doc.text"], st.session_state[QUESTION_KEY] = split


def question_input(document: str) -> str | None:
    """The Question box under the document (None when empty), and a hint when the document ends with a question
    and the box is empty. A whitespace-only question is passed on, so the run says it is empty."""
    question = st.text_area(
        "Question (optional)",
        value=landed(QUESTION_KEY, linked_text(QUESTION_PARAM, "")),
        key=QUESTION_KEY,
        height=68,
        persist_state="session",
        placeholder="A question about the document, e.g. Which antibiotic is the patient allergic to?",
        help="Asked after the document, in the same user turn (the model reads the same tokens as if both were "
        "pasted together), but the run knows where it starts, so it can keep it: see Keep the question in the "
        "sidebar. Empty: no question. The page's link names it.",
    )
    link_text(QUESTION_PARAM, question, "")
    link_problems()  # the question is linked by now
    if not question.strip() and split_question(document) is not None:
        left, right = st.columns([2, 1], vertical_alignment="center")
        left.caption(":material/lightbulb: The document ends with a question: asked apart, it can be kept.")
        right.button("Move it to the Question box", key="doc.split_question", on_click=_split_off)
    return question or None


def expected_answer_input() -> str | None:
    """The Expected answer box (None when blank): each run then opens with its verdict. It changes no run."""
    answer = st.text_input(
        "Expected answer (optional)",
        value=landed(EXPECT_KEY, linked(EXPECT_KEY, "")),
        key=EXPECT_KEY,
        persist_state="session",
        placeholder="e.g. amoxicillin",
        help="What a right answer contains. Each run then opens with one line: answered or not (the answer's words "
        "in the output, in order, case ignored), whether the full cache answers, and, when the run did not, "
        "whether its policy evicted the answer from the document, at which refresh and why. Samples fill it. "
        "Changing it runs nothing again.",
    )
    return answer if answer.strip() else None


def keep_question_input(prefix: str) -> bool:
    """The "Keep the question" toggle, on by default (``RunConfig.protect_question``)."""
    return st.toggle(
        "Keep the question (recommended)",
        value=linked(f"{prefix}.protect_question", True, as_bool),
        key=f"{prefix}.protect_question",
        persist_state="session",
        help="On: the question of the Question box, and the chat template's turn end after it, is never a "
        "candidate of a refresh, never evicted, and takes no place of J. Off: it streams through the refreshes "
        "like the document and can be evicted, as in the paper.",
    )


def protect_question(keep: bool, question: str | None) -> bool:
    """RunConfig's ``protect_question``: the toggle's value when a question is asked; without one the default,
    so a run without a question has one label and one cached result whatever the toggle says."""
    return keep or question is None
