"""The verdict on a run (ccviz.explain.run_verdict): answered or not, the full cache's answer, and where the
expected answer went, on hand-built traces whose every number is known, then once on SmolLM2."""

import torch

from ccviz import generate
from ccviz.explain import descending_rank, explain_token, rank_candidate, run_verdict
from ccviz.explain.verdict import quote
from ccviz.trace import Cycle, TokenRecord, Trace

PROMPT = ["The", " code", " is", " 44", "17", ".", " Bye", " now"]  # "4417" is tokens 3 and 4
# Scores at the one refresh (J = 4, every token a candidate): t0 .9, t4 .8, t6 .7, t7 .6 are the best four.
SCORES = [0.9, 0.1, 0.2, 0.15, 0.8, 0.05, 0.7, 0.6]


def _trace(output: str = "Sorry.", scores=SCORES, units=None, kept=None, **config) -> Trace:
    """Tova over PROMPT with J = 4 (R = 0 unless given): one refresh after the prompt (keeping the best by
    ``scores``, or ``kept``), then ``output``."""
    recent, n = config.get("recent", 0), len(PROMPT)
    if kept is None:
        best = sorted(range(n - recent), key=lambda t: (-scores[t], -t))[: 4 - recent]
        kept = sorted(best + list(range(n - recent, n)))
    tokens = [TokenRecord(t, 100 + t, text, "prompt") for t, text in enumerate(PROMPT)]
    tokens.append(TokenRecord(n, 1, output, "generated"))
    settings = {"policy": "tova", "cache_size": 4, "chunk_size": 2, "frozen": 0, "recent": 0, "granularity": "token"}
    cycle = Cycle(0, n, "prefill", list(range(n)), kept, {"attention_last": list(scores)}, 0.0, units=units)
    return Trace(config={**settings, "prompt_tokens": n, **config}, tokens=tokens, cycles=[cycle], output_text=output)


def _full(output: str) -> Trace:
    return Trace(config={"policy": "full", "cache_size": 2000}, output_text=output)


def test_no_expected_answer_gives_no_verdict():
    for expected in (None, "", "   ", "?!"):
        assert run_verdict(_trace(), expected) is None


def test_an_answered_run_says_so_and_whether_the_full_cache_answers_too():
    trace = _trace("The code is 4417, as you wrote.")
    verdict = run_verdict(trace, " 4417 ")
    assert verdict.answered and verdict.expected == "4417" and verdict.text == "Answered: yes."
    full = _full("Your code is 4,417. I hope it still opens the locker after all these weeks at the gym.")
    assert (
        run_verdict(trace, "4417", full).text
        == 'Answered: yes. The full cache answers too ("Your code is 4,417. I hope it still opens…").'
    )
    assert run_verdict(trace, "4417", _full("I do not know.")).text == (
        'Answered: yes. The full cache does not ("I do not know.").'
    )
    assert run_verdict(_trace("THE CODE: 4417"), "4417").answered  # case and punctuation around it do not count


def test_an_answer_evicted_at_a_refresh_says_which_its_rank_and_the_cut_off():
    trace = _trace("Sorry.")
    verdict = run_verdict(trace, "4417", _full("Sure: 4417."))
    assert not verdict.answered and verdict.fate == "evicted"
    e = verdict.eviction
    assert (e.position, e.refresh, e.phase, e.step, e.explainable) == (3, 0, "prefill", 8, True)  # " 44" went
    assert descending_rank(torch.tensor(SCORES), 3) == 6
    assert verdict.text == (
        'Answered: no. The full cache answers "Sure: 4417.". "4417" was evicted at refresh 0 (prefill, after 8 '
        "tokens): its token ' 44' (t=3) ranked 6 of 8 by attention_last, cut-off J = 4."
    )


def test_a_full_cache_that_wrote_nothing_is_said_so():
    verdict = run_verdict(_trace(), "4417", _full(" \n"))
    assert (
        verdict.full_answered is False
        and "The full cache does not answer either (it generated nothing)." in verdict.text
    )


def test_with_a_recent_window_the_rank_is_among_the_older_candidates():
    verdict = run_verdict(_trace(recent=2), "4417")
    assert "ranked 4 of the 6 older candidates by attention_last, cut-off J − R = 2" in verdict.text


