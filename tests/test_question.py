"""A question asked apart from the document: kept out of eviction, and J counts the document only."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from ccviz import CcvizError, generate
from ccviz.cache import Candidates
from ccviz.engine import CacheSession, RunConfig, prepare
from ccviz.explain import explain_token, explain_without_replay
from ccviz.policies import Policy
from ccviz.prompts import encode_prompt

DOCUMENT = (
    "The committee met on Tuesday to review the budget for the new library wing. Construction costs rose by "
    "twelve percent because of steel prices, and the architect proposed replacing the glass atrium with a "
    "cheaper skylight. Several members objected, noting that the atrium was the main reason the city council "
    "approved the project. The treasurer suggested delaying the children's reading room by one year instead. "
    "The door code of the archive room is 7193, and only the treasurer may change it."
)
QUESTION = "What is the door code of the archive room?"
GEMMA_TEMPLATE = (  # Gemma 3's turn markers, as its instruction-tuned tokenizer renders a user turn
    "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ 'model' if message['role'] == 'assistant' "
    "else message['role'] }}\n{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


@dataclass
class NewestLast(Policy):
    """Ranks the newest entries lowest: the question, at the end of the prompt, is what it would evict first."""

    name = "newest_last"
    summary = "test only: keeps the oldest entries"
    signal = "age"

    def score_candidates(self, model: torch.nn.Module, candidates: Candidates) -> torch.Tensor:
        return -candidates.pos.to(torch.float32)


def _run(lm, protect: bool, **settings):
    return generate(
        lm,
        DOCUMENT,
        question=QUESTION,
        policy=NewestLast(),
        cache_size=8,
        chunk_size=4,
        recent=0,
        max_new_tokens=12,
        stop_at_eos=False,
        protect_question=protect,
        **settings,
    )


def _question(trace) -> range:
    start = trace.question_start
    assert start is not None
    return range(start, trace.config["prompt_tokens"])


def test_the_question_and_the_turn_suffix_are_never_evicted_and_never_candidates(tiny):
    trace = _run(tiny, protect=True)
    question = _question(trace)
    assert trace.kept_question == question
    text = "".join(tok.text for tok in trace.tokens[question.start : question.stop])
    assert text == QUESTION + "<|im_end|>\n<|im_start|>assistant\n"  # the template's turn markers too
    frozen = trace.config["frozen"]
    after_question = [c for c in trace.cycles if c.step > question.start]
    assert any(c.phase == "prefill" for c in trace.cycles) and len(after_question) >= 2  # decode refreshes
    for cycle in trace.cycles:
        assert not set(question) & set(cycle.candidates)
        if cycle.step > question.start:  # the question is cached from here on, and stays whole
            assert set(question) <= set(cycle.kept)
        document = [t for t in cycle.kept if t >= frozen and t not in question]
        assert len(document) <= 8  # J counts the document (and generated tokens) only
    assert trace.peak_cache_length <= frozen + len(question) + 8 + 4


def test_without_protection_the_same_scorer_evicts_the_question(tiny):
    trace = _run(tiny, protect=False)
    question = _question(trace)
    assert trace.kept_question == range(0)
    assert set(question) & {t for c in trace.cycles for t in c.candidates}
    assert not set(question) <= set(trace.cycles[-1].kept)
    assert "question evictable" in trace.run_config.describe()


def test_the_question_arrives_after_the_documents_last_prefill_refresh(tiny):
    trace = _run(tiny, protect=True)
    question = _question(trace)
    prefill = [c.step for c in trace.cycles if c.phase == "prefill"]
    assert max(prefill) <= question.start  # no refresh while the question is fed
    assert all(step % 4 == 0 for step in prefill)  # the document's refreshes fall where they would without it
    decode = [c.step for c in trace.cycles if c.phase == "decode"]
    clock = [step - len(question) for step in decode]  # the question does not advance the refresh clock
    assert all(tick % 4 == 0 for tick in clock)


def test_pins_are_found_in_the_document_only(tiny):
    with pytest.raises(CcvizError, match="not in the document"):
        _run(tiny, protect=True, pin=("archive room?",))
    trace = _run(tiny, protect=True, pin=("7193",))
    assert all(t in trace.cycles[-1].kept for t in range(len(trace.tokens)) if "719" in trace.tokens[t].text)


@pytest.mark.parametrize("allocation", ["pyramid", "adaptive"])
def test_per_layer_allocations_keep_the_question_in_every_layer(tiny, allocation):
    trace = generate(
        tiny,
        DOCUMENT,
        question=QUESTION,
        policy="tova",
        cache_size=12,
        chunk_size=4,
        max_new_tokens=12,
        stop_at_eos=False,
        allocation=allocation,
    )
    question = _question(trace)
    for cycle in trace.cycles:
        if cycle.step > question.start:
            for layer in range(cycle.num_layers or 1):
                assert set(question) <= set(cycle.kept_by(layer))


def test_a_question_joins_the_turn_as_one_text_would(smollm):
    joined = encode_prompt(smollm.tokenizer, DOCUMENT + "\n\n" + QUESTION, chat=True)
    apart = encode_prompt(smollm.tokenizer, DOCUMENT + "\n", chat=True, question="  " + QUESTION)
    assert apart.ids == joined.ids
    assert smollm.tokenizer.decode(apart.ids[apart.question_start :]).startswith(QUESTION + "<|im_end|>")
    raw = encode_prompt(smollm.tokenizer, DOCUMENT, chat=False, question=QUESTION)
    assert smollm.tokenizer.decode(raw.ids[raw.question_start :]) == QUESTION  # raw: no turn suffix to keep
    with pytest.raises(CcvizError, match="question is empty"):
        encode_prompt(smollm.tokenizer, DOCUMENT, chat=True, question="  ")


def test_gemmas_turn_markers_are_kept_with_the_question(smollm):
    tokenizer = smollm.tokenizer.__class__.from_pretrained(smollm.tokenizer.name_or_path)
    tokenizer.chat_template = GEMMA_TEMPLATE
    encoded = encode_prompt(tokenizer, DOCUMENT, chat=True, question=QUESTION)
    kept = tokenizer.decode(encoded.ids[encoded.question_start :])
    assert kept == QUESTION + "<end_of_turn>\n<start_of_turn>model\n"


def test_full_with_a_question_equals_model_generate_on_the_same_turn(smollm):
    ids = encode_prompt(smollm.tokenizer, DOCUMENT + "\n\n" + QUESTION, chat=True).ids
    with torch.inference_mode():
        reference = smollm.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=16,
            do_sample=False,
        )[0, len(ids) :].tolist()
    trace = generate(smollm, DOCUMENT, question=QUESTION, policy="full", cache_size=32, max_new_tokens=16)
    assert [tok.id for tok in trace.tokens[: len(ids)]] == ids
    assert [tok.id for tok in trace.tokens if tok.source == "generated"] == reference


def test_a_session_checks_where_the_question_starts(tiny):
    prepared = prepare(tiny, DOCUMENT, RunConfig(policy="sliding", cache_size=16), question=QUESTION)
    assert prepared.question_start is not None
    with pytest.raises(CcvizError, match="question_start"):
        CacheSession(tiny, prepared.config, question_start=prepared.question_start)  # no prompt length
    with pytest.raises(CcvizError, match="question_start"):
        CacheSession(tiny, prepared.config, prompt_ids=prepared.prompt_ids, question_start=len(prepared.prompt_ids))


def test_explain_says_a_question_token_is_kept_apart_and_replays_around_it(tiny):
    trace = generate(
        tiny, DOCUMENT, question=QUESTION, policy="sliding", cache_size=8, chunk_size=4, max_new_tokens=12,
        stop_at_eos=False,
    )  # fmt: skip
    question = _question(trace)
    last = len(trace.cycles) - 1
    told = explain_without_replay(trace, last, question.start)
    assert told is not None and told.status == "question" and told.kept
    candidate = trace.cycles[last].candidates[-1]
    replayed = explain_token(tiny, trace, last, candidate)
    assert replayed.status == "candidate" and replayed.matches_trace
    assert replayed.entries[replayed.row] == candidate
    assert set(question) <= set(replayed.entries)  # the question is context the policy read
    early = [c for c in trace.cycles if c.phase == "prefill" and c.candidates][-1]  # the question has yet to come
    assert early.step <= question.start
    before = explain_token(tiny, trace, early.index, early.candidates[0])
    assert before.matches_trace and not set(question) & set(before.entries)
