"""Readers for PaSa's released training files (the `pasa-dataset` on the model hub), for users who have them.

- ``AutoScholarQuery/{train,dev,test}.jsonl`` and ``RealScholarQuery/test.jsonl``: ``{qid, question, answer:
  [titles], answer_arxiv_id: [ids], source_meta: {published_time: YYYYMMDD}}`` — read with
  :func:`scholar_agents.pasa.queries.load_pasa_queries` (the one query reader), re-exported here.
- ``sft_selector/{train,test}.jsonl``: ``{messages: [{user: Table 15 prompt}, {assistant: "True\\nReason: ..."}]}``.
- ``sft_crawler/train.jsonl``: ``{messages: [{user: session prompt}, {assistant: "[Search]q1\\n[Search]q2\\n
  [StopSearch]"}]}``. The released file writes the official code's tokens (``[StopSearch]``, ``[StopExpand]``, no
  space after ``[Search]``) and its prompt wording (``Please generate ...\\nUser Query:``, backquoted query);
  :meth:`CrawlerSessionExample.as_paper_format` rewrites a record into this project's Table 8 format
  (``[Search] q1 [Search] q2 [Stop]``, our prompt rendering) so both can be mixed in one SFT run.

Every reader raises ``ValueError("<file>:<line>: ...")`` on a malformed record.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from scholar_agents.data_gen.llm_json import parse_llm_json
from scholar_agents.pasa.actions import EXPAND, SEARCH, render_response
from scholar_agents.pasa.prompts import crawler_expand_messages, crawler_search_messages
from scholar_agents.pasa.queries import ScholarQuery, load_pasa_queries  # noqa: F401  (re-exported)
from scholar_agents.pasa.selectors.llm import parse_judgement
from scholar_agents.validation import jsonl_records


def _records(path: str | Path) -> Iterator[tuple[str, dict]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"PaSa release file not found: {p}")
    for lineno, rec in jsonl_records(p):
        yield f"{p}:{lineno}", rec


def _user_assistant(rec: dict, where: str) -> tuple[str, str]:
    msgs = rec.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ValueError(f"{where}: expected 'messages': [user, assistant]")
    user = [m.get("content", "") for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
    assistant = [m.get("content", "") for m in msgs if isinstance(m, dict) and m.get("role") == "assistant"]
    if len(user) != 1 or len(assistant) != 1:
        raise ValueError(f"{where}: expected exactly one user and one assistant message, got roles "
                         f"{[m.get('role') for m in msgs if isinstance(m, dict)]}")
    return str(user[0]), str(assistant[0])


# ---- sft_selector ----

_SEL_QUERY = re.compile(r"User Query:\s*(.*?)\s*\n\s*\nOutput format:", re.DOTALL)
_SEL_TITLE = re.compile(r"Title:\s*(.*?)\s*\nAbstract:", re.DOTALL)
_SEL_ABSTRACT = re.compile(r"\nAbstract:\s*(.*?)\s*\n\s*\nUser Query:", re.DOTALL)


@dataclass
class SelectorExample:
    """One Selector SFT pair: the parsed prompt fields, the label (the decision token) and the rationale."""

    user_query: str
    title: str
    abstract: str
    decision: bool
    rationale: str
    messages: list[dict[str, str]]


def load_sft_selector(path: str | Path, limit: int | None = None) -> Iterator[SelectorExample]:
    n = 0
    for where, rec in _records(path):
        if limit is not None and n >= limit:
            return
        user, answer = _user_assistant(rec, where)
        q, t, a = _SEL_QUERY.search(user), _SEL_TITLE.search(user), _SEL_ABSTRACT.search(user)
        if not (q and t and a):
            raise ValueError(f"{where}: the user message is not the Table 15 Selector prompt")
        j = parse_judgement(answer)
        if j.decision is None:
            raise ValueError(f"{where}: the assistant message does not start with True/False: {answer[:60]!r}")
        n += 1
        yield SelectorExample(q.group(1), t.group(1), a.group(1), j.decision, j.rationale,
                              [{"role": "user", "content": user}, {"role": "assistant", "content": answer}])


# ---- sft_crawler ----

_ACTION = re.compile(r"\[(Search|Expand|Stop|StopSearch|StopExpand)\]")
_SEARCH_QUERY = re.compile(r"User Query:\s*(.*)$", re.DOTALL)
_EXPAND = re.compile(
    r"conducting research on\s*[`'\"\u2018\u201c]?(?P<q>.*?)[`'\"\u2019\u201d]?\.?\s*You need to predict.*?"
    r"Title:\s*(?P<title>.*?)\s*Abstract:\s*(?P<abstract>.*?)\s*Sections:\s*(?P<sections>.*)$",
    re.DOTALL,
)


@dataclass
class CrawlerSessionExample:
    """One Crawler imitation session: ``kind`` is ``search`` (S_q) or ``expand`` (S_{q+p}); ``arguments`` are the
    queries or section headings of the response in order; ``stop_token`` is what the response ended with."""

    kind: str
    user_query: str
    arguments: list[str]
    stop_token: str | None
    messages: list[dict[str, str]]
    title: str = ""
    abstract: str = ""
    sections: list[str] = field(default_factory=list)

    def as_paper_format(self) -> list[dict[str, str]]:
        """The same session in this project's Table 8 rendering (our prompt, ``[Search] q ... [Stop]``)."""
        if self.kind == SEARCH:
            prompt = crawler_search_messages(self.user_query)
        else:
            prompt = crawler_expand_messages(self.user_query, self.title, self.abstract, self.sections)
        return prompt + [{"role": "assistant", "content": render_response(self.kind, self.arguments)}]


