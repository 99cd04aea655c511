"""Run a prompt under a policy and show what survived each refresh."""

import pandas as pd
import streamlit as st

from ccviz import POLICIES, CcvizError, generate
from ccviz.ui.model import app_model

st.title("Run & retention")
prompt = st.text_area("Prompt", "Explain in three sentences why the sky is blue.", height=150)
col1, col2, col3, col4 = st.columns(4)
policy = col1.selectbox("Policy", list(POLICIES), index=list(POLICIES).index("sliding"))
cache_size = col2.number_input("Cache size J", min_value=1, value=64, step=8)
chunk_size = col3.number_input("Chunk size h", min_value=1, value=16, step=4)
max_new = col4.number_input("Max new tokens", min_value=1, value=64, step=16)

if st.button("Run", type="primary"):
    lm = app_model()
    bar = st.progress(0.0, text="Starting...")

    def progress(refreshes: int, processed: int, total: int) -> None:
        bar.progress(min(processed / total, 1.0), text=f"{processed}/{total} tokens, {refreshes} refreshes")

    try:
        st.session_state["trace"] = generate(
            lm, prompt, policy=policy, cache_size=int(cache_size), chunk_size=int(chunk_size),
            max_new_tokens=int(max_new), progress=progress,
        )
    except CcvizError as err:
        st.error(str(err))
    bar.empty()

trace = st.session_state.get("trace")
if trace is not None:
    st.subheader("Output")
    st.write(trace.output_text)
    st.subheader("Kept timesteps per refresh")
    st.dataframe(
        pd.DataFrame(
            {
                "refresh": [c.index for c in trace.cycles],
                "phase": [c.phase for c in trace.cycles],
                "step": [c.step for c in trace.cycles],
                "cache": [len(c.kept) for c in trace.cycles],
                "kept": [" ".join(map(str, c.kept)) for c in trace.cycles],
            }
        ),
        hide_index=True,
    )
