"""Lesson: a guided walk through KV-cache eviction, each step drawn from a recorded run (docs/app.md#lesson)."""

import streamlit as st

from ccviz.ui.frame import ensure_app_frame
from ccviz.ui.lesson_view import current_lesson, glossary, intro, presenter_view, show_step, step_buttons, step_picker

ensure_app_frame()  # a fresh server's first request for a deep link: rerun it through app.py

title, switch = st.columns([4, 1], vertical_alignment="bottom")
title.title("Lesson: what a small model forgets")
with switch:
    presenter_view()
intro()
lesson = current_lesson()
if lesson is not None:
    number = step_picker()
    show_step(number, lesson)
    step_buttons(number)
    glossary(lesson)
