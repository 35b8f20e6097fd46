"""[Expand] on papers whose full text is not in the store: fetch their sections and cited papers on demand
(the ``expand`` config group), store them, and let the crawl environment read them as it reads the corpus.

PaSa's Crawler expands papers by reading their full text (§4.1, §5.1); the closed corpus has sections only for
the papers of its citation source. ``expand=store`` (the default: evaluation and training) fetches nothing.
``expand=ar5iv`` reads the LaTeXML HTML of arXiv papers (``ar5iv.py``); ``expand=semantic_scholar`` reads the
references of any paper S2 knows (``semantic_scholar.py``). A cited paper with an id (arXiv id, or S2 paperId)
is added to the store with its date, so PaSa's date filter applies to expansion too (``crawl_env._expand``); a
cited title without one is matched against the store by title (``PaperStore.find_by_title``), as the corpus'
own references are. A paper whose text cannot be fetched (no HTML, 404, timeout, malformed page) keeps no
sections and is counted in ``skipped``: the crawl skips its session (``crawler.env.skip_sectionless``).
"""

from __future__ import annotations

import abc
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from omegaconf import DictConfig

from scholar_agents.papers.live.ar5iv import parse_html
from scholar_agents.papers.live.http import HttpConfig, LiveRequestFailed, LiveSession
from scholar_agents.papers.live.semantic_scholar import (
    SemanticScholarConfig,
    fetch_references,
    references_to_sections,
    s2_session,
)
from scholar_agents.papers.loaders import date_from_arxiv_id
from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.typed_config import typed
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

EXPAND_KINDS = ("store", "ar5iv", "semantic_scholar")


@dataclass
class Ar5ivConfig:
    # Tried in order, ``{id}`` = the arXiv id: arXiv's own HTML (papers since Dec 2023), then ar5iv (older ones).
    endpoints: list[str] = field(default_factory=lambda: ["https://arxiv.org/html/{id}",
                                                          "https://ar5iv.labs.arxiv.org/html/{id}"])
    min_interval_s: float = 1.0  # be polite to arxiv.org
    http: HttpConfig = field(default_factory=HttpConfig)


@dataclass
class ExpandConfig:
    """Where [Expand] reads a paper's sections. Presets: ``conf/expand/*.yaml``."""

    kind: str = "store"  # store (closed corpus, nothing fetched) | ar5iv | semantic_scholar
    title_min_score: float = 90.0  # cited titles matched against the store (0-100), as papers.title_min_score
    ar5iv: Ar5ivConfig = field(default_factory=Ar5ivConfig)
    semantic_scholar: SemanticScholarConfig = field(default_factory=SemanticScholarConfig)

    def __post_init__(self) -> None:
        if self.kind not in EXPAND_KINDS:
            raise UsageError(f"expand.kind must be one of {', '.join(EXPAND_KINDS)}, got {self.kind!r}")


def to_expand_config(cfg: ExpandConfig | DictConfig | dict | None) -> ExpandConfig:
    return typed(ExpandConfig, cfg, "expand")


