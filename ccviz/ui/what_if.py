"""The Run page's "What if": pin or drop a phrase of the document, run again, and see both runs side by side.

The second run is an ordinary :class:`RunTask` (the shown run's settings with one more pinned or dropped
phrase, :attr:`ccviz.RunConfig.pin` / ``drop``) through the page's own job (:func:`run_controls`), so
it is cached, validated and cancellable like any run. The comparison is the Compare page's view plus
what changed in the cache (:mod:`ccviz.figures.what_if`).
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import streamlit as st

from ..errors import CcvizError
from ..figures.export import file_stem
from ..figures.what_if import cache_changes, changes_figure, document_sentences, final_differences
from ..trace import Trace
from ..worker.tasks import RunTask
from .links import linked
from .state import run_controls
from .views import chart, compare_view

PAGE = "run.what_if"  # the second run's job, beside the page's own
VERBS = ("pin", "drop")
TYPED = "(type a phrase)"


def what_if_config(task: RunTask, verb: str, phrase: str) -> RunTask:
    """``task`` with ``phrase`` pinned or dropped as well (a one-line error for an empty phrase)."""
    phrase = phrase.strip()
    if not phrase:
        raise CcvizError("type a phrase of the document, or pick a sentence, to pin or drop")
    config = task.config
    field = config.pin if verb == "pin" else config.drop
    changed = config.replace(**{verb: field if phrase in field else (*field, phrase)})
    return replace(task, config=changed)  # the same document and question


def what_if_section(task: RunTask, trace: Trace) -> None:
    """Inputs for the phrase, the button that runs the what-if twin of ``task`` (whose result is ``trace``),
    and, once it ran, both runs side by side."""
    st.subheader("What if")
    st.caption(
        "Pin a phrase (its tokens are never evicted; they take places of J, as the frozen prefix never "
        "does) or drop it (evicted at its first refresh), run again, and compare. Every occurrence of the "
        "phrase in the document counts, case ignored."
    )
    left, right = st.columns([1, 4])
    verb = left.radio(
        "Phrase", VERBS, index=VERBS.index(linked(f"{PAGE}.verb", "pin", choices=VERBS)), key=f"{PAGE}.verb"
    )
    sentences = document_sentences(trace, task.prompt)
    labels = {s.label: s.text for s in sentences}
    picked = right.selectbox(
        "A sentence of the document (what this run kept of it at the end)",
        [TYPED, *labels],
        key=f"{PAGE}.pick",
    )
    typed = right.text_input(
        "Or type a phrase: a word, a number, part of a sentence (used when no sentence is picked)",
        value=linked(f"{PAGE}.phrase", ""),
        key=f"{PAGE}.phrase",
    )
    phrase = labels.get(picked, typed)

    def make_tasks(model) -> list[RunTask]:
        twin = what_if_config(task, verb, phrase)
        st.session_state[f"{PAGE}.base"] = task
        return [twin]

    done = run_controls(PAGE, f"Run again, {verb}ning the phrase", make_tasks)
    if done is None or done.results[0] is None or st.session_state.get(f"{PAGE}.base") != task:
        return
    side_by_side(trace, done.results[0], done.tasks[0])


def side_by_side(base: Trace, other: Trace, twin: RunTask) -> None:
    """Both runs: outputs, heatmaps and survival (the Compare page's view), then what changed in the cache."""
    config = twin.config
    what = ", ".join([*(f"pinning {p!r}" for p in config.pin), *(f"dropping {p!r}" for p in config.drop)])
    labels = ["this run", f"what if: {what}"]
    phrase = (config.pin or config.drop)[-1]
    st.markdown("**The answer changed.**" if base.output_text != other.output_text else "**The answer is the same.**")
    compare_view([base, other], labels, phrase, key=PAGE)
    st.subheader("What changed in the cache")
    changes = cache_changes(base, other, ["this run", "what if"])
    if changes.empty:
        st.info("No refresh happened: nothing was kept or evicted in either run.")
        return
    chart(changes_figure(changes), key=f"{PAGE}.changes", stem=file_stem(other, "what-if-changes"))
    only_base, only_other = final_differences(base, other)
    left, right = st.columns(2)
    for column, title, texts in (
        (left, "Kept only by this run, at the last refresh", only_base),
        (right, "Kept only by the what-if, at the last refresh", only_other),
    ):
        column.markdown(f"**{title}**")
        column.dataframe(pd.DataFrame({"text": texts}), hide_index=True, height=200)
    with st.expander("Counts per refresh"):
        st.dataframe(changes, hide_index=True)
