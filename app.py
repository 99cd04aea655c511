"""ccviz web app: ``streamlit run app.py``."""

import streamlit as st

st.set_page_config(page_title="ccviz: KV-cache eviction lab", page_icon="🧠", layout="wide")

pages = [
    st.Page("pages/run.py", title="Run & retention", icon="🔥", default=True),
]
st.navigation(pages).run()
