"""Benchmarks: what ``python -m ccviz bench`` measured, where and when, and the command that measures it again."""

from pathlib import Path

import streamlit as st

from ccviz.ui.bench_views import section_view
from ccviz.ui.frame import ensure_app_frame
from ccviz_bench.browse import cached_sections, command_for_all, result_folders
from ccviz_bench.reproduce import display_path
from ccviz_bench.results import PUBLISHED, RESULTS_ENV, results_dir

ensure_app_frame()  # a fresh server's first request for a deep link: rerun it through app.py

st.title("Benchmarks")
# $CCVIZ_BENCH_RESULTS, else the results published with this app, wherever the server was started from
folders = [str(path) for path in result_folders(results_dir(default=Path(__file__).resolve().parents[1] / PUBLISHED))]
folder = Path(
    st.selectbox(
        "Results folder",
        folders,
        format_func=lambda path: display_path(Path(path)),
        key="bench.folder",
        help=(
            "The published run, and the follow-up measurements kept in folders next to it (each with its own command)."
        ),
    )
    if len(folders) > 1
    else folders[0]
)
sections = cached_sections(folder)  # read again when its files change: a run in progress shows its newest rows
everything = command_for_all(sections, folder)
shown = display_path(folder)

st.caption(
    f"The result files of `python -m ccviz bench` in `{shown}` (set `{RESULTS_ENV}` to read another folder), "
    "summarised by the harness's own code; a run still in progress shows the rows it has written so far."
)
measured = [section for section in sections if section.meta or section.measured or section.error]
if everything is None:  # a follow-up folder: only its own tasks, each with the command that measured it
    st.markdown(f"`{shown}` holds follow-up measurements with settings of their own; each tab gives its command.")
    sections = measured
elif measured:
    st.markdown(f"Everything on this page: `{everything}`.")
else:
    st.info(
        f"No benchmark results in `{shown}` yet. `{everything}` measures everything (hours on a CPU; it resumes "
        "where it stopped); `python -m ccviz bench all --quick --out DIR` writes a CI-sized set in a few minutes."
    )
# Only the open tab is drawn: chromium lays out every chart of every tab, hidden ones included.
# Picking another tab reruns the page (its label is in st.session_state["bench.tab"]).
tabs = st.tabs([section.title for section in sections], key="bench.tab", on_change="rerun")
for section, tab in zip(sections, tabs):
    if tab.open:
        with tab:
            section_view(section, shown)
