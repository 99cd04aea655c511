"""Figure and HTML builders, checked against hand-made traces whose answers are known."""

import html
import math
from html.parser import HTMLParser

import numpy as np
import pytest

from ccviz import CcvizError, generate
from ccviz.figures import (
    comparison_heatmaps,
    cycle_context_html,
    eviction_cycles,
    highlight_html,
    jaccard_matrix,
    latest_scores,
    overlap_heatmap,
    per_token,
    phrase_survival,
    recorded_values,
    retention_grid,
    retention_heatmap,
    retention_image_html,
    run_summary,
    sentence_html,
    split_sentences,
    survival_html,
)
from ccviz.figures.budget import cache_growth, cache_sizes
from ccviz.figures.tokens import answer_html
from ccviz.trace import Cycle, TokenRecord, Trace

TEXTS = ["<sys>", "The", " key", " is", " <b>42</b>", ".", " Keep", " it", " & go", ".", " OK", "!"]


def _trace() -> Trace:
    """12 tokens (10 prompt, 2 generated), 1 frozen, three refreshes with known survivors."""
    tokens = [
        TokenRecord(t=i, id=100 + i, text=text, source="prompt" if i < 10 else "generated")
        for i, text in enumerate(TEXTS)
    ]
    cycles = [
        Cycle(
            index=0,
            step=4,
            phase="prefill",
            candidates=[1, 2, 3],
            kept=[0, 1, 2, 3],
            scores={"surprise": [0.5, 2.0, 1.0]},
            seconds=0.01,
        ),
        Cycle(
            index=1,
            step=8,
            phase="prefill",
            candidates=[1, 2, 3, 4, 5, 6, 7],
            kept=[0, 2, 4, 7],
            scores={"surprise": [0.1, 3.0, 0.2, 5.0, 0.0, 0.3, math.inf]},
            seconds=0.02,
        ),
        Cycle(
            index=2,
            step=11,
            phase="decode",
            candidates=[2, 4, 7, 8, 9, 10],
            kept=[0, 4, 9, 10],
            scores={"surprise": [1.0, 6.0, -1.0, 0.5, 2.0, math.inf]},
            seconds=0.03,
        ),
    ]
    return Trace(
        config={"policy": "counter_causal_fast", "cache_size": 4, "chunk_size": 4, "frozen": 1, "recent": 0},
        tokens=tokens,
        cycles=cycles,
        output_text=" OK!",
        timings={"prefill_seconds": 1.0, "decode_seconds": 0.5, "refresh_seconds": 0.06, "total_seconds": 1.6},
        peak_cache_length=8,
        stop_reason="eos",
    )


