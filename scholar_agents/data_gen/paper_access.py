"""The paper store and search backend a data_gen command runs against (the ``papers`` / ``search`` / ``embedder``
config groups), built on first use exactly as ``scholar papers build`` builds them and reused afterwards."""

from __future__ import annotations

import logging
from dataclasses import replace

from omegaconf import DictConfig, OmegaConf

from scholar_agents.llm.embedder import build_embedder
from scholar_agents.papers.corpus import build_store, to_papers_config
from scholar_agents.papers.index import load_or_build_search, resolve_kind, to_search_config
from scholar_agents.papers.search_base import SearchBackend
from scholar_agents.papers.store import PaperStore

log = logging.getLogger(__name__)


def _resolved(node):
    # Interpolations such as ${paths.sample_dir} need the root config: resolve before the node is detached.
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def open_store(cfg: DictConfig) -> PaperStore:
    """``cfg.papers``' store, read-only (built from its sources if it does not exist or they changed)."""
    pcfg = to_papers_config(_resolved(cfg.papers))
    build_store(pcfg, progress=True)
    return PaperStore(pcfg.store, readonly=True)


def open_corpus(cfg: DictConfig) -> tuple[PaperStore, SearchBackend]:
    """The store and its search backend (``cfg.search``; the embedder only when the search is dense/hybrid)."""
    pcfg = to_papers_config(_resolved(cfg.papers))
    scfg = to_search_config(_resolved(cfg.search))
    store = open_store(cfg)
    if scfg.kind == "auto":  # the backend the Crawler will search with: hybrid or bm25
        kind, why = resolve_kind(scfg, len(store), pcfg.index_dir)
        log.info("search backend: %s (%s)", kind, why)
        scfg = replace(scfg, kind=kind)
    embedder = None
    if scfg.kind == "dense" or (scfg.kind == "hybrid" and "dense" in scfg.hybrid_components):
        embedder = build_embedder(cfg.embedder)
    try:
        search = load_or_build_search(scfg, store, embedder, pcfg.index_dir, progress=True)
        search.resolved_kind = scfg.kind  # type: ignore[attr-defined]  # what a report states (search=auto resolved)
    except BaseException:
        store.close()
        raise
    return store, search
