"""What the live search backends share: the store they write fetched papers into, the local date filter, and the
count of what was skipped (a failed request loses that query's hits, never the papers already stored)."""

from __future__ import annotations

import abc
import logging
from collections import Counter
from collections.abc import Sequence

from scholar_agents.papers.dated_docs import date_key, normalize_date
from scholar_agents.papers.live.http import LiveRequestFailed
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.search_base import Hit, SearchBackend, per_query_dates

log = logging.getLogger(__name__)


class LiveSearch(SearchBackend):
    """Subclasses implement ``fetch(query, k, before) -> [Paper]`` (ranked); this class stores the papers
    (``source`` = the backend's name) so the crawl environment, the Selector and the reports see one store."""

    name = "live"

    def __init__(self, store, session):
        if store is None or getattr(store, "readonly", True):
            raise ValueError(f"{self.name} search adds the papers it finds to the store: it needs a writable store")
        self.store = store
        self.session = session
        self.skipped: Counter = Counter()  # failed requests by reason (timeout, http_429, malformed, ...)
        self.added = 0  # papers written to the store

    @abc.abstractmethod
    def fetch(self, query: str, k: int, before: str | None) -> list[Paper]:
        """Up to ``k`` papers for ``query``, best first, published before ``before`` as far as the service
        filters; raises :class:`LiveRequestFailed` for a request that failed after its retries."""

    @property
    def stats(self) -> dict:
        return {"requests_sent": self.session.requests_sent, "cache_hits": self.session.cache_hits,
                "papers_added": self.added, "skipped_requests": dict(self.skipped)}

    def _one(self, query: str, k: int, before: str | None) -> list[Hit]:
        before = normalize_date(before)
        try:
            papers = self.fetch(query, k, before)
        except LiveRequestFailed as e:
            self.skipped[e.reason] += 1
            log.warning("%s (query %r: no hits, counted as skipped)", e, query[:80])
            return []
        keep: list[Paper] = []
        for p in papers:
            # The service's own date filter is re-applied: PaSa §5.1 searches only papers before the query date.
            if before is not None and p.date and date_key(p.date) >= date_key(before):
                continue
            if p.paper_id not in {q.paper_id for q in keep}:
                keep.append(p)
        keep = keep[:k]
        if keep:
            self.added += self.store.add(keep)
        return [Hit(p.paper_id, 1.0 / (r + 1), r) for r, p in enumerate(keep)]

    def search_batch(self, queries: Sequence[str], k: int = 10,
                     before: Sequence[str | None] | str | None = None) -> list[list[Hit]]:
        # One query after the other: the services ask for spaced requests (the session enforces the interval).
        return [self._one(q, k, b) for q, b in zip(queries, per_query_dates(before, len(queries)))]
