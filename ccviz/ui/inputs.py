"""Input widgets shared by the pages: the document, a policy with its options, the budget and decoding.

The document (text box, sample picker, upload) and the chat/raw switch use the same keys on every
page, and every input keeps its value for the whole session (``persist_state="session"``), so
switching pages never loses what the user typed. Defaults are passed as ``value=``: with
``persist_state`` a value the sample loader put in session state still wins, whereas defaults
written into session state before the widget (``setdefault``) are lost on the first page switch.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from ..engine import RunConfig
from ..errors import CcvizError
from ..fields import rule_of
from ..policies import make_policy, policy_class, policy_names
from ..worker.limits import DEFAULT_MAX_TOKENS, MAX_TOKENS_ENV, max_tokens
from .keys import EXPECT_KEY, QUESTION_KEY
from .landing import landed, landing, sample_titled, sample_values, samples
from .limits import max_upload_bytes
from .links import (
    DOC_PARAM,
    as_bool,
    link_problems,
    link_text,
    linked,
    linked_checkbox,
    linked_index,
    linked_text,
    optional,
)
from .model_picker import chosen_model
from .needle_sample import NEEDLE_KEY, needle_generator, needle_loaded
from .options import option_specs
from .uploads import decode_document

DEFAULT_TEXT = (
    "The museum's night guard, Tomas, keeps the spare key to the east wing in a blue tin under the reception desk. "
    "Every evening he walks the galleries twice, checks the windows, "
    "and writes the temperature of each room in a logbook.\n\n"
    "Where is the spare key to the east wing kept?"
)
SESSION = "session"  # widget values survive page switches
OPENING = 80  # characters: a document that still holds a sample's opening is an edit of that sample


def _load_sample() -> None:
    sample = sample_titled(st.session_state.get("doc.sample"))
    if sample is None:
        return
    for key, value in sample_values(sample).items():
        st.session_state[key] = value
    st.session_state.pop(NEEDLE_KEY, None)


def _sample_left() -> None:
    """A document that replaces a loaded sample takes the sample's question and expected answer with it (while
    the boxes still hold them as loaded): the landing sample's question must not be asked of a pasted text.
    An edit of the sample (its opening kept) keeps them."""
    sample = sample_titled(st.session_state.get("doc.sample"))
    if sample is None or sample.text[:OPENING] in st.session_state.get("doc.text", ""):
        return
    for key, loaded in ((QUESTION_KEY, sample.question), (EXPECT_KEY, sample.answer)):
        if loaded and st.session_state.get(key) == loaded:
            st.session_state[key] = ""
    st.session_state["doc.sample"] = None


def _load_upload() -> None:
    upload = st.session_state.get("up.doc")
    if upload is None:
        return
    try:
        st.session_state["doc.text"] = decode_document(upload.name, upload.getvalue(), max_upload_bytes())
        st.session_state.pop(NEEDLE_KEY, None)
        _sample_left()
    except CcvizError as err:
        st.session_state["doc.error"] = str(err)  # the text box keeps what the user had


def document_input() -> tuple[str, bool]:
    """The document: pasted, picked from the samples or uploaded (which fill the text box); and chat/raw."""
    landing_sample = landing()
    left, middle, right = st.columns([3, 2, 2], vertical_alignment="bottom")
    labels = {s.title: s.label(chosen_model()) for s in samples()}
    left.selectbox(
        "Sample document",
        list(labels),
        format_func=labels.__getitem__,
        index=None if landing_sample is None else list(labels).index(landing_sample.title),
        key="doc.sample",
        placeholder="Load a sample document…",
        on_change=_load_sample,
        persist_state=SESSION,
    )
    with middle:
        needle_generator()
    right.file_uploader("…or upload a .txt / .md file", type=["txt", "md"], key="up.doc", on_change=_load_upload)
    error = st.session_state.pop("doc.error", None)
    if error:
        st.error(error)
    needle_loaded()
    document = landed("doc.text", linked_text(DOC_PARAM, DEFAULT_TEXT))
    link_problems()  # the sidebar's settings and the document are linked by now
    text = st.text_area(
        "Document or prompt",
        value=document,
        key="doc.text",
        height=220,
        persist_state=SESSION,
        on_change=_sample_left,
        help="Paste any text. In chat mode it becomes one user turn of the model's chat template. The page's "
        "link (the address bar) names it, so a reload or a shared link brings it back.",
    )
    link_text(DOC_PARAM, text, DEFAULT_TEXT)
    chat = st.toggle(
        "Chat template",
        value=landed("doc.chat", linked("doc.chat", True, as_bool)),
        key="doc.chat",
        persist_state=SESSION,
        help="On: the text is one user turn (the template's system prompt is frozen by default). Off: raw text.",
    )
    return text, chat


def _in_bounds(value: float, low: float | None, high: float | None) -> float:
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(value)
    return value


def _option_input(spec, key: str) -> Any:
    label = spec.name.replace("_", " ")
    if spec.kind == "bool":
        return linked_checkbox(label, key, spec.default)
    if spec.kind in ("int", "float"):  # Streamlit wants the value and its bounds of one type
        cast = int if spec.kind == "int" else float
        low, high = (None if bound is None else cast(bound) for bound in (spec.minimum, spec.maximum))
        default = None if spec.default is None else cast(spec.default)
        value = _number(
            label, key, default, low, high, cast, **({"step": 1} if spec.kind == "int" else {"format": "%.4g"})
        )
        return None if value is None else cast(value)
    if spec.kind == "choice":
        return st.selectbox(
            label, spec.choices, index=linked_index(key, spec.choices, spec.default), key=key, persist_state=SESSION
        )
    default = "" if spec.default is None else str(spec.default)
    return st.text_input(label, value=linked(key, default), key=key, persist_state=SESSION)


def policy_input(
    key: str, default: str | None = None, label: str = "Policy"
) -> tuple[str, tuple[tuple[str, Any], ...]]:
    """A policy from the registry and its options (widgets built from the dataclass fields).

    Returns the name and the options that differ from their defaults, so equal configurations share
    one cache entry and labels stay short.
    """
    names = policy_names()
    index = names.index(default) if default in names else 0
    policy = st.selectbox(
        label,
        names,
        index=linked_index(key, names, names[index]),
        key=key,
        persist_state=SESSION,
        help="Every policy in ccviz's registry, then the installed kvpress scorers (kvpress:NAME).",
    )
    st.caption(policy_class(policy).summary)
    options = []
    for spec in option_specs(policy):
        value = _option_input(spec, f"{key}.{policy}.{spec.name}")
        if value != spec.default:
            options.append((spec.name, value))
    return policy, tuple(options)


def _unit_defaults(policy: str, options: tuple[tuple[str, Any], ...]) -> tuple[str, int]:
    """The unit and left context ``policy`` keeps with ``options`` when the run does not say; the class's own
    when the options are refused (the run then shows why)."""
    try:
        return make_policy(policy, **dict(options)).unit_defaults()
    except CcvizError:
        return policy_class(policy).default_granularity, policy_class(policy).default_left_context


def _setting_control(label: str, key: str, field: str, default: str, extra: tuple[str, ...] = (), **kw: Any) -> str:
    """A segmented control over one of RunConfig's choices (after ``extra`` ones of the app's), under the
    widget key ``<key>.<field>``, linked to the URL and kept across pages."""
    choices = (*extra, *rule_of(RunConfig, field).choices)
    default = linked(f"{key}.{field}", default, choices=choices)
    widget_key = f"{key}.{field}"
    return st.segmented_control(
        label, choices, default=default, key=widget_key, required=True, persist_state=SESSION, **kw
    )


def unit_input(key: str, policy: str, options: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:
    """The unit of the keep decision (RunConfig's ``granularity`` and ``pool``): any policy by token, word,
    clause or sentence; for word units also ``left_context`` and ``sentence_share``. "default" names the
    unit the policy keeps with ``options`` (the counter-causal ``paper`` box turns it to single tokens)."""
    own_unit, own_context = _unit_defaults(policy, options)
    choice = _setting_control(
        "Keep whole",
        key,
        "granularity",
        "default",
        extra=("default",),
        format_func=lambda g: f"default ({own_unit})" if g == "default" else g,
        help="The unit a refresh keeps or evicts: single tokens (the paper's), whole words (so KX-4817 or 4817 "
        "survives whole or not at all), clauses (split at , : ; too) or whole sentences; default: the policy's "
        "own. A unit scores the max or mean of its tokens' scores.",
    )
    granularity = None if choice == "default" else choice
    pool = _setting_control(
        "Unit score",
        key,
        "pool",
        "max",
        disabled=(granularity or own_unit) == "token",
        help="How a word's or sentence's score is made from its tokens' scores.",
    )
    words = (granularity or own_unit) == "word"
    context_rule, share_rule = rule_of(RunConfig, "left_context"), rule_of(RunConfig, "sentence_share")
    left, right = st.columns(2)
    left_context = left.number_input(
        "Left context (words)",
        min_value=int(context_rule.minimum or 0),
        max_value=int(context_rule.maximum or 64),
        value=int(linked(f"{key}.left_context", own_context, decode=int)),
        step=1,
        key=f"{key}.left_context",
        disabled=not words,
        help="Word units: each word takes along up to this many words before it in its clause, so a surprising "
        "value is kept with the words that say what it is. 0: words alone. Opens at the policy's own.",
    )
    sentence_share = right.slider(
        "Whole sentences first",
        min_value=float(share_rule.minimum or 0.0),
        max_value=float(share_rule.maximum or 1.0),
        value=float(linked(f"{key}.sentence_share", 0.0, decode=float)),
        step=0.05,
        key=f"{key}.sentence_share",
        disabled=not words,
        format="%.2f",
        help="Word units: this share of the scored places goes to the best whole sentences first, the rest word "
        "by word (a two-level budget). 0: words only.",
    )
    shape = dict(left_context=int(left_context), sentence_share=float(sentence_share)) if words else {}
    return dict(granularity=granularity, pool=pool, **shape)


ALLOCATION_HELP = {
    "uniform": "every layer and head keeps the same J entries (the paper's)",
    "pyramid": "PyramidKV: deeper layers keep fewer entries, the same total",
    "adaptive": "Ada-KV: each layer's J x KV-heads places go to its best (head, entry) pairs",
}


def allocation_input(key: str, policy: str, granularity: str | None = None) -> dict[str, Any]:
    """How the budget is split over layers and KV heads (RunConfig's ``allocation``, ``pyramid_beta``);
    a choice the policy cannot serve is named at once, in the engine's words."""
    allocation = _setting_control(
        "Allocation",
        key,
        "allocation",
        "uniform",
        help="How J is split over layers and KV heads: "
        + "; ".join(f"{a}: {text}" for a, text in ALLOCATION_HELP.items())
        + ". Under pyramid and adaptive each layer's cache really holds its own entries (docs/method.md#allocation).",
    )
    beta = rule_of(RunConfig, "pyramid_beta")
    pyramid_beta = RunConfig.__dataclass_fields__["pyramid_beta"].default  # the engine's default, declared once
    if allocation == "pyramid":
        pyramid_beta = float(
            _number(
                "Pyramid beta",
                f"{key}.beta",
                pyramid_beta,
                float(beta.minimum),
                cast=float,
                step=1.0,
                format="%.4g",
                help="The last layer keeps (J - R) / beta scored entries and the first the rest of "
                "twice the mean; 1 = uniform (PyramidKV's beta, 20 there).",
            )
        )
    try:
        RunConfig(
            policy=policy, cache_size=1, allocation=allocation, pyramid_beta=pyramid_beta, granularity=granularity
        ).resolved()
    except CcvizError as err:
        st.error(str(err))
    return dict(allocation=allocation, pyramid_beta=pyramid_beta)


def _token_ceiling() -> int:
    """The widgets' upper bound: the app's token limit (a badly set variable is reported when Run is clicked)."""
    try:
        return max_tokens()
    except CcvizError:
        return DEFAULT_MAX_TOKENS


def _least(name: str) -> int:
    """The smallest value RunConfig accepts for ``name``: the engine's rule bounds the widget."""
    return int(rule_of(RunConfig, name).minimum)


def _number(
    label: str, key: str, default: float | None, low: float | None, high: float | None = None, cast=int, **kw
) -> Any:
    """A linked number input: its default from the link when the link's value is in bounds."""

    def decode(raw: str) -> float:
        return _in_bounds(cast(raw), low, high)

    return st.number_input(
        label,
        value=landed(key, linked(key, default, optional(decode) if default is None else decode)),
        min_value=low,
        max_value=high,
        key=key,
        persist_state=SESSION,
        **kw,
    )


def budget_input(prefix: str, default_cache: int = 128) -> dict[str, Any]:
    """J, h, frozen and recent: the cache budget of a run."""
    top = _token_ceiling()
    help_text = f"Entries that survive each refresh, not counting the frozen prefix (at most {top}, {MAX_TOKENS_ENV})."
    cache_size = _number(
        "Cache size J", f"{prefix}.J", min(default_cache, top), _least("cache_size"), top, step=8, help=help_text
    )
    chunk, frozen, recent = (
        _number(label, f"{prefix}.{key}", None, _least(field), top, step=step, placeholder=empty, help=text)
        for field, (label, key, step, empty, text) in _OPTIONAL_BUDGET.items()
    )
    return dict(
        cache_size=int(cache_size),
        chunk_size=None if chunk is None else int(chunk),
        frozen="auto" if frozen is None else int(frozen),
        recent=None if recent is None else int(recent),
    )


_OPTIONAL_BUDGET = {  # run setting: (label, widget key, step, shown when empty, help)
    "chunk_size": (
        "Chunk size h",
        "h",
        4,
        "J/4",
        "A refresh happens after every h processed tokens (empty: J/4, as in the paper); at most J.",
    ),
    "frozen": (
        "Frozen prefix",
        "frozen",
        1,
        "auto",
        "Leading entries never evicted (empty: the chat template's system prompt; 0 in raw mode).",
    ),
    "recent": (
        "Recent R",
        "recent",
        1,
        "policy default",
        "Trailing entries always kept (empty: the policy's default); at most J.",
    ),
}


def decoding_input(prefix: str, default_new: int = 64) -> dict[str, Any]:
    """Max new tokens and greedy or seeded sampling."""
    top = _token_ceiling()
    help_text = f"Prompt plus new tokens may not exceed {top} per run ({MAX_TOKENS_ENV})."
    max_new = _number(
        "Max new tokens",
        f"{prefix}.max_new",
        min(default_new, top),
        _least("max_new_tokens"),
        top,
        step=16,
        help=help_text,
    )
    sample = st.toggle(
        "Sampling (off: greedy)",
        value=linked(f"{prefix}.sample", False, as_bool),
        key=f"{prefix}.sample",
        persist_state=SESSION,
    )
    settings: dict[str, Any] = dict(max_new_tokens=int(max_new), do_sample=bool(sample))
    if sample:
        settings["temperature"] = float(
            _number("Temperature", f"{prefix}.temperature", 0.8, 0.01, cast=float, step=0.1)
        )
        settings["top_p"] = float(_number("Top-p", f"{prefix}.top_p", 0.95, 0.01, 1.0, cast=float, step=0.05))
        settings["seed"] = int(_number("Seed", f"{prefix}.seed", 0, _least("seed"), step=1))
    return settings
