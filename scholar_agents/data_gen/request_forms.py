"""Request forms: an AutoScholarQuery question rewritten the ways researchers ask.

AutoScholarQuery questions are LLM-written from Related Work sections and read alike ("Which works ...?", "Could
you mention some papers that ...?"); users write "Give me papers which ...", "I am looking for ...", "Show me
research on ...", or a few sentences with a constraint. A Crawler trained on one style may write nothing for the
others, so the evaluation (``eval pasa phrasings=[...]``) and training data rewrite each question into every form.

Templates over the question's content, deterministic, no LLM: the question's request head ("Could you provide me
some studies", "Which papers", "What are the works") is cut and the rest — the content, kept verbatim — becomes a
relative clause ``rel`` that reads after "papers": "that propose X", "about X", "related to X", "on methods for X".
Each form is then a template over ``rel``. A question no pattern matches keeps its whole text as the content
("papers about <question>"), so every form is non-empty and keeps every content word.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import Callable, Sequence

from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.validation import UsageError

ORIGINAL = "original"

_ADJ = r"(?:\s+(?:early|earlier|initial|recent|prior|previous|existing|notable|key|relevant|seminal))?"
# "Could you (please) provide me (with) some", "Can you list a few of the", "Could you tell me if there are any", ...
_POLITE = re.compile(
    r"^(?:could|can|would|will)\s+you\s+(?:please\s+)?"
    r"(?:provide|list|mention|name|tell|give|suggest|recommend|share|cite|show|point(?:\s+me)?\s+to|find|identify)"
    r"(?:\s+me)?(?:\s+with)?(?:\s+about)?(?:\s+(?:if|whether)\s+there\s+(?:are|is|were))?"
    r"(?:\s+(?:some|any|a\s+few|several|the|a))?(?:\s+of\s+the)?" + _ADJ + r"\s+", re.I)
# "What are some examples of the", "Which were the", "What early", "Any"
_WH = re.compile(r"^(?:(?:what|which)(?:\s+(?:are|were|is|was))?|any)(?:\s+(?:some|the|a\s+few))?"
                 r"(?:\s+examples\s+of)?(?:\s+of\s+the)?" + _ADJ + r"\s+", re.I)
_THERE = re.compile(r"^(?:are|is|were)\s+there\s+", re.I)  # "Which studies are there on X"
# the nouns that name the papers themselves (cut); any other noun ("methods", "datasets") is content (kept)
_PAPERS = re.compile(r"^(?:research\s+(?:papers?|works?|studies|articles?)|research|studies|study|works?|papers?|"
                     r"articles?|publications?|literature|references?)\b\s*", re.I)
_RELATIVE = re.compile(r"^(?:that|which|who|where)\s+", re.I)
# a content that starts with one of these already reads after "papers" ("papers about X", "papers related to X")
_PREPOSITION = re.compile(r"^(?:on|about|in|into|for|from|with|by|regarding|concerning|related\s+to|relating\s+to|"
                          r"dealing\s+with|focused\s+on|focusing\s+on|performed\s+on|done\s+on|conducted\s+on|"
                          r"using|that|which)\b", re.I)


def _strip(question: str) -> str:
    return " ".join(str(question).split()).rstrip(" ?.!")


def relative_clause(question: str) -> str:
    """What follows "papers" in every request form: the question's content as a relative clause (verbatim)."""
    q = _strip(question)
    if not q:
        raise ValueError("an empty question has no request forms")
    head = _POLITE.match(q) or _WH.match(q)
    rest = q[head.end():] if head else q
    noun = _PAPERS.match(rest)
    if head is None or not rest:  # no known head: the whole question is the content
        return "about " + q[0].lower() + q[1:]
    if noun is None:  # "Could you name some methods that X", "What were the methods for X": the noun is content
        return "on " + rest
    rest = rest[noun.end():]
    rest = rest[_THERE.match(rest).end():] if _THERE.match(rest) else rest
    if not rest:
        return "about " + q[0].lower() + q[1:]
    if _RELATIVE.match(rest):
        return "that " + rest[_RELATIVE.match(rest).end():]
    if _PREPOSITION.match(rest) or re.match(r"^\w+ing\b", rest):  # "about X", "discussing X"
        return rest
    return "that " + rest  # a verb phrase: "Which studies indicate X" -> "that indicate X"


# the linker that makes the content read after "papers" (cut for the bare topic)
_LINKER = re.compile(r"^(?:that|which|who|where|about|on|regarding|concerning|related\s+to|relating\s+to)\s+", re.I)


def topic(question: str) -> str:
    """The question's content without its request head or linker ("Which papers propose X?" -> "propose X"):
    the part every request form of the question shares verbatim, hence a search that reads the same whatever form
    the user asked in (the verified teacher's ``topic`` candidate, ``data_gen.topic_candidate``)."""
    rel = relative_clause(question)
    m = _LINKER.match(rel)
    return (rel[m.end():] if m and rel[m.end():].strip() else rel).strip()


# multi-sentence requests: a context sentence, the request, and one constraint (picked by the question's hash)
_CONTEXTS = ("I am writing the related work section of a paper.", "I am new to this area.",
             "I need background reading for a project.")
_CONSTRAINTS = ("Only include peer-reviewed papers, no blog posts.", "Prefer the original papers over surveys.",
                "Journal or conference papers only, please.", "Include the most cited ones first.")


def _pick(options: Sequence[str], question: str, salt: str) -> str:
    h = int(hashlib.sha256(f"{salt}|{question}".encode()).hexdigest(), 16)
    return options[h % len(options)]


def _multi_sentence(question: str, rel: str) -> str:
    return f"{_pick(_CONTEXTS, question, 'context')} Find papers {rel}. {_pick(_CONSTRAINTS, question, 'constraint')}"


FORMS: dict[str, Callable[[str, str], str]] = {
    ORIGINAL: lambda q, rel: " ".join(str(q).split()),
    "imperative": lambda q, rel: f"Give me papers {rel}",
    "papers_that": lambda q, rel: f"papers {rel}",
    "looking_for": lambda q, rel: f"I am looking for papers {rel}.",
    "show_me": lambda q, rel: f"Show me research {rel}",
    "multi_sentence": _multi_sentence,
}


def rewrite(question: str, form: str) -> str:
    """``question`` in request ``form`` (one of :data:`FORMS`)."""
    if form not in FORMS:
        raise UsageError(f"unknown request form {form!r}; forms: {', '.join(FORMS)}")
    return FORMS[form](question, relative_clause(question))


def rewrite_query(query: ScholarQuery, form: str) -> ScholarQuery:
    """The same query (qid, date, gold papers) asked in ``form``."""
    return query if form == ORIGINAL else replace(query, question=rewrite(query.question, form))
