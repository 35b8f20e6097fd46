"""The Thought-Retriever memory: raw chunks K and thoughts T in one persistent store (§2.1, Algorithm 1).

SQLite is the source of truth: every item row carries its text, provenance (immediate sources, root sources
Ô(·), abstraction level L(·)), the query/answer/confidence a thought came from, and its unit-norm embedding.
Each insertion is one SQLite transaction, so a crash never leaves half an item. The FAISS indexes (one per
scope, built incrementally) are derived data: ``save()`` writes a snapshot per scope atomically (temp file +
rename, with the highest item id it covers in the file name) and opening catches up from SQLite on any item
newer than the snapshot, or rebuilds the scope when a snapshot does not match — the memory survives restarts
and kills at any point.

Scopes partition the memory (e.g. one AcademicEval case = one paper's chunks and the thoughts about it);
retrieval and the redundancy check run over a list of scopes. Chunks and thoughts of a scope have separate
indexes, so R(Q, K ∪ T) merges the two and a plain RALM baseline searches K alone. The official code instead
rebuilt its index from re-embedded texts for every document and query and kept thoughts in a JSON file with no
provenance.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np

from scholar_agents.papers.dense import require_faiss
from scholar_agents.thought.provenance import abstraction_level, root_sources

# FAISS is imported where an index is touched, not at start-up of every command (the lent GPU image has no faiss wheel)
if TYPE_CHECKING:
    import faiss

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,              -- chunk | thought
    scope TEXT NOT NULL,
    text TEXT NOT NULL,
    doc_id TEXT,                     -- chunks: the document (paper, cited abstract) the chunk comes from
    origin TEXT,                     -- thoughts: id of the query that produced it (idempotent re-runs)
    query TEXT,
    answer TEXT,
    confidence INTEGER,
    sources TEXT NOT NULL,           -- JSON list of immediate source ids (thoughts)
    root_sources TEXT NOT NULL,      -- JSON list of raw-chunk ids: Ô(item)
    level REAL NOT NULL,             -- L(item)
    n_tokens INTEGER,
    meta TEXT NOT NULL,
    created REAL NOT NULL,
    embedding BLOB NOT NULL          -- float32, unit norm
);
CREATE INDEX IF NOT EXISTS items_scope ON items(scope, id);
CREATE INDEX IF NOT EXISTS items_origin ON items(scope, origin);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_COLUMNS = ("id, kind, scope, text, doc_id, origin, query, answer, confidence, sources, root_sources, level, "
            "n_tokens, meta, created")


@dataclass
class MemoryItem:
    id: int
    kind: str  # "chunk" | "thought"
    scope: str
    text: str
    doc_id: str | None = None
    origin: str | None = None
    query: str | None = None
    answer: str | None = None
    confidence: int | None = None
    sources: list[int] = field(default_factory=list)
    root_sources: list[int] = field(default_factory=list)
    level: float = 1.0
    n_tokens: int | None = None
    meta: dict = field(default_factory=dict)
    created: float = 0.0

    @classmethod
    def from_row(cls, row: tuple) -> "MemoryItem":
        (id_, kind, scope, text, doc_id, origin, query, answer, conf, sources, roots, level, n_tok, meta, created) = row
        return cls(
            id=int(id_), kind=kind, scope=scope, text=text, doc_id=doc_id, origin=origin, query=query,
            answer=answer, confidence=conf, sources=json.loads(sources), root_sources=json.loads(roots),
            level=float(level), n_tokens=n_tok, meta=json.loads(meta), created=float(created),
        )


def _unit(vectors: np.ndarray, dim: int) -> np.ndarray:
    v = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] != dim:
        raise ValueError(f"expected embeddings of shape [N, {dim}], got {tuple(v.shape)}")
    v = v.copy()
    require_faiss().normalize_L2(v)  # cosine similarity is the paper's measure (Appendix M)
    return v


KINDS = ("chunk", "thought")


def index_key(scope: str, kind: str) -> str:
    """File-name-safe key of one (scope, kind) index."""
    return hashlib.sha1(f"{scope}\x00{kind}".encode("utf-8")).hexdigest()[:20]


class Memory:
    """Persistent chunks + thoughts with incremental FAISS indexes. Use as a context manager or call ``close()``."""

    def __init__(self, path: str | os.PathLike, dim: int | None = None, index: str = "flat", hnsw_m: int = 32,
                 readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly
        if readonly:
            if not (self.path / "memory.sqlite").exists():
                raise FileNotFoundError(f"no memory at {self.path} (memory.sqlite missing)")
            self._db = sqlite3.connect(f"file:{self.path / 'memory.sqlite'}?mode=ro", uri=True)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(self.path / "memory.sqlite"))
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        self._faiss_dir = self.path / "faiss"
        stored = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        self.index_kind = stored.get("index", index)
        if index != self.index_kind:
            log.warning("memory %s was built with index=%s; keeping it (asked for %s)",
                        self.path, self.index_kind, index)
        self.hnsw_m = int(stored.get("hnsw_m", hnsw_m))
        self.dim: int | None = int(stored["dim"]) if "dim" in stored else None
        if dim is not None and self.dim is not None and dim != self.dim:
            raise ValueError(f"memory {self.path} holds {self.dim}-d embeddings, got dim={dim} (another embedder?)")
        if self.dim is None and dim is not None:
            self._set_dim(dim)
        self._indexes: dict[tuple[str, str], faiss.Index] = {}
        self._covered: dict[tuple[str, str], int] = {}  # (scope, kind) -> highest item id in its loaded index
        self._dirty: set[tuple[str, str]] = set()

    # ---------------------------------------------------------------- set-up

    def _set_dim(self, dim: int) -> None:
        self.dim = int(dim)
        if not self.readonly:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                    [("dim", str(self.dim)), ("index", self.index_kind), ("hnsw_m", str(self.hnsw_m))],
                )

    def _new_index(self) -> faiss.Index:
        assert self.dim is not None
        faiss = require_faiss()
        if self.index_kind == "hnsw":
            inner = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efSearch = 64
        else:
            inner = faiss.IndexFlatIP(self.dim)
        return faiss.IndexIDMap2(inner)

    def _snapshots(self, slot: tuple[str, str]) -> list[tuple[int, Path]]:
        if not self._faiss_dir.is_dir():
            return []
        key = index_key(*slot)
        out = []
        for p in self._faiss_dir.glob(f"{key}.*.faiss"):
            try:
                out.append((int(p.name.split(".")[1]), p))
            except ValueError:
                continue
        return sorted(out)

    def _index(self, scope: str, kind: str) -> faiss.Index:
        """The (scope, kind) index, loaded from its latest snapshot and caught up from SQLite (or rebuilt)."""
        slot = (scope, kind)
        idx = self._indexes.get(slot)
        if idx is not None:
            return idx
        if self.dim is None:
            raise ValueError("the memory is empty and has no embedding dimension yet")
        idx, covered = None, 0
        snaps = self._snapshots(slot)
        if snaps:
            covered, snap = snaps[-1]
            try:
                idx = require_faiss().read_index(str(snap))
                (expected,) = self._db.execute(
                    "SELECT COUNT(*) FROM items WHERE scope = ? AND kind = ? AND id <= ?",
                    (scope, kind, covered)).fetchone()
                if idx.ntotal != expected or idx.d != self.dim:
                    log.warning("FAISS snapshot %s is stale (%d vs %d items); rebuilding from SQLite",
                                snap, idx.ntotal, expected)
                    idx, covered = None, 0
            except RuntimeError as e:  # a truncated file from a crash mid-write of a *previous* layout
                log.warning("unreadable FAISS snapshot %s (%s); rebuilding from SQLite", snap, e)
                idx, covered = None, 0
        if idx is None:
            idx = self._new_index()
        cur = self._db.execute(
            "SELECT id, embedding FROM items WHERE scope = ? AND kind = ? AND id > ? ORDER BY id",
            (scope, kind, covered))
        added = 0
        while True:
            rows = cur.fetchmany(65536)
            if not rows:
                break
            ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
            vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), self.dim)
            idx.add_with_ids(vecs, ids)
            covered = int(ids[-1])
            added += len(rows)
        if added and snaps:
            log.info("scope %r (%s): caught up %d items newer than the FAISS snapshot", scope, kind, added)
        self._indexes[slot] = idx
        self._covered[slot] = covered
        if added:
            self._dirty.add(slot)
        return idx

    # ---------------------------------------------------------------- writes

    def _check_writable(self) -> None:
        if self.readonly:
            raise PermissionError(f"memory {self.path} is open read-only")

    def add_chunks(self, texts: Sequence[str], embeddings: np.ndarray, scope: str = "default",
                   doc_ids: Sequence[str | None] | None = None, n_tokens: Sequence[int | None] | None = None,
                   meta: Sequence[dict] | None = None) -> list[int]:
        """Store raw chunks (L = 1, Ô = {itself}) in one transaction; returns their ids in order."""
        self._check_writable()
        texts = list(texts)
        if not texts:
            return []
        emb = np.asarray(embeddings)
        if self.dim is None:
            self._set_dim(emb.shape[-1])
        vecs = _unit(emb, self.dim)
        if len(vecs) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(vecs)} embeddings")
        doc_ids = list(doc_ids) if doc_ids is not None else [None] * len(texts)
        n_tokens = list(n_tokens) if n_tokens is not None else [None] * len(texts)
        meta = list(meta) if meta is not None else [{}] * len(texts)
        now = time.time()
        with self._db:
            (start,) = self._db.execute("SELECT COALESCE(MAX(id), 0) FROM items").fetchone()
            ids = list(range(start + 1, start + 1 + len(texts)))
            self._db.executemany(
                f"INSERT INTO items ({_COLUMNS}, embedding) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (i, "chunk", scope, t, d, None, None, None, None, "[]", json.dumps([i]), 1.0, n, json.dumps(m),
                     now, v.tobytes())
                    for i, t, d, n, m, v in zip(ids, texts, doc_ids, n_tokens, meta, vecs)
                ],
            )
        self._index_add((scope, "chunk"), vecs, ids)
        return ids

    def insert_thought(self, text: str, embedding: np.ndarray, sources: Sequence[int], scope: str = "default",
                       query: str | None = None, answer: str | None = None, confidence: int | None = None,
                       origin: str | None = None, n_tokens: int | None = None, meta: dict | None = None) -> int:
        """Store a thought; Ô(T) and L(T) are derived from its immediate sources (§2.1, Eq. 1).

        With ``origin`` set, inserting twice for the same (scope, origin) returns the first id (resumed runs).
        The redundancy decision is the caller's (see ``ThoughtRetriever``), so every variant shares this code.
        """
        self._check_writable()
        if origin is not None:
            existing = self.find_origin(scope, origin)
            if existing is not None:
                return existing
        srcs = self.get(list(sources))
        if self.dim is None:
            raise ValueError("insert chunks before thoughts: a thought needs sources")
        vec = _unit(embedding, self.dim)
        now = time.time()
        with self._db:
            cur = self._db.execute(
                f"INSERT INTO items ({_COLUMNS}, embedding) VALUES (NULL,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                ("thought", scope, text, None, origin, query, answer, confidence, json.dumps([s.id for s in srcs]),
                 json.dumps(root_sources(srcs)), abstraction_level(srcs), n_tokens, json.dumps(meta or {}), now,
                 vec[0].tobytes()),
            )
            new_id = int(cur.lastrowid)
        self._index_add((scope, "thought"), vec, [new_id])
        return new_id

    def _index_add(self, slot: tuple[str, str], vecs: np.ndarray, ids: list[int]) -> None:
        if slot in self._indexes:  # otherwise it is built (with these rows) on first use
            self._indexes[slot].add_with_ids(vecs, np.asarray(ids, dtype=np.int64))
            self._covered[slot] = max(self._covered[slot], int(ids[-1]))
            self._dirty.add(slot)

    def save(self) -> None:
        """Snapshot every changed scope index: temp file + atomic rename; older snapshots removed after."""
        if self.readonly or not self._dirty:
            return
        self._faiss_dir.mkdir(parents=True, exist_ok=True)
        for slot in sorted(self._dirty):
            key, covered = index_key(*slot), self._covered[slot]
            tmp = self._faiss_dir / f".{key}.{os.getpid()}.tmp"
            require_faiss().write_index(self._indexes[slot], str(tmp))
            final = self._faiss_dir / f"{key}.{covered}.faiss"
            os.replace(tmp, final)
            for cov, p in self._snapshots(slot):
                if cov != covered:
                    p.unlink(missing_ok=True)
        self._dirty.clear()

    def close(self) -> None:
        if self._db is None:
            return
        self.save()
        self._db.close()
        self._db = None  # type: ignore[assignment]
        self._indexes.clear()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- reads

    def search(self, queries: np.ndarray, k: int, scopes: Sequence[str],
               kinds: Sequence[str] = KINDS) -> list[list[tuple[int, float]]]:
        """Top-k (id, cosine) per query vector over the union of ``scopes`` x ``kinds``, best first."""
        if self.dim is None:
            return [[] for _ in range(len(np.atleast_2d(queries)))]
        q = _unit(queries, self.dim)
        merged: list[list[tuple[int, float]]] = [[] for _ in range(len(q))]
        for scope in dict.fromkeys(scopes):
            for kind in kinds:
                if kind not in KINDS:
                    raise ValueError(f"unknown item kind {kind!r}; expected one of {KINDS}")
                idx = self._index(scope, kind)
                if idx.ntotal == 0:
                    continue
                scores, ids = idx.search(q, min(k, idx.ntotal))
                for row, (srow, irow) in enumerate(zip(scores, ids)):
                    merged[row].extend((int(i), float(s)) for i, s in zip(irow, srow) if i >= 0)
        # ties broken by id so results do not depend on scope order
        return [sorted(m, key=lambda t: (-t[1], t[0]))[:k] for m in merged]

    def nearest(self, queries: np.ndarray, scopes: Sequence[str],
                kinds: Sequence[str] = KINDS) -> list[tuple[int | None, float]]:
        """(id, cosine) of the most similar item per vector, (None, -inf) in an empty memory."""
        return [(h[0][0], h[0][1]) if h else (None, float("-inf")) for h in self.search(queries, 1, scopes, kinds)]

    def get(self, ids: Sequence[int]) -> list[MemoryItem]:
        """Items in the order of ``ids``; unknown ids raise ``KeyError``."""
        ids = [int(i) for i in ids]
        if not ids:
            return []
        found: dict[int, MemoryItem] = {}
        for start in range(0, len(ids), 900):  # SQLite's host-parameter limit
            part = ids[start:start + 900]
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM items WHERE id IN ({','.join('?' * len(part))})", part).fetchall()
            found.update((r[0], MemoryItem.from_row(r)) for r in rows)
        missing = [i for i in ids if i not in found]
        if missing:
            raise KeyError(f"memory items not found: {missing[:10]}")
        return [found[i] for i in ids]

    def embeddings(self, ids: Sequence[int]) -> np.ndarray:
        ids = [int(i) for i in ids]
        if not ids:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        out: dict[int, bytes] = {}
        for start in range(0, len(ids), 900):
            part = ids[start:start + 900]
            out.update(self._db.execute(
                f"SELECT id, embedding FROM items WHERE id IN ({','.join('?' * len(part))})", part).fetchall())
        return np.stack([np.frombuffer(out[i], dtype=np.float32) for i in ids])

    def scope_items(self, scope: str, kinds: Iterable[str] = ("chunk", "thought")) -> list[MemoryItem]:
        kinds = list(kinds)
        rows = self._db.execute(
            f"SELECT {_COLUMNS} FROM items WHERE scope = ? AND kind IN ({','.join('?' * len(kinds))}) ORDER BY id",
            [scope, *kinds]).fetchall()
        return [MemoryItem.from_row(r) for r in rows]

    def scope_version(self, scope: str) -> tuple[int, int]:
        """(item count, max id) of a scope: changes whenever the scope changes (sparse-index cache key)."""
        n, m = self._db.execute("SELECT COUNT(*), COALESCE(MAX(id), 0) FROM items WHERE scope = ?", (scope,)).fetchone()
        return int(n), int(m)

    def find_origin(self, scope: str, origin: str) -> int | None:
        row = self._db.execute(
            "SELECT id FROM items WHERE scope = ? AND origin = ? ORDER BY id LIMIT 1", (scope, origin)).fetchone()
        return int(row[0]) if row else None

    def count(self, kind: str | None = None, scope: str | None = None) -> int:
        sql, args = "SELECT COUNT(*) FROM items WHERE 1=1", []
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        if scope is not None:
            sql += " AND scope = ?"
            args.append(scope)
        return int(self._db.execute(sql, args).fetchone()[0])

    def get_meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        self._check_writable()
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def scopes(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT scope FROM items ORDER BY scope")]

    def __len__(self) -> int:
        return self.count()
