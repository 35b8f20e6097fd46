"""Which corpus files make a paper store, and building the store from them (the ``papers`` config group).

A build records its sources (format, path, size, mtime) in the store; a later build with the same sources reuses
the store as is, and any change rebuilds it from scratch (merging into a store built from other files would
keep papers that are no longer in the corpus).
"""

from __future__ import annotations

import fcntl
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scholar_agents.papers.loaders import LOADERS, load_source
from scholar_agents.papers.store import PaperStore
from scholar_agents.typed_config import typed

log = logging.getLogger(__name__)


@dataclass
class CorpusSource:
    format: str = "arxiv_jsonl"  # arxiv_jsonl | gold_stubs | pasa_db | unarxive | research_town
    path: str = "???"
    optional: bool = False  # a missing file is skipped with a warning instead of failing the build
    skip_bad: bool = False  # count and log malformed records instead of failing


@dataclass
class PapersConfig:
    """A named corpus: its source files, where its store and search indexes live. Presets: ``conf/papers/``."""

    name: str = "sample"
    sources: list[CorpusSource] = field(default_factory=list)
    store: str = "${paths.cache_dir}/stores/${papers.name}.sqlite"
    index_dir: str = "${paths.cache_dir}/indexes/${papers.name}"
    # Live runs (search=arxiv_api|semantic_scholar, expand=ar5iv|semantic_scholar) work on a copy of the store that
    # the fetched papers are added to; the corpus store stays closed (papers/live/store.py).
    live_store: str = "${paths.cache_dir}/stores/${papers.name}+live.sqlite"
    resolve_references: bool = True  # map cited titles to stored papers after loading (see PaperStore)
    title_min_score: float = 90.0  # fuzzy title match threshold (0-100) for that
    rebuild_store: bool = False  # reload every source even if the store was built from the same files
    # Whether this process opens a store and indexes built before it started, writing nothing and taking no lock
    # (immutable SQLite, no index build): the ranks of a multi-process job on a shared file system, after the job's
    # first step (`scholar papers prepare`) built them. true: refused in one line when they are not built; null:
    # when WORLD_SIZE > 1 and they are built (else every rank builds under the file locks, as one process does).
    prebuilt: bool | None = None


def to_papers_config(cfg: PapersConfig | DictConfig | dict) -> PapersConfig:
    return typed(PapersConfig, cfg, "papers")


def _source_signature(src: CorpusSource) -> dict[str, Any] | None:
    p = Path(src.path)
    if not p.exists():
        return None
    files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
    return {"format": src.format, "path": str(p.resolve()),
            "files": [[str(f.relative_to(p)) if p.is_dir() else f.name, f.stat().st_size, int(f.stat().st_mtime)]
                      for f in files]}


def prebuilt_store_problem(cfg: PapersConfig) -> str | None:
    """Why ``cfg.store`` is not a finished build of ``cfg.sources`` (None when it is), read without writing: the
    store opened immutable, the sources only stat-ed."""
    store_path = Path(cfg.store)
    if not store_path.is_file():
        return f"papers.store={store_path} does not exist"
    try:
        with PaperStore(store_path, immutable=True) as store:
            built_from = store.get_meta("sources")
    except Exception as e:  # noqa: BLE001 — a half-written or foreign file: not a finished build
        return f"papers.store={store_path} cannot be read ({e})"
    wanted = json.dumps([_source_signature(src) for src in cfg.sources], sort_keys=True)
    if built_from != wanted:
        return f"papers.store={store_path} was not built from papers={cfg.name}'s sources as they are now"
    return None


def build_store(cfg: PapersConfig, progress: bool = True) -> dict[str, Any]:
    """Load ``cfg.sources`` into ``cfg.store`` (unless it already holds exactly them); returns build stats."""
    if not cfg.sources:
        raise ValueError(f"papers config {cfg.name!r} lists no sources")
    signatures = []
    for src in cfg.sources:
        if src.format not in LOADERS:
            raise ValueError(f"papers.sources: unknown format {src.format!r}; known: {sorted(LOADERS)}")
        sig = _source_signature(src)
        if sig is None:
            if not src.optional:
                raise FileNotFoundError(f"corpus source {src.path} ({src.format}) does not exist; "
                                        "mark it `optional: true` to build without it")
            log.warning("optional corpus source %s is missing: skipped", src.path)
        signatures.append(sig)
    store_path = Path(cfg.store)
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(store_path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # concurrent builds of one store: the second waits, then reuses it
        return _build_store_locked(cfg, store_path, signatures, progress)


def _build_store_locked(cfg: PapersConfig, store_path: Path, signatures: list, progress: bool) -> dict[str, Any]:
    wanted = json.dumps(signatures, sort_keys=True)
    if store_path.exists() and not cfg.rebuild_store:
        with PaperStore(store_path) as store:
            if store.get_meta("sources") == wanted:
                log.info("store %s already holds these sources (%d papers): reused", store_path, len(store))
                return {"store": str(store_path), "status": "reused", **store.stats()}
    for suffix in ("", "-wal", "-shm"):
        Path(str(store_path) + suffix).unlink(missing_ok=True)
    t0 = time.perf_counter()
    loaded: list[dict[str, Any]] = []
    with PaperStore(store_path) as store:
        for src, sig in zip(cfg.sources, signatures):
            if sig is None:
                continue
            t = time.perf_counter()
            n = store.add(load_source(src.format, src.path, skip_bad=src.skip_bad), progress=progress)
            loaded.append({"format": src.format, "path": src.path, "records": n,
                           "seconds": round(time.perf_counter() - t, 2)})
            log.info("loaded %d records from %s (%s) in %.1fs", n, src.path, src.format, loaded[-1]["seconds"])
        resolution = (store.resolve_references(min_score=cfg.title_min_score, progress=progress)
                      if cfg.resolve_references else {})
        store.set_meta("sources", wanted)
        stats = store.stats()
    return {"store": str(store_path), "status": "built", "sources": loaded, "resolution": resolution,
            "seconds": round(time.perf_counter() - t0, 2), **stats}
