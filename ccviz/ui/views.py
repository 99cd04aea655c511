"""How a finished trace is shown. The same views serve live runs and uploaded traces.

All figures and HTML come from :mod:`ccviz.figures`; this module only lays them out and holds the
view controls (colouring, refresh slider, signal), which rerun the page without recomputing anything.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from cachetools import LRUCache

from ..figures import (
    comparison_heatmaps,
    cycle_context_html,
    highlight_html,
    overlap_heatmap,
    per_layer,
    phrase_survival,
    retention_heatmap,
    retention_image_html,
    run_summary,
    sentence_html,
    signals,
    split_sentences,
    survival_html,
    visible_text,
)
from ..figures.data import question_words
from ..figures.export import IMAGE_FORMATS, file_stem, image_options, report_html, slide_ready
from ..trace import Trace
from ..worker.jobs import Job
from .links import as_bool, linked

COLOUR_LABELS = {"original timestep": "timestep", "score": "score", "prompt / generated": "source"}
LAYERS_LABEL = "layers holding it"  # colouring of a per-layer run (allocation pyramid / adaptive)
ANY_LAYER = "any layer"
IMAGE_FORMAT_KEY = "charts.format"  # the sidebar's choice (app.py): what the toolbar's camera saves
LIVE_KEY = "charts.live"  # the sidebar's choice: draw a running job's heatmap as it grows
PHRASE_BADGES = {  # status -> (icon, colour) for st.badge
    "kept": (":material/check_circle:", "green"),
    "partly kept": (":material/contrast:", "orange"),
    "evicted": (":material/cancel:", "red"),
    "absent": (":material/help:", "gray"),
}


def chart(fig: go.Figure, key: str, stem: str) -> None:
    """A Plotly chart as it will look on a slide (white, dark text: Streamlit's theme is not applied), whose
    toolbar camera saves ``stem``.png or .svg, as the sidebar's "Chart downloads" says."""
    image_format = st.session_state.get(IMAGE_FORMAT_KEY, IMAGE_FORMATS[0])
    config = {"displaylogo": False, "scrollZoom": False, "toImageButtonOptions": image_options(stem, image_format)}
    st.plotly_chart(slide_ready(fig), key=key, config=config, theme=None)


def chart_settings() -> None:
    """App-wide chart settings (every page's sidebar): what the camera saves, and whether runs draw live."""
    st.toggle(
        "Draw runs live",
        value=linked(LIVE_KEY, True, as_bool),
        key=LIVE_KEY,
        persist_state="session",
        help="Draw the retention heatmap refresh by refresh while a run goes on (once a second). On a small "
        "machine the drawing takes some CPU from the run: docs/app.md#live-retention has the measured cost.",
    )
    st.segmented_control(
        "Chart downloads",
        IMAGE_FORMATS,
        default=linked(IMAGE_FORMAT_KEY, IMAGE_FORMATS[0], choices=IMAGE_FORMATS),
        key=IMAGE_FORMAT_KEY,
        required=True,
        persist_state="session",
        format_func=str.upper,
        help="What the camera in each chart's toolbar saves: PNG (twice the screen size) or SVG (vectors, for slides "
        "and papers). The run report has both buttons on every chart.",
    )


def live_view(key: str) -> Callable[[Job], None] | None:
    """The live heatmap for a page's running job, or None when "Draw runs live" is off."""
    if not st.session_state.get(LIVE_KEY, True):
        return None
    return lambda job: live_retention(job, key)


def live_retention(job: Job, key: str) -> None:
    """The running task's heatmap so far (every refresh completed), redrawn in place at each poll: as a
    picture of the same cells, since redrawing the Plotly figure every second cost the run itself
    (docs/app.md#live-retention)."""
    trace = job.live
    if trace is None or not trace.cycles:
        st.caption("The retention heatmap appears here with the first refresh.")
        return
    task = job.tasks[min(job.progress.task, len(job.tasks) - 1)]
    if len(job.tasks) > 1:
        st.markdown(f"**Live: run {job.progress.task + 1} of {len(job.tasks)} · {task.label}**")
    st.html(live_picture(trace))


_LIVE_PICTURES: LRUCache[int, tuple[Trace, str]] = LRUCache(maxsize=64)
_LIVE_LOCK = threading.Lock()


def live_picture(snapshot: Trace) -> str:
    """:func:`retention_image_html` of a live snapshot, built once per snapshot for every session.

    A snapshot is replaced, never changed, at each refresh (:class:`ccviz.worker.flights.Flight`), and every
    session following a shared run holds the same one: a poll with no new refresh, or a second session's
    poll, costs a lookup instead of a picture (~12 ms of server CPU for a 1,000-token run's 34 rows).
    Keyed by identity (a trace is not hashable); the entry holds the snapshot, so its id is not reused."""
    with _LIVE_LOCK:
        hit = _LIVE_PICTURES.get(id(snapshot))
    if hit is not None and hit[0] is snapshot:
        return hit[1]
    picture = retention_image_html(snapshot)
    with _LIVE_LOCK:
        _LIVE_PICTURES[id(snapshot)] = (snapshot, picture)
    return picture


def download_trace(trace: Trace, key: str, label: str = "Download trace JSON") -> None:
    """A download button; the JSON is written only when clicked."""
    st.download_button(
        label,
        data=trace.to_json,
        file_name=f"{file_stem(trace)}.json",
        mime="application/json",
        key=key,
        on_click="ignore",
        icon=":material/download:",
    )


def status_notes(trace: Trace) -> None:
    if trace.status == "cancelled":
        st.warning(f"Partial trace: the run was cancelled after {len(trace.cycles)} refreshes.")
    elif trace.status == "error":
        st.error(f"The run failed part-way: {trace.error}. The refreshes completed before it are shown.")


def summary_metrics(trace: Trace, verdict: Callable[[], None] | None = None) -> None:
    """The run's heading in plain words (``RunConfig.title``), ``verdict`` (its one line, drawn under the
    heading), the exact settings behind an expander, and the sizes and times."""
    s, run = run_summary(trace), trace.run_config
    st.markdown(f"#### {run.title()}")
    mode = "chat" if run.chat else "raw"
    question = question_words(trace)
    asked = f" · {question}" if question else ""
    st.caption(f"{run.describe_budget()} · {mode}{asked} · {trace.config.get('model')} · {trace.status}")
    if verdict is not None:
        verdict()
    with st.expander("Exact settings"):
        st.markdown(f"`{s['policy']}` · {run.describe_budget()}")
        st.json(trace.config, expanded=False)
    cols = st.columns(5)
    cols[0].metric("Prompt tokens", s["prompt tokens"])
    cols[1].metric("Generated", s["generated"], help=f"stopped by: {trace.stop_reason or 'n/a'}")
    cols[2].metric("Refreshes", s["refreshes"], help=f"{s['per refresh (ms)']} ms per refresh on average")
    cols[3].metric(
        "Final / peak cache",
        f"{s['final cache']} / {s['peak cache']}",
        help=(f"peak K/V memory {s['peak K/V (MiB)']} MiB" if s["peak K/V (MiB)"] else None)
        if run.allocation == "uniform"
        else f"entries any layer holds; peak K/V memory {s['peak K/V (MiB)']} MiB, each layer at its own length",
    )
    cols[4].metric(
        "Total time", f"{s['total (s)']:.2f} s", help=f"refreshes took {s['refresh total (s)']:.3f} s in all"
    )


def retention_view(
    trace: Trace,
    key: str,
    needle: str | None = None,
    missed: Sequence[int] = (),
    verdict: Callable[[], None] | None = None,
) -> None:
    """Figure 4 for one run: the heatmap, a refresh slider with the kept/evicted tokens, the output.

    ``needle``: a sentence of the prompt to follow (the needle generator's), marked in the token view;
    ``missed``: timesteps the full cache's answer read that this run evicted, dashed there; ``verdict``:
    draws the run's verdict line under its heading, before the heatmap."""
    status_notes(trace)
    summary_metrics(trace, verdict)
    marked = needle_badge(trace, needle) if needle else []
    recorded = signals(trace)
    layers, heads = per_layer(trace)
    labels = COLOUR_LABELS | ({LAYERS_LABEL: "layers"} if layers else {})
    left, right = st.columns([3, 2])
    colouring = left.radio(
        "Colour cells by",
        list(labels),
        key=f"{key}.colour",
        horizontal=True,
        help="Original timestep uses a diverging scale: blue = early in the text, red = late."
        + (" Layers holding it: how many of the model's layers still cache the token." if layers else ""),
    )
    colour = labels.get(colouring, "timestep")
    layer, head = layer_input(trace, key)
    signal = None
    if recorded:
        signal = right.selectbox("Score signal (hover and score colouring)", recorded, key=f"{key}.signal")
    if colour == "score" and not recorded:
        st.info("This policy records no scores: colour by original timestep or by prompt / generated.")
        colour = "timestep"
    if not trace.cycles:
        st.info("No refresh happened: the run processed fewer than h tokens, so nothing was ever scored or evicted.")
    else:
        chart(
            retention_heatmap(trace, colour, signal, layer=layer, head=head),
            key=f"{key}.heatmap",
            stem=file_stem(
                trace,
                "retention" if layer is None else f"retention-layer{layer}" + ("" if head is None else f"-head{head}"),
            ),
        )
        refresh_context(trace, key, marked, missed)
    st.subheader("Generated text")
    output_block(trace.output_text)
    left, right = st.columns(2)
    with left:
        download_trace(trace, key=f"{key}.download")
    with right:
        download_report(trace, colour, signal, key=f"{key}.report")


def layer_input(trace: Trace, key: str) -> tuple[int | None, int | None]:
    """Of a per-layer run, the layer (and KV head) whose cache the heatmap shows; (None, None) otherwise."""
    layers, heads = per_layer(trace)
    if layers is None:
        return None, None
    left, right = st.columns([3, 2])
    choices = [ANY_LAYER, *range(layers)]
    layer = left.select_slider(
        "Layer",
        choices,
        key=f"{key}.layer",
        format_func=lambda c: c if c == ANY_LAYER else f"layer {c}",
        help=f"This run's allocation ({trace.run_config.allocation}) gives each layer its own cache: one layer's, "
        "or what any layer holds (the union, the trace's kept set).",
    )
    if layer == ANY_LAYER:
        return None, None
    head = None
    if heads:
        picked = right.selectbox(
            "KV head",
            ["all of the layer's", *range(heads)],
            key=f"{key}.head",
            help="Under adaptive each KV head keeps its own entries within the layer's cache.",
        )
        head = None if isinstance(picked, str) else picked
    return layer, head


def download_report(trace: Trace, colour: str = "timestep", signal: str | None = None, key: str = "report") -> None:
    """ "Download all figures": one self-contained HTML page of the run, written only when clicked."""

    def write() -> str:
        figures = {"Retention heatmap": retention_heatmap(trace, colour, signal)} if trace.cycles else {}
        views = {"What survives": survival_html(trace)}
        if trace.cycles:
            views[f"Refresh {len(trace.cycles) - 1} in context"] = cycle_context_html(trace, len(trace.cycles) - 1)
        return report_html(trace, figures, views, title=f"ccviz run: {trace.run_config.title()}")

    st.download_button(
        "Download all figures (HTML report)",
        data=write,
        file_name=f"{file_stem(trace, 'report')}.html",
        mime="text/html",
        key=key,
        on_click="ignore",
        icon=":material/summarize:",
        help="One self-contained HTML file (opens offline in any browser): the settings, the retention heatmap with "
        "PNG and SVG buttons, what survives and the last refresh in context, and the generated text.",
    )


def output_block(text: str) -> None:
    """Generated text, verbatim; long outputs scroll instead of stretching the page."""
    long = text.count("\n") > 15 or len(text) > 1500
    st.code(text or "(nothing was generated)", language=None, wrap_lines=True, height=360 if long else "content")


def needle_badge(trace: Trace, needle: str) -> list[int]:
    """Whether the needle's tokens are still cached at the end; its timesteps ([] when the prompt lacks it)."""
    result = phrase_survival(trace, needle)
    if result.status == "absent":
        return []
    icon, colour = PHRASE_BADGES[result.status]
    left, right = st.columns([1, 4], vertical_alignment="center")
    left.badge(f"needle {result.status}", icon=icon, color=colour)
    right.caption(
        f"“{needle}”: {len(result.kept)} of its {len(result.tokens)} tokens are in the cache at the end; "
        "they are outlined in the token view below."
    )
    return result.tokens


def refresh_slider(key: str) -> str:
    """The session-state key of a page's refresh slider (set it, then rerun, to open another refresh)."""
    return f"{key}.cycle"


def refresh_context(trace: Trace, key: str, marked: Sequence[int] = (), missed: Sequence[int] = ()) -> None:
    """A refresh slider and, for that refresh, every token so far marked kept or evicted (``marked`` outlined,
    ``missed`` dashed)."""
    last = len(trace.cycles) - 1
    slider = refresh_slider(key)
    st.session_state[slider] = min(st.session_state.get(slider, last), last)  # a new run may have fewer refreshes
    index = st.slider("Refresh cycle", 0, last, key=slider) if last > 0 else 0
    cycle = trace.cycles[index]
    st.caption(
        f"Refresh {index}: {cycle.phase}, after {cycle.step} tokens; {len(cycle.candidates)} candidates scored in "
        f"{1000 * cycle.seconds:.1f} ms, {len(cycle.kept)} entries kept."
    )
    st.html(cycle_context_html(trace, index, marked, missed))


def signal_views(trace: Trace, values: Mapping[str, Sequence[float]], key: str) -> None:
    """Highlight the text by a signal, show what survives, or the same per sentence."""
    mode = st.segmented_control(
        "View",
        ["Highlight", "What survives", "Sentences"],
        default="Highlight",
        key=f"{key}.mode",
        required=True,
    )
    names = list(values)
    signal = None
    if mode != "What survives" and names:
        signal = st.selectbox("Signal", names, key=f"{key}.signal")
    if mode == "Highlight":
        if signal is None:
            st.info("No signal is available for this trace: see what survives instead.")
        else:
            st.html(highlight_html(trace, values[signal], signal))
    elif mode == "What survives":
        st.html(survival_html(trace))
    else:
        chosen = values[signal] if signal is not None else None
        st.html(sentence_html(trace, chosen, signal))
        table = pd.DataFrame(
            [
                {
                    "start": s.start,
                    "sentence": visible_text(s.text.strip()[:160]),
                    "tokens": s.tokens,
                    "kept %": round(100 * s.kept_fraction, 1),
                    f"mean {signal or 'signal'}": s.mean_value,
                }
                for s in split_sentences(trace, chosen)
            ]
        )
        st.dataframe(table, hide_index=True, height=300)


def phrase_badges(traces: Sequence[Trace], labels: Sequence[str], phrase: str) -> None:
    """At a glance: did the phrase survive under each policy?"""
    cols = st.columns(len(traces))
    for col, trace, label in zip(cols, traces, labels):
        result = phrase_survival(trace, phrase)
        if result.status == "absent":
            detail = "not in the prompt"
        else:
            detail = f"{len(result.kept)} of {len(result.tokens)} tokens in the cache at the end"
        icon, colour = PHRASE_BADGES[result.status]
        col.markdown(f"**{label}**")
        col.badge(result.status, icon=icon, color=colour)
        col.caption(detail)


def column_names(labels: Sequence[str]) -> list[str]:
    """Each label's first part, naming its column inside a figure ("B" of "B · Counter-causal surprise (fast)",
    a file's name of "run.json · Sliding window"): whole titles run long, and the page spells them out above."""
    return [label.split(" · ")[0] for label in labels]


def compare_view(traces: Sequence[Trace], labels: Sequence[str], phrase: str, key: str) -> None:
    """Several runs of one input: phrase survival, heatmaps, outputs, overlaps and timings."""
    for trace, label in zip(traces, labels):
        if trace.status != "complete":
            st.warning(f"{label}: {trace.status} run, partial trace.")
    if phrase.strip():
        st.subheader(f"Did “{phrase.strip()}” survive?")
        phrase_badges(traces, labels, phrase)
    st.subheader("Retention, on one colour scale")
    colouring = st.radio(
        "Colour cells by", ["original timestep", "prompt / generated"], key=f"{key}.colour", horizontal=True
    )
    depth = max((per_layer(trace)[0] or 0 for trace in traces), default=0)
    layer = None
    if depth:
        picked = st.select_slider(
            "Layer of the per-layer runs",
            [ANY_LAYER, *range(depth)],
            key=f"{key}.layer",
            format_func=lambda c: c if c == ANY_LAYER else f"layer {c}",
            help="Runs under pyramid or adaptive allocation hold different entries per layer: "
            "show one layer's cache (a uniform run's one set is every layer's).",
        )
        layer = None if picked == ANY_LAYER else picked
    if any(trace.cycles for trace in traces):
        fig = comparison_heatmaps(traces, column_names(labels), COLOUR_LABELS[colouring], layer=layer)
        chart(fig, key=f"{key}.heatmaps", stem=file_stem(traces[0], "compare"))
    else:
        st.info("No refresh happened in these runs: the input is shorter than h.")
    st.subheader("Outputs")
    for col, trace, label in zip(st.columns(len(traces)), traces, labels):
        col.markdown(f"**{label}**")
        with col:
            output_block(trace.output_text)
    left, right = st.columns([3, 2], vertical_alignment="center")
    with left:
        chart(overlap_heatmap(traces, column_names(labels)), key=f"{key}.overlap", stem=file_stem(traces[0], "overlap"))
    right.caption(
        "Jaccard overlap |A ∩ B| / |A ∪ B| of the cache contents after the last refresh (frozen prefix included): "
        "1 = the two policies kept exactly the same tokens."
    )
    st.markdown("**Times and sizes**")
    rows = [{"run": label, **run_summary(trace)} for trace, label in zip(traces, labels)]
    st.dataframe(pd.DataFrame(rows), hide_index=True)

    def write() -> str:
        columns = column_names(labels)
        figures = (
            {"Retention, on one colour scale": comparison_heatmaps(traces, columns, COLOUR_LABELS[colouring])}
            if any(t.cycles for t in traces)
            else {}
        )
        figures["Kept-set overlap"] = overlap_heatmap(traces, columns)
        views = {f"What survives: {label}": survival_html(trace) for trace, label in zip(traces, labels)}
        return report_html(dict(zip(labels, traces)), figures, views, title=f"ccviz comparison: {', '.join(labels)}")

    st.download_button(
        "Download all figures (HTML report)",
        data=write,
        file_name=f"{file_stem(traces[0], 'compare-report')}.html",
        mime="text/html",
        key=f"{key}.report",
        on_click="ignore",
        icon=":material/summarize:",
        help="One self-contained HTML file: every run's settings, the heatmaps side by side and the overlap matrix "
        "(each with PNG and SVG buttons), what survives under each run, and the outputs.",
    )
