"""The benchmark inputs: the fact-document generator, and where a character span lands in the engine's timesteps."""

import re

import pytest

from ccviz import CcvizError
from ccviz.cases.documents import COMBINATIONS, KINDS, make_case
from ccviz.cases.spans import prompt_tokens
from ccviz.prompts import encode_prompt


# ----- document generator ----------------------------------------------------------------------
def test_generator_is_deterministic_and_seeded():
    assert make_case(7) == make_case(7)
    assert make_case(7, words=900, position=0.3) == make_case(7, words=900, position=0.3)
    assert make_case(7).prompt != make_case(7, seed=1).prompt
    assert make_case(7).prompt != make_case(8).prompt


@pytest.mark.parametrize("words", [60, 400, 1500])
def test_fact_is_stated_exactly_once_and_the_question_is_last(words):
    for index in range(3 * len(COMBINATIONS)):
        case = make_case(index, words=words)
        start, end = case.answer_span
        assert case.prompt[start:end] == case.answer
        hits = re.findall(rf"(?<!\w){re.escape(case.answer)}(?!\w)", case.prompt, flags=re.IGNORECASE)
        assert len(hits) == 1, (index, case.answer)
        assert case.prompt[case.question_start :].startswith("Question: ")
        assert "\n" not in case.prompt[case.question_start :] and end < case.question_start


def test_every_kind_and_fact_type_is_covered_and_filler_does_not_repeat():
    cases = [make_case(i) for i in range(len(COMBINATIONS))]
    assert {(c.kind, c.fact_type) for c in cases} == set(COMBINATIONS)
    assert {c.kind for c in cases} == set(KINDS)
    for case in cases:
        splitter = r"\n" if case.kind == "chat" else r"(?<=[.?!:])\s+"
        units = [s for s in re.split(splitter, case.prompt) if len(s.split()) > 3]
        assert len(units) == len(set(units)) > 20


def test_position_and_length_are_parameters():
    early = make_case(3, position=0.1, words=600)
    late = make_case(3, position=0.9, words=600)
    assert early.answer_span[0] / len(early.prompt) < 0.2 < 0.8 < late.answer_span[0] / len(late.prompt)
    assert len(make_case(3, words=1200).prompt) > 1.8 * len(make_case(3, words=600).prompt)
    with pytest.raises(CcvizError, match="position"):
        make_case(0, position=1.5)
    with pytest.raises(CcvizError, match="kind/fact"):
        make_case(0, kind="meeting", fact_type="allergy")


def test_spans_map_characters_to_the_engines_timesteps(tiny):
    case = make_case(5)
    tokens = prompt_tokens(tiny.tokenizer, case.prompt)
    assert tokens.ids == encode_prompt(tiny.tokenizer, case.prompt, chat=True).ids
    fact = tokens.timesteps(*case.answer_span)
    assert tiny.tokenizer.decode([tokens.ids[t] for t in fact]).strip() == case.answer
    question = tokens.first_timestep(case.question_start)
    assert tiny.tokenizer.decode(tokens.ids[question : question + 2]).startswith("Question")


def test_a_prose_case_states_its_fact_and_two_distractors_of_the_same_form_once_each_in_real_prose():
    from ccviz.cases.prose import FORMS, KEYS, make_prose_case
    from ccviz.cases.texts import prose_corpus

    for index in range(12):
        case = make_prose_case(index)
        assert case == make_prose_case(index) != make_prose_case(index, seed=1)
        assert case.kind == "prose" and case.prompt[slice(*case.answer_span)] == case.answer
        document, question = case.prompt[: case.question_start], case.prompt[case.question_start :]
        assert question.startswith("Question: ") and "\n" not in question and case.answer not in question
        statement = next(s for s, q in FORMS if q.split("{key}")[0] in question)
        head, tail = statement.split("{value}")
        pattern = re.escape(head).replace(re.escape("{key}"), "(?P<key>[a-z ]+)") + r"(?P<value>\S+?)" + re.escape(tail)
        stated = {m["key"]: m["value"] for m in re.finditer(pattern, document)}
        assert len(stated) == 3 and set(stated) <= set(KEYS) and len(set(stated.values())) == 3
        asked = next(key for key in stated if key in question)
        assert stated[asked] == case.answer  # the question names the fact's key; the others are distractors
        assert all(len(re.findall(rf"(?<!\w){re.escape(v)}(?!\w)", case.prompt)) == 1 for v in stated.values())
        prose = re.sub(pattern, "", document).split()
        assert sum(word in prose_corpus() for word in prose) > 0.95 * len(prose)  # the rest is the corpus's prose
    with pytest.raises(CcvizError, match="at least 40 words"):
        make_prose_case(0, words=10)


def test_the_retention_task_measures_either_family_and_records_prose_in_its_settings(tmp_path):
    import json

    import pandas as pd

    from ccviz.models import load_model
    from ccviz_bench.specs import parse_spec
    from ccviz_bench.tasks.retention import RetentionSettings, run

    lm = load_model("tiny-random")
    settings = RetentionSettings(cases=1, accuracy_cases=0, words=60, budgets=(0.5,))
    for family, folder in (("records", tmp_path / "records"), ("prose", tmp_path / "prose")):
        run(lm, [parse_spec("sliding")], RetentionSettings(**{**vars(settings), "family": family}), folder, log=str)
        rows = pd.read_csv(folder / "retention.csv")
        assert set(rows.kind) <= ({"prose"} if family == "prose" else {"clinical", "chat", "meeting"})
        recorded = json.loads((folder / "retention.json").read_text())["settings"]
        assert recorded.get("family", "records") == family  # a records folder from before the setting resumes
