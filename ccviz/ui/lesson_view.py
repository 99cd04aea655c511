"""The Lesson page's layout: one step at a time, drawn from the recorded traces (no model, no job), a Try it
that opens another page with the step's document and settings, Run it live, and a presenter view.

The steps' words, runs and links are :mod:`.lesson`; every figure is a builder of :mod:`ccviz.figures`.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ..explain import matching_tokens, run_verdict
from ..figures import comparison_heatmaps, cycle_context_html, latest_scores, retention_heatmap, signals
from ..figures.budget import cache_growth
from ..figures.data import frozen_count
from ..figures.export import file_stem
from ..figures.tokens import answer_html, highlight_html
from ..trace import Trace
from ..worker.tasks import RunTask
from . import lesson as content
from .lesson import GLOSSARY, MANIFEST, STEPS, Lesson, Step, load_lesson, try_link
from .links import as_bool, document_store, linked
from .state import run_controls
from .verdict_view import verdict_line
from .views import chart, live_view

PAGE = "lesson"
STEP_KEY, PRESENTER_KEY = "step", "presenter"  # also the link's parameters: /lesson?step=3&presenter=1
PASSAGE = 48  # tokens either side of the answer in the token views: the fact on screen, not a long scroll
PAGE_NAMES = {"run": "Run & retention", "compare": "Compare", "surprise": "Surprise"}
# Larger type for a projector. The sidebar folds away through the page config (initial_sidebar_state), which
# Streamlit applies again whenever it changes during a session.
PRESENTER_CSS = """<style>
[data-testid="stMainBlockContainer"] [data-testid="stMarkdownContainer"] p,
[data-testid="stMainBlockContainer"] [data-testid="stMarkdownContainer"] li { font-size: 1.45rem; line-height: 1.55; }
[data-testid="stMainBlockContainer"] [data-testid="stCaptionContainer"] p { font-size: 1.1rem; }
[data-testid="stMainBlockContainer"] h1 { font-size: 3rem; }
[data-testid="stMainBlockContainer"] h3 { font-size: 2.2rem; }
[data-testid="stMainBlockContainer"] [data-testid="stHtml"] div { font-size: 1.2rem !important; }
</style>"""


@st.cache_resource(show_spinner=False, max_entries=4)
def recorded(folder: str, stamp: int) -> Lesson:
    """The lesson recorded in ``folder``, loaded once per server and shared by every session (read only);
    ``stamp``, the manifest's modification time, reads a new recording."""
    return load_lesson(Path(folder))


def current_lesson() -> Lesson | None:
    """The shipped lesson, or None (with a message) when it has not been recorded."""
    manifest = content.LESSON_DIR / MANIFEST
    if not manifest.exists():
        st.error(f"The lesson is not recorded in {content.LESSON_DIR}: run `python scripts/lesson.py`.")
        return None
    return recorded(str(content.LESSON_DIR), manifest.stat().st_mtime_ns)


def intro() -> None:
    st.caption(
        f"{len(STEPS)} steps, from what the KV cache holds to choosing what to keep. Each figure is a recorded run; "
        "Try it opens the same run on another page, where you can change it."
    )


def presenter_view() -> bool:
    """The presenter toggle: larger type and the sidebar folded away (the link keeps it: ``presenter=1``)."""
    on = st.toggle(
        "Presenter view",
        value=linked(PRESENTER_KEY, False, as_bool),
        key=PRESENTER_KEY,
        persist_state="session",
        help="Larger type and the sidebar folded away, for a projector. The link keeps it.",
    )
    st.set_page_config(initial_sidebar_state="collapsed" if on else "auto")
    if on:
        st.html(PRESENTER_CSS)
    return on


def step_picker() -> int:
    """The step shown (1-based): the link's ``step`` at first, then the picker's and the buttons'."""
    numbers = list(range(1, len(STEPS) + 1))
    return st.segmented_control(
        "Step",
        numbers,
        default=linked(STEP_KEY, 1, int, choices=numbers),
        key=STEP_KEY,
        required=True,
        persist_state="session",
        help=" · ".join(f"{n}. {step.title}" for n, step in zip(numbers, STEPS)),
    )


def _move(by: int) -> None:
    st.session_state[STEP_KEY] = min(max(st.session_state.get(STEP_KEY, 1) + by, 1), len(STEPS))


def step_buttons(number: int) -> None:
    """Previous and Next."""
    left, _, right = st.columns([1, 3, 1])
    left.button(
        "Previous",
        key=f"{PAGE}.previous",
        icon=":material/arrow_back:",
        on_click=_move,
        args=(-1,),
        disabled=number == 1,
    )
    right.button(
        "Next",
        key=f"{PAGE}.next",
        type="primary",
        icon=":material/arrow_forward:",
        icon_position="right",
        on_click=_move,
        args=(1,),
        disabled=number == len(STEPS),
    )


def live_tasks(step: Step, lesson: Lesson) -> list[RunTask]:
    """The step's runs as the recording made them (model, document, question, resolved settings): run live,
    they land on the same traces."""
    tasks = []
    for name in step.runs:
        document = lesson.document(name)
        tasks.append(RunTask(lesson.model, document.text, lesson.traces[name].run_config, document.question))
    return tasks


