"""The "needle" sample generator: one cell of a needle map, loaded into the text box to watch it happen.

The user picks a context length, a depth and what the needle states (or a RULER-style task); the
harness's own generator (:mod:`ccviz.cases.haystack`) writes the document and question, counted in
the session's model's tokens, and the budget is set as the benchmark sets it (J = 25% of the document,
h = J/4). The needle's sentence is remembered, so the Run page can mark its tokens.
"""

from __future__ import annotations

import streamlit as st

from ..cases.haystack import KINDS, NEEDLE_BUDGET, NEEDLE_LENGTHS, TASKS, make_haystack_case, token_count
from ..cases.spans import prepare
from ..engine.budget import budget_text, cache_size_for
from ..errors import CcvizError
from ..models import load_tokenizer
from ..worker.limits import max_tokens
from .keys import EXPECT_KEY, QUESTION_KEY
from .model_picker import chosen_source

NEEDLE_KEY = "doc.needle"  # the generated needle's sentence, while the text box still holds its document
BUDGET = NEEDLE_BUDGET
TASK_LABELS = {
    "needle": "one needle",
    "multikey": "needle among distractors",
    "multivalue": "one key, four values",
    "variable_tracking": "variable tracking chain",
}


@st.cache_resource(show_spinner=False)
def _tokenizer(model: str | None):
    return load_tokenizer(model)


def needle_lengths(ceiling: int) -> list[int]:
    """The needle map's context lengths that fit the app's token limit (with room for the answer)."""
    return [n for n in NEEDLE_LENGTHS if n + max(64, n // 10) <= ceiling] or [min(NEEDLE_LENGTHS)]


def _generate() -> None:
    state = st.session_state
    task = state["needle.task"]
    try:
        tokenizer = _tokenizer(chosen_source())  # counted in the session's model's tokens
        case = make_haystack_case(
            tokenizer,
            task,
            int(state["needle.length"]),
            state["needle.depth"] / 100 if task in ("needle", "multikey") else None,
            kind=state["needle.kind"],
            seed=int(state["needle.seed"]),
        )
    except CcvizError as err:
        state["doc.error"] = f"Could not generate the needle document: {err}"
        return
    prepared = prepare(tokenizer, case.prompt, case.question_start, case.required)
    cache_size = cache_size_for(BUDGET, prepared.doc_tokens)  # as the map's cell measures it
    state["doc.text"], state["doc.chat"], state[NEEDLE_KEY] = prepared.document, True, case.target
    state[QUESTION_KEY] = prepared.question  # asked apart, as the map's cells ask it
    for page in ("run", "cmp"):
        state[f"{page}.max_new"] = case.max_new_tokens
        state[f"{page}.J"], state[f"{page}.h"] = cache_size, None
    state["cmp.phrase"] = case.answers[0]
    state[EXPECT_KEY] = case.answers[0] if len(case.answers) == 1 else ""  # one verdict line looks for one answer
    share = budget_text(BUDGET, "{:.0%} of the document")
    state["needle.loaded"] = (
        f"Loaded: {TASK_LABELS[task]}, {token_count(tokenizer, case.prompt)} tokens, the question "
        f"asks for {', '.join(case.answers)}; J = {cache_size} ({share}), h = J/4."
    )


def needle_generator() -> None:
    """Length, depth, kind and task pickers and a Generate button, inside a popover (:func:`needle_loaded`
    says what it loaded)."""
    try:
        ceiling = max_tokens()
    except CcvizError:
        ceiling = 4096
    with st.popover("Generate a needle document", icon=":material/search:", width="stretch"):
        st.caption(
            "A haystack of Python-documentation prose with a fact stated once: one cell of the Benchmarks "
            "page's needle map, to watch in the retention heatmap."
        )
        lengths = needle_lengths(ceiling)
        st.select_slider(
            "Context length (tokens)",
            lengths,
            value=lengths[len(lengths) // 2],
            persist_state="session",
            key="needle.length",
        )
        st.slider(
            "Depth of the needle (%)",
            0,
            100,
            50,
            step=5,
            persist_state="session",
            key="needle.depth",
            help="Where the needle starts, as a share of the document: 0% first, 100% just before the question.",
        )
        left, right = st.columns(2)
        left.selectbox("The needle states", KINDS, persist_state="session", key="needle.kind")
        right.selectbox(
            "Task",
            TASKS,
            format_func=TASK_LABELS.get,
            persist_state="session",
            key="needle.task",
            help=(
                "RULER-style tasks place their needles by the seed; "
                "the depth applies to one needle and to multikey's target."
            ),
        )
        st.number_input("Seed", min_value=0, value=0, step=1, persist_state="session", key="needle.seed")
        st.button(
            "Generate and load",
            key="needle.generate",
            on_click=_generate,
            type="primary",
            icon=":material/auto_fix_high:",
        )


def needle_loaded() -> None:
    """What the last Generate loaded, once, under the document row."""
    loaded = st.session_state.pop("needle.loaded", None)
    if loaded:
        st.success(loaded, icon=":material/check:")
