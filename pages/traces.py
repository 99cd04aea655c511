"""Traces: download any run of this session; open trace files to view them without the model."""

import streamlit as st

from ccviz import CcvizError, Trace
from ccviz.figures import recorded_values
from ccviz.ui.frame import ensure_app_frame
from ccviz.ui.state import history
from ccviz.ui.uploads import read_trace
from ccviz.ui.views import compare_view, download_trace, retention_view, signal_views

ensure_app_frame()  # a fresh server's first request for a deep link: rerun it through app.py

MAX_COMPARED = 4
# Validated traces by file contents: switching views never re-parses (refused files are not cached).
parse_trace = st.cache_data(max_entries=8, show_spinner=False)(read_trace)


st.title("Traces")
st.subheader("This session's runs")
runs = list(history().items())
if not runs:
    st.caption("No runs yet: finished runs of the other pages appear here, newest first.")
for label, trace in reversed(runs):
    left, right = st.columns([4, 1], vertical_alignment="center")
    left.markdown(f"`{label}` · {trace.status} · {len(trace.cycles)} refreshes")
    with right:
        download_trace(trace, key=f"history.{label}", label="Download")

st.subheader("Open trace files")
uploads = st.file_uploader(
    "Trace JSON files (one to view a run, two to four to compare)",
    type=["json"],
    accept_multiple_files=True,
    key="up.traces",
)
loaded: list[tuple[str, Trace]] = []
for upload in uploads or []:
    try:  # read_trace validates everything before anything is drawn, the size limit (CCVIZ_MAX_TRACE_MB) included
        loaded.append((upload.name, parse_trace(upload.name, upload.getvalue())))
    except CcvizError as err:
        st.error(str(err))

if loaded:
    names = [name for name, _ in loaded]
    tabs = ["Retention", "Signals"] + (["Compare"] if len(loaded) > 1 else [])
    view = st.segmented_control("View", tabs, default="Retention", key="traces.view", required=True)
    if view == "Compare":
        if len(loaded) > MAX_COMPARED:
            st.info(f"Comparing the first {MAX_COMPARED} files.")
        chosen = loaded[:MAX_COMPARED]
        phrase = st.text_input("Phrase to track", key="traces.phrase")
        labels = [f"{name} · {trace.run_config.title()}" for name, trace in chosen]
        compare_view([trace for _, trace in chosen], labels, phrase, key="traces.compare")
    else:
        pick = (
            st.selectbox("Trace", range(len(loaded)), format_func=lambda i: names[i], key="traces.pick")
            if len(loaded) > 1
            else 0
        )
        trace = loaded[pick][1]
        if view == "Retention":
            retention_view(trace, key="traces.retention")
        else:
            signal_views(trace, recorded_values(trace), key="traces.signals")
