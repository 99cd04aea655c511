"""Units of the keep decision: word and sentence grouping on SmolLM2's real tokenisation, whole-unit selection."""

import pytest
import torch

from ccviz import generate
from ccviz.cases.documents import make_case
from ccviz.engine.survivors import select_units
from ccviz.engine.units import group_units, pool_scores, token_classes


def _units(lm, text, granularity):
    ids = torch.tensor(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    units = group_units(ids, token_classes(lm.tokenizer, lm.model.get_input_embeddings().num_embeddings), granularity)
    pieces = lm.tokenizer.batch_decode([[i] for i in ids.tolist()])
    grouped: dict[int, str] = {}
    for piece, unit in zip(pieces, units.tolist()):
        grouped[unit] = grouped.get(unit, "") + piece
    return list(grouped.values())


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "The serial is KX-4817. Call 555-0199 now!",
            ["The", " serial", " is", " KX-4817.", " Call", " 555-0199", " now!"],
        ),
        (
            "pi is 3.14, or 22/7; well-known\nNext",
            ["pi", " is", " 3.14,", " or", " 22/7;", " well-known", "\n", "Next"],
        ),
        ("Dose: 4817 mg.  Then", ["Dose:", " 4817", " mg.", "  Then"]),
    ],
)
def test_words_on_smollm_tokenisation(smollm, text, words):
    assert _units(smollm, text, "word") == words


def test_sentences_end_at_stops_and_newlines_not_inside_numbers(smollm):
    text = "Pi is 3.14 here. Really? Yes! A list:\n- one\nThe end"
    assert _units(smollm, text, "sentence") == [
        "Pi is 3.14 here.",
        " Really?",
        " Yes!",
        " A list:\n",
        "- one\n",
        "The end",
    ]


def test_special_tokens_are_units_of_their_own(smollm):
    text = "<|im_start|>user\nHello there.<|im_end|>\n"
    assert _units(smollm, text, "word") == ["<|im_start|>", "user", "\n", "Hello", " there.", "<|im_end|>", "\n"]
    assert _units(smollm, text, "sentence") == ["<|im_start|>", "user\n", "Hello there.", "<|im_end|>", "\n"]


def test_pooling():
    units = torch.tensor([0, 0, 1, 2, 2, 2])
    scores = torch.tensor([1.0, 3.0, 2.0, 0.0, 6.0, 3.0])
    assert pool_scores(scores, units, "max").tolist() == [3.0, 2.0, 6.0]
    assert pool_scores(scores, units, "mean").tolist() == [2.0, 2.0, 3.0]


def test_selection_keeps_whole_units_best_first_and_fills_with_smaller_ones():
    #                  unit: 0    0    1    2    2    2    3    4    4
    units = torch.tensor([0, 0, 1, 2, 2, 2, 3, 4, 4])
    scores = torch.tensor([5.0, 5.0, 1.0, 9.0, 0.0, 0.0, 2.0, 0.0, 0.0])
    # the last unit (4) is always kept (it may still grow): 2 places; then unit 2 (max 9, 3 tokens) and
    # unit 0 (5, 2 tokens) fit J = 7; unit 3 (2.0) does not fit the last place? 7 - 2 - 3 - 2 = 0.
    assert select_units(scores, units, 7, 0, "max").tolist() == [0, 1, 3, 4, 5, 7, 8]
    # J = 6: after units 4 and 2 one place is left: unit 0 (2 tokens) is skipped, unit 3 (1 token) fills it
    assert select_units(scores, units, 6, 0, "max").tolist() == [3, 4, 5, 6, 7, 8]
    # mean pooling ranks unit 0 (5) above unit 2 (3)
    assert select_units(scores, units, 6, 0, "mean").tolist() == [0, 1, 2, 6, 7, 8]
    # recent = 3 cuts unit 3? the last 3 candidates are units 3 and 4: both protected, then unit 2 fits
    assert select_units(scores, units, 6, 3, "max").tolist() == [3, 4, 5, 6, 7, 8]
    # recent = 4 cuts unit 2: the window is extended back to unit 2's start (6 tokens protected), and
    # the one place left goes to unit 1, the only unit that fits, though unit 0 scores higher
    assert select_units(scores, units, 7, 4, "max").tolist() == [2, 3, 4, 5, 6, 7, 8]
    # a unit longer than J on its own: the last J candidates, the only split
    assert select_units(torch.arange(6.0), torch.tensor([0, 0, 0, 0, 0, 1]), 3, 2, "max").tolist() == [3, 4, 5]


