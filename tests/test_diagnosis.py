"""The retention diagnosis: each measure on hand-built traces whose answer is known, the summary on
hand-built rows, and the reading probe against softmax(q k^T) computed from the model's own weights."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from ccviz import CcvizError, generate
from ccviz.cases.spans import Prepared, prepare, prompt_tokens
from ccviz.trace import Cycle, TokenRecord, Trace
from ccviz_bench.diagnosis import diagnose, mann_whitney_auc, summarise_diagnosis, word_kind
from ccviz_bench.reading import ReadingProbe

DOC = (
    "Anna met Novak on day 12 of 2024 in room B12. The patient's locker number is 4817 at the exact clinic. "
    "Rosa saw Ingrid near code KX-55 and bed 31."
)
QUESTION = "Question: What is the patient's locker number? Answer with the exact value from the text."


def _span(phrase: str) -> tuple[int, int]:
    """Characters of ``phrase`` in DOC, where the prompt starts."""
    start = DOC.index(phrase)
    assert DOC.count(phrase) == 1, phrase
    return start, start + len(phrase)


def _row(tokenizer, fact: str, evict=(), question: str = QUESTION) -> tuple[Trace, Prepared]:
    """The prompt DOC + question with ``fact`` as the required span, and a trace whose one refresh, at the
    question's first token, evicted ``evict`` (phrases of DOC, or timesteps) and kept everything else."""
    prompt = f"{DOC}\n\n{question}"
    prepared = prepare(tokenizer, prompt, prompt.index("Question"), [_span(fact)])
    ids = prepared.tokens.ids
    evicted = {t for item in evict for t in _timesteps(prepared, item)}
    texts = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    tokens = [TokenRecord(t=t, id=i, text=text, source="prompt") for t, (i, text) in enumerate(zip(ids, texts))]
    step = prepared.question_start
    kept = sorted(set(range(step)) - evicted)
    cycle = Cycle(index=0, step=step, phase="prefill", candidates=[], kept=kept, scores={}, seconds=0.0)
    return Trace(config={}, tokens=tokens, cycles=[cycle]), prepared


def _timesteps(prepared: Prepared, item) -> list[int]:
    return [item] if isinstance(item, int) else prepared.tokens.timesteps(*_span(item))


def test_a_fully_kept_fact_has_its_whole_context_and_every_distractor(tiny):
    trace, prepared = _row(tiny.tokenizer, "4817")
    got = diagnose(trace, prepared, tiny.tokenizer)
    # key words: patient's, locker, number (what / is / the are stopwords; "exact" is the prompt's frame)
    assert got["sentence_kept"] == 1.0 and got["key_kept"] == 1.0 and got["key_words"] == 3
    assert got["distractors_kept"] == 3  # 12, 2024, 31: B12 and KX-55 are identifiers, not numbers
    assert got["gaps_around"] == 0 and got["isolated"] == 0
    assert math.isnan(got["reading"]) and math.isnan(got["reading_peak"])  # no probe readings given


def test_evicted_context_key_words_distractors_and_gaps_are_counted(tiny):
    trace, prepared = _row(tiny.tokenizer, "4817", evict=["locker", "2024", "Rosa"])
    got = diagnose(trace, prepared, tiny.tokenizer)
    sentence = set(prepared.tokens.timesteps(*_span("The patient's locker number is 4817 at the exact clinic.")))
    context = sentence - set(prepared.required)
    locker = prepared.tokens.timesteps(*_span("locker"))
    assert got["sentence_kept"] == round(1 - len(locker) / len(context), 4)
    assert got["key_kept"] == round(2 / 3, 4) and got["key_words"] == 3
    assert got["distractors_kept"] == 2  # 2024 went
    assert got["gaps_around"] == 3  # three separate evicted runs in the fact's sentence and its neighbours
    assert got["isolated"] == 0
    adjacent = diagnose(*_row(tiny.tokenizer, "4817", evict=["day 12 of"]), tiny.tokenizer)
    assert adjacent["gaps_around"] == 1 and adjacent["distractors_kept"] == 2  # one run; 12 went


