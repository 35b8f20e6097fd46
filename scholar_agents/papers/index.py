"""Search configuration and the one entry point that loads a persisted index or builds it.

``load_or_build_search(cfg, store, embedder, index_dir)`` returns a :class:`SearchBackend`. Indexes live under
``index_dir`` with a ``manifest.json`` each (corpus fingerprint, embedder, parameters): a manifest that matches is
loaded as is — document embeddings are never recomputed — and anything that differs (new papers, other text
fields, another embedder, other BM25/FAISS parameters) rebuilds just the affected part. Embeddings are cached
separately from the FAISS index, so switching flat -> HNSW re-indexes without re-encoding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from omegaconf import DictConfig

from scholar_agents.papers.bm25 import BM25Search
from scholar_agents.papers.dated_docs import DatedDocs
from scholar_agents.papers.dense import INDEX_TYPES, DenseSearch, build_faiss_index
from scholar_agents.papers.embedding_pool import EmbeddingPool, doc_hashes, fill_from
from scholar_agents.papers.hybrid import HybridSearch
from scholar_agents.papers.live.arxiv_api import ArxivApiConfig, ArxivApiSearch
from scholar_agents.papers.live.semantic_scholar import SemanticScholarConfig, SemanticScholarSearch
from scholar_agents.papers.online import OnlineSearch, OnlineSearchConfig
from scholar_agents.papers.search_base import SearchBackend
from scholar_agents.runtime.progress import progress_bar
from scholar_agents.typed_config import typed
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

KINDS = ("bm25", "dense", "hybrid", "online", "arxiv_api", "semantic_scholar", "auto")
LIVE_KINDS = ("arxiv_api", "semantic_scholar")  # they add the papers they find to the (writable) store
ENCODE_CHUNK = 1024  # papers encoded between two checkpoints (pool chunks) of a long encoding


@dataclass
class SearchConfig:
    """Which retriever and how. Presets in ``conf/search/*.yaml``."""

    # bm25 | dense | hybrid (RRF of bm25 + dense) | online (Google via Serper, mapped onto the store) |
    # arxiv_api | semantic_scholar (live services; found papers are added to the store: papers/live/) |
    # auto (ours: hybrid when the store has a dense index or is small enough to encode one, else bm25;
    # resolve_kind)
    kind: str = "hybrid"
    # search=auto builds the dense index itself for a store of at most this many papers (the bundled sample: 3.5k,
    # about a minute on 2 cores); a bigger store without one searches with BM25 (build it with search=hybrid)
    auto_dense_max_papers: int = 20000
    k: int = 10  # default number of hits (PaSa's search tool returns its top results per query)
    text_fields: list[str] = field(default_factory=lambda: ["title", "abstract"])
    keep_undated: bool = True  # papers without a date pass every before-date filter (else: never)
    # BM25 (bm25s). Lucene's variant is bm25s' default; k1/b are the usual 1.5/0.75.
    bm25_method: str = "lucene"  # lucene | robertson | atire | bm25l | bm25+
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    bm25_stopwords: Optional[str] = "en"
    bm25_stemmer: Optional[str] = None  # "english" needs PyStemmer
    # Dense (FAISS over the embedder; see dense.py for when to use which)
    faiss_index: str = "flat"  # flat | ivf | hnsw
    ivf_nlist: int = 4096
    ivf_nprobe: int = 32
    hnsw_m: int = 32
    hnsw_ef_construction: int = 200
    hnsw_ef_search: int = 128
    faiss_gpu: bool = False  # needs faiss-gpu (the `gpu` extra)
    encode_batch_size: Optional[int] = None  # default: the embedder's batch_size
    # Encode and index only the papers published before this date (ours, default off). Exact for every search
    # dated on or before it — the before-date filter is an index prefix (dated_docs.py) — and a search after it is
    # refused, never silently truncated. For closed-corpus evaluations whose queries all predate most of the corpus
    # (AutoScholarQuery dev, dated up to 2024-07-31, vs the 2024-26 arXiv dump: 9.5k of 99k papers), it skips
    # encoding the rest.
    dense_before: Optional[str] = None
    # Shared cache of document vectors (embedding_pool.py); null keeps an index-private one, deleted once built.
    embedding_pool: Optional[str] = None
    # Hybrid: reciprocal rank fusion (Cormack et al. 2009; k=60 is theirs)
    hybrid_components: list[str] = field(default_factory=lambda: ["bm25", "dense"])
    hybrid_weights: Optional[list[float]] = None
    rrf_k: float = 60.0
    rrf_depth: int = 100  # hits taken from each component before fusing
    rebuild: bool = False  # ignore saved indexes and rebuild
    online: OnlineSearchConfig = field(default_factory=OnlineSearchConfig)
    arxiv_api: ArxivApiConfig = field(default_factory=ArxivApiConfig)
    semantic_scholar: SemanticScholarConfig = field(default_factory=SemanticScholarConfig)


def to_search_config(cfg: SearchConfig | DictConfig | dict | None) -> SearchConfig:
    return typed(SearchConfig, cfg, "search")


def embedder_key(embedder: Any) -> dict[str, Any]:
    """What identifies an embedder's vectors: model, dimension, and the settings that change them."""
    ecfg = getattr(embedder, "cfg", None)
    key: dict[str, Any] = {"model": str(getattr(embedder, "model_id", type(embedder).__name__)),
                           "dim": int(embedder.dim)}
    if ecfg is not None:
        for f in ("normalize", "doc_prefix", "max_length"):
            if hasattr(ecfg, f):
                key[f] = getattr(ecfg, f)
    return key


# Bumped whenever the on-disk layout or its reading code changes (v2: BM25 vocab keys read back as ints), so an index
# written by older code is rebuilt instead of silently loaded — a stale v1 BM25 index once returned no hits at all.
INDEX_FORMAT_VERSION = 2


def _read_manifest(d: Path) -> dict[str, Any] | None:
    try:
        return json.loads((d / "manifest.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


@contextlib.contextmanager
def index_lock(index_dir: Path, component: str):
    """One builder per index component (bm25, dense) of a directory at a time (the demo, a test session and an eval
    job may start together); the others wait, then find the finished index and load it. Per component, so a
    BM25-only job never waits for another job's hour-long dense encoding."""
    index_dir.mkdir(parents=True, exist_ok=True)
    with open(index_dir / f".lock-{component}", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process building the %s index in %s ...", component, index_dir)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _write_atomically(d: Path, write: Callable[[Path], None], manifest: dict[str, Any]) -> None:
    """Write into ``<d>.tmp`` and swap it in, manifest last: an interrupted build never looks complete."""
    tmp = d.with_name(d.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)


class IndexNotBuilt(UsageError):
    """A process that must not build (``build=False``: the ranks of a job whose first step built the indexes)
    found an index missing or stale."""


def _not_built(d: Path) -> IndexNotBuilt:
    return IndexNotBuilt(f"the search index {d} is missing or was built from another store or settings: build it "
                         f"before the ranks start (`scholar papers prepare <the run's overrides>`)")


def _bm25(cfg: SearchConfig, docs: DatedDocs, texts: list[str], index_dir: Path, info: dict, progress: bool,
          build: bool = True):
    d = index_dir / "bm25"
    params = {"method": cfg.bm25_method, "k1": cfg.bm25_k1, "b": cfg.bm25_b, "stopwords": cfg.bm25_stopwords,
              "stemmer": cfg.bm25_stemmer}
    manifest = {"format": INDEX_FORMAT_VERSION, "fingerprint": docs.fingerprint, "n_docs": len(docs), "params": params}
    t = time.perf_counter()
    if not cfg.rebuild and _read_manifest(d) == manifest:
        backend = BM25Search.load(d, docs)
        info["bm25"] = {"status": "loaded", "seconds": time.perf_counter() - t}
        return backend
    if not build:
        raise _not_built(d)
    backend = BM25Search.build(docs, texts, k1=cfg.bm25_k1, b=cfg.bm25_b, method=cfg.bm25_method,
                               stopwords=cfg.bm25_stopwords, stemmer=cfg.bm25_stemmer, progress=progress)
    _write_atomically(d, backend.save, manifest)
    info["bm25"] = {"status": "built", "seconds": time.perf_counter() - t}
    log.info("built BM25 index over %d papers in %.1fs -> %s", len(docs), info["bm25"]["seconds"], d)
    return backend


def _embeddings(cfg: SearchConfig, docs: DatedDocs, texts: list[str], embedder, index_dir: Path, info: dict,
                progress: bool, build: bool = True) -> tuple[np.ndarray, dict[str, Any]]:
    """Document vectors in ``docs`` order: the index's own cache when its fingerprint matches, else assembled
    from the embedding pool (vectors of unchanged papers are reused, whatever their position) plus encoding
    of what is missing, chunk by chunk into the pool (an interrupted encoding resumes)."""
    d = index_dir / "embeddings"
    saved = _read_manifest(d)
    key = embedder_key(embedder) if embedder is not None else None
    if (not cfg.rebuild and saved is not None and saved.get("fingerprint") == docs.fingerprint
            and (key is None or saved.get("embedder") == key)):
        t = time.perf_counter()
        vectors = np.load(d / "vectors.npy")
        info["embeddings"] = {"status": "loaded", "seconds": time.perf_counter() - t}
        if key is None:
            log.info("no embedder given: using cached embeddings of %s", saved.get("embedder"))
        return vectors, saved["embedder"]
    if not build:
        raise _not_built(d)
    if embedder is None:
        raise RuntimeError(f"the dense index in {index_dir} is missing or stale and no embedder was given to build it")
    t = time.perf_counter()
    hashes = doc_hashes(docs.ids, texts)
    vectors = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    done = np.zeros(len(texts), dtype=bool)
    local_pool = not cfg.embedding_pool
    pool = EmbeddingPool(index_dir / "embeddings.partial" if local_pool else cfg.embedding_pool, key)
    if not cfg.rebuild:
        reused = 0
        if saved is not None and saved.get("embedder") == key and (d / "doc_hashes.npy").exists():
            reused += fill_from(np.load(d / "doc_hashes.npy"), lambda: np.load(d / "vectors.npy", mmap_mode="r"),
                                hashes, vectors, done)
        reused += pool.fill(hashes, vectors, done)
        if reused:
            log.info("embedding caches: %d of %d papers already encoded", reused, len(texts))
    todo = np.flatnonzero(~done)
    if len(todo):
        log.info("encoding %d papers with %s ...", len(todo), key["model"])
        bar = progress_bar(total=len(todo), desc="encode papers", unit=" papers", disable=not progress)
        for start in range(0, len(todo), ENCODE_CHUNK):
            rows = todo[start:start + ENCODE_CHUNK]
            vectors[rows] = embedder.encode([texts[i] for i in rows], batch_size=cfg.encode_batch_size, kind="doc")
            pool.add(hashes[rows], vectors[rows])
            bar.update(len(rows))
        bar.close()
    seconds = time.perf_counter() - t
    manifest = {"format": INDEX_FORMAT_VERSION, "fingerprint": docs.fingerprint, "n_docs": len(docs), "embedder": key, "encoded": int(len(todo)),
                "encode_seconds": seconds}
    def write(tmp: Path) -> None:
        np.save(tmp / "vectors.npy", vectors)
        np.save(tmp / "doc_hashes.npy", hashes)  # lets the next build after a corpus change reuse these vectors

    _write_atomically(d, write, manifest)
    if local_pool:
        shutil.rmtree(pool.dir.parent, ignore_errors=True)
    info["embeddings"] = {"status": "built", "encoded": int(len(todo)), "seconds": seconds}
    log.info("encoded %d papers (%d from the pool) in %.1fs -> %s", len(todo), len(texts) - len(todo), seconds, d)
    return vectors, key


def _dense(cfg: SearchConfig, docs: DatedDocs, texts: list[str], embedder, index_dir: Path, info: dict,
           progress: bool, build: bool = True) -> DenseSearch:
    if cfg.faiss_index not in INDEX_TYPES:
        raise ValueError(f"faiss_index must be one of {INDEX_TYPES}, got {cfg.faiss_index!r}")
    if cfg.dense_before is not None:
        docs = docs.prefix_before(cfg.dense_before)
        texts = texts[:len(docs)]
        log.info("dense index limited to the %d papers published before %s (search.dense_before)", len(docs),
                 docs.covers_before)
    vectors, key = _embeddings(cfg, docs, texts, embedder, index_dir, info, progress, build)
    t = time.perf_counter()
    if cfg.faiss_index == "flat":
        index = build_faiss_index(vectors, "flat")
        status = "built from cached embeddings" if info["embeddings"]["status"] == "loaded" else "built"
    else:
        d = index_dir / f"dense_{cfg.faiss_index}"
        params = ({"nlist": cfg.ivf_nlist} if cfg.faiss_index == "ivf"
                  else {"m": cfg.hnsw_m, "ef_construction": cfg.hnsw_ef_construction})
        manifest = {"format": INDEX_FORMAT_VERSION, "fingerprint": docs.fingerprint, "embedder": key, "index_type": cfg.faiss_index, "params": params}
        if not cfg.rebuild and _read_manifest(d) == manifest:
            index = DenseSearch.read_index(d, cfg.faiss_index)
            status = "loaded"
        elif not build:
            raise _not_built(d)
        else:
            index = build_faiss_index(vectors, cfg.faiss_index, ivf_nlist=cfg.ivf_nlist, hnsw_m=cfg.hnsw_m,
                                      hnsw_ef_construction=cfg.hnsw_ef_construction)
            backend = DenseSearch(docs, index, None, cfg.faiss_index)
            _write_atomically(d, backend.save, manifest)
            status = "built"
    info["dense"] = {"status": status, "index": cfg.faiss_index, "seconds": time.perf_counter() - t}
    return DenseSearch(docs, index, embedder, cfg.faiss_index, ivf_nprobe=cfg.ivf_nprobe,
                       hnsw_ef_search=cfg.hnsw_ef_search, gpu=cfg.faiss_gpu)


def has_dense_index(index_dir: str | Path | None) -> bool:
    """Whether ``index_dir`` holds a finished dense index (its document embeddings; a corpus change since then only
    encodes the new papers)."""
    return index_dir is not None and _read_manifest(Path(index_dir) / "embeddings") is not None


def resolve_kind(cfg: SearchConfig | DictConfig | dict | None, n_papers: int,
                 index_dir: str | Path | None) -> tuple[str, str]:
    """``search.kind`` with ``auto`` resolved (ours: the Crawler searches with the backend its training
    data were verified on): hybrid when a dense index exists for the store or the store is small enough to encode
    one (``auto_dense_max_papers``), else BM25. Returns (kind, why)."""
    cfg = to_search_config(cfg)
    if cfg.kind != "auto":
        return cfg.kind, "search.kind"
    if has_dense_index(index_dir):
        return "hybrid", f"search=auto: a dense index exists in {index_dir}"
    if n_papers <= cfg.auto_dense_max_papers:
        return "hybrid", (f"search=auto: {n_papers} papers <= search.auto_dense_max_papers="
                          f"{cfg.auto_dense_max_papers}, the dense index is built")
    return "bm25", (f"search=auto: no dense index in {index_dir} and {n_papers} papers > "
                    f"search.auto_dense_max_papers={cfg.auto_dense_max_papers} (build one with search=hybrid)")


def load_or_build_search(cfg: SearchConfig | DictConfig | dict | None, store, embedder=None,
                         index_dir: str | Path | None = None, progress: bool = False,
                         build: bool = True) -> SearchBackend:
    """The configured backend over ``store``, loading persisted indexes from ``index_dir`` when they match.
    ``build=False``: load only, writing nothing and taking no lock (an index missing or stale is
    :class:`IndexNotBuilt`): the ranks of a job whose first step built the indexes, on any file system.

    ``embedder`` is needed to build a dense index and to encode text queries; a dense index reloads without one
    (then only ``DenseSearch.search_vectors`` works). The returned backend carries ``build_info``: what was loaded
    and what was built, with timings.
    """
    cfg = to_search_config(cfg)
    if cfg.kind not in KINDS:
        raise ValueError(f"search kind must be one of {KINDS}, got {cfg.kind!r}")
    if cfg.kind == "auto":
        kind, why = resolve_kind(cfg, len(store), index_dir)
        log.info("search backend: %s (%s)", kind, why)
        cfg = dataclasses.replace(cfg, kind=kind)
        if kind == "hybrid" and embedder is None:
            raise ValueError(f"{why}: hybrid search needs an embedder (resolve search=auto with resolve_kind "
                             "before building the embedder)")
    if cfg.kind == "online":
        backend: SearchBackend = OnlineSearch(cfg.online, store)
        backend.build_info = {"online": {"status": "remote", "endpoint": cfg.online.endpoint}}  # type: ignore[attr-defined]
        return backend
    if cfg.kind in LIVE_KINDS:
        if cfg.kind == "arxiv_api":
            backend = ArxivApiSearch(cfg.arxiv_api, store)
            endpoint = cfg.arxiv_api.endpoint
        else:
            backend = SemanticScholarSearch(cfg.semantic_scholar, store)
            endpoint = cfg.semantic_scholar.endpoint
        backend.build_info = {cfg.kind: {"status": "remote", "endpoint": endpoint}}  # type: ignore[attr-defined]
        return backend
    if index_dir is None:
        raise ValueError("local search needs an index_dir to persist its indexes")
    index_dir = Path(index_dir)
    if build:
        index_dir.mkdir(parents=True, exist_ok=True)
    names = list(cfg.hybrid_components) if cfg.kind == "hybrid" else [cfg.kind]
    for n in names:
        if n not in ("bm25", "dense"):
            raise ValueError(f"hybrid components must be bm25 and/or dense, got {n!r}")
    t = time.perf_counter()
    papers = list(store.iter_papers(with_sections=False))
    if not papers:
        raise ValueError(f"the paper store {getattr(store, 'path', '')} is empty: nothing to index")
    docs, texts = DatedDocs.from_papers(papers, cfg.text_fields, cfg.keep_undated, progress=progress)
    del papers
    info: dict[str, Any] = {"documents": {"n": len(docs), "fingerprint": docs.fingerprint,
                                          "seconds": time.perf_counter() - t}}
    built: dict[str, SearchBackend] = {}
    for n in names:
        with index_lock(index_dir, n) if build else contextlib.nullcontext():
            if n == "bm25":
                built[n] = _bm25(cfg, docs, texts, index_dir, info, progress, build)
            else:
                built[n] = _dense(cfg, docs, texts, embedder, index_dir, info, progress, build)
    if cfg.kind == "hybrid":
        backend = HybridSearch([built[n] for n in names], rrf_k=cfg.rrf_k, depth=cfg.rrf_depth,
                               weights=cfg.hybrid_weights)
    else:
        backend = built[cfg.kind]
    backend.build_info = info  # type: ignore[attr-defined]
    if build:
        (index_dir / "search_config.json").write_text(json.dumps(asdict(cfg), indent=1))
    return backend
