"""The lenient JSON parser on hand-written deviations and on the corpus of REAL malformed SmolLM2 outputs
(tests/assets/malformed_llm_outputs/, collected from `data_gen` runs)."""

import json
from pathlib import Path

import pytest

from scholar_agents.data_gen import llm_json as lj
from scholar_agents.data_gen.answers import read_items
from scholar_agents.data_gen.teacher_queries import parse_teacher_queries
from tests.paths import TEST_ASSETS

CORPUS = TEST_ASSETS / "malformed_llm_outputs"


@pytest.mark.parametrize(
    "text, value, repairs",
    [
        ('[{"question": "Q?", "answer": [1]}]', [{"question": "Q?", "answer": [1]}], []),
        ('Sure!\n```json\n[{"question": "Q?", "answer": [1, 2]},]\n```\nHope it helps.',
         [{"question": "Q?", "answer": [1, 2]}], [lj.CODE_FENCE, lj.TRAILING_COMMA]),
        ("[{'question': 'What's new?', 'answer': ['x']}]", [{"question": "What's new?", "answer": ["x"]}],
         [lj.SINGLE_QUOTES, lj.UNESCAPED_QUOTE]),
        ('[{"question": "Q?", "answer": ["\\cite{1}"]}]', [{"question": "Q?", "answer": ["\\cite{1}"]}],
         [lj.INVALID_ESCAPE]),
        ('[OUTPUT]: [{"question": "Q?", "answer": [3]}] and more text',
         [{"question": "Q?", "answer": [3]}], [lj.LEADING_TEXT, lj.TRAILING_TEXT]),
        ('{"questions": [{"question": "Q?", "answer": [3]}]}', [{"question": "Q?", "answer": [3]}], [lj.WRAPPED_ARRAY]),
        ('{"question": "Q?", "answer": [3]}', [{"question": "Q?", "answer": [3]}], [lj.SINGLE_OBJECT]),
        ('{"question": "A?", "answer": [1]}\n{"question": "B?", "answer": [2]}',
         [{"question": "A?", "answer": [1]}, {"question": "B?", "answer": [2]}], [lj.BARE_SEQUENCE]),
        ('[{"question": "Which studied "attention" maps?", "answer": [1]}]',
         [{"question": 'Which studied "attention" maps?', "answer": [1]}], [lj.UNESCAPED_QUOTE]),
        ('[{question: "A?", answer: [1]} {question: "B?", answer: [2]}]',
         [{"question": "A?", "answer": [1]}, {"question": "B?", "answer": [2]}], [lj.MISSING_COMMA, lj.UNQUOTED_KEY]),
        ('[{"question": "A?", "answer": [1], "x": True, "y": None}]',
         [{"question": "A?", "answer": [1], "x": True, "y": None}], [lj.PYTHON_LITERAL]),
        ('[\u201cone\u201d, \u201ctwo\u201d]', ["one", "two"], [lj.SMART_QUOTES]),
        ('[{"a": 1}', [{"a": 1}], [lj.UNCLOSED]),
        ('[{"a": 1}, {"b": 2},"output": [{"c": 3}]', [{"a": 1}, {"b": 2}], [lj.DROPPED_AFTER_ERROR]),
        ('[{"a": 1}, {"b": 2}, {oops}]', [{"a": 1}, {"b": 2}], [lj.DROPPED_AFTER_ERROR]),
        ('[{"a": 1}]\n\n[{"b": 2}]\nThat is all.', [{"a": 1}, {"b": 2}], [lj.CONCATENATED_ARRAYS, lj.TRAILING_TEXT]),
        ('[{"question": "A?"}, "answer": [1]}, {"question": "B?", "answer": [2]}]',
         [{"question": "A?", "answer": [1]}, {"question": "B?", "answer": [2]}], [lj.OBJECT_CLOSED_EARLY]),
        # the same key twice is not a pair closed early: dropped as before
        ('[{"a": 1}, "a": 2}]', [{"a": 1}], [lj.DROPPED_AFTER_ERROR]),
    ],
)
def test_repairs(text, value, repairs):
    r = lj.parse_llm_json(text, items="object" if "{" in text else None)
    assert r.ok, r
    assert r.value == value
    assert sorted(r.repairs) == sorted(repairs)


