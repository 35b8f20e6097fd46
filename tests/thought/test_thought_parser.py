"""The Figure 3 thought/confidence parser on well-formed and malformed replies, and pre-query list parsing."""

import random

import pytest

from scholar_agents.thought.prequery import PreQuerySource, parse_numbered_questions, template_queries
from scholar_agents.thought.thought_parser import parse_thought

PASSAGE = "Benchmarks such as GLUE drove progress in NLP by ranking models on diverse tasks."


@pytest.mark.parametrize("reply, confidence, status, thought", [
    # the literal Figure 3 layout
    (f"1\n{PASSAGE}", 1, "ok", PASSAGE),
    (f"1. {PASSAGE}", 1, "ok", PASSAGE),
    ("'1'\n\n" + PASSAGE, 1, "ok", PASSAGE),
    ("0", 0, "invalid", ""),
    ("0.", 0, "invalid", ""),
    # step labels
    (f"Step 1: 1\nStep 2: {PASSAGE}", 1, "ok", PASSAGE),
    ("Step 1: 0", 0, "invalid", ""),
    (f"Step 1: output '1'\n\nStep 2:\n{PASSAGE}", 1, "ok", PASSAGE),
    # the structured layout (thought_prompt=structured), in any case / markdown
    (f"Confidence: 1\nThought: {PASSAGE}", 1, "ok", PASSAGE),
    (f"**Confidence:** 1\n**Thought:** {PASSAGE}", 1, "ok", PASSAGE),
    (f"Thought: {PASSAGE}\nConfidence: 1", 1, "ok", PASSAGE),
    ("Confidence: 0\nThought:", 0, "invalid", ""),
    ("confidence = yes\n" + PASSAGE, 1, "ok", PASSAGE),
    # JSON
    ('{"confidence": 1, "thought": "' + PASSAGE + '"}', 1, "ok", PASSAGE),
    ('{"confidence": 0}', 0, "invalid", ""),
    # the early draft / official code's 'idk'
    ("idk", 0, "invalid", ""),
    ("The question cannot be answered due to insufficient information.", 0, "invalid", ""),
    # malformed: nothing, a bare verdict with no passage, an echo of the prompt, an unmarked passage
    ("", None, "malformed", ""),
    (None, None, "malformed", ""),
    ("1", 1, "malformed", ""),
    ("Confidence: 1\nThought:", 1, "malformed", ""),
    ("Confidence: maybe\nThought: " + PASSAGE, None, "malformed", PASSAGE),
    ("Input: Given question: x. Determine if the answer is an actual answer or not.", None, "malformed", ""),
    (PASSAGE, None, "malformed", PASSAGE),
    ("{not json", None, "malformed", "{not json"),
    ("10 benchmarks were used in the paper.", None, "malformed", "10 benchmarks were used in the paper."),
])
def test_parse_thought(reply, confidence, status, thought):
    got = parse_thought(reply)
    assert (got.confidence, got.status, got.thought) == (confidence, status, thought)


def test_numbered_question_lists():
    reply = ("Here are the questions:\n1. What problem does the paper solve?\n2) How is memory organised?\n"
             "3. <Put Your Question Here>\nQ4: Why does retrieval of thoughts help abstract queries?\n"
             "Is this an unnumbered question?\n5. What problem does the paper solve?\nok")
    assert parse_numbered_questions(reply) == [
        "What problem does the paper solve?", "How is memory organised?",
        "Why does retrieval of thoughts help abstract queries?", "Is this an unnumbered question?"]
    assert parse_numbered_questions(reply, limit=2) == ["What problem does the paper solve?",
                                                         "How is memory organised?"]
    assert parse_numbered_questions("") == [] and parse_numbered_questions("no questions at all") == []


def test_template_queries_are_figure13_templates_with_title_and_sentences():
    src = PreQuerySource("Thought-Retriever", sentences=["Thoughts are stored in memory", "Memory grows with use"])
    qs = template_queries(src, 7, random.Random(0))
    assert len(qs) == 7 and len(set(qs)) == 7
    assert sum("'Thought-Retriever'" in q for q in qs) == 7
    assert sum("Thoughts are stored in memory" in q or "Memory grows with use" in q for q in qs) == 2
    assert qs == template_queries(src, 7, random.Random(0))  # seeded
    # without sentences only the five title templates apply
    assert len(template_queries(PreQuerySource("T"), 9, random.Random(0))) == 5