class FullText(abc.ABC):
    """``ensure(paper_ids)``: give the stored papers among them that have no sections their fetched sections."""

    name: str

    def __init__(self, store, session: LiveSession, title_min_score: float):
        if getattr(store, "readonly", True):
            raise ValueError(f"expand={self.name} stores what it fetches: it needs a writable store")
        self.store = store
        self.session = session
        self.title_min_score = title_min_score
        self.skipped: Counter = Counter()  # papers without fetched sections, by reason
        self.fetched = 0
        self._tried: set[str] = set()  # one try per paper and run (failures are not cached)

    @abc.abstractmethod
    def fetch(self, paper: Paper) -> tuple[list[Section], list[Paper], str, str]:
        """``(sections, cited papers to store, title, abstract)`` of ``paper`` (title/abstract "" = unknown);
        raises :class:`LiveRequestFailed` when the text cannot be had."""

    @property
    def stats(self) -> dict:
        return {"requests_sent": self.session.requests_sent, "cache_hits": self.session.cache_hits,
                "papers_fetched": self.fetched, "skipped_papers": dict(self.skipped)}

    def ensure(self, paper_ids: Sequence[str]) -> None:
        todo = [i for i in dict.fromkeys(paper_ids) if i not in self._tried]
        if not todo:
            return
        self._tried.update(todo)
        for pid, paper in self.store.get_many(todo).items():
            if paper.sections:
                continue  # the corpus (or an earlier run) has them: the closed-corpus text wins
            try:
                sections, cited, title, abstract = self.fetch(paper)
            except LiveRequestFailed as e:
                self.skipped[e.reason] += 1
                log.warning("%s (paper %s: not expandable, counted as skipped)", e, pid)
                continue
            if not sections:
                self.skipped["no_sections"] += 1
                continue
            if cited:
                self.store.add(cited)  # before the citing paper: its references point at stored papers
            paper.sections = sections
            paper.title = paper.title or title
            paper.abstract = paper.abstract or abstract
            paper.source = self.name
            self.store.add([paper])
            self.fetched += 1

    def _resolve(self, title: str) -> str | None:
        return self.store.find_by_title(title, fuzzy=True, min_score=self.title_min_score) if title else None


class Ar5ivFullText(FullText):
    name = "ar5iv"

    def __init__(self, cfg: Ar5ivConfig, store, title_min_score: float):
        self.cfg = cfg
        super().__init__(store, LiveSession(cfg.http, "expand=ar5iv", "expand=store (the corpus' own sections)",
                                            min_interval_s=cfg.min_interval_s), title_min_score)

    def fetch(self, paper: Paper):
        if not date_from_arxiv_id(paper.paper_id):
            raise LiveRequestFailed(f"expand=ar5iv: {paper.paper_id} is not an arXiv id", "not_arxiv")
        last: LiveRequestFailed | None = None
        for pattern in self.cfg.endpoints:
            try:
                r = self.session.get(pattern.format(id=paper.paper_id))
                doc = self.session.parsed(r, lambda resp: parse_html(resp.content))
            except LiveRequestFailed as e:
                last = e  # not converted there (404) or a bad page: try the next endpoint
                continue
            cited: list[Paper] = []
            sections = []
            for heading, entries in doc.sections:
                refs = []
                for e in entries:
                    if e.arxiv_id:
                        refs.append(Reference(paper_id=e.arxiv_id, title=e.title or None))
                        cited.append(Paper(e.arxiv_id, e.title, date=date_from_arxiv_id(e.arxiv_id),
                                           source="ar5iv_ref"))
                    elif e.title:
                        refs.append(Reference(paper_id=self._resolve(e.title), title=e.title))
                sections.append(Section(heading, refs))
            return sections, cited, doc.title, doc.abstract
        assert last is not None
        raise last


class SemanticScholarFullText(FullText):
    name = "semantic_scholar"

    def __init__(self, cfg: SemanticScholarConfig, store, title_min_score: float):
        self.cfg = cfg
        super().__init__(store, s2_session(cfg, "expand=semantic_scholar", "expand=store (the corpus' own sections)"),
                         title_min_score)

    def fetch(self, paper: Paper):
        sections, cited = references_to_sections(fetch_references(self.session, self.cfg, paper.paper_id))
        for s in sections:  # titles S2 could not resolve: the store may know them
            s.references = [r if r.paper_id else Reference(paper_id=self._resolve(r.title or ""), title=r.title)
                            for r in s.references]
        return sections, cited, "", ""


def build_fulltext(cfg: ExpandConfig | DictConfig | dict | None, store) -> FullText | None:
    """The configured fetcher, or None for ``expand=store`` (the closed corpus: nothing is fetched)."""
    cfg = to_expand_config(cfg)
    if cfg.kind == "store":
        return None
    if cfg.kind == "ar5iv":
        return Ar5ivFullText(cfg.ar5iv, store, cfg.title_min_score)
    return SemanticScholarFullText(cfg.semantic_scholar, store, cfg.title_min_score)