def test_selection_never_exceeds_J_and_leaves_only_places_no_unit_fits():
    generator = torch.Generator().manual_seed(0)
    for _ in range(200):
        n = int(torch.randint(2, 60, (1,), generator=generator))
        units = torch.cumsum(torch.rand(n, generator=generator) < 0.3, 0)
        units -= units[0].clone()
        scores = torch.randn(n, generator=generator)
        J = int(torch.randint(1, n + 1, (1,), generator=generator))
        recent = int(torch.randint(0, J + 1, (1,), generator=generator))
        kept = select_units(scores, units, J, recent, "max")
        assert kept.numel() <= J and torch.equal(kept, kept.sort().values)
        sizes = torch.bincount(units)
        kept_units = set(units[kept].tolist())
        protected_tokens = int(sizes[units[n - recent] if recent else units[-1] :].sum())
        if n > J and protected_tokens <= J:
            for unit in kept_units:  # never split
                assert int((units[kept] == unit).sum()) == int(sizes[unit])
            left = J - kept.numel()
            dropped = [u for u in range(sizes.numel()) if u not in kept_units]
            assert all(int(sizes[u]) > left for u in dropped)  # no dropped unit would have fit
            assert all(t in kept.tolist() for t in range(n - recent, n))


def test_ties_go_to_the_more_recent_unit():
    units = torch.tensor([0, 1, 2, 3])
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert select_units(scores, units, 2, 0, "max").tolist() == [2, 3]
    assert select_units(scores, units, 2, 0, "max").tolist() == select_units(scores, units, 2, 0, "max").tolist()


@pytest.mark.parametrize("granularity", ["word", "sentence"])
@pytest.mark.parametrize("policy", ["counter_causal_fast", "tova"])
def test_a_refresh_never_splits_a_unit_and_keeps_J(smollm, granularity, policy):
    """On a real document: every unit of the whole prompt is, after every refresh, wholly cached or wholly
    gone (among its tokens processed so far); J is never exceeded, and places are left empty only when
    no dropped unit would fit them."""
    case = make_case(1, words=150, seed=0)
    J = 64
    trace = generate(
        smollm, case.prompt, policy=policy, cache_size=J, granularity=granularity, pool="mean", max_new_tokens=1
    )
    frozen = trace.config["frozen"]
    ids = torch.tensor([tok.id for tok in trace.tokens[frozen:]])
    units = group_units(
        ids, token_classes(smollm.tokenizer, smollm.model.get_input_embeddings().num_embeddings), granularity
    )
    assert trace.config["granularity"] == granularity and trace.config["pool"] == "mean"
    evicting = 0
    for cycle in trace.cycles:
        assert cycle.units is not None and len(cycle.units) == len(cycle.candidates)
        assert f"{trace_signal(trace)}:{granularity}" in cycle.scores
        kept = set(cycle.kept)
        seen = [t for t in range(frozen, cycle.step)]
        if len(cycle.candidates) > J:
            evicting += 1
            left = J - (len(cycle.kept) - frozen)
            assert left >= 0
            dropped = set(cycle.units[i] for i, t in enumerate(cycle.candidates) if t not in kept)
            assert all(cycle.units.count(u) > left for u in dropped)
        for unit in set(units[: cycle.step - frozen].tolist()):
            members = [t for t in seen if units[t - frozen] == unit and t in cycle.candidates]
            if unit == int(units[cycle.step - frozen - 1]):
                continue  # the last unit may continue after the refresh: kept, and complete only later
            assert len({t in kept for t in members}) <= 1, (cycle.index, [trace.tokens[t].text for t in members])
    assert evicting >= 3


def trace_signal(trace):
    return {"counter_causal_fast": "surprise", "tova": "attention_last"}[trace.config["policy"]]


def test_token_granularity_is_todays_engine(tiny):
    kwargs = dict(policy="tova", cache_size=24, max_new_tokens=6)
    prompt = make_case(0, words=60, seed=0).prompt
    a, b = generate(tiny, prompt, **kwargs), generate(tiny, prompt, granularity="token", pool="mean", **kwargs)
    assert [c.kept for c in a.cycles] == [c.kept for c in b.cycles] and all(c.units is None for c in a.cycles)


def test_clauses_split_at_commas_colons_and_semicolons_but_not_inside_numbers(smollm):
    text = "Dose: 4,817 mg, twice daily; then stop. Next"
    assert _units(smollm, text, "clause") == ["Dose:", " 4,817 mg,", " twice daily;", " then stop.", " Next"]
    assert _units(smollm, text, "sentence") == ["Dose: 4,817 mg, twice daily; then stop.", " Next"]


def _left_context(words, clauses, scores, k):
    """Slow reference: word w joins the best word (by pooled max; ties: the later) among itself and the k
    words after it in its clause; consecutive words that join the same word form one unit."""
    pooled = [max(s for s, u in zip(scores, words) if u == w) for w in range(max(words) + 1)]
    clause_of = [clauses[words.index(w)] for w in range(len(pooled))]
    best = []
    for w in range(len(pooled)):
        window = [j for j in range(w, min(w + k + 1, len(pooled))) if clause_of[j] == clause_of[w]]
        best.append(max(window, key=lambda j: (pooled[j], j)))
    unit, units = 0, []
    for w in range(len(pooled)):
        unit += w > 0 and best[w] != best[w - 1]
        units.append(unit)
    return [units[w] for w in words]


