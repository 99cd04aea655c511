"""State that survives a reload: the page's settings in the URL's query string, the document by hash.

Every input helper asks :func:`linked` for its widget's default: the value the session's link gave
for that key, if valid, else the usual default; the key then joins this run's link. After the page
has run, :func:`publish` writes every linked setting that differs from its default (and ``doc=`` the
document's hash, ``question=`` the question's, the texts themselves held server-side in a
:class:`DocumentStore`) into the query string, so a reload or a link sent to a colleague opens the
same page with the same inputs. The link is read once per session: later writes never move a
widget's default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from .documents import DocumentStore

DOC_PARAM, QUESTION_PARAM = "doc", "question"
TEXT_NAMES = {DOC_PARAM: "document", QUESTION_PARAM: "question"}  # the texts a link names by hash
_INITIAL, _KEYS, _PROBLEMS, _TEXTS = "url.initial", "url.keys", "url.problems", "url.texts"


@st.cache_resource
def document_store() -> DocumentStore:
    """Pasted documents of every session of this server (bounded LRU)."""
    return DocumentStore()


def initial_params() -> dict[str, str]:
    """The query string this session was opened with."""
    if _INITIAL not in st.session_state:
        st.session_state[_INITIAL] = {key: st.query_params.get(key) for key in st.query_params}
    return st.session_state[_INITIAL]


def begin() -> None:
    """Start this run's link (app.py, before the page runs)."""
    initial_params()
    st.session_state[_KEYS] = {}
    st.session_state.pop(_TEXTS, None)


def optional(decode: Callable[[str], Any]) -> Callable[[str], Any]:
    """A decoder for a setting that may be empty (an empty value is None)."""
    return lambda raw: None if raw == "" else decode(raw)


def as_bool(raw: str) -> bool:
    if raw not in ("0", "1"):
        raise ValueError(raw)
    return raw == "1"


def linked(key: str, default: Any, decode: Callable[[str], Any] = str, choices: Sequence[Any] | None = None) -> Any:
    """The default for widget ``key``: the link's value when it has a valid one; ``key`` joins the link."""
    st.session_state.setdefault(_KEYS, {})[key] = default
    raw = initial_params().get(key)
    if raw is None:
        return default
    try:
        value = decode(raw)
        if choices is not None and value not in choices:
            raise ValueError(raw)
    except (ValueError, TypeError):
        st.session_state.setdefault(_PROBLEMS, {})[key] = raw
        return default
    return value


def linked_checkbox(label: str, key: str, default: bool = False, help: str | None = None) -> bool:
    """A checkbox that starts from the link's value (``key`` joins the link) and keeps its state for the session."""
    return st.checkbox(label, value=linked(key, default, as_bool), key=key, persist_state="session", help=help)


def linked_index(key: str, options: Sequence[Any], default: Any) -> int:
    """A selectbox's ``index``: the link's choice when it is one of ``options``."""
    return list(options).index(linked(key, default, choices=options))


def linked_text(param: str, default: str) -> str:
    """A text box's default: the text the link names under ``param`` (one of ``TEXT_NAMES``), when this
    server still holds it. The page's text joins the link through :func:`link_text`."""
    key = initial_params().get(param)
    if not key:
        return default
    text = document_store().get(key)
    if text is None:
        st.session_state.setdefault(_PROBLEMS, {})[param] = key
        return default
    return text


def link_text(param: str, text: str, default: str) -> None:
    """This run's text under ``param``, named in the link by its hash unless it is the default text."""
    st.session_state.setdefault(_TEXTS, {})[param] = None if text == default else text


def link_problems() -> None:
    """One line for what the link asked that cannot be restored (shown once per session)."""
    problems = st.session_state.get(_PROBLEMS)
    if not problems:
        return
    for param, name in TEXT_NAMES.items():
        key = problems.pop(param, None)
        if key is not None:
            st.warning(
                f"This link's {name} (#{key}) is no longer held by this server: its settings are restored; "
                f"paste or load the {name} again.",
                icon=":material/link_off:",
            )
    if problems:
        named = ", ".join(f"{key}={value!r}" for key, value in problems.items())
        st.warning(f"Not restored from the link (not valid here, defaults used): {named}.", icon=":material/link_off:")
    st.session_state[_PROBLEMS] = {}


def _encode(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def publish() -> None:
    """Write this run's linked settings (those off their defaults) and its texts' hashes into the URL."""
    params = {}
    for key, default in st.session_state.get(_KEYS, {}).items():
        value = st.session_state.get(key, default)
        if value != default:
            params[key] = _encode(value)
    for param, text in st.session_state.get(_TEXTS, {}).items():
        if text:
            params[param] = document_store().put(text)
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)