def test_a_word_counts_as_kept_only_whole(tiny):
    _, prepared = _row(tiny.tokenizer, "4817")
    year = prepared.tokens.timesteps(*_span("2024"))
    assert len(year) > 1  # SmolLM2 writes numbers digit by digit
    got = diagnose(*_row(tiny.tokenizer, "4817", evict=[year[-1]]), tiny.tokenizer)
    assert got["distractors_kept"] == 2


def test_isolated_needs_both_neighbours_evicted(tiny):
    _, prepared = _row(tiny.tokenizer, "4817")
    before, after = prepared.required[0] - 1, prepared.required[-1] + 1
    both = diagnose(*_row(tiny.tokenizer, "4817", evict=[before, after]), tiny.tokenizer)
    assert both["isolated"] == 1 and both["gaps_around"] == 2
    one = diagnose(*_row(tiny.tokenizer, "4817", evict=[before]), tiny.tokenizer)
    assert one["isolated"] == 0 and one["gaps_around"] == 1


def test_distractors_are_words_of_the_facts_own_kind(tiny):
    assert diagnose(*_row(tiny.tokenizer, "KX-55"), tiny.tokenizer)["distractors_kept"] == 1  # B12
    # names: Novak's distractor is Ingrid; Anna, The and Rosa open their sentences
    assert diagnose(*_row(tiny.tokenizer, "Novak"), tiny.tokenizer)["distractors_kept"] == 1
    assert diagnose(*_row(tiny.tokenizer, "Novak", evict=["Ingrid"]), tiny.tokenizer)["distractors_kept"] == 0
    assert math.isnan(diagnose(*_row(tiny.tokenizer, "clinic"), tiny.tokenizer)["distractors_kept"])


def test_a_question_sharing_no_word_leaves_key_kept_blank(tiny):
    got = diagnose(*_row(tiny.tokenizer, "4817", question="Question: Where? Answer."), tiny.tokenizer)
    assert got["key_words"] == 0 and math.isnan(got["key_kept"])


def test_a_question_evicted_before_the_answer_is_read_from_the_trace(tiny):
    trace, prepared = _row(tiny.tokenizer, "4817")
    before = diagnose(trace, prepared, tiny.tokenizer)
    assert before["question_evicted"] == 0  # nothing evicted after the question came
    question = prepared.question_start
    step = question + 4  # a refresh inside the question, as the paper's protocol has them, evicting its first token
    kept = sorted(set(trace.cycles[0].kept) | set(range(question + 1, step)))
    refresh = Cycle(index=1, step=step, phase="prefill", candidates=[], kept=kept, scores={}, seconds=0.0)
    after = diagnose(Trace(config={}, tokens=trace.tokens, cycles=[*trace.cycles, refresh]), prepared, tiny.tokenizer)
    assert after["question_evicted"] == 1
    document = ["sentence_kept", "key_kept", "key_words", "distractors_kept", "gaps_around", "isolated"]
    assert [after[m] for m in document] == [before[m] for m in document]  # the document is read at the question
    rows = pd.DataFrame(
        {"case": [0, 1, 2, 3], "policy": "a", "survived": 1, "answered": [1, 1, 0, 0], "question_evicted": [0, 0, 1, 0]}
    )
    summary = summarise_diagnosis(rows).set_index(["policy", "measure"])
    assert summary.loc[("a", "question_evicted"), "auc"] == 0.25  # evicted questions go with unanswered rows


def test_the_readings_are_the_first_decode_pass_and_the_peak(tiny):
    got = diagnose(*_row(tiny.tokenizer, "4817"), tiny.tokenizer, readings=[0.1, 0.5, 0.2])
    assert got["reading"] == 0.1 and got["reading_peak"] == 0.5


@pytest.mark.parametrize(
    "word, kind",
    [
        ("KX-4817,", "identifier"),
        ("B12", "identifier"),
        ("A-B", "identifier"),
        ("4,817.", "number"),
        ("12:30", "number"),
        ("(Ingrid)", "name"),
        ("latex.", None),
        ("follow-up", None),
    ],
)
def test_word_kinds(word, kind):
    assert word_kind(word) == kind


