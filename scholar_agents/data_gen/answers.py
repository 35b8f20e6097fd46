"""From a parsed AutoScholarQuery generation to questions with cited papers.

The model answers each question with the citation markers of the passage (``"\\cite{3}"``), but small and large
models alike also write ``3``, ``"[3]"``, ``"\\cite{1, 4}"``, a list inside a string, or the cited paper's title.
:func:`read_items` accepts all of those, maps them to the passage's numbered citations and counts, by kind,
every item it has to drop — an output is never silently lost.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scholar_agents.papers.titles import TitleMatcher

_CITE = re.compile(r"cite\s*\{([^}]*)\}", re.IGNORECASE)
_ID_LIST = re.compile(r"[\s\[\(#]*\d+(?:[\s,;\]\)\[\(#]+\d+)*[\s\]\)]*")
_QUESTION_KEYS = ("question", "query", "q", "research_question", "questions")
_ANSWER_KEYS = ("answer", "answers", "a", "cited", "citations", "references", "papers", "ids")

# Item failure kinds (counted in the stats report).
NOT_AN_OBJECT = "item_not_an_object"
NO_QUESTION = "item_without_question"
NO_ANSWER = "item_without_answer"
NO_CITATION = "answer_without_citation"  # the answer names no marker and no title of the passage
UNKNOWN_ID = "answer_id_not_in_passage"  # e.g. \cite{12} in a passage with 8 citations (counted per id)
# Repair kind: `{"question": ".."}, {"answer": [..]}` — one item written as two objects, joined.
SPLIT_ITEM = "question_answer_split"


@dataclass
class GeneratedQuestion:
    question: str
    cite_ids: list[int]  # 1-based markers of the passage, in answer order, deduplicated
    via_title: list[int] = field(default_factory=list)  # markers found by matching an answer title


def _get(d: dict, keys: Sequence[str]) -> Any:
    lower = {str(k).strip().lower(): v for k, v in d.items()}
    for k in keys:
        if k in lower:
            return lower[k]
    return None


def _ids_and_texts(value: Any) -> tuple[list[int], list[str]]:
    """Marker numbers written in an answer value, and the strings that hold none (titles, maybe)."""
    ids: list[int] = []
    texts: list[str] = []
    if isinstance(value, bool) or value is None:
        return ids, texts
    if isinstance(value, int):
        return [value], texts
    if isinstance(value, float) and value.is_integer():
        return [int(value)], texts
    if isinstance(value, str):
        found = _CITE.findall(value)
        if found:
            for group in found:
                ids += [int(x) for x in re.findall(r"\d+", group)]
        elif _ID_LIST.fullmatch(value):
            ids += [int(x) for x in re.findall(r"\d+", value)]
        elif value.strip():
            texts.append(value.strip())
        return ids, texts
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        for v in value:
            i, t = _ids_and_texts(v)
            ids += i
            texts += t
    return ids, texts


def _join_split_items(items: list, repairs: set[str] | None) -> list:
    """An object with only a question followed by one with only an answer is one item (SmolLM2 writes
    ``{"question": ".."}, {"answer": [..]}``)."""
    out: list = []
    i = 0
    while i < len(items):
        a = items[i]
        b = items[i + 1] if i + 1 < len(items) else None
        if (isinstance(a, dict) and isinstance(b, dict) and _get(a, _QUESTION_KEYS) is not None
                and _get(a, _ANSWER_KEYS) is None and _get(b, _QUESTION_KEYS) is None
                and _get(b, _ANSWER_KEYS) is not None):
            out.append({**b, **a})
            if repairs is not None:
                repairs.add(SPLIT_ITEM)
            i += 2
            continue
        out.append(a)
        i += 1
    return out


def read_items(
    items: Any, citation_titles: Sequence[str | None], failures: Counter, title_min_score: float = 90.0,
    repairs: set[str] | None = None,
) -> list[GeneratedQuestion]:
    """Questions with the passage markers they cite. ``citation_titles[n - 1]`` is marker ``n``'s title (used when
    a model answers with titles instead of markers). Every dropped item or id is counted in ``failures``; item
    repairs (:data:`SPLIT_ITEM`) are added to ``repairs``."""
    if not isinstance(items, list):
        items = [items]
    items = _join_split_items(items, repairs)
    n_cites = len(citation_titles)
    matcher: TitleMatcher | None = None
    out: list[GeneratedQuestion] = []
    for item in items:
        if not isinstance(item, dict):
            failures[NOT_AN_OBJECT] += 1
            continue
        q = _get(item, _QUESTION_KEYS)
        if isinstance(q, list) and len(q) == 1:
            q = q[0]
        if not isinstance(q, str) or not q.strip():
            failures[NO_QUESTION] += 1
            continue
        answer = _get(item, _ANSWER_KEYS)
        if answer is None or answer == [] or answer == "":
            failures[NO_ANSWER] += 1
            continue
        ids, texts = _ids_and_texts(answer)
        via_title: list[int] = []
        for t in texts:
            if matcher is None:
                matcher = TitleMatcher([(str(i + 1), tt) for i, tt in enumerate(citation_titles) if tt],
                                       min_score=title_min_score)
            hit = matcher.match(t)
            if hit is not None:
                ids.append(int(hit))
                via_title.append(int(hit))
        kept: list[int] = []
        for i in ids:
            if not 1 <= i <= n_cites:
                failures[UNKNOWN_ID] += 1
            elif i not in kept:
                kept.append(i)
        if not kept:
            failures[NO_CITATION] += 1
            continue
        out.append(GeneratedQuestion(" ".join(q.split()), kept, [i for i in via_title if i in kept]))
    return out


def normalize_question(q: str) -> str:
    """The de-duplication key of a question: case, punctuation and spacing ignored."""
    return " ".join(re.sub(r"[^\w\s]", " ", q.lower()).split())
