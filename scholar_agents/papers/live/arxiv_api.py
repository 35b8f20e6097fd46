"""[Search] through the arXiv API (https://info.arxiv.org/help/api/user-manual.html): the arXiv-only search PaSa
ran through Google with ``site:arxiv.org`` (§5.1), without a search-engine key.

Query: the words of the [Search] query (``all:`` fields), AND-ed with ``submittedDate:[... TO <day before the
query date>2359]`` for PaSa's date filter, sorted by relevance, paged with ``start``/``max_results``. The Atom
feed is parsed with feedparser, as in the manual's own Python example. We do not use the ``arxiv`` package's
client: it logs a malformed page and returns it empty (no way to count it as a failure), sleeps its delay even
when the response comes from a cache, and retries without honouring Retry-After; our session does those.
The API terms ask for one request every 3 seconds (``min_interval_s``).
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
import xml.sax
from dataclasses import dataclass, field

from scholar_agents.papers.live.base import LiveSearch
from scholar_agents.papers.live.http import INSTALL_HINT, HttpConfig, LiveRequestFailed, LiveSession
from scholar_agents.papers.loaders import strip_version
from scholar_agents.papers.paper import Paper
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

_ID = re.compile(r"arxiv\.org/abs/(.+)$")
_SYNTAX = re.compile(r"[():\[\]\"^]")  # characters that would change the arXiv query's syntax


@dataclass
class ArxivApiConfig:
    endpoint: str = "https://export.arxiv.org/api/query"
    page_size: int = 25  # max_results per request; a [Search] asks for search_k (10) papers: one page
    min_interval_s: float = 3.0  # arXiv API terms: no more than one request every three seconds
    date_filter: bool = True  # PaSa §5.1: submittedDate before the query date (also re-applied locally)
    http: HttpConfig = field(default_factory=HttpConfig)


def _feedparser():
    try:
        import feedparser
    except ImportError as e:
        raise UsageError(INSTALL_HINT) from e
    return feedparser


def search_query(query: str, before: str | None) -> str:
    """The ``search_query`` of a [Search]: its words in all fields, before the query date (exclusive)."""
    words = _SYNTAX.sub(" ", query).split()
    words = [w for w in words if w.upper() not in {"AND", "OR", "ANDNOT"}]
    if not words:
        raise ValueError(f"empty arXiv query from {query!r}")
    q = " AND ".join(f"all:{w}" for w in words)
    if before:
        last = _dt.date.fromisoformat((before + "-01-01")[:10]) - _dt.timedelta(days=1)
        q = f"({q}) AND submittedDate:[190001010000 TO {last:%Y%m%d}2359]"
    return q


def parse_feed(content: bytes) -> tuple[list[Paper], int]:
    """Papers of one Atom page and the feed's opensearch:totalResults. Raises ValueError on a malformed feed or
    on the API's error entry (``<id>http://arxiv.org/api/errors#...``)."""
    feed = _feedparser().parse(content)
    if feed.get("bozo") and isinstance(feed.get("bozo_exception"), xml.sax.SAXException):
        raise ValueError(f"not an Atom feed ({feed.bozo_exception})")
    if "opensearch_totalresults" not in feed.feed:
        raise ValueError("no opensearch:totalResults: not an arXiv API feed")
    papers = []
    for e in feed.entries:
        if "api/errors" in e.get("id", ""):
            raise ValueError(f"arXiv API error: {' '.join(e.get('summary', '').split())}")
        m = _ID.search(e.get("id", ""))
        if not m or not e.get("title"):
            log.warning("arXiv API: entry without an abs id or title skipped: %r", e.get("id"))
            continue
        papers.append(Paper(
            paper_id=strip_version(m.group(1)), title=" ".join(e.title.split()),
            abstract=" ".join(e.get("summary", "").split()), date=(e.get("published") or "")[:10],
            authors=[a.get("name", "") for a in e.get("authors", []) if a.get("name")],
            categories=[t["term"] for t in e.get("tags", []) if t.get("term")], source="arxiv_api"))
    return papers, int(feed.feed["opensearch_totalresults"])


class ArxivApiSearch(LiveSearch):
    name = "arxiv_api"

    def __init__(self, cfg: ArxivApiConfig, store):
        self.cfg = cfg
        super().__init__(store, LiveSession(cfg.http, "search=arxiv_api", "search=hybrid (the local corpus)",
                                            min_interval_s=cfg.min_interval_s))

    def __repr__(self) -> str:
        return f"ArxivApiSearch(endpoint={self.cfg.endpoint!r})"

    def fetch(self, query: str, k: int, before: str | None) -> list[Paper]:
        try:
            q = search_query(query, before if self.cfg.date_filter else None)
        except ValueError:  # nothing searchable left (e.g. "():"): no request, no hits, counted
            self.skipped["empty_query"] += 1
            return []
        out: list[Paper] = []
        start = 0
        while len(out) < k:
            n = min(self.cfg.page_size, k - len(out))
            try:
                r = self.session.get(self.cfg.endpoint, params={
                    "search_query": q, "start": start, "max_results": n, "sortBy": "relevance",
                    "sortOrder": "descending"})
                papers, total = self.session.parsed(r, lambda resp: parse_feed(resp.content))
            except LiveRequestFailed as e:
                if not out:
                    raise
                # a later page failed: keep the pages already read, count the failure
                self.skipped[e.reason] += 1
                log.warning("%s; keeping the %d papers of the earlier pages", e, len(out))
                return out
            out.extend(papers)
            start += len(papers)
            if not papers or start >= total:
                break
        return out
