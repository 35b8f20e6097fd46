"""The store of a live run: a copy of the corpus store that the live backends add to.

Fetched papers, sections and references must land in ONE store (the crawl environment, the Selector and the
reports read one), but never in the corpus store itself: the closed-corpus evaluation and training read that
one, and its search indexes are fingerprinted on its content. So a live run works on ``papers.live_store``,
seeded with SQLite's backup API from the corpus store, and re-seeded when the corpus store was rebuilt from
other sources (what was fetched is then fetched again, from the HTTP cache: no request is sent).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from scholar_agents.papers.store import PaperStore

log = logging.getLogger(__name__)


def open_live_store(corpus_store: str | Path, live_store: str | Path) -> PaperStore:
    corpus_store, live_store = Path(corpus_store), Path(live_store)
    if corpus_store.resolve() == live_store.resolve():
        raise ValueError("papers.live_store must differ from papers.store: the corpus store stays closed")
    with PaperStore(corpus_store, readonly=True) as corpus:
        sources = corpus.get_meta("sources") or ""
    if live_store.exists():
        store = PaperStore(live_store)
        if store.get_meta("seeded_from") == sources:
            return store
        store.close()
        log.info("the corpus store %s changed: re-seeding %s", corpus_store, live_store)
        for suffix in ("", "-wal", "-shm"):
            Path(str(live_store) + suffix).unlink(missing_ok=True)
    live_store.parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"file:{corpus_store.resolve()}?mode=ro", uri=True)
    dst = sqlite3.connect(str(live_store))
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    store = PaperStore(live_store)
    store.set_meta("seeded_from", sources)
    log.info("live store %s seeded from %s (%d papers)", live_store, corpus_store, len(store))
    return store