# ----- the summary --------------------------------------------------------------------------------
def test_mann_whitney_auc_and_its_normal_approximation():
    assert mann_whitney_auc(np.array([0.9, 0.8, 0.7]), np.array([0.1, 0.2]))[0] == 1.0
    assert mann_whitney_auc(np.array([0.1, 0.2]), np.array([0.9, 0.8, 0.7]))[0] == 0.0
    assert mann_whitney_auc(np.array([1.0, 1.0, 1.0]), np.array([1.0, 1.0])) == (0.5, 1.0)
    # scipy.stats.mannwhitneyu(..., method="asymptotic") gives U = 24 and p = 0.11475530327740123
    auc, p = mann_whitney_auc(np.array([1, 2, 3, 4, 5, 5]), np.array([0, 1, 2, 2, 3]))
    assert auc == pytest.approx(24 / 30) and p == pytest.approx(0.11475530327740123, rel=1e-12)
    assert all(math.isnan(v) for v in mann_whitney_auc(np.array([1.0]), np.array([])))


def _rows() -> pd.DataFrame:
    rows = [
        # case, policy, survived, answered, sentence_kept, gaps_around, reading
        (0, "full", 1, 1, 1.0, 0, 0.4),
        (1, "full", 1, 1, 1.0, 0, 0.3),
        (2, "full", 1, 0, 1.0, 0, 0.2),
        (3, "full", 1, 1, 1.0, 0, 0.1),
        (0, "a", 1, 1, 0.9, 2, 0.05),
        (1, "a", 1, 1, 0.8, 2, 0.04),
        (2, "a", 1, 0, 0.2, 2, 0.03),
        (3, "a", 1, 0, 0.1, 2, 0.06),
        (4, "a", 0, 0, 0.0, 9, 0.0),  # the fact did not survive: left out
        (5, "a", 1, "", 0.5, 1, ""),  # not answered: left out
        (0, "b", 1, 1, 0.7, 1, ""),
        (1, "b", 1, 0, 0.75, 3, ""),
        (2, "b", 1, 0, "", "", ""),  # no diagnosis: left out
    ]
    frame = pd.DataFrame(
        rows, columns=["case", "policy", "survived", "answered", "sentence_kept", "gaps_around", "reading"]
    )
    return frame.astype(object)  # as read back from a result table with blank cells


def test_the_summary_splits_survived_rows_by_answer_and_scores_each_measure():
    summary = summarise_diagnosis(_rows()).set_index(["policy", "measure"])
    a = summary.loc["a"]
    assert a.loc["sentence_kept", "auc"] == 1.0  # perfectly separating
    assert a.loc["gaps_around", "auc"] == 0.5  # all tied
    assert a.loc["sentence_kept", "n_answered"] == 2 and a.loc["sentence_kept", "n_unanswered"] == 2
    assert a.loc["sentence_kept", "mean_answered"] == pytest.approx(0.85)
    assert a.loc["sentence_kept", "mean_unanswered"] == pytest.approx(0.15)
    # reading_full: the full-cache reading of each row's own case (0.4, 0.3 answered; 0.2, 0.1 not)
    assert a.loc["reading_full", "mean_answered"] == pytest.approx(0.35)
    assert a.loc["reading_full", "auc"] == 1.0
    assert a.loc["reading", "auc"] == 0.5  # 0.05, 0.04 against 0.03, 0.06
    # "all": every policy but full, each measure on the rows that have it
    every = summary.loc["all"]
    assert every.loc["sentence_kept", "n_answered"] == 3 and every.loc["sentence_kept", "n_unanswered"] == 3
    assert every.loc["reading", "n_answered"] == 2
    assert every.loc["sentence_kept", "auc"] == pytest.approx(8 / 9)
    assert summary.loc[("b", "gaps_around"), "auc"] == 0.0  # fewer gaps went with the answer
    assert set(summary.index.get_level_values("policy")) == {"full", "a", "b", "all"}
    assert 0 < every.loc["sentence_kept", "p_value"] < 1


def test_rows_without_diagnosis_give_an_empty_summary():
    assert summarise_diagnosis(_rows().drop(columns=["sentence_kept", "gaps_around", "reading"])).empty
    assert summarise_diagnosis(pd.DataFrame()).empty


# ----- the reading probe --------------------------------------------------------------------------
PROMPT = "The locker number is 4817. Remember it well, because later you will be asked about the locker."


