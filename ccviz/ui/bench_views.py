"""How one benchmark section is laid out: provenance, progress, figures, tables, the paper note and
the command that reproduces it. Everything shown is computed in :mod:`ccviz_bench.browse`."""

from __future__ import annotations

import streamlit as st

from ccviz_bench.browse import Section
from ccviz_bench.needle_figures import needle_difference_figure, needle_map_figure
from ccviz_bench.specs import FULL

from ..engine.budget import budget_text
from .inputs import SESSION
from .views import chart

# Task -> how its setting differs from the paper's
# (docs/benchmarks.md#how-the-miniatures-relate-to-the-papers-benchmarks).
PAPER_NOTES = {
    "retention": (
        "The paper scores answer accuracy on real long documents (LongHealth clinical records, Qasper papers, "
        "LoCoMo 300-turn conversations) with 3B-14B models in fp16 on a GPU, one greedy rollout and no intervals. "
        "Here the documents are synthetic, each stating one fact once and asking about it at the end, and the "
        "model is the one named above (by default the 135M-parameter SmolLM2, on a CPU); J is a share of each "
        "document (h = J/4, as in the paper). Survival is read from the cache itself; accuracy is a normalised "
        "string match; both carry Wilson 95% intervals."
    ),
    "perplexity": (
        "Not in the paper, which reports task accuracy only. This is the StreamingLLM-style measure: long prose is "
        "teacher-forced through the same refresh cycle (a refresh after every h = J/4 tokens), so every token is "
        "predicted from what the cache held at that moment."
    ),
    "decode": (
        "The paper's decode-heavy tests are MATH500 (J = 512, h = 256) and AIME with Qwen3-8B thinking "
        "(J = 4096, up to 16,384 generated tokens), scored by answer accuracy. A 135M-parameter model cannot solve "
        "those, so here each policy's greedy continuation of a long-writing prompt is compared with the full cache's: "
        "the first token where they differ, and the share of repeated 4-grams (a looping signal)."
    ),
    "efficiency": (
        "The paper's Table 1 gives milliseconds per refresh on an RTX 4090 with Qwen2.5-7B in fp16 (n = 512 and "
        "4096), seconds per MATH500 sample and peak GPU memory. Here one refresh decision (scores plus top-J) is timed "
        "as a ratio to one plain forward pass over the same n tokens in the same process, which survives a shared, "
        "noisy machine better than seconds; the end-to-end time and peak resident memory (CPU RSS, not GPU memory) "
        "come from one long prompt plus a decode under each policy. Work a policy does on every forward pass "
        "(H2O's attention bookkeeping) shows only in the end-to-end time."
    ),
    "ablation": (
        "Not in the paper, which ranks by the raw logit only (full and fast variants). The logprob and contrast "
        "scores, min_gap and window smoothing are this project's calibrations (docs/method.md#scores; smoothing is "
        "phrase-level scoring, which the paper leaves to future work), each measured on the retention and "
        "perplexity tasks at one budget."
    ),
    "allocation": (
        "Not in the paper, which keeps one token set for every layer and head (its Algorithm 3) and declines to "
        "compare with PyramidKV and Ada-KV. Here the same retention and perplexity tasks run each scoring rule "
        "under per-layer budgets (pyramid, PyramidKV's beta = 20) and per-head budgets within each layer (adaptive, "
        "Ada-KV, without its safeguard floor), with each layer's cache really holding only its own entries. "
        "Survival counts a fact held by any layer; the share of layers (and heads) holding it and the answers say "
        "more. Per-head budgets are masks within a layer's cache, so adaptive's memory counts the layer's union."
    ),
    "needle": (
        "Not in the paper, which reports no needle maps. This is the picture KVCache-Factory draws for every method: "
        "one needle (a 7-digit number, an identifier or a word, stated once for a named key) at each depth of a "
        "haystack of Python-documentation prose, at each context length, under each policy at J = 25% of the "
        "document (h = J/4). Survival is read from the cache when the question starts; the answer is greedy and "
        "string-matched. Each cell is one needle by default (its counts are in the cell), so read rows, columns and "
        "the Wilson intervals of the tables rather than single cells."
    ),
    "ruler": (
        "Not in the paper. RULER's synthetic tasks, regenerated here from its definitions: a needle among distractor "
        "needles for other keys (multikey), one key with four values (multivalue), and a five-variable assignment "
        "chain (variable tracking, where every link must survive). RULER scores long-context models without "
        "eviction; here the same tasks measure what each policy keeps, at three budgets."
    ),
}


