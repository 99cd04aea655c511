"""ccviz web app: ``streamlit run app.py``."""

import streamlit as st

from ccviz.errors import CcvizError
from ccviz.plugins import load_plugins
from ccviz.ui import links
from ccviz.ui.model import model_status_line
from ccviz.ui.views import chart_settings

st.set_page_config(page_title="ccviz: KV-cache eviction lab", page_icon="🧠", layout="wide")

pages = [
    st.Page("app_pages/run.py", title="Run & retention", icon=":material/grid_on:", default=True),
    st.Page("app_pages/surprise.py", title="Surprise", icon=":material/highlight:"),
    st.Page("app_pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("app_pages/benchmarks.py", title="Benchmarks", icon=":material/monitoring:"),
    st.Page("app_pages/traces.py", title="Traces", icon=":material/folder_open:"),
]
page = st.navigation(pages)
links.begin()
try:
    load_plugins()  # policies of CCVIZ_PLUGINS join the menus (the worker imports them too)
except CcvizError as err:
    st.error(str(err))
model_status_line()
with st.sidebar:
    chart_settings()
page.run()
links.publish()  # the page's settings and document into the URL: a reload or a shared link restores them
