"""Cited works → arXiv ids through the paper store: bibliography ids first, then the title (exact, then fuzzy).

PaSa §3.1 keeps only cited papers "that could be retrieved on arXiv, using their arxiv_id as the unique article
identifier". A bibliography entry that names an arXiv id satisfies that by itself; ``require_in_store`` also
demands the paper be in our store (needed when the data feeds a closed-corpus crawl or the Selector, which
reads the abstract). Every resolution records its method, so the stats can report the resolution rate by method.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scholar_agents.data_gen.passages import CitedWork
from scholar_agents.papers.store import PaperStore

BIB_ID = "bib_id"  # the bibliography's arXiv id, paper in the store
BIB_ID_NOT_IN_STORE = "bib_id_not_in_store"  # the bibliography's arXiv id, paper not in the store
TITLE_EXACT = "title_exact"
TITLE_FUZZY = "title_fuzzy"
UNRESOLVED = "unresolved"
METHODS = (BIB_ID, BIB_ID_NOT_IN_STORE, TITLE_EXACT, TITLE_FUZZY, UNRESOLVED)


_TITLE_WORD = re.compile(r"\b[A-Za-z][A-Za-z-]{2,}\b")


def looks_like_title(title: str | None) -> bool:
    """At least two words of three or more letters. Physics-style references ("A. Author, Phys. Rev. D 12, 345
    (2020) [arXiv:...]") have no title, and the raw-entry parser then returns a journal abbreviation ("Phys",
    "Rev", "Page D") that must not become an answer title."""
    return bool(title) and len(_TITLE_WORD.findall(title)) >= 2


@dataclass
class ResolutionConfig:
    """How cited works become answer papers."""

    use_bibliography_ids: bool = True  # arXiv ids linked or written in the bibliography entry
    # PaSa: "retrievable on arXiv" — an arXiv id suffices. true = only papers present in our store (a closed corpus).
    require_in_store: bool = False
    fuzzy: bool = True  # fall back to the store's fuzzy title match
    min_score: float = 90.0  # fuzzy title threshold (0-100, papers.titles.title_similarity)


@dataclass(frozen=True)
class Resolution:
    arxiv_id: str | None
    title: str  # the stored title where the paper is in the store, else the bibliography's
    method: str
    in_store: bool


class CitationResolver:
    def __init__(self, store: PaperStore, cfg: ResolutionConfig | None = None):
        self.store = store
        self.cfg = cfg or ResolutionConfig()
        self._memo: dict[tuple[str | None, str | None], Resolution] = {}

    def _paper_title(self, pid: str) -> str | None:
        paper = self.store.get_many([pid], with_sections=False).get(pid)
        return paper.title if paper is not None else None

    def resolve(self, work: CitedWork) -> Resolution:
        key = (work.arxiv_id, work.title)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = self._resolve(work)
        return hit

    def _resolve(self, work: CitedWork) -> Resolution:
        c = self.cfg
        if c.use_bibliography_ids and work.arxiv_id:
            title = self._paper_title(work.arxiv_id)
            if title is not None:
                return Resolution(work.arxiv_id, title, BIB_ID, True)
            if not c.require_in_store:
                # Not stored: the bibliography's title, or the id itself when the entry has no usable title.
                title = work.title if looks_like_title(work.title) else f"arXiv:{work.arxiv_id}"
                return Resolution(work.arxiv_id, title, BIB_ID_NOT_IN_STORE, False)
        if work.title:
            exact = self.store.match_title(work.title, fuzzy=False)
            match = exact
            if match is None and c.fuzzy:
                match = self.store.match_title(work.title, fuzzy=True, min_score=c.min_score)
            if match is not None:
                pid = match[0]
                method = TITLE_EXACT if exact else TITLE_FUZZY
                return Resolution(pid, self._paper_title(pid) or work.title, method, True)
        return Resolution(None, work.title or "", UNRESOLVED, False)