def test_question_and_answer_written_as_two_objects_are_one_item():
    from collections import Counter

    failures, repairs = Counter(), set()
    items = [{"question": "A?"}, {"answer": ["\\cite{1}"]}, {"question": "B?"}, {"question": "C?", "answer": [2]},
             {"answer": [1]}]
    got = read_items(items, ["t1", "t2"], failures, repairs=repairs)
    assert [(q.question, q.cite_ids) for q in got] == [("A?", [1]), ("C?", [2])]
    assert dict(failures) == {"item_without_answer": 1, "item_without_question": 1}  # B? and the lone answer
    assert repairs == {"question_answer_split"}


def test_truncated_array_keeps_finished_items_and_drops_the_cut_one():
    text = '[{"question": "A?", "answer": ["\\cite{1}"]}, {"question": "B?", "answer": ["\\ci'
    r = lj.parse_llm_json(text, items="object")
    assert r.value == [{"question": "A?", "answer": ["\\cite{1}"]}]
    assert lj.TRUNCATED in r.repairs and lj.TRAILING_TEXT not in r.repairs


def test_a_bracket_in_the_prose_is_not_the_answer():
    r = lj.parse_llm_json('See [1] and [2]: [{"question": "Q?", "answer": [1]}]', items="object")
    assert r.value == [{"question": "Q?", "answer": [1]}]


@pytest.mark.parametrize(
    "text, failure",
    [("", lj.EMPTY), ("   \n", lj.EMPTY), ("no json here at all", lj.NO_JSON), ('[{"question": "A', lj.TRUNCATED_EMPTY),
     ("[Which paper?] [Another one]", lj.UNREPAIRABLE)],
)
def test_failures_are_named(text, failure):
    r = lj.parse_llm_json(text, items="object")
    assert not r.ok and r.value is None and r.failure == failure


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="expect"):
        lj.parse_llm_json("[]", expect="list")
    with pytest.raises(ValueError, match="items"):
        lj.parse_llm_json("[]", items="number")


def _corpus():
    files = sorted(CORPUS.glob("*.txt"))
    expected = json.loads((CORPUS / "expected.json").read_text())
    return [(f, expected[f.name]) for f in files]


def test_corpus_is_real_and_covers_every_expectation():
    expected = json.loads((CORPUS / "expected.json").read_text())
    files = {f.name for f in CORPUS.glob("*.txt")}
    assert files == set(expected), "every collected output needs an expectation and vice versa"
    assert len(files) >= 10
    # Not all of them can be clean: the corpus exists because real outputs break JSON.
    assert sum(1 for e in expected.values() if e["strict_json"]) < len(files)


@pytest.mark.parametrize("path, exp", _corpus(), ids=lambda x: x.name if isinstance(x, Path) else "")
def test_real_malformed_outputs(path, exp):
    text = path.read_text(encoding="utf-8")
    assert lj.strict_json_ok(text.strip()) == exp["strict_json"]
    if exp["prompt"] == "table7_queries":
        tq = parse_teacher_queries(text, max_queries=5)
        assert (tq.failure is None) == exp["usable"], tq
        if exp["usable"]:
            assert tq.queries == exp["queries"] and len(tq.queries) == exp["n_items"]
            assert sorted(tq.repairs) == sorted(exp["repairs"])
        return
    r = lj.parse_llm_json(text, expect="array", items="object")
    assert r.failure == exp["failure"]
    assert sorted(r.repairs) == sorted(exp["repairs"])
    if r.ok:
        assert len(r.value) == exp["n_items"]
        from collections import Counter

        failures, item_repairs = Counter(), set()
        questions = read_items(r.value, exp.get("citation_titles", []) or [None] * exp["n_citations"], failures,
                               repairs=item_repairs)
        assert len(questions) == exp["n_questions"]
        assert dict(failures) == exp["item_failures"]
        assert sorted(item_repairs) == exp.get("item_repairs", [])