def _budget(value: float) -> str:
    return budget_text(value, "{:.0%} of the document", "J = {:d}")


def needle_maps(section: Section) -> None:
    """A heatmap of one policy's map, and optionally its difference from the full cache or another policy."""
    summary = section.summaries["needle"]
    evicting = [p for p in dict.fromkeys(summary["policy"]) if p != FULL]
    if not evicting:
        return
    left, middle, right = st.columns([2, 1, 1])
    policy = left.selectbox(
        "Policy",
        evicting + [FULL],
        key="bench.needle.policy",
        persist_state=SESSION,  # kept while another tab is open (only the open tab is drawn)
        help="Whose map: every policy measured, and the full cache (the ceiling).",
    )
    budgets = sorted(summary.loc[summary["policy"] == policy, "budget"].unique())
    budget = (
        middle.selectbox("Budget", budgets, format_func=_budget, key="bench.needle.budget", persist_state=SESSION)
        if len(budgets) > 1
        else budgets[0]
    )
    measure = right.segmented_control(
        "Colour by",
        ["accuracy", "survival"],
        default="accuracy",  # answers are the measure; survival says why one was missed
        required=True,
        key="bench.needle.measure",
        persist_state=SESSION,  # kept while another tab is open (only the open tab is drawn)
        help="Accuracy: the greedy answer contains the value. Survival (the diagnosis): every needle token "
        "cached when the question is read.",
    )
    chart(needle_map_figure(summary, policy, budget, measure), key="bench.needle.map", stem=f"ccviz-needle-{policy}")
    others = ["nothing", "the full cache", *[p for p in evicting if p != policy]]
    against = st.selectbox(
        "Difference against",
        others,
        key="bench.needle.against",
        persist_state=SESSION,  # kept while another tab is open (only the open tab is drawn)
        help="Blue: this policy keeps (or answers) more than the other there; red: less.",
    )
    if against != "nothing" and policy != FULL:
        other = FULL if against == "the full cache" else against
        chart(
            needle_difference_figure(summary, policy, other, budget, measure),
            key="bench.needle.difference",
            stem=f"ccviz-needle-{policy}-minus-{other}",
        )


def _command(section: Section, lead: str) -> None:
    st.markdown(lead)
    st.code(section.command, language="bash")


def section_view(section: Section, folder: str) -> None:
    """One task's results, or a plain message saying which command produces them."""
    if section.error:
        st.error(section.error)
        _command(section, "This command measures them again (add `--fresh` to discard the task's rows and start over):")
        return
    if not section.meta and not section.measured:
        _command(section, f"No results in `{folder}` yet. This command produces them:")
        return
    for line in section.provenance:
        st.caption(line)
    if section.incomplete:
        st.warning(
            "Partial results (a run still going, or one that stopped): "
            + "; ".join(section.incomplete)
            + ". The command below measures the rest; it resumes where the rows end."
        )
    if not section.measured:
        _command(section, "Nothing to plot yet: no evicting policy has a result. This command produces them:")
        return
    if section.task == "needle":
        needle_maps(section)
    for i, fig in enumerate(section.figures):
        chart(fig, key=f"bench.{section.task}.{i}", stem=f"ccviz-bench-{section.task}-{i + 1}")
    if section.frontier is not None:  # retention: which policy to use at which cost (the efficiency task's)
        chart(section.frontier, key=f"bench.{section.task}.frontier", stem=f"ccviz-bench-{section.task}-frontier")
    for table in section.tables:
        st.markdown(table)
    with st.expander("All numbers of the summary"):
        for name, summary in section.summaries.items():
            st.dataframe(summary, hide_index=True, key=f"bench.{section.task}.{name}")
    if section.task in PAPER_NOTES:  # a new task needs no note to be shown
        st.markdown(f"**What differs from the paper.** {PAPER_NOTES[section.task]}")
    _command(section, "**Reproduce** (resumable: rows already measured are kept):")
