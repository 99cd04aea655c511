"""What a newcomer lands on: a session opened on a bare link finds the first sample measured to demonstrate on its
model already loaded (its document, question, expected answer and budget), so the first click on Run evicts
and ends with a verdict. The landing sets the widgets' defaults; a pick from the sample menu writes the same
values (:func:`sample_values`) into the session.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from .keys import EXPECT_KEY, QUESTION_KEY
from .links import initial_params
from .model_picker import chosen_model
from .samples import Sample, landing_sample, load_samples

LANDING_KEY = "doc.landing"  # the title of the sample this session landed on (None: it did not)


@st.cache_data(show_spinner=False)
def samples() -> list[Sample]:
    """The shipped samples, read once per server."""
    return load_samples()


def sample_titled(title: str | None) -> Sample | None:
    """The shipped sample called ``title``, or None."""
    return next((s for s in samples() if s.title == title), None)


def landing() -> Sample | None:
    """The sample a newcomer lands on, decided once per session: on a session opened on a bare link, the first
    sample measured to demonstrate on its model (a link names what it restores, so a session opened on one keeps
    to it); None otherwise."""
    if LANDING_KEY not in st.session_state:
        sample = None if initial_params() else landing_sample(samples(), chosen_model())
        st.session_state[LANDING_KEY] = None if sample is None else sample.title
    return sample_titled(st.session_state[LANDING_KEY])


def landed(key: str, value: Any) -> Any:
    """Widget ``key``'s default: the landing sample's value (its document, question, expected answer, budget and
    key phrase, as a pick from the menu loads them) in a session that lands, else ``value``. Defaults, not
    session state: a value written before its widget first exists is dropped by Streamlit on a page switch.
    Links still compare against the plain defaults, so a landed session's link names the sample's values."""
    sample = landing()
    return value if sample is None else sample_values(sample).get(key, value)


def sample_values(sample: Sample) -> dict[str, Any]:
    """The widget values a sample loads: its document, question and answer, chat switch, new tokens and phrase,
    and the budget it was measured to demonstrate at (h = J/4)."""
    values = {
        "doc.text": sample.text,
        "doc.chat": sample.chat,
        QUESTION_KEY: sample.question or "",
        EXPECT_KEY: sample.answer or "",
        "run.max_new": sample.max_new_tokens,
        "cmp.max_new": sample.max_new_tokens,
        "cmp.phrase": sample.key_phrase,
    }
    if sample.cache_size is not None:
        for page in ("run", "cmp"):
            values[f"{page}.J"], values[f"{page}.h"] = sample.cache_size, None
    return values