def run_live(step: Step, lesson: Lesson) -> dict[str, Trace] | None:
    """The Run it live button; once its job for this step has ended, its traces by run name."""
    tasks = live_tasks(step, lesson)
    done = run_controls(PAGE, "Run it live", lambda model: tasks, live_view=live_view(PAGE))
    st.caption(
        f"Run it live: the same settings through the model worker ({lesson.model}, greedy), "
        "so the figures above are drawn again from runs made now."
    )
    if done is None or done.tasks != tasks or any(result is None for result in done.results):
        return None
    return dict(zip(step.runs, done.results))


def same_kept_sets(a: Trace, b: Trace) -> bool:
    """Whether two runs kept the same entries at every refresh."""
    return [cycle.kept for cycle in a.cycles] == [cycle.kept for cycle in b.cycles]


def passage(trace: Trace, answer: str) -> range | None:
    """The tokens around the answer's first occurrence in the document (None when it is not there)."""
    found = matching_tokens(trace, answer, trace.question_start or trace.prompt_length)
    return range(min(found) - PASSAGE, max(found) + PASSAGE + 1) if found else None


def verdicts(traces: list[Trace], answer: str, full: Trace | None) -> None:
    """Each run's verdict line under its title."""
    for trace in traces:
        st.markdown(f"**{trace.run_config.title()}**")
        verdict_line(run_verdict(trace, answer, full), trace)


def step_figure(step: Step, key: str, traces: dict[str, Trace], lesson: Lesson) -> None:
    """The step's verdict lines and its one figure."""
    full, run = traces[step.runs[0]], traces[step.runs[-1]]
    answer = lesson.document(step.runs[-1]).answer
    if step.figure == "cache":
        runs = [("the full cache", full), (run.run_config.title(), run)]
        budget = cache_growth(runs, run.run_config.cache_size, frozen_count(run))
        chart(budget, key=key, stem=file_stem(run, "cache"))
    elif step.figure == "answer":
        verdicts([full], answer, None)
        st.html(answer_html(full, answer))
    elif step.figure == "pinned":
        shown = [traces[name] for name in step.runs[1:]]
        verdicts(shown, answer, full)
        titles = [trace.run_config.title(budget=False) for trace in shown]
        chart(comparison_heatmaps(shown, titles), key=key, stem=file_stem(run, "what-if"))
    else:
        verdicts([run], answer, full)
        if step.figure == "retention":
            chart(retention_heatmap(run), key=key, stem=file_stem(run, "retention"))
        elif step.figure == "surprise":
            signal = signals(run)[0]
            st.html(highlight_html(run, latest_scores(run, signal), signal, passage(run, answer)))
        else:  # the context of the answer at the last refresh before the question
            last = max(cycle.index for cycle in run.cycles if cycle.phase == "prefill")
            marked = matching_tokens(run, answer, run.question_start or run.prompt_length)
            st.html(cycle_context_html(run, last, marked, focus=passage(run, answer), marked_as="the answer"))


def try_it(step: Step, lesson: Lesson) -> None:
    """A link to the page of ``step``'s Try it, in a new tab, with its document and question held by the server."""
    document = lesson.document(step.tried[0])
    store = document_store()
    store.put(document.text)
    store.put(document.question)
    st.link_button(
        f"Try it on {PAGE_NAMES[step.try_page]}",
        try_link(step, lesson),
        icon=":material/open_in_new:",
        help="Opens the page in a new tab with this step's document, question and settings: click its run button.",
    )


def show_step(number: int, lesson: Lesson) -> None:
    """Step ``number``: its title, paragraph, figure (from the recording, or from a live run of it), Try it."""
    step = STEPS[number - 1]
    st.subheader(f"{number}. {step.title}")
    missing = lesson.missing(step)
    if missing:
        st.warning(f"This step's runs are not recorded ({', '.join(missing)}): run `python scripts/lesson.py`.")
        return
    st.markdown(lesson.text(step))
    figure = st.container()
    try_it(step, lesson)
    live = run_live(step, lesson)
    with figure:
        if live is not None:
            same = all(same_kept_sets(live[name], lesson.traces[name]) for name in step.runs)
            st.info(
                "Drawn from the live run: "
                + (
                    "the same kept sets as the recording at every refresh."
                    if same
                    else "it differs from the recording."
                )
            )
        step_figure(step, f"{PAGE}.{number}", live or {name: lesson.traces[name] for name in step.runs}, lesson)
        document = lesson.document(step.runs[-1])
        st.caption(f"Document: {document.title} ({document.source}). Question, asked apart: “{document.question}”")


def glossary(lesson: Lesson) -> None:
    """The foot of the lesson: what J, h and a refresh are, and what the figures were recorded with."""
    st.divider()
    st.caption(GLOSSARY)
    made = lesson.made
    st.caption(
        f"Recorded by `scripts/lesson.py` with {lesson.model} on {made.get('date')} (commit {made.get('commit')}): "
        "every figure is drawn from a trace in assets/lesson/, without running the model."
    )
