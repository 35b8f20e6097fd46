"""Optional online search: Google through the Serper API (what PaSa used, §5.1 and footnote 7), mapped to papers.

PaSa's [Search] calls Google with ``site:arxiv.org`` and ``before:<query date>``; we do the same, then map each
result to a paper id: the arXiv id in the link, else its title matched against the store. The date filter is
also re-applied locally (Google's ``before:`` is approximate). Never required: the local backends are the
default. The API key is read only from the environment variable named in the config and is never logged.

Requests go through the live backends' session (``papers/live/http.py``): a POST per query, cached on disk keyed on
its JSON body (a crawl re-run sends nothing; the ``X-API-KEY`` header is neither in the key nor in the stored
request), retried on 429/5xx honouring ``Retry-After`` (bounded), with a timeout. A request that still fails is a
counted skip (the query gets no hits, ``stats``); an unreachable endpoint or a refused key stops the run with one
line (:class:`OnlineSearchUnreachable`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

from scholar_agents.papers.dated_docs import date_key, normalize_date
from scholar_agents.papers.live.http import HttpConfig, LiveRequestFailed, LiveServiceUnreachable, LiveSession
from scholar_agents.papers.loaders import date_from_arxiv_id, strip_version
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.search_base import Hit, SearchBackend, per_query_dates
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

_ARXIV_LINK = re.compile(r"arxiv\.org/(?:abs|pdf|html)/(\d{4}\.\d{4,5}(?:v\d+)?|[a-z\-]+(?:\.[A-Z]{2})?/\d{7})",
                         re.IGNORECASE)
_TITLE_NOISE = re.compile(r"^\s*\[[^\]]*\]\s*|\s*[-|–]\s*arxiv(?:\.org)?\s*$", re.IGNORECASE)


@dataclass
class OnlineSearchConfig:
    """Google via Serper (https://serper.dev). Point ``endpoint`` at any server speaking the same JSON."""

    endpoint: str = "https://google.serper.dev/search"
    api_key_env: str = "SERPER_API_KEY"  # the key is read from this environment variable, never from config
    site: str = "arxiv.org"  # PaSa §5.1: site:arxiv.org ("" disables)
    date_operator: bool = True  # PaSa §5.1: before:<query date> in the Google query
    num_results: int = 10  # results requested per query (Serper: 10..100); at least k are requested
    require_in_store: bool = True  # drop results that are not papers in the store (the crawler needs their text)
    # Ours, for live runs (expand=ar5iv fetches the text): an arXiv result missing from the store is added to it
    # (title, snippet as abstract, the date of its id, source "serper") instead of dropped. Needs a writable store:
    # `pasa search` then works on papers.live_store (docs/pasa.md).
    add_missing: bool = False
    title_match_min_score: float = 90.0
    max_concurrency: int = 4  # queries of one batch sent at once
    min_interval_s: float = 0.0  # between two requests that reach Serper (cache hits never wait)
    # cache (the preset: ${paths.http_cache_dir}/online.sqlite), timeout, retries with backoff, Retry-After bound
    http: HttpConfig = field(default_factory=lambda: HttpConfig(timeout_s=20.0))


class OnlineSearchError(RuntimeError):
    pass


class OnlineSearchUnreachable(OnlineSearchError, UsageError):
    """Serper cannot be used at all (no network, or the key is refused): one line, ``scholar`` exits 2."""


def _organic(response) -> list[dict[str, Any]]:
    """The ``organic`` results of a Serper answer (none is an answer); a body of another shape is malformed."""
    data = response.json()
    if not isinstance(data, dict):
        raise TypeError(f"a JSON object was expected, got {type(data).__name__}")
    organic = data.get("organic") or []
    if not isinstance(organic, list) or not all(isinstance(r, dict) for r in organic):
        raise TypeError("`organic` is not a list of results")
    return organic


class OnlineSearch(SearchBackend):
    name = "online"

    def __init__(self, cfg: OnlineSearchConfig, store=None):
        self.cfg = cfg
        self.store = store
        key = os.environ.get(cfg.api_key_env, "")
        if not key:
            raise OnlineSearchError(
                f"online search needs an API key in the environment variable {cfg.api_key_env} "
                f"(e.g. a serper.dev key); or use search.kind=bm25|dense|hybrid, which run offline")
        if cfg.require_in_store and store is None:
            raise ValueError("online search with require_in_store=true needs the paper store")
        if cfg.add_missing and getattr(store, "readonly", True):
            raise ValueError("online search with add_missing=true adds papers to the store: it needs a writable store")
        # The key travels only in this header; requests-cache redacts it (spelled as here) from what it stores.
        self.session = LiveSession(cfg.http, "search=online", "search=hybrid (the local corpus)",
                                   min_interval_s=cfg.min_interval_s, headers={"X-API-KEY": key},
                                   secret_headers=("X-API-KEY",))
        self.skipped: Counter = Counter()  # failed requests by reason (timeout, http_429, malformed, ...)
        self.added = 0  # arXiv results added to the store (add_missing)
        self._lock = threading.Lock()

    @property
    def stats(self) -> dict:
        return {"requests_sent": self.session.requests_sent, "cache_hits": self.session.cache_hits,
                "papers_added": self.added, "skipped_requests": dict(self.skipped)}

    def __repr__(self) -> str:  # never show the key
        return f"OnlineSearch(endpoint={self.cfg.endpoint!r}, key_env={self.cfg.api_key_env!r})"

    def _query_text(self, query: str, before: str | None) -> str:
        q = query.strip()
        if self.cfg.site:
            q += f" site:{self.cfg.site}"
        if before and self.cfg.date_operator:
            q += f" before:{before}"
        return q

    def _post(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """Serper's organic results; raises :class:`LiveRequestFailed` (counted by the caller) or
        :class:`OnlineSearchUnreachable`."""
        try:
            r = self.session.post(self.cfg.endpoint, payload, key_env=self.cfg.api_key_env)
        except LiveServiceUnreachable as e:
            raise OnlineSearchUnreachable(str(e)) from None
        return self.session.parsed(r, _organic)

    def _to_paper_id(self, result: dict[str, Any]) -> str | None:
        m = _ARXIV_LINK.search(str(result.get("link", "")))
        if m:
            pid = strip_version(m.group(1))
            if self.store is None or not self.cfg.require_in_store or pid in self.store:
                return pid
            if self.cfg.add_missing:
                self.store.add([Paper(pid, _TITLE_NOISE.sub("", str(result.get("title", ""))) or pid,
                                      abstract=str(result.get("snippet", "")), date=date_from_arxiv_id(pid),
                                      source="serper")])
                with self._lock:
                    self.added += 1
                return pid
        title = _TITLE_NOISE.sub("", str(result.get("title", "")))
        if self.store is not None and title:
            return self.store.find_by_title(title, min_score=self.cfg.title_match_min_score)
        return None

    def _date_of(self, pid: str) -> str:
        if self.store is not None:
            p = self.store.get_many([pid], with_sections=False).get(pid)
            if p is not None and p.date:
                return p.date
        return date_from_arxiv_id(pid)

    def _one(self, query: str, k: int, before: str | None) -> list[Hit]:
        before = normalize_date(before)
        try:
            organic = self._post({"q": self._query_text(query, before), "num": max(k, self.cfg.num_results)})
        except LiveRequestFailed as e:
            with self._lock:
                self.skipped[e.reason] += 1
            log.warning("%s (query %r: no hits, counted as skipped)", e, query[:80])
            return []
        out: list[str] = []
        for res in organic:
            pid = self._to_paper_id(res)
            if pid is None or pid in out:
                continue
            if before is not None:
                date = self._date_of(pid)
                if date and date_key(date) >= date_key(before):  # undated papers pass, as locally by default
                    continue
            out.append(pid)
            if len(out) == k:
                break
        return [Hit(pid, 1.0 / (r + 1), r) for r, pid in enumerate(out)]

    def search_batch(self, queries: Sequence[str], k: int = 10,
                     before: Sequence[str | None] | str | None = None) -> list[list[Hit]]:
        dates = per_query_dates(before, len(queries))
        with ThreadPoolExecutor(max_workers=max(1, self.cfg.max_concurrency)) as pool:
            return list(pool.map(lambda a: self._one(a[0], k, a[1]), zip(queries, dates)))