class _Spans(HTMLParser):
    """Collects (text, style, title) of the token spans inside the view's box (after the legend)."""

    def __init__(self):
        super().__init__()
        self.depth, self.box, self.spans, self.current = 0, False, [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div":
            self.box = "overflow-y" in (attrs.get("style") or "")
        elif tag == "span" and self.box:
            self.current = [attrs.get("style") or "", attrs.get("title") or "", ""]

    def handle_data(self, data):
        if self.current is not None:
            self.current[2] += data

    def handle_endtag(self, tag):
        if tag == "span" and self.current is not None:
            style, title, text = self.current
            self.spans.append((text, style, title))
            self.current = None


def _spans(html: str) -> list[tuple[str, str, str]]:
    parser = _Spans()
    parser.feed(html)
    return parser.spans


# ----- retention heatmap ----------------------------------------------------------------------
def test_heatmap_cells_are_the_kept_timesteps_of_each_refresh():
    trace = _trace()
    grid = retention_grid(trace)
    assert grid.rows == [0, 1, 2]
    assert grid.timesteps.tolist() == [[0, 1, 2, 3], [0, 2, 4, 7], [0, 4, 9, 10]]
    assert grid.z.tolist() == grid.timesteps.astype(float).tolist()
    assert grid.customdata.shape == (3, 4, 2) and grid.customdata.dtype == np.float32
    assert grid.customdata[:, :, 0].tolist() == grid.timesteps.astype(float).tolist()
    fig = retention_heatmap(trace)
    heat = fig.data[0]
    assert np.asarray(heat.customdata).ndim == 3  # Plotly 6+: 2-D customdata prints the literal placeholder
    assert "%{customdata[0]}" in heat.hovertemplate and "%{text}" in heat.hovertemplate
    assert np.array_equal(np.asarray(heat.z), grid.z)
    assert fig.layout.yaxis.autorange == "reversed"  # the first refresh at the top


def test_heatmap_pads_short_rows_and_hover_text_is_escaped():
    trace = _trace()
    trace.cycles[0].kept = [0, 1]
    trace.cycles[0].candidates = [1]
    trace.cycles[0].scores = {"surprise": [0.5]}
    grid = retention_grid(trace)
    assert grid.timesteps[0].tolist() == [0, 1, -1, -1]
    assert np.isnan(grid.z[0, 2:]).all()
    assert grid.text[1][2] == "“ &lt;b&gt;42&lt;/b&gt;”"


def test_score_colouring_reads_each_refreshs_score_of_each_kept_token():
    trace = _trace()
    grid = retention_grid(trace, colour="score")
    assert math.isnan(grid.customdata[1, 0, 1])  # frozen: never scored
    assert grid.customdata[1, 1:, 1].tolist() == [3.0, 5.0, math.inf]
    assert grid.customdata[2, 1:, 1].tolist() == [6.0, 2.0, math.inf]
    assert np.isnan(grid.z[1, 0])
    assert grid.z[1, 3] == np.nanmax(grid.z) == 6.0  # +inf shows at the top of the scale, not as a gap


def test_source_colouring_separates_frozen_prompt_and_generated():
    grid = retention_grid(_trace(), colour="source")
    assert grid.z[2].tolist() == [0, 1, 1, 2]


def _question_trace(protect: bool = True) -> Trace:
    """The hand-made run with its last two prompt tokens (t = 8, 9) a question asked apart, kept or not."""
    trace = _trace()
    trace.config |= {"question_start": 8, "protect_question": protect, "prompt_tokens": 10}
    return trace


def test_a_kept_question_has_its_own_source_band_label_and_hover():
    trace = _question_trace()
    grid = retention_grid(trace, colour="source")
    assert grid.kept_question and grid.z[2].tolist() == [0, 1, 3, 2]  # t = 0, 4, 9, 10: frozen, prompt, question
    assert grid.text[2][2] == "“.”  question (kept)" and "question" not in grid.text[2][1]
    axis = retention_heatmap(trace, colour="source").layout.coloraxis
    assert list(axis.colorbar.ticktext) == ["frozen", "prompt", "generated", "question (kept)"]
    assert (axis.cmin, axis.cmax) == (-0.5, 3.5) and axis.colorscale[-1][1] == "#54a24b"
    assert "question kept" in retention_heatmap(trace).layout.title.text  # named in every colouring
    assert "green = question (kept)" in retention_image_html(trace, colour="source")
    # Compared beside a run without a question, both share the four bands.
    fig = comparison_heatmaps([_trace(), trace], ["A", "B"], colour="source")
    assert fig.layout.coloraxis.colorbar.ticktext[-1] == "question (kept)"


def test_an_evictable_question_is_drawn_as_the_document():
    trace = _question_trace(protect=False)
    grid = retention_grid(trace, colour="source")
    assert not grid.kept_question and grid.z[2].tolist() == [0, 1, 1, 2]
    assert not any("question" in cell for row in grid.text for cell in row)
    assert list(retention_heatmap(trace, colour="source").layout.coloraxis.colorbar.ticktext) == list(
        ("frozen", "prompt", "generated")
    )
    assert "question evictable" in retention_heatmap(trace).layout.title.text


def test_a_real_runs_kept_question_is_drawn_apart(tiny):
    question = "Who kept the light?"
    document = "The lighthouse on Gull Rock was built in 1852. Its keeper, Ada Brenn, logged the weather."
    trace = generate(
        tiny,
        document,
        question=question,
        policy="sliding",
        cache_size=8,
        chunk_size=4,
        max_new_tokens=12,
        stop_at_eos=False,
    )  # the question is read in the last prefill pass: the decode's refreshes show it kept
    grid = retention_grid(trace, colour="source")
    shown = grid.timesteps[grid.timesteps >= 0]
    in_question = np.isin(shown, list(trace.kept_question))
    assert in_question.any() and (grid.z[grid.timesteps >= 0][in_question] == 3).all()
    assert "".join(trace.tokens[t].text for t in trace.kept_question).startswith(question)


def test_long_runs_show_every_kth_refresh_but_keep_the_last():
    trace = _trace()
    grid = retention_grid(trace, max_cells=8)
    assert grid.stride == 2 and grid.rows == [0, 2]
    assert grid.timesteps.tolist() == [[0, 1, 2, 3], [0, 4, 9, 10]]


def test_bad_colourings_and_signals_are_user_errors():
    trace = _trace()
    with pytest.raises(CcvizError, match="unknown colouring"):
        retention_grid(trace, colour="rainbow")
    with pytest.raises(CcvizError, match="no signal 'recency'"):
        retention_grid(trace, signal="recency")
    for cycle in trace.cycles:
        cycle.scores = {}
    with pytest.raises(CcvizError, match="records no scores"):
        retention_grid(trace, colour="score")


def _long_trace(n: int = 2000, cache: int = 256, chunk: int = 16, frozen: int = 24) -> Trace:
    """A 2,000-token document under a random-score policy: a realistic size for the browser."""
    rng = np.random.default_rng(0)
    tokens = [TokenRecord(t=i, id=i, text=f" word{i % 97}", source="prompt") for i in range(n)]
    cycles, kept = [], []
    for step in range(chunk, n + 1, chunk):
        kept = kept + list(range(step - chunk, step))
        candidates = kept[frozen:]
        scores = rng.random(len(candidates))
        if len(candidates) > cache:
            best = np.sort(np.argsort(scores)[-cache:])
            kept = kept[:frozen] + [candidates[i] for i in best]
        cycles.append(
            Cycle(
                index=len(cycles),
                step=step,
                phase="prefill",
                candidates=candidates,
                kept=list(kept),
                scores={"surprise": scores.tolist()},
                seconds=0.0,
            )
        )
    return Trace(
        config={"policy": "random", "cache_size": cache, "chunk_size": chunk, "frozen": frozen},
        tokens=tokens,
        cycles=cycles,
    )


def test_a_2000_token_document_sends_compact_figures():
    trace = _long_trace()
    assert len(retention_heatmap(trace).to_json()) < 2_000_000
    assert len(highlight_html(trace, latest_scores(trace, "surprise"), "surprise")) < 400_000
    fine = _long_trace(chunk=2)  # 1,000 refreshes: every k-th is shown
    grid = retention_grid(fine)
    assert grid.stride > 1 and grid.timesteps.size <= 60_000 and grid.rows[-1] == len(fine.cycles) - 1
    assert len(retention_heatmap(fine).to_json()) < 2_500_000


def test_comparison_shares_one_colour_scale():
    a, b = _trace(), _trace()
    b.tokens.append(TokenRecord(t=12, id=1, text="!", source="generated"))
    b.cycles[-1].kept = [0, 4, 9, 11]
    fig = comparison_heatmaps([a, b], ["A", "B"])
    assert len(fig.data) == 2 and {d.coloraxis for d in fig.data} == {"coloraxis"}
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 11.0)
    with pytest.raises(CcvizError, match="not comparable"):
        comparison_heatmaps([a, b], ["A", "B"], colour="score")


