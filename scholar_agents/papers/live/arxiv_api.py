"""[Search] through the arXiv API (https://info.arxiv.org/help/api/user-manual.html): the arXiv-only search PaSa
ran through Google with ``site:arxiv.org`` (§5.1), without a search-engine key.

Query: the content words of the [Search] query (``all:`` fields; stop-words, punctuation and query syntax dropped),
combined as ``match`` says, AND-ed with ``submittedDate:[... TO <day before the query date>2359]`` for PaSa's date
filter, sorted by relevance, paged with ``start``/``max_results``. The Crawler writes natural-language queries
("graph neural networks for molecular property prediction"): AND-ing every word asks for papers containing all of
them, often none; OR-ing the content words with arXiv's relevance sort ranks the papers matching most (and the
rarest) of them first, as a search engine does. Hence ``match``: ``any_terms`` (OR, the default), ``all_terms``
(AND, strict), ``all_then_any`` (AND, then OR when AND finds nothing). The Atom
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
from scholar_agents.runtime.jax_guard import import_bm25s
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

_ID = re.compile(r"arxiv\.org/abs/(.+)$")
# Runs of letters and digits: punctuation, hyphens and the query syntax ( ) : [ ] " ^ * ? all split words.
_WORD = re.compile(r"[^\W_]+")
_OPERATORS = {"and", "or", "not", "andnot"}  # arXiv's boolean operators, never sent as terms
MATCH = ("any_terms", "all_terms", "all_then_any")
STOP_WORDS = ("sklearn", "lucene", "none")


@dataclass
class ArxivApiConfig:
    endpoint: str = "https://export.arxiv.org/api/query"
    page_size: int = 25  # max_results per request; a [Search] asks for search_k (10) papers: one page
    min_interval_s: float = 3.0  # arXiv API terms: no more than one request every three seconds
    date_filter: bool = True  # PaSa §5.1: submittedDate before the query date (also re-applied locally)
    # How a [Search] query's content words are combined (ours; PaSa's Google search needs no such choice):
    # any_terms = OR, ranked by arXiv's relevance sort (behaves like a search engine); all_terms = AND (strict: a
    # natural-language query often matches nothing); all_then_any = AND, then OR when AND finds nothing.
    match: str = "any_terms"
    # Words dropped first: sklearn = scikit-learn's ENGLISH_STOP_WORDS (318 words: question words such as "which",
    # "what", "how" too, but also "system", "first", "full"); lucene = Lucene's 33-word English stop set
    # (bm25s.stopwords.STOPWORDS_EN); none. One-character words and AND/OR/NOT/ANDNOT are always dropped.
    stop_words: str = "sklearn"
    http: HttpConfig = field(default_factory=HttpConfig)


def _feedparser():
    try:
        import feedparser
    except ImportError as e:
        raise UsageError(INSTALL_HINT) from e
    return feedparser


def _stop_words(kind: str) -> frozenset[str]:
    if kind == "sklearn":
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return frozenset(ENGLISH_STOP_WORDS)
    if kind == "lucene":
        return frozenset(import_bm25s().stopwords.STOPWORDS_EN)
    if kind == "none":
        return frozenset()
    raise UsageError(f"search.arxiv_api.stop_words must be one of {STOP_WORDS}, got {kind!r}")


def content_terms(query: str, stop_words: str = "sklearn") -> list[str]:
    """The words of ``query`` worth searching: lower-cased runs of letters/digits, without stop-words, boolean
    operators and one-character words, each once, in order. ValueError when none is left."""
    drop = _stop_words(stop_words) | _OPERATORS
    terms: list[str] = []
    for w in _WORD.findall(query.lower()):
        if len(w) > 1 and w not in drop and w not in terms:
            terms.append(w)
    if not terms:
        raise ValueError(f"empty arXiv query from {query!r}")
    return terms


def search_query(query: str | list[str], before: str | None, match: str = "any_terms",
                 stop_words: str = "sklearn") -> str:
    """The ``search_query`` of a [Search]: its content terms in all fields, OR-ed (``any_terms``) or AND-ed
    (``all_terms``), before the query date (exclusive). ``query`` may be the terms already."""
    if match not in ("any_terms", "all_terms"):
        raise ValueError(f"a single arXiv query is any_terms or all_terms, got {match!r}")
    terms = content_terms(query, stop_words) if isinstance(query, str) else query
    q = (" OR " if match == "any_terms" else " AND ").join(f"all:{w}" for w in terms)
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
        if cfg.match not in MATCH:
            raise UsageError(f"search.arxiv_api.match must be one of {MATCH}, got {cfg.match!r}")
        _stop_words(cfg.stop_words)  # a wrong name fails here, not at the first query
        self.cfg = cfg
        self.any_fallbacks = 0  # all_then_any: queries whose AND found nothing, asked again with OR
        super().__init__(store, LiveSession(cfg.http, "search=arxiv_api", "search=hybrid (the local corpus)",
                                            min_interval_s=cfg.min_interval_s))

    def __repr__(self) -> str:
        return f"ArxivApiSearch(endpoint={self.cfg.endpoint!r}, match={self.cfg.match!r})"

    @property
    def stats(self) -> dict:
        out = super().stats
        if self.cfg.match == "all_then_any":
            out["any_terms_fallbacks"] = self.any_fallbacks
        return out

    def fetch(self, query: str, k: int, before: str | None) -> list[Paper]:
        try:
            terms = content_terms(query, self.cfg.stop_words)
        except ValueError:  # nothing searchable left (e.g. "():" or only stop-words): no request, no hits, counted
            self.skipped["empty_query"] += 1
            return []
        before = before if self.cfg.date_filter else None
        if self.cfg.match != "all_then_any":
            return self._pages(search_query(terms, before, self.cfg.match), k)
        out = self._pages(search_query(terms, before, "all_terms"), k)
        if out or len(terms) == 1:  # one term: OR would ask the same again
            return out
        self.any_fallbacks += 1
        log.info("arXiv API: no paper has all of %s; asking for any of them", terms)
        return self._pages(search_query(terms, before, "any_terms"), k)

    def _pages(self, q: str, k: int) -> list[Paper]:
        """Up to ``k`` papers of ``q``, page after page."""
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
