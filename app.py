"""ccviz web app: ``streamlit run app.py``."""

import streamlit as st

from ccviz.errors import CcvizError
from ccviz.plugins import load_plugins
from ccviz.ui import links
from ccviz.ui.frame import ensure_app_frame
from ccviz.ui.model_picker import model_picker
from ccviz.ui.views import chart_settings

ensure_app_frame()  # a fresh server's first run goes through st.navigation, not the legacy pages/ folder
st.set_page_config(page_title="ccviz: KV-cache eviction lab", page_icon="🧠", layout="wide")

pages = [
    st.Page("pages/lesson.py", title="Lesson", icon=":material/school:"),  # first in the menu; Run stays the landing
    st.Page("pages/run.py", title="Run & retention", icon=":material/grid_on:", default=True),
    st.Page("pages/surprise.py", title="Surprise", icon=":material/highlight:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare:"),
    st.Page("pages/benchmarks.py", title="Benchmarks", icon=":material/monitoring:"),
    st.Page("pages/traces.py", title="Traces", icon=":material/folder_open:"),
]
page = st.navigation(pages)
links.begin()
try:
    load_plugins()  # policies of CCVIZ_PLUGINS join the menus (the worker imports them too)
except CcvizError as err:
    st.error(str(err))
model_picker()  # the session's model and the worker's state, in the sidebar
with st.sidebar:
    chart_settings()
page.run()
links.publish()  # the page's settings and document into the URL: a reload or a shared link restores them