def test_heatmap_of_a_real_run_matches_its_trace(tiny):
    trace = generate(
        tiny,
        "Tell me a story about a lighthouse keeper and a storm.",
        policy="sliding",
        cache_size=8,
        chunk_size=4,
        max_new_tokens=8,
    )
    grid = retention_grid(trace)
    for r, cycle in enumerate(trace.cycles):
        row = grid.timesteps[r]
        assert row[row >= 0].tolist() == cycle.kept
    retention_heatmap(trace, colour="score")


# ----- per-token facts ------------------------------------------------------------------------
def test_eviction_cycles_and_latest_scores():
    trace = _trace()
    assert eviction_cycles(trace).tolist() == [-1, 1, 2, 1, -1, 1, 1, 2, 2, -1, -1, -1]
    scores = latest_scores(trace, "surprise")
    assert scores[1] == 0.1 and scores[2] == 1.0 and scores[4] == 6.0 and scores[10] == math.inf
    assert math.isnan(scores[0]) and math.isnan(scores[11])
    assert set(recorded_values(trace, " (run)")) == {"surprise (run)"}
    assert per_token([1.0, 2.0], 4)[:2].tolist() == [1.0, 2.0] and np.isnan(per_token([1.0], 3)[1:]).all()


# ----- token HTML -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "build",
    [
        lambda t: highlight_html(t, latest_scores(t, "surprise"), "surprise"),
        survival_html,
    ],
)
def test_token_views_hold_every_token_once_and_escape_html(build):
    trace = _trace()
    html = build(trace)
    assert [text for text, _, _ in _spans(html)] == TEXTS
    assert "<b>42</b>" not in html and "&lt;b&gt;42&lt;/b&gt;" in html
    assert "& go" not in html and "&amp; go" in html


