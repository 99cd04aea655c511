"""ccviz web app: ``streamlit run app.py``."""

import streamlit as st

st.set_page_config(page_title="ccviz: KV-cache eviction lab", page_icon="🧠", layout="wide")

pages = [
    st.Page("pages/run.py", title="Run & retention", icon=":material/grid_on:", default=True),
    st.Page("pages/surprise.py", title="Surprise", icon=":material/highlight:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/benchmarks.py", title="Benchmarks", icon=":material/monitoring:"),
    st.Page("pages/traces.py", title="Traces", icon=":material/folder_open:"),
]
st.navigation(pages).run()
