""" "Explain a token": pick a token and a refresh, and see why it was kept or evicted there.

The explanation is computed in the model worker (it replays the run up to the refresh), as a job of
its own next to the page's runs, and cached with the other results; this module only lays it out.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from ..choices import SURPRISE_SCORES
from ..explain import Explanation, explain_without_replay, matching_tokens
from ..figures import visible_text
from ..figures.explain import explanation_figure, explanation_html
from ..figures.export import file_stem
from ..trace import Trace
from ..worker.tasks import ExplainTask
from .state import result_store, run_controls
from .views import chart, refresh_slider

STATUS_BADGES = {  # status -> (label, icon, colour)
    "kept": ("kept", ":material/check_circle:", "green"),
    "evicted": ("evicted", ":material/cancel:", "red"),
    "frozen": ("frozen", ":material/lock:", "gray"),
    "question": ("question (kept)", ":material/lock:", "green"),
    "unseen": ("not processed yet", ":material/schedule:", "gray"),
}


def _token_choice(trace: Trace, key: str, step: int) -> int:
    """A token of the first ``step``: found by its text, or typed as a timestep."""
    left, right = st.columns([2, 3])
    query = left.text_input(
        "Find a token",
        key=f"{key}.find",
        placeholder="e.g. amoxicillin, 4817, key",
        help="Every token of each place the text contains this (case-insensitive), up to this refresh.",
    )
    if query.strip():
        matches = matching_tokens(trace, query.strip(), step)
        if not matches:
            right.warning(f"Nothing up to this refresh contains “{query.strip()}”.")
        else:
            return right.selectbox(
                f"Tokens of the matches ({len(matches)})",
                matches,
                key=f"{key}.match",
                format_func=lambda t: f"t={t} “{visible_text(trace.tokens[t].text)}”",
            )
    # Bounded by the whole trace, not the refresh: moving the refresh never invalidates the number (a
    # token processed later is explained as "not processed yet").
    return int(
        right.number_input(
            "Token t (original timestep)",
            min_value=0,
            max_value=len(trace.tokens) - 1,
            value=max(step - 1, 0) // 2,
            step=1,
            key=f"{key}.t",
        )
    )


def _badge(explanation: Explanation) -> None:
    status = explanation.status
    if status == "candidate":
        status = "kept" if explanation.kept else "evicted"
    label, icon, colour = STATUS_BADGES[status]
    st.badge(label, icon=icon, color=colour)


def _numbers(e: Explanation) -> None:
    n = len(e.entries)
    cols = st.columns(2)
    if e.signal is not None:
        cols[0].metric(
            f"Policy score ({e.signal})", f"{e.score:.4g}", help="The score this refresh ranked it by, replayed."
        )
    if e.rank is not None:
        cols[1].metric("Rank that decided", f"{e.rank}", help="1 = best; among the entries the cut-off applied to.")
    settings = ", ".join(f"{k}={v}" for k, v in e.surprise_settings.items())
    table = pd.DataFrame(
        [
            {"score": name, "surprise": e.surprise[name], "rank among candidates": f"{e.surprise_rank[name]} of {n}"}
            for name in SURPRISE_SCORES
        ]
    )
    st.markdown(f"**Counter-causal surprise** ({settings})")
    st.dataframe(table, hide_index=True)


def _open_refresh(state_key: str, refresh: int) -> None:
    """A button's callback: it runs before the rerun, so it may still set the refresh widget's value."""
    st.session_state[state_key] = refresh


def open_explanation(key: str, refresh: int, position: int) -> None:
    """A button's callback (it runs before the rerun, so it may set widgets' values): :func:`explain_section`
    of ``key``, with the page's refresh slider, turns to token ``position`` at refresh ``refresh`` and explains
    it at once."""
    st.session_state[refresh_slider(key)] = refresh
    st.session_state[f"{key}.find"] = ""
    st.session_state[f"{key}.t"] = position
    st.session_state[f"{key}.explain_now"] = True


def explanation_view(e: Explanation, trace: Trace, key: str, refresh_key: str | None = None) -> None:
    """The verdict and its reason, the numbers, and the attention behind them. ``refresh_key``: the state of the
    widget that picks the refresh; a token evicted earlier then gets a button that opens the refresh that did it."""
    head, reason = st.columns([1, 4], vertical_alignment="center")
    with head:
        _badge(e)
    reason.markdown(f"**t={e.position} “{visible_text(e.text)}” at refresh {e.refresh}.** {e.reason}")
    if e.evicted_at is not None and refresh_key is not None:
        st.button(
            f"Open refresh {e.evicted_at}",
            key=f"{key}.open_refresh",
            icon=":material/history:",
            on_click=_open_refresh,
            args=(refresh_key, e.evicted_at),
            help="Move the refresh to the one that evicted this token, to explain why it went.",
        )
    if e.status != "candidate":
        return
    if not e.matches_trace:
        st.warning(
            "The replay's scores or survivors differ from the trace's: this trace was made by another model or version."
        )
    _numbers(e)
    chart(
        explanation_figure(e, trace), key=f"{key}.figure", stem=file_stem(trace, f"explain-t{e.position}-r{e.refresh}")
    )
    st.html(explanation_html(e, trace))


def explain_section(trace: Trace, key: str, refresh: int | None = None) -> None:
    """Pick a token (and a refresh, unless the page's refresh slider gives it: :func:`.views.refresh_slider`
    of ``key``) and explain it."""
    st.subheader("Explain a token")
    if not trace.cycles:
        st.info("No refresh happened, so there is no decision to explain.")
        return
    allocation = trace.run_config.allocation
    if allocation != "uniform":
        st.info(
            f"This run's allocation ({allocation}) decides per layer, so there is no one keep decision "
            "to replay: the heatmap's Layer slider shows what each layer kept."
        )
        return
    last = len(trace.cycles) - 1
    refresh_key = f"{key}.refresh" if refresh is None else refresh_slider(key)
    if refresh is None:
        refresh = int(st.number_input("At refresh", min_value=0, max_value=last, value=last, step=1, key=refresh_key))
    else:
        st.caption(f"At refresh {refresh} (the refresh slider above).")
    t = _token_choice(trace, key, trace.cycles[refresh].step)
    task = ExplainTask(str(trace.config.get("model", "")), trace, refresh, t)
    ready = explain_without_replay(trace, refresh, t) or result_store().get(
        task
    )  # no candidate then: the trace says why
    page = f"{key}.explain"
    start = st.session_state.pop(f"{key}.explain_now", False)  # opened by open_explanation
    done = run_controls(page, "Explain", lambda _: [task], start=start) if ready is None else None
    if ready is None and done is not None and done.tasks[0] == task:
        ready = done.results[0]
    if ready is not None:
        explanation_view(ready, trace, key, refresh_key)
    elif not st.session_state.get(f"job.{page}"):
        st.caption(
            "Explaining replays the run up to this refresh in the model worker: "
            "about as long as the run took to get there."
        )