def test_highlight_marks_survivors_and_shows_values_in_tooltips():
    trace = _trace()
    spans = _spans(highlight_html(trace, latest_scores(trace, "surprise"), "surprise"))
    survivors = {i for i, (_, style, _) in enumerate(spans) if "border-bottom" in style}
    assert survivors == {0, 4, 9, 10, 11}
    assert "surprise 6" in spans[4][2] and "survived to the end" in spans[4][2]
    assert "evicted at refresh 1" in spans[1][2]
    assert "no future visible" in spans[10][2]
    with pytest.raises(ValueError, match="one value per token"):
        highlight_html(trace, [1.0], "surprise")


def test_survival_view_greys_exactly_the_evicted_tokens():
    trace = _trace()
    spans = _spans(survival_html(trace))
    greyed = {i for i, (_, style, _) in enumerate(spans) if "color:#b5b5b5" in style}
    assert greyed == {1, 2, 3, 5, 6, 7, 8}


def test_cycle_context_shows_the_tokens_so_far_with_their_fate():
    trace = _trace()
    spans = _spans(cycle_context_html(trace, 1))
    assert [text for text, _, _ in spans] == TEXTS[:8]
    fates = [title.split(" · ")[1] for _, _, title in spans]
    assert fates[0] == "frozen"
    assert fates[2] == fates[4] == fates[7] == "kept by refresh 1"
    assert fates[1] == fates[3] == "evicted by this refresh"


def test_token_views_cut_to_a_passage_say_so():
    trace = _trace()
    view = cycle_context_html(trace, 1, marked=[4], focus=range(3, 6), marked_as="the answer")
    spans = _spans(view)
    assert [text for text, _, _ in spans] == TEXTS[3:6] and "outline:2px solid" in spans[1][1]
    assert ">the answer</span>" in view and "the needle" not in view
    assert "Shown: tokens t=3 to 5 of 8." in cycle_context_html(trace, 1, focus=range(3, 6))
    values = latest_scores(trace, "surprise")
    assert [text for text, _, _ in _spans(highlight_html(trace, values, "surprise", range(-5, 2)))] == TEXTS[:2]
    assert "Shown" not in highlight_html(trace, values, "surprise", range(0, 99))  # the whole text: no note


def test_the_answer_is_highlighted_in_the_output_where_it_is_given():
    trace = _trace()
    spans = _spans(answer_html(trace, "ok"))  # the generated " OK", "!", case ignored
    assert [text for text, _, _ in spans] == TEXTS[10:] and "background:#fff3bf" in spans[0][1]
    assert "fff3bf" not in spans[1][1] and "highlighted where the output gives it" in answer_html(trace, "ok")
    assert "not in the output" in answer_html(trace, "42")


# ----- the cache's size ---------------------------------------------------------------------------
def test_cache_sizes_climb_between_refreshes_and_drop_to_what_each_kept():
    trace = _trace()  # refreshes after 4, 8 and 11 tokens keep 4 entries each; 12 tokens in all
    assert cache_sizes(trace) == ([0, 4, 4, 8, 8, 11, 11, 12], [0, 4, 4, 8, 4, 7, 4, 5])
    fig = cache_growth([("the full cache", Trace(config={}, tokens=trace.tokens)), ("J = 3", trace)], 3, frozen=1)
    assert [list(line.y) for line in fig.data] == [[0, 12], [0, 4, 4, 8, 4, 7, 4, 5]]  # no refresh: every token
    assert fig.layout.shapes[0].y0 == 4 and fig.layout.annotations[0].text == "J = 3 + 1 frozen"