def parse_session_response(text: str) -> tuple[list[str], list[str], str | None]:
    """``(action kinds, arguments, stop token)`` of a released response, e.g. ``[Expand]1 Intro[StopExpand]``."""
    kinds, args, stop = [], [], None
    marks = list(_ACTION.finditer(text))
    for i, m in enumerate(marks):
        tok = m.group(1)
        if tok.startswith("Stop"):
            stop = m.group(0)
            break
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        arg = " ".join(text[m.end() : end].split())
        if arg:
            kinds.append(tok.lower())
            args.append(arg)
    return kinds, args, stop


def load_sft_crawler(path: str | Path, limit: int | None = None) -> Iterator[CrawlerSessionExample]:
    n = 0
    for where, rec in _records(path):
        if limit is not None and n >= limit:
            return
        user, answer = _user_assistant(rec, where)
        kinds, args, stop = parse_session_response(answer)
        if len(set(kinds)) > 1:
            raise ValueError(f"{where}: a session mixes [Search] and [Expand] actions")
        msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        m = _EXPAND.search(user)
        if m:
            parsed = parse_llm_json(m.group("sections"), items="string")
            sections = [str(s) for s in parsed.value] if parsed.ok and isinstance(parsed.value, list) else []
            if not sections:
                raise ValueError(f"{where}: cannot read the expand prompt's section list")
            if kinds and kinds[0] != EXPAND:
                raise ValueError(f"{where}: an expand-session prompt answered with [{kinds[0].title()}]")
            ex = CrawlerSessionExample(EXPAND, m.group("q").strip(), args, stop, msgs, title=m.group("title").strip(),
                                       abstract=m.group("abstract").strip(), sections=sections)
        else:
            q = _SEARCH_QUERY.search(user)
            if not q:
                raise ValueError(f"{where}: the user message is neither a search- nor an expand-session prompt")
            if kinds and kinds[0] != SEARCH:
                raise ValueError(f"{where}: a search-session prompt answered with [{kinds[0].title()}]")
            ex = CrawlerSessionExample(SEARCH, q.group(1).strip(), args, stop, msgs)
        n += 1
        yield ex
