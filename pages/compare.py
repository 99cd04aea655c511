"""Compare: two to four policies (or one policy under two allocations) on the same input, on one colour scale."""

import streamlit as st

from ccviz import POLICIES, RunConfig
from ccviz.explain import run_verdict
from ccviz.ui.frame import ensure_app_frame
from ccviz.ui.full_cache_view import full_cache_compare, full_cache_input, runs_and_full_cache, with_full_cache
from ccviz.ui.inputs import (
    allocation_input,
    budget_input,
    decoding_input,
    document_input,
    policy_input,
    unit_input,
)
from ccviz.ui.landing import landed
from ccviz.ui.links import linked
from ccviz.ui.question import expected_answer_input, keep_question_input, protect_question, question_input
from ccviz.ui.state import run_controls
from ccviz.ui.verdict_view import verdict_row
from ccviz.ui.views import compare_view, live_view
from ccviz.worker.tasks import RunTask

ensure_app_frame()  # a fresh server's first request for a deep link: rerun it through app.py

PAGE = "compare"
LETTERS = "ABCD"
PREFERRED = ["sliding", "counter_causal_fast", "h2o", "tova"]

st.title("Compare policies")
st.caption("The same document and budget under two to four policies, run one after another.")
defaults = [name for name in PREFERRED if name in POLICIES] + [name for name in POLICIES if name not in PREFERRED]
with st.sidebar:
    count = st.segmented_control(
        "Runs",
        [2, 3, 4],
        default=linked("cmp.count", 2, int, choices=[2, 3, 4]),
        key="cmp.count",
        required=True,
        persist_state="session",
    )
    runs = []
    for i in range(count):
        with st.expander(f"Run {LETTERS[i]}", expanded=i < 2):
            policy, options = policy_input(
                f"cmp.p{i}", default=defaults[i % len(defaults)], label=f"Policy {LETTERS[i]}"
            )
            units = unit_input(f"cmp.p{i}", policy, options)
            runs.append((policy, options, units | allocation_input(f"cmp.p{i}", policy, units["granularity"])))
    st.header("Budget (shared)")
    budget = budget_input("cmp")
    keep_question = keep_question_input("cmp")
    st.header("Decoding (shared)")
    decoding = decoding_input("cmp")
    beside_full = full_cache_input("cmp")

text, chat = document_input()
question = question_input(text)
expected = expected_answer_input()
phrase = st.text_input(
    "Phrase to track",
    value=landed("cmp.phrase", linked("cmp.phrase", "")),
    key="cmp.phrase",
    persist_state="session",
    placeholder="e.g. the key fact of the document",
    help="Shows at a glance whether these words were still in each run's cache at the end.",
)
done = run_controls(
    PAGE,
    "Run all",
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
                    protect_question=protect_question(keep_question, question),
                ),
                question=question,
            )
            for policy, options, units in runs
        ],
        beside_full,
    ),
    live_view=live_view("compare"),
)
if done is not None:
    finished, full = runs_and_full_cache(done)
    shown = [(f"{LETTERS[i]} · {trace.run_config.title(budget=False)}", trace) for i, (_, trace) in enumerate(finished)]
    if shown:
        labels, traces = zip(*shown)
        verdict_row([run_verdict(trace, expected, full) for trace in traces], traces, labels)
        compare_view(list(traces), list(labels), phrase, key="compare")
        if full is not None:
            full_cache_compare(traces, labels, full)