# ----- sentences ------------------------------------------------------------------------------
def test_sentences_split_on_final_punctuation_and_count_survivors():
    trace = _trace()
    sentences = split_sentences(trace, latest_scores(trace, "surprise"))
    assert [(s.start, s.end) for s in sentences] == [(0, 6), (6, 10), (10, 12)]
    assert [s.kept for s in sentences] == [2, 1, 2]
    assert sentences[0].mean_value == pytest.approx((0.1 + 1.0 + 0.2 + 6.0 + 0.0) / 5)
    spans = _spans(sentence_html(trace, latest_scores(trace, "surprise"), "surprise"))
    assert [text for text, _, _ in spans] == ["".join(TEXTS[0:6]), "".join(TEXTS[6:10]), "".join(TEXTS[10:])]
    assert "2/6 tokens survived" in spans[0][2]


# ----- comparing runs -------------------------------------------------------------------------
def test_jaccard_of_final_kept_sets():
    a, b = _trace(), _trace()
    b.cycles[-1].kept = [0, 4, 7, 8]
    matrix = jaccard_matrix([a, b])
    assert matrix.tolist() == [[1.0, 2 / 6], [2 / 6, 1.0]]
    assert overlap_heatmap([a, b], ["A", "B"]).data[0].z.tolist() == matrix.tolist()


def test_phrase_survival_at_a_glance():
    trace = _trace()
    assert phrase_survival(trace, "42").status == "kept"
    assert phrase_survival(trace, "key is").status == "evicted"
    partly = phrase_survival(trace, "is <b>42")
    assert partly.status == "partly kept" and partly.tokens == [3, 4] and partly.kept == [4]
    assert phrase_survival(trace, "THE KEY").status == "evicted"  # case-insensitive
    assert phrase_survival(trace, "OK").status == "absent"  # generated text is not the prompt
    assert phrase_survival(trace, "banana").occurrences == 0


def test_run_summary_reports_times_and_sizes():
    summary = run_summary(_trace())
    assert summary["refreshes"] == 3 and summary["final cache"] == 4 and summary["peak cache"] == 8
    assert summary["generated"] == 2 and summary["prompt tokens"] == 10
    assert summary["per refresh (ms)"] == pytest.approx(20.0)
    assert summary["total (s)"] == 1.6


def test_png_writer_round_trips_through_pillow():
    import io

    import numpy as np
    from PIL import Image

    from ccviz.figures.png import png_bytes

    rgb = np.random.default_rng(0).integers(0, 256, size=(7, 13, 3), dtype=np.uint8)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(png_bytes(rgb))).convert("RGB")), rgb)
    with pytest.raises(ValueError, match="uint8"):
        png_bytes(rgb.astype(np.float32))


def test_the_html_report_is_self_contained_and_holds_every_run_and_figure():
    from ccviz.figures import comparison_heatmaps, overlap_heatmap, retention_heatmap, survival_html
    from ccviz.figures.export import report_html

    hostile = _trace()
    hostile.tokens[3].text = "</script><script>alert(1)</script>"  # token text must not end the figure's script
    one = report_html(
        hostile, {"Retention heatmap": retention_heatmap(hostile)}, {"What survives": survival_html(hostile)}, "a run"
    )
    assert one.count("Plotly.newPlot(") == 1 and "<script src" not in one  # plotly.js inline, nothing fetched
    assert f"<h2>Settings: {html.escape(hostile.run_config.title())}</h2>" in one  # one run: named by its title
    assert "<h2>Generated text</h2>" in one and "alert(1)</script>" not in one
    other = _trace()
    other.config = {**other.config, "policy": "sliding"}
    pair = report_html(
        {"A · counter_causal_fast": hostile, "B · sliding": other},
        {
            "Retention": comparison_heatmaps([hostile, other], ["A", "B"]),
            "Overlap": overlap_heatmap([hostile, other], ["A", "B"]),
        },
        {},
        "a comparison",
    )
    assert pair.count("Plotly.newPlot(") == 2 and "<h2>Settings: A · counter_causal_fast</h2>" in pair
    assert "<h2>Settings: B · sliding</h2>" in pair and pair.count("<h2>Generated text: ") == 2