def test_left_context_units_match_a_slow_reference_and_stay_inside_clauses():
    from ccviz.engine.units import left_context_units

    generator = torch.Generator().manual_seed(1)
    for _ in range(200):
        n = int(torch.randint(1, 50, (1,), generator=generator))
        words = torch.cumsum(torch.rand(n, generator=generator) < 0.6, 0)
        words -= words[0].clone()
        starts = torch.ones(n, dtype=torch.bool)
        starts[1:] = words[1:] != words[:-1]
        clause_start = starts & (torch.rand(n, generator=generator) < 0.3)
        clause_start[0] = True
        clauses = torch.cumsum(clause_start.long(), 0) - 1
        scores = torch.randint(0, 4, (n,), generator=generator).float()  # ties on purpose
        k = int(torch.randint(0, 5, (1,), generator=generator))
        units = left_context_units(scores, words, clauses, k, "max")
        assert units.tolist() == _left_context(words.tolist(), clauses.tolist(), scores.tolist(), k)
        for unit in set(units.tolist()):
            members = units == unit
            assert len(set(clauses[members].tolist())) == 1  # never across a clause end
            assert len(set(words[members].tolist())) <= k + 1


@pytest.mark.parametrize(
    "settings", [{"left_context": 3}, {"sentence_share": 0.5}, {"left_context": 2, "sentence_share": 0.3}]
)
def test_left_context_and_two_level_budget_never_split_a_unit_and_respect_J(smollm, settings):
    """On a real document under the counter-causal score: every unit a refresh decided on (recorded in the
    trace) is wholly kept or wholly evicted, the cache never holds more than J, and places stay empty
    only when no evicted unit would fit them."""
    case = make_case(2, words=150, seed=0)
    J = 64
    trace = generate(
        smollm,
        case.prompt,
        policy="counter_causal_fast",
        cache_size=J,
        granularity="word",
        max_new_tokens=1,
        **settings,
    )
    frozen, evicting = trace.config["frozen"], 0
    for key, value in settings.items():
        assert trace.config[key] == value
    for cycle in trace.cycles:
        if len(cycle.candidates) <= J:
            continue
        evicting += 1
        kept = set(cycle.kept)
        assert len(cycle.kept) - frozen <= J
        by_unit: dict[int, set[bool]] = {}
        for unit, t in zip(cycle.units, cycle.candidates):
            by_unit.setdefault(unit, set()).add(t in kept)
        assert all(len(fates) == 1 for fates in by_unit.values())
        left = J - (len(cycle.kept) - frozen)
        dropped = {u for u, fates in by_unit.items() if fates == {False}}
        assert all(cycle.units.count(u) > left for u in dropped)
    assert evicting >= 3


def test_two_level_budget_keeps_the_best_sentences_whole_first(smollm):
    from ccviz.engine.survivors import top_sentences

    text = "One two three. Four five six seven. Eight nine. Ten eleven twelve"
    ids = torch.tensor(smollm.tokenizer(text, add_special_tokens=False)["input_ids"])
    classes = token_classes(smollm.tokenizer, smollm.model.get_input_embeddings().num_embeddings)
    words, sentences = group_units(ids, classes, "word"), group_units(ids, classes, "sentence")
    scores = torch.zeros(len(ids))
    scores[sentences == 1] = 1.0  # "Four five six seven." is the best sentence, then "Eight nine."
    scores[sentences == 2] = 0.5
    size = int((sentences == 1).sum())
    first = top_sentences(scores, words, sentences, size, int(words[sentences == 3][0]), "max")
    assert torch.equal(first, sentences == 1)
    more = top_sentences(scores, words, sentences, size + int((sentences == 2).sum()), int(words[-1]), "max")
    assert torch.equal(more, (sentences == 1) | (sentences == 2))
    # the last sentence is where the protected tail starts: never a first-level choice
    assert not top_sentences(
        scores + 5 * (sentences == 3), words, sentences, len(ids), int(words[sentences == 3][0]), "max"
    )[sentences == 3].any()


def test_left_context_and_sentence_share_need_word_units(tiny):
    from ccviz.errors import CcvizError

    prompt = make_case(0, words=60, seed=0).prompt
    with pytest.raises(CcvizError, match="word units"):
        generate(tiny, prompt, policy="tova", cache_size=24, granularity="sentence", left_context=2, max_new_tokens=1)
    with pytest.raises(CcvizError, match="word units"):
        generate(tiny, prompt, policy="tova", cache_size=24, sentence_share=0.5, max_new_tokens=1)
