"""Run & retention: one policy on one document, and what survived every refresh (the paper's Figure 4)."""

import streamlit as st

from ccviz import RunConfig
from ccviz.explain import run_verdict
from ccviz.ui.answer_view import answer_view, record_reads_input
from ccviz.ui.explain import explain_section
from ccviz.ui.frame import ensure_app_frame
from ccviz.ui.full_cache_view import (
    full_cache_input,
    full_cache_view,
    missed_beside_full,
    runs_and_full_cache,
    with_full_cache,
)
from ccviz.ui.inputs import allocation_input, budget_input, decoding_input, document_input, policy_input, unit_input
from ccviz.ui.links import linked_checkbox
from ccviz.ui.needle_sample import NEEDLE_KEY
from ccviz.ui.question import expected_answer_input, keep_question_input, protect_question, question_input
from ccviz.ui.state import run_controls
from ccviz.ui.verdict_view import verdict_line
from ccviz.ui.views import live_view, retention_view
from ccviz.ui.what_if import what_if_section
from ccviz.worker.tasks import RunTask

ensure_app_frame()  # a fresh server's first request for a deep link: rerun it through app.py

PAGE = "run"

st.title("Run & retention")
st.caption(
    "Generate under a managed KV cache and see which tokens survive each refresh: one row per refresh, "
    "one column per cache slot in position order."
)
with st.sidebar:
    st.header("Policy")
    policy, options = policy_input("run.policy", default="counter_causal_fast")
    units = unit_input("run", policy, options)
    units |= allocation_input("run", policy, units["granularity"])
    st.header("Budget")
    budget = budget_input("run")
    keep_question = keep_question_input("run")
    st.header("Decoding")
    decoding = decoding_input("run")
    st.header("Trace")
    record_all = linked_checkbox(
        "Record every signal",
        "run.record_all",
        help="Also record, at every refresh, the cheap signals this policy does not use (attention received "
        "in the last chunk, last-layer attention, counter-causal surprise), to compare attention and surprise "
        "on the same cycle. Costs one extra surprise scoring per refresh.",
    )
    record_reads = record_reads_input(PAGE)
    beside_full = full_cache_input(PAGE)

text, chat = document_input()
question = question_input(text)
expected = expected_answer_input()
done = run_controls(
    PAGE,
    "Run",
    lambda model: with_full_cache(
        [
            RunTask(
                model.name,
                text,
                RunConfig(
                    policy=policy,
                    policy_options=options,
                    chat=chat,
                    **budget,
                    **decoding,
                    **units,
                    record="all" if record_all else "policy",
                    record_reads=record_reads,
                    protect_question=protect_question(keep_question, question),
                ),
                question=question,
            )
        ],
        beside_full,
    ),
    live_view=live_view("run"),
)
if done is not None and done.results[0] is not None:
    trace = done.results[0]
    full = runs_and_full_cache(done)[1]
    missed = missed_beside_full(trace, full)
    verdict = run_verdict(trace, expected, full)
    retention_view(
        trace,
        key="run",
        needle=st.session_state.get(NEEDLE_KEY),
        missed=[m.position for m in missed],
        verdict=lambda: verdict_line(verdict, trace, explain_key="run"),
    )
    if full is not None:
        full_cache_view(trace, full, missed)
    answer_view(trace, key="run")
    if trace.cycles:
        explain_section(trace, key="run", refresh=min(st.session_state.get("run.cycle", 0), len(trace.cycles) - 1))
    what_if_section(done.tasks[0], trace)
