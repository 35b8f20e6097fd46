"""Dense retrieval: FAISS inner-product search over the embedder's vectors, before-date filtered.

Index types (``faiss_index``): ``flat`` (exact; the default and right up to a few hundred thousand papers),
``ivf`` (IVF-Flat, ``nlist`` clusters, ``nprobe`` probed) and ``hnsw`` (graph, ``M``/``efSearch``) for millions.
Vectors are added in date order, so "before D" is ``IDSelectorRange(0, cutoff)`` — exact on flat and IVF; on HNSW
a very selective filter lowers recall (the graph walk sees few allowed nodes; raise ``hnsw_ef_search``).
``faiss_gpu`` moves the index to GPUs (needs faiss-gpu, the ``gpu`` extra).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from scholar_agents.papers.dated_docs import DatedDocs
from scholar_agents.papers.search_base import Hit, SearchBackend, per_query_dates

log = logging.getLogger(__name__)

INDEX_TYPES = ("flat", "ivf", "hnsw")
# FAISS 1.15's flat search uses BLAS only from ``distance_compute_blas_threshold`` = 128,000 queries on. Measured
# here (97k x 384, one thread, CPU time): 64 queries 1108 ms -> 262 ms and 8 queries 132 -> 68 ms with the
# threshold at 8, but a single query 16 -> 38 ms; so batches of >= 8 queries switch it per call. (The setting
# is process-wide: concurrent searches may take the slower path; results are identical either way.)
BLAS_FROM_QUERIES = 8
_FAISS_BLAS_DEFAULT: dict[str, int] = {}


def require_faiss():
    """The ``faiss`` module, from faiss-cpu (the ``cpu`` extra) or faiss-gpu (the ``gpu`` extra): the two wheels
    install the same module, so the core dependencies name neither."""
    try:
        import faiss
    except ImportError as e:
        raise ImportError("dense search needs FAISS: `pip install 'scholar-agents[cpu]'` (faiss-cpu) or "
                          "`pip install 'scholar-agents[gpu]'` (faiss-gpu) on a CUDA node") from e
    return faiss


def build_faiss_index(vectors: np.ndarray, index_type: str = "flat", ivf_nlist: int = 4096, hnsw_m: int = 32,
                      hnsw_ef_construction: int = 200, seed: int = 0):
    """An inner-product FAISS index holding ``vectors`` with ids 0..N-1 (their row order)."""
    faiss = require_faiss()

    n, dim = vectors.shape
    if index_type == "flat":
        index = faiss.IndexFlatIP(dim)
    elif index_type == "ivf":
        # FAISS wants >= 39 training points per centroid; small corpora get fewer lists rather than a warning.
        nlist = max(1, min(ivf_nlist, n // 39))
        if nlist < ivf_nlist:
            log.info("IVF: %d vectors -> nlist %d (asked %d)", n, nlist, ivf_nlist)
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        train = vectors
        if n > nlist * 256:  # FAISS samples 256 points per centroid anyway
            train = vectors[np.random.default_rng(seed).choice(n, nlist * 256, replace=False)]
        index.train(train)
    elif index_type == "hnsw":
        index = faiss.IndexHNSWFlat(dim, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = hnsw_ef_construction
    else:
        raise ValueError(f"faiss_index must be one of {INDEX_TYPES}, got {index_type!r}")
    if n:
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def _to_gpu(index):
    faiss = require_faiss()

    if not hasattr(faiss, "StandardGpuResources"):
        raise RuntimeError("faiss_gpu=true needs faiss-gpu (`pip install 'scholar-agents[gpu]'`); this faiss is CPU-only")
    if faiss.get_num_gpus() < 1:
        raise RuntimeError("faiss_gpu=true but FAISS sees no GPU")
    return faiss.index_cpu_to_all_gpus(index)


class DenseSearch(SearchBackend):
    name = "dense"

    def __init__(self, docs: DatedDocs, index, embedder=None, index_type: str = "flat", ivf_nprobe: int = 32,
                 hnsw_ef_search: int = 128, gpu: bool = False):
        if index.ntotal != len(docs):
            raise ValueError(f"FAISS index holds {index.ntotal} vectors for {len(docs)} documents: rebuild it")
        self.docs = docs
        self.embedder = embedder
        self.index_type = index_type
        self.ivf_nprobe = ivf_nprobe
        self.hnsw_ef_search = hnsw_ef_search
        self.gpu = gpu
        self._cpu_index = index
        self.index = _to_gpu(index) if gpu else index

    def _params(self, cutoff: int):
        faiss = require_faiss()

        sel = faiss.IDSelectorRange(0, cutoff) if cutoff < len(self.docs) else None
        if self.index_type == "ivf":
            return faiss.SearchParametersIVF(sel=sel, nprobe=self.ivf_nprobe), sel
        if self.index_type == "hnsw":
            return faiss.SearchParametersHNSW(sel=sel, efSearch=self.hnsw_ef_search), sel
        return (faiss.SearchParameters(sel=sel) if sel is not None else None), sel

    def search_vectors(self, vectors: np.ndarray, k: int = 10,
                       before: Sequence[str | None] | str | None = None) -> list[list[Hit]]:
        """Search with query vectors already encoded (``embedder.encode(q, kind="query")``)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dates = per_query_dates(before, len(vectors))
        cutoffs = [self.docs.cutoff(d) for d in dates]
        out: list[list[Hit]] = [[] for _ in range(len(vectors))]
        # one FAISS call per distinct cutoff (queries sharing a date share a selector)
        by_cut: dict[int, list[int]] = {}
        for i, c in enumerate(cutoffs):
            by_cut.setdefault(c, []).append(i)
        for cut, rows in by_cut.items():
            if cut == 0:
                continue
            kk = min(k, cut)
            params, sel = self._params(cut)  # keep `sel` referenced: SWIG params do not own it
            D, I = self._search(vectors[rows], kk, params, cut)
            for row, dists, idxs in zip(rows, D, I):
                hits = [(int(j), float(s)) for j, s in zip(idxs, dists) if j >= 0]
                out[row] = [Hit(self.docs.ids[j], s, r) for r, (j, s) in enumerate(hits)]
        return out

    def _search(self, q: np.ndarray, k: int, params, cut: int):
        faiss = require_faiss()

        default = _FAISS_BLAS_DEFAULT.setdefault("threshold", faiss.cvar.distance_compute_blas_threshold)
        faiss.cvar.distance_compute_blas_threshold = BLAS_FROM_QUERIES if len(q) >= BLAS_FROM_QUERIES else default
        if params is None:
            return self.index.search(q, k)
        try:
            return self.index.search(q, k, params=params)
        except RuntimeError:
            if not self.gpu:
                raise
            # GPU indexes may not take selectors: over-fetch and drop post-cutoff ids.
            fetch = k
            while True:
                fetch = min(fetch * 4, self.index.ntotal)
                D, I = self.index.search(q, fetch)
                keep = [(d[(i >= 0) & (i < cut)][:k], i[(i >= 0) & (i < cut)][:k]) for d, i in zip(D, I)]
                if fetch >= self.index.ntotal or all(len(x[1]) >= k for x in keep):
                    D2 = np.full((len(q), k), -np.inf, dtype=np.float32)
                    I2 = np.full((len(q), k), -1, dtype=np.int64)
                    for r, (d, i) in enumerate(keep):
                        D2[r, :len(d)], I2[r, :len(i)] = d, i
                    return D2, I2

    def search_batch(self, queries: Sequence[str], k: int = 10,
                     before: Sequence[str | None] | str | None = None) -> list[list[Hit]]:
        if self.embedder is None:
            raise RuntimeError("dense search of text queries needs an embedder (pass one to load_or_build_search)")
        return self.search_vectors(self.embedder.encode(list(queries), kind="query"), k=k, before=before)

    def save(self, directory: str | Path) -> None:
        faiss = require_faiss()

        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if self.index_type != "flat":  # a flat index is rebuilt from the cached embeddings in a memcpy
            faiss.write_index(self._cpu_index, str(d / f"faiss_{self.index_type}.index"))

    @staticmethod
    def read_index(directory: str | Path, index_type: str):
        """The saved IVF/HNSW index of :meth:`save` (flat indexes are rebuilt from the cached embeddings)."""
        faiss = require_faiss()

        path = Path(directory) / f"faiss_{index_type}.index"
        if not path.exists():
            raise FileNotFoundError(f"no saved FAISS index at {path}")
        return faiss.read_index(str(path))
