"""The teacher's search queries for a user query (PaSa Table 7): the [Search] arguments of imitation search
sessions, and the searches of the simulated crawl that yields Selector negatives.

The prompt asks for a JSON list (``["query1", "query2", ...]``); the output is read with the lenient JSON parser,
and when there is no list at all, with a line-based fallback (numbered / bulleted / quoted lines), counted as such.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from scholar_agents.data_gen.llm_json import parse_llm_json
from scholar_agents.llm import SamplingParams
from scholar_agents.pasa.prompts import SEARCH_QUERY_GENERATION

LINES_FALLBACK = "lines_fallback"
_ACTION_LIKE = re.compile(r"\[(?:search|expand|stop)\]", re.IGNORECASE)
_LIST_LINE = re.compile(r"^\s*(?:\d+[.)]|[-*\u2022]|Query\s*\d+\s*:)\s+(.+?)\s*$", re.IGNORECASE)
# Small models copy the rest of the Table 7 prompt into a query: cut it there.
_TEMPLATE_ECHO = re.compile(r"\s*(?:The semantics between generated queries|The format of the list is|User Query:).*$",
                            re.IGNORECASE | re.DOTALL)
_QUOTED = re.compile(r"[\"\u201c]([^\"\u201c\u201d]{3,200})[\"\u201d]")


@dataclass
class TeacherQueries:
    queries: list[str]
    failure: str | None = None  # why there are none
    repairs: list[str] = field(default_factory=list)


def teacher_messages(user_query: str) -> list[dict[str, str]]:
    """Table 7 as a one-message chat."""
    return [{"role": "user", "content": SEARCH_QUERY_GENERATION.format(user_query=user_query)}]


def _clean(queries: Sequence, max_queries: int | None, max_chars: int) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for q in queries:
        if not isinstance(q, str):
            continue
        q = " ".join(_ACTION_LIKE.sub(" ", _TEMPLATE_ECHO.sub("", q)).split()).strip(" ,;")
        key = q.lower()
        # An echo of the Table 7 template ("query1") is not a search.
        if not q or len(q) > max_chars or key in seen or re.fullmatch(r"query\s*\d*", key):
            continue
        seen.add(key)
        out.append(q)
    return out[:max_queries] if max_queries else out


def parse_teacher_queries(text: str, max_queries: int | None = None,
                          max_chars: int = 200) -> TeacherQueries:
    parsed = parse_llm_json(text, expect="array", items="string")
    if parsed.ok:
        qs = _clean(parsed.value, max_queries, max_chars)
        if qs:
            return TeacherQueries(qs, None, parsed.repairs)
        return TeacherQueries([], "no_usable_query", parsed.repairs)
    lines = [m.group(1) for m in map(_LIST_LINE.match, (text or "").splitlines()) if m]
    if not lines:  # quoted strings, but not fragments such as "The query" (a search query has a few words)
        lines = [q for q in _QUOTED.findall(text or "") if len(q.split()) >= 4]
    qs = _clean([ln.strip("\"'\u201c\u201d") for ln in lines], max_queries, max_chars)
    if qs:
        return TeacherQueries(qs, None, [LINES_FALLBACK])
    return TeacherQueries([], parsed.failure or "no_usable_query", [])


def generate_teacher_queries(llm, user_queries: Sequence[str], max_new_tokens: int, temperature: float, seed: int,
                             max_queries: int | None, stats: Counter,
                             response_prefix: str = "") -> tuple[list[TeacherQueries], list[str]]:
    """One batched LLM call; returns the parsed queries and the raw outputs (kept for the malformed-output corpus).
    ``response_prefix`` (e.g. ``["``) starts the teacher's answer for it: small models otherwise answer Table 7
    with refusals and prose (measured on SmolLM2-135M: ~80% of dev queries)."""
    if not user_queries:
        return [], []
    prompts = [teacher_messages(q) for q in user_queries]
    if response_prefix:
        prompts = [llm.render(p) + response_prefix for p in prompts]
    gens = llm.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed))
    stats["teacher_query_prompts"] += len(user_queries)
    out, raw = [], []
    for q, g in zip(user_queries, gens):
        text = response_prefix + g.completions[0].text
        tq = parse_teacher_queries(text, max_queries)
        if tq.failure:
            stats[f"teacher_queries_failed:{tq.failure}"] += 1
        for r in tq.repairs:
            stats[f"teacher_queries_repair:{r}"] += 1
        out.append(tq)
        raw.append(text)
    return out, raw
