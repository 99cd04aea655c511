"""Surprise: the document highlighted by a signal, what survives at a budget, and the same per sentence."""

import streamlit as st

from ccviz import RunConfig
from ccviz.choices import SURPRISE_SCORES, VARIANTS
from ccviz.figures import per_token, recorded_values
from ccviz.signals import ATTENTION_SIGNALS
from ccviz.ui.explain import explain_section
from ccviz.ui.frame import ensure_app_frame
from ccviz.ui.inputs import budget_input, document_input, policy_input, unit_input
from ccviz.ui.links import linked, linked_index
from ccviz.ui.state import run_controls
from ccviz.ui.views import signal_views
from ccviz.worker.tasks import AttentionTask, RunTask, SurpriseTask

ensure_app_frame()  # a fresh server's first request for a deep link: rerun it through app.py

PAGE = "surprise"

st.title("Surprise")
st.caption(
    "Which tokens does each signal single out, and what text survives a prefill at a chosen budget? "
    "Whole-document signals score every token once with nothing evicted; the run's own signals are the "
    "last score each token got before it was kept or evicted."
)
with st.sidebar:
    st.header("Budget run")
    policy, options = policy_input("sur.policy", default="counter_causal_fast")
    units = unit_input("sur", policy, options)
    budget = budget_input("sur", default_cache=256)
    st.header("Counter-causal surprise")
    variant = st.selectbox(
        "Variant",
        VARIANTS,
        index=linked_index("sur.variant", VARIANTS, "fast"),
        key="sur.variant",
        persist_state="session",
    )
    score = st.selectbox(
        "Score",
        SURPRISE_SCORES,
        index=linked_index("sur.score", SURPRISE_SCORES, SURPRISE_SCORES[0]),
        key="sur.score",
        persist_state="session",
    )
    min_gap = int(
        st.number_input(
            "min gap",
            value=linked("sur.min_gap", 0, lambda raw: max(int(raw), 0)),
            min_value=0,
            step=1,
            key="sur.min_gap",
            persist_state="session",
        )
    )

text, chat = document_input()
done = run_controls(
    PAGE,
    "Prefill and score",
    lambda model: [
        RunTask(
            model.name,
            text,
            RunConfig(
                policy=policy, policy_options=options, chat=chat, max_new_tokens=1, record="all", **budget, **units
            ),
        ),
        SurpriseTask(model=model.name, prompt=text, chat=chat, variant=variant, score=score, min_gap=min_gap),
        AttentionTask(model=model.name, prompt=text, chat=chat, frozen=budget["frozen"]),
    ],
)
if done is not None:
    trace, surprise, attention = done.results
    if trace is not None:
        n = len(trace.tokens)
        values = {}
        if surprise is not None:
            values[f"{done.tasks[1].label}, whole document"] = per_token(surprise, n)
        if attention is not None:
            whole = recorded_values(attention)
            values.update(
                {
                    f"{label}, whole document": per_token(whole[name], n)
                    for name, label in ATTENTION_SIGNALS.items()
                    if name in whole
                }
            )
        values.update(recorded_values(trace, suffix=f" (during the {trace.run_config.policy} run)"))
        st.caption(
            f"Budget run: {done.tasks[0].label}, {trace.run_config.describe_budget()}, "
            f"{trace.prompt_length} prompt tokens, {len(trace.cycles)} refreshes."
        )
        signal_views(trace, values, key="surprise")
        explain_section(trace, key="surprise")
