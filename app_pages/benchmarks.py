"""Benchmarks: what ``python -m ccviz bench`` measured, where and when, and the command that measures it again."""

import streamlit as st

from ccviz.ui.bench_results import RESULTS_ENV, command_for_all, load_sections, results_dir
from ccviz.ui.bench_views import section_view

folder = results_dir()
sections = load_sections(folder)  # read on every rerun: a run in progress shows its newest rows
everything = command_for_all(sections, folder)

st.title("Benchmarks")
st.caption(
    f"The result files of `python -m ccviz bench` in `{folder}` (set `{RESULTS_ENV}` to read another folder), "
    "summarised by the harness's own code; a run still in progress shows the rows it has written so far."
)
if any(section.meta or section.measured or section.error for section in sections):
    st.markdown(f"Everything on this page: `{everything}`.")
else:
    st.info(
        f"No benchmark results in `{folder}` yet. `{everything}` measures everything (hours on a CPU; it resumes "
        "where it stopped); `python -m ccviz bench all --quick --out DIR` writes a CI-sized set in a few minutes."
    )
for section, tab in zip(sections, st.tabs([section.title for section in sections])):
    with tab:
        section_view(section, str(folder))