def test_under_word_units_the_rank_is_its_words():
    """Words 0..6 ("4417" is word 3); the last word is protected, the best whole words take the 3 other places."""
    scores = [0.9, 0.1, 0.2, 0.15, 0.12, 0.05, 0.7, 0.6]  # word 3's max, .15, ranks 4 of the 6 older words
    trace = _trace(scores=scores, units=[0, 1, 2, 3, 3, 4, 5, 6], kept=[0, 2, 6, 7], granularity="word")
    verdict = run_verdict(trace, "4417")
    assert verdict.eviction.position == 3
    assert verdict.text.endswith(
        "its token ' 44' (t=3) is in word 3, which ranked 4 of the 6 older words by its max score; whole words are "
        "kept best first while they fit in J = 4."
    )


def test_an_answer_kept_but_not_given_points_to_what_the_answer_read():
    verdict = run_verdict(_trace("Sorry."), "Bye")
    assert verdict.fate == "kept" and verdict.eviction is None
    assert verdict.text == 'Answered: no. "Bye" was kept, yet the answer does not give it: see what the answer read.'


def test_an_answer_absent_from_the_document_says_so():
    assert (
        run_verdict(_trace(), "zebra").text
        == 'Answered: no. "zebra" is not in the document, so no cache could keep it.'
    )


def test_a_dropped_answer_and_a_per_layer_run_say_the_rule_that_decided():
    dropped = run_verdict(_trace(drop=["4417"]), "4417")
    assert "part of '4417', which this run drops: evicted at its first refresh" in dropped.text
    pyramid = run_verdict(_trace(allocation="pyramid"), "4417")
    assert "under pyramid allocation each layer keeps its own entries" in pyramid.text
    assert not pyramid.eviction.explainable  # Explain replays one decision for every layer


def test_the_quote_is_a_window_around_the_answer():
    text = "Well, let me look at what you told me. Your locker code is 4417, as you wrote on Monday at the gym."
    assert quote(text, "4417") == "…me. Your locker code is 4417, as you wrote on Monday…"  # whole words
    assert quote("4417", "4417") == "4417" and quote("  no  \n answer ", "4417") == "no answer"
    assert quote(text, "7134") == "Well, let me look at what you told me. Your…"  # no answer: its start


def test_the_verdicts_rank_is_explains_rank(tiny):
    """On a real run, the rank read from the trace's scores is the one Explain replays."""
    doc = "The museum guard keeps the spare key in a blue tin. The locker code is 4817. " + "We met and talked. " * 8
    trace = generate(
        tiny,
        doc,
        policy="counter_causal_fast",
        policy_options={"paper": True},
        cache_size=16,
        recent=2,
        chat=False,
        max_new_tokens=2,
    )
    verdict = run_verdict(trace, "4817")
    e = verdict.eviction
    assert verdict.fate == "evicted" and e is not None
    explained = explain_token(tiny, trace, e.refresh, e.position)
    assert explained.kept is False and explained.matches_trace
    assert f"(t={e.position}) ranked {explained.rank} of the " in verdict.text
    cycle = trace.cycles[e.refresh]
    ranking = rank_candidate(
        torch.tensor(cycle.scores["surprise"]), None, trace.run_config, cycle.candidates.index(e.position)
    )
    assert ranking.rank == explained.rank and ranking.reason("surprise", kept=False) == explained.reason


def test_on_smollm_the_full_cache_answers_and_a_small_window_loses_the_code(smollm):
    doc = (
        "The museum guard Tomas keeps the spare key in a blue tin under the desk. The locker code is 4817. "
        + "Every evening he walks the galleries twice, checks the windows and writes the temperature of each room "
        "in a logbook. " * 3
    )
    asked = dict(question="What is the locker code?", max_new_tokens=12)
    full = generate(smollm, doc, policy="full", cache_size=2000, **asked)
    window = generate(smollm, doc, policy="sliding", cache_size=32, **asked)
    assert run_verdict(full, "4817").answered
    verdict = run_verdict(window, "4817", full)
    assert not verdict.answered and verdict.full_answered and verdict.fate == "evicted"
    assert verdict.text.startswith('Answered: no. The full cache answers "') and "4817" in verdict.full_quote
    assert f"was evicted at refresh {verdict.eviction.refresh} (prefill, after" in verdict.text
    assert "by recency, cut-off J = 32." in verdict.text
