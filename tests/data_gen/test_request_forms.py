"""The request-form rewriter on the 100 bundled AutoScholarQuery dev questions — every form
non-empty, deterministic, in its own shape, and keeping every content word of the question."""

import json
import re

import pytest

from scholar_agents.data_gen.request_forms import FORMS, ORIGINAL, relative_clause, rewrite, rewrite_query, topic
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.validation import UsageError
from tests.paths import REPO

SAMPLE = REPO / "scholar_agents" / "assets" / "sample" / "autoscholarquery_dev.jsonl"
QUESTIONS = [json.loads(line)["question"] for line in SAMPLE.read_text().splitlines() if line.strip()]
# the request's own words, which a form may drop or replace ("Could you provide me some studies" -> "Give me papers")
REQUEST_WORDS = set("""could can would will you please provide list mention name tell give suggest recommend share cite
show point find identify me with about some any few several the a an of what which who are were is was papers paper
works work studies study research articles article publications literature references reference that there if
whether early earlier initial recent prior previous existing notable key relevant seminal examples""".split())


def content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[\w'-]+", text.lower()) if w not in REQUEST_WORDS]


def test_the_sample_has_100_questions():
    assert len(QUESTIONS) == 100


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_of_every_question_is_non_empty_and_keeps_its_content_words(form):
    for q in QUESTIONS:
        text = rewrite(q, form)
        assert text.strip(), (form, q)
        assert rewrite(q, form) == text  # deterministic
        missing = [w for w in content_words(q) if w not in content_words(text)]
        assert not missing, (form, q, text, missing)


def test_forms_have_their_shapes_and_differ_from_the_question():
    q = "Could you mention some papers that propose neural algorithms for f-divergence regularized costs?"
    assert rewrite(q, ORIGINAL) == q
    rel = "that propose neural algorithms for f-divergence regularized costs"
    assert rewrite(q, "imperative") == f"Give me papers {rel}"
    assert rewrite(q, "papers_that") == "papers that propose neural algorithms for f-divergence regularized costs"
    assert rewrite(q, "looking_for").startswith("I am looking for papers that propose neural algorithms")
    assert rewrite(q, "show_me").startswith("Show me research that propose")
    multi = rewrite(q, "multi_sentence")
    assert len(re.findall(r"[.]", multi)) >= 3 and "Find papers that propose neural algorithms" in multi
    for form in FORMS:
        if form != ORIGINAL:
            assert all("?" not in rewrite(x, form) for x in QUESTIONS)  # a request, not the question


@pytest.mark.parametrize("question, rel", [
    ("Which studies indicate a natural conflict between robustness and accuracy?",
     "that indicate a natural conflict between robustness and accuracy"),
    ("Could you provide me some works related to policy-gradient methods?", "related to policy-gradient methods"),
    ("What were the methods proposed for prompt learning?", "on methods proposed for prompt learning"),
    ("Any works about adapting vision-language models?", "about adapting vision-language models"),
    ("Could you list some works discussing Countsketch operators?", "discussing Countsketch operators"),
    ("Which studies are there on pre-trained models?", "on pre-trained models"),
    ("Who introduced the Set Abstraction module?", "about who introduced the Set Abstraction module"),
])
def test_the_request_head_is_cut_and_the_content_kept(question, rel):
    assert relative_clause(question) == rel


def test_a_query_keeps_its_gold_and_date_and_unknown_forms_are_refused():
    q = ScholarQuery("q1", "Which papers worked on lower bound theory for ReLU networks?", before="2023-01-01",
                     gold_ids=["2101.00001"])
    r = rewrite_query(q, "looking_for")
    assert (r.qid, r.before, r.gold_ids) == (q.qid, q.before, q.gold_ids)
    assert r.question == "I am looking for papers that worked on lower bound theory for ReLU networks."
    assert rewrite_query(q, ORIGINAL) is q
    with pytest.raises(UsageError, match="unknown request form 'shouting'"):
        rewrite(q.question, "shouting")
    with pytest.raises(ValueError, match="empty question"):
        relative_clause(" ? ")


def test_the_topic_is_in_every_form_verbatim_and_keeps_the_content():
    """The verified teacher's topic candidate (data_gen.topic_candidate): the one search text every request form
    of the question contains, so a Crawler trained on it can write the same search whatever form it is asked in."""
    assert topic("Which papers propose graph neural networks for molecules?") == \
        "propose graph neural networks for molecules"
    assert topic("Could you provide me some studies about contrastive learning?") == "contrastive learning"
    for q in QUESTIONS:
        t = topic(q)
        assert t and not re.match(r"(?i)(that|which|about)\b", t), (q, t)
        assert all(t in rewrite(q, f) for f in FORMS if f != ORIGINAL), (q, t)
        linker = {"related", "relating", "to", "on", "regarding", "concerning"}  # what the topic cuts
        assert not [w for w in content_words(q) if w not in content_words(t) and w not in linker], (q, t)
