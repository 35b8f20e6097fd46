"""The Semantic Scholar Academic Graph API (https://api.semanticscholar.org/api-docs/graph): relevance search
for [Search] and a paper's references for [Expand].

- ``GET /paper/search?query=&fields=&offset=&limit=&publicationDateOrYear=:<day before the query date>``:
  paged by ``offset``/``next`` (absent on the last page); the date filter is the API's own, re-applied locally.
- ``GET /paper/{id}/references?fields=contexts,intents,...`` (``id`` = ``ARXIV:<id>`` or the S2 paperId): the
  cited papers with the *intents* of their citations. The API has no sections, so the S_{q+p} outline offered
  to the Crawler is one section per citation intent (Background, Methodology, Result) plus "References" with
  every cited paper (ours; PaSa reads sections of the full text, see ``ar5iv.py``).

Papers get their arXiv id where S2 knows one (``externalIds.ArXiv``), else ``s2:<paperId>``. The API key is
optional (a shared rate limit applies without one), read from ``$SEMANTIC_SCHOLAR_API_KEY`` only, sent as
``x-api-key``, never logged and redacted from the response cache.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from dataclasses import dataclass, field
from typing import Any

from scholar_agents.papers.live.base import LiveSearch
from scholar_agents.papers.live.http import HttpConfig, LiveSession
from scholar_agents.papers.loaders import date_from_arxiv_id, strip_version
from scholar_agents.papers.paper import Paper, Reference, Section

log = logging.getLogger(__name__)

SEARCH_FIELDS = "title,abstract,externalIds,publicationDate,year,authors"
REFERENCE_FIELDS = "contexts,intents,title,externalIds,publicationDate,year"
INTENT_SECTIONS = {"background": "Background", "methodology": "Methodology", "result": "Result"}


@dataclass
class SemanticScholarConfig:
    endpoint: str = "https://api.semanticscholar.org/graph/v1"
    api_key_env: str = "SEMANTIC_SCHOLAR_API_KEY"  # optional; read from the environment only
    page_size: int = 100  # limit per request (the API's maximum for /paper/search and /references)
    max_references: int = 1000  # references read per paper (pages of page_size)
    min_interval_s: float = 1.0  # the API's introductory rate limit with a key: 1 request per second
    date_filter: bool = True  # PaSa §5.1: publicationDateOrYear before the query date (also re-applied locally)
    http: HttpConfig = field(default_factory=HttpConfig)


def paper_id_of(record: dict[str, Any]) -> str | None:
    """Our id of an S2 paper record: its arXiv id, else ``s2:<paperId>``; None when S2 has neither."""
    arxiv = (record.get("externalIds") or {}).get("ArXiv")
    if arxiv:
        return strip_version(str(arxiv))
    return f"s2:{record['paperId']}" if record.get("paperId") else None


def s2_key(paper_id: str) -> str:
    """The S2 path id of one of our ids (``ARXIV:2106.15928``, as the API docs spell it, or the paperId)."""
    return paper_id[3:] if paper_id.startswith("s2:") else f"ARXIV:{paper_id}"


def to_paper(record: dict[str, Any], source: str = "semantic_scholar") -> Paper | None:
    pid = paper_id_of(record)
    if pid is None or not record.get("title"):
        return None
    date = record.get("publicationDate") or (str(record["year"]) if record.get("year") else "")
    if not date and not pid.startswith("s2:"):
        date = date_from_arxiv_id(pid)
    return Paper(paper_id=pid, title=" ".join(str(record["title"]).split()),
                 abstract=" ".join(str(record.get("abstract") or "").split()), date=str(date)[:10],
                 authors=[a["name"] for a in record.get("authors") or [] if a.get("name")], source=source)


def _page(data: Any) -> tuple[list[dict], int | None]:
    """``data`` and ``next`` of a paged response; a body without a ``data`` list is malformed."""
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise TypeError("no `data` list in the response")
    nxt = data.get("next")
    return data["data"], (int(nxt) if nxt is not None else None)


def s2_session(cfg: SemanticScholarConfig, backend: str, offline: str) -> LiveSession:
    key = os.environ.get(cfg.api_key_env, "")
    if not key:
        log.info("no $%s: Semantic Scholar's shared (unauthenticated) rate limit applies", cfg.api_key_env)
    return LiveSession(cfg.http, backend, offline, min_interval_s=cfg.min_interval_s,
                       headers={"x-api-key": key} if key else None, secret_headers=("x-api-key",))


class SemanticScholarSearch(LiveSearch):
    name = "semantic_scholar"

    def __init__(self, cfg: SemanticScholarConfig, store):
        self.cfg = cfg
        super().__init__(store, s2_session(cfg, "search=semantic_scholar", "search=hybrid (the local corpus)"))

    def __repr__(self) -> str:  # never the key
        return f"SemanticScholarSearch(endpoint={self.cfg.endpoint!r}, key_env={self.cfg.api_key_env!r})"

    def fetch(self, query: str, k: int, before: str | None) -> list[Paper]:
        params: dict[str, Any] = {"query": " ".join(query.split()), "fields": SEARCH_FIELDS}
        if before and self.cfg.date_filter:
            last = _dt.date.fromisoformat((before + "-01-01")[:10]) - _dt.timedelta(days=1)
            params["publicationDateOrYear"] = f":{last.isoformat()}"
        out: list[Paper] = []
        offset: int | None = 0
        while offset is not None and len(out) < k:
            r = self.session.get(f"{self.cfg.endpoint}/paper/search", key_env=self.cfg.api_key_env,
                                 params={**params, "offset": offset, "limit": min(self.cfg.page_size, k - len(out))})
            records, offset = self.session.parsed(r, lambda resp: _page(resp.json()))
            if not records:
                break
            out.extend(p for p in map(to_paper, records) if p is not None)
        return out


def references_to_sections(records: list[dict]) -> tuple[list[Section], list[Paper]]:
    """Sections (one per citation intent, then "References") and the cited papers to store."""
    by_intent: dict[str, list[Reference]] = {}
    every: list[Reference] = []
    cited: list[Paper] = []
    for rec in records:
        paper = rec.get("citedPaper") or {}
        p = to_paper(paper, source="semantic_scholar_ref")
        if p is not None:
            cited.append(p)
            ref = Reference(paper_id=p.paper_id, title=p.title)
        elif paper.get("title"):  # S2 could not resolve the citation: keep its title for store matching
            ref = Reference(title=" ".join(str(paper["title"]).split()))
        else:
            continue
        every.append(ref)
        for intent in rec.get("intents") or []:
            if intent in INTENT_SECTIONS:
                by_intent.setdefault(intent, []).append(ref)
    sections = [Section(INTENT_SECTIONS[i], by_intent[i]) for i in INTENT_SECTIONS if i in by_intent]
    if every:
        sections.append(Section("References", every))
    return sections, cited


def fetch_references(session: LiveSession, cfg: SemanticScholarConfig, paper_id: str) -> list[dict]:
    """Every reference record of a paper (pages of ``page_size`` up to ``max_references``)."""
    out: list[dict] = []
    offset: int | None = 0
    while offset is not None and len(out) < cfg.max_references:
        r = session.get(f"{cfg.endpoint}/paper/{s2_key(paper_id)}/references", key_env=cfg.api_key_env,
                        params={"fields": REFERENCE_FIELDS, "offset": offset,
                                "limit": min(cfg.page_size, cfg.max_references - len(out))})
        records, offset = session.parsed(r, lambda resp: _page(resp.json()))
        if not records:
            break
        out.extend(records)
    return out