def _explicit_attention(lm, ids: list[int]) -> torch.Tensor:
    """softmax(q k^T * scale) of the last token at the last layer, per query head, from the model's own
    weights on a plain forward pass (no ccviz): float32 [query heads, len(ids)]."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    model = lm.model
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        layer = model.model.layers[-1]
        hidden = layer.input_layernorm(out.hidden_states[-2])  # the last layer's input, normalised
        attn, config = layer.self_attn, model.config
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        d = config.hidden_size // heads
        q = attn.q_proj(hidden).view(1, len(ids), heads, d).transpose(1, 2)
        k = attn.k_proj(hidden).view(1, len(ids), kv_heads, d).transpose(1, 2)
        cos, sin = model.model.rotary_emb(hidden, torch.arange(len(ids))[None])
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = k.repeat_interleave(heads // kv_heads, dim=1)  # query head h reads KV head h // group
        logits = (q[0, :, -1:] @ k[0].transpose(1, 2))[:, 0] * d**-0.5
        return torch.softmax(logits, dim=-1)


def test_the_probe_reads_the_first_decode_query_as_softmax_q_k(tiny):
    n = len(prompt_tokens(tiny.tokenizer, PROMPT, chat=False).ids)
    probe = ReadingProbe(timestep=n)
    trace = generate(
        tiny, PROMPT, policy="full", cache_size=64, chat=False, max_new_tokens=4, stop_at_eos=False, observers=[probe]
    )
    assert len(probe.weights) == 3  # one per decode pass: the 4th token is picked, never fed
    assert probe.positions[0].tolist() == list(range(n + 1))
    expected = _explicit_attention(tiny, [tok.id for tok in trace.tokens[: n + 1]])
    torch.testing.assert_close(probe.weights[0], expected, rtol=1e-5, atol=1e-6)
    fact = [3, 4, 5]
    readings = probe.readings(fact)
    assert readings[0] == pytest.approx(float(expected[:, fact].sum(dim=1).max()), abs=1e-6)
    assert readings[0] > float(expected[:, fact].sum(dim=1).mean())  # max over heads, not the mean


def _comparable(trace: Trace) -> dict:
    data = trace.to_dict()
    for cycle in data["cycles"]:
        cycle["seconds"] = 0.0
    del data["timings"]
    return data


@pytest.mark.parametrize("policy", ["tova", "snapkv"])
def test_the_probe_changes_nothing_in_the_run_and_reads_only_what_is_cached(tiny, policy):
    settings = {
        "policy": policy,
        "cache_size": 12,
        "chunk_size": 4,
        "chat": False,
        "max_new_tokens": 6,
        "stop_at_eos": False,
    }
    n = len(prompt_tokens(tiny.tokenizer, PROMPT, chat=False).ids)
    probe = ReadingProbe(timestep=n)
    probed = generate(tiny, PROMPT, observers=[probe], **settings)
    assert _comparable(probed) == _comparable(generate(tiny, PROMPT, **settings))
    first = probe.positions[0]
    assert len(first) < n  # the policy evicted: the probe saw the cache, not the prompt
    assert torch.allclose(probe.weights[0].sum(dim=1), torch.ones(probe.weights[0].shape[0]))
    evicted = sorted(set(range(n)) - set(first.tolist()))
    assert probe.readings(evicted)[0] == 0.0 and probe.readings(first.tolist())[0] == pytest.approx(1.0)
    assert ReadingProbe(timestep=10**6).readings([0]) == []  # never probed


def test_each_head_averages_to_what_policies_read(tiny):
    """The new per-head form leaves the default path as it was: its mean over heads is the mean form."""
    from ccviz.capture import attention_weights

    torch.manual_seed(0)
    query, key = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 7, 8)
    each = attention_weights(query, key, None, 0.3, None, heads="each")
    assert each.shape == (4, 3, 7)
    torch.testing.assert_close(each.mean(dim=0), attention_weights(query, key, None, 0.3, None))
    per_kv = attention_weights(query, key, None, 0.3, None, per_head=True)
    torch.testing.assert_close(each.view(2, 2, 3, 7).mean(dim=1), per_kv)


def test_generate_refuses_an_observer_that_is_not_a_policy(tiny):
    with pytest.raises(CcvizError, match="observers must be built Policy instances, got str"):
        generate(tiny, PROMPT, policy="full", cache_size=8, observers=["reading_probe"])
    with pytest.raises(CcvizError, match="probed timestep"):
        replace(ReadingProbe(timestep=3), timestep=-1)
