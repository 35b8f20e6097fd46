"""SciPIP's literature database (§3.1, Fig. 1) as tables inside the paper store's SQLite file.

The official code keeps it in Neo4j; here it is four small tables next to the paper store's own, so one file
holds papers, their LLM summaries, the paper–keyword graph, co-citation counts and the embeddings:

- ``scipip_summaries``: per paper the summary, background (motivations), ideas (details) and concise method,
  each with an ``*_ok`` flag (0 = the LLM output broke the format and a fallback is stored);
- ``scipip_paper_keywords``: the paper–keyword graph (one edge per row);
- ``scipip_references`` / ``scipip_cocitations``: resolved references and the co-citation counts derived
  from them (both directions stored, so a lookup is one indexed query);
- ``scipip_embeddings``: float32 vectors as BLOBs, per (paper, field, embedder).

:class:`LiteratureIndex` is the read-side snapshot SKC retrieval runs on: unit-norm matrices per field, the
keyword graph and the co-citation lists, all in memory.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import Self

from scholar_agents.papers.dense import require_faiss

SCHEMA = """
CREATE TABLE IF NOT EXISTS scipip_summaries (
    paper_id TEXT PRIMARY KEY,
    summary TEXT, summary_ok INTEGER,
    background TEXT, ideas TEXT, details_ok INTEGER,
    keywords_ok INTEGER,
    concise_method TEXT, method_ok INTEGER,
    raw TEXT NOT NULL DEFAULT '{}'
);
CREATE TABLE IF NOT EXISTS scipip_paper_keywords (
    paper_id TEXT NOT NULL, keyword TEXT NOT NULL, PRIMARY KEY (paper_id, keyword)
);
CREATE INDEX IF NOT EXISTS scipip_paper_keywords_kw ON scipip_paper_keywords (keyword);
CREATE TABLE IF NOT EXISTS scipip_references (
    paper_id TEXT NOT NULL, cited_id TEXT NOT NULL, PRIMARY KEY (paper_id, cited_id)
);
CREATE TABLE IF NOT EXISTS scipip_cocitations (
    a TEXT NOT NULL, b TEXT NOT NULL, count INTEGER NOT NULL, PRIMARY KEY (a, b)
);
CREATE TABLE IF NOT EXISTS scipip_embeddings (
    paper_id TEXT NOT NULL, field TEXT NOT NULL, model_id TEXT NOT NULL, vec BLOB NOT NULL,
    PRIMARY KEY (field, model_id, paper_id)
);
"""

TEXT_FIELDS = ("summary", "background", "ideas", "concise_method")
EMBED_FIELDS = ("background", "ideas", "summary", "abstract")  # Eq. 2 (+ summary for clustering, abstract for the ablation)


@dataclass
class PaperSummary:
    paper_id: str
    summary: str | None = None
    background: str | None = None
    ideas: str | None = None
    concise_method: str | None = None
    keywords: list[str] = field(default_factory=list)


class LiteratureDB:
    """Read/write access to SciPIP's tables in the paper store file ``path``."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"paper store {self.path} does not exist: build it first (`scholar papers build`)")
        self.conn = sqlite3.connect(str(self.path), timeout=120)
        self.conn.executescript(SCHEMA)
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- summaries (one column group per LLM stage, so each stage resumes on its own) ----

    def pending(self, paper_ids: Iterable[str], stage: str, retry_failed: bool = False) -> list[str]:
        """Ids among ``paper_ids`` whose ``stage`` (summary | details | keywords | method) has not run yet
        (or failed, with ``retry_failed``)."""
        col = {"summary": "summary_ok", "details": "details_ok", "keywords": "keywords_ok", "method": "method_ok"}[stage]
        done = {
            pid: ok for pid, ok in self.conn.execute(f"SELECT paper_id, {col} FROM scipip_summaries WHERE {col} IS NOT NULL")
        }
        return [p for p in paper_ids if p not in done or (retry_failed and not done[p])]

    def _raw(self, pid: str) -> dict:
        row = self.conn.execute("SELECT raw FROM scipip_summaries WHERE paper_id = ?", (pid,)).fetchone()
        return json.loads(row[0]) if row else {}

    def _upsert(self, pid: str, values: dict, raw_key: str, raw_text: str) -> None:
        raw = self._raw(pid)
        raw[raw_key] = raw_text
        self.conn.execute("INSERT OR IGNORE INTO scipip_summaries (paper_id) VALUES (?)", (pid,))
        sets = ", ".join(f"{k} = ?" for k in values)
        self.conn.execute(
            f"UPDATE scipip_summaries SET {sets}, raw = ? WHERE paper_id = ?", (*values.values(), json.dumps(raw), pid)
        )

    def put_summary(self, pid: str, summary: str, ok: bool, raw: str) -> None:
        self._upsert(pid, {"summary": summary, "summary_ok": int(ok)}, "summary", raw)

    def put_details(self, pid: str, background: str, ideas: str, ok: bool, raw: str) -> None:
        self._upsert(pid, {"background": background, "ideas": ideas, "details_ok": int(ok)}, "details", raw)

    def put_keywords(self, pid: str, keywords: list[str], ok: bool, raw: str) -> None:
        self.conn.execute("DELETE FROM scipip_paper_keywords WHERE paper_id = ?", (pid,))
        self.conn.executemany(
            "INSERT OR IGNORE INTO scipip_paper_keywords (paper_id, keyword) VALUES (?, ?)", [(pid, k) for k in keywords]
        )
        self._upsert(pid, {"keywords_ok": int(ok)}, "keywords", raw)

    def put_method(self, pid: str, method: str, ok: bool, raw: str) -> None:
        self._upsert(pid, {"concise_method": method, "method_ok": int(ok)}, "method", raw)

    def commit(self) -> None:
        self.conn.commit()

    def get(self, pid: str) -> PaperSummary | None:
        got = self.get_many([pid])
        return got.get(pid)

    def get_many(self, paper_ids: Iterable[str]) -> dict[str, PaperSummary]:
        ids = list(dict.fromkeys(paper_ids))
        out: dict[str, PaperSummary] = {}
        for i in range(0, len(ids), 900):  # SQLite's bound-parameter limit
            chunk = ids[i : i + 900]
            marks = ",".join("?" * len(chunk))
            for row in self.conn.execute(
                f"SELECT paper_id, summary, background, ideas, concise_method FROM scipip_summaries WHERE paper_id IN ({marks})",
                chunk,
            ):
                out[row[0]] = PaperSummary(*row)
            for pid, kw in self.conn.execute(
                f"SELECT paper_id, keyword FROM scipip_paper_keywords WHERE paper_id IN ({marks}) ORDER BY rowid", chunk
            ):
                if pid in out:
                    out[pid].keywords.append(kw)
        return out

    def summarized_ids(self) -> list[str]:
        """Papers whose summary stage has run (the database's members for retrieval)."""
        return [r[0] for r in self.conn.execute("SELECT paper_id FROM scipip_summaries WHERE summary_ok IS NOT NULL ORDER BY paper_id")]

    def stage_counts(self) -> dict[str, dict[str, int]]:
        out = {}
        for stage, col in [("summary", "summary_ok"), ("details", "details_ok"), ("keywords", "keywords_ok"), ("method", "method_ok")]:
            ok, failed = self.conn.execute(
                f"SELECT COALESCE(SUM({col} = 1), 0), COALESCE(SUM({col} = 0), 0) FROM scipip_summaries"
            ).fetchone()
            out[stage] = {"ok": int(ok), "failed": int(failed)}
        return out

    # ---- texts for embeddings ----

    def field_texts(self, field_name: str, paper_ids: Iterable[str], abstracts: dict[str, str] | None = None) -> dict[str, str]:
        if field_name == "abstract":
            if abstracts is None:
                raise ValueError("the abstract field needs the paper store's abstracts")
            return {p: abstracts[p] for p in paper_ids if abstracts.get(p)}
        if field_name not in TEXT_FIELDS:
            raise ValueError(f"unknown field {field_name!r}; expected one of {TEXT_FIELDS + ('abstract',)}")
        got = self.get_many(paper_ids)
        return {p: getattr(s, field_name) for p, s in got.items() if getattr(s, field_name)}

    # ---- embeddings ----

    def embedded_ids(self, field_name: str, model_id: str) -> set[str]:
        return {
            r[0]
            for r in self.conn.execute(
                "SELECT paper_id FROM scipip_embeddings WHERE field = ? AND model_id = ?", (field_name, model_id)
            )
        }

    def put_embeddings(self, field_name: str, model_id: str, paper_ids: list[str], vecs: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vecs, dtype=np.float32)
        self.conn.executemany(
            "INSERT OR REPLACE INTO scipip_embeddings (paper_id, field, model_id, vec) VALUES (?, ?, ?, ?)",
            [(p, field_name, model_id, vecs[i].tobytes()) for i, p in enumerate(paper_ids)],
        )

    def load_embeddings(self, field_name: str, model_id: str) -> tuple[list[str], np.ndarray]:
        ids, rows = [], []
        for pid, blob in self.conn.execute(
            "SELECT paper_id, vec FROM scipip_embeddings WHERE field = ? AND model_id = ? ORDER BY paper_id", (field_name, model_id)
        ):
            ids.append(pid)
            rows.append(np.frombuffer(blob, dtype=np.float32))
        if not rows:
            return [], np.zeros((0, 0), dtype=np.float32)
        return ids, np.vstack(rows)

    # ---- references and co-citation ----

    def put_references(self, pid: str, cited_ids: Iterable[str]) -> None:
        self.conn.execute("DELETE FROM scipip_references WHERE paper_id = ?", (pid,))
        self.conn.executemany(
            "INSERT OR IGNORE INTO scipip_references (paper_id, cited_id) VALUES (?, ?)", [(pid, c) for c in cited_ids if c != pid]
        )

    def references(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for pid, cited in self.conn.execute("SELECT paper_id, cited_id FROM scipip_references ORDER BY rowid"):
            out[pid].append(cited)
        return dict(out)

    def rebuild_cocitations(self) -> int:
        """Co-citation counts from every stored reference list (§3.2, Eq. 5): co-cite(a, b) = number of papers
        citing both. Recomputed in full (cheap: pairs per citing paper) so incremental builds stay exact."""
        counts = cocitation_counts(self.references())
        self.conn.execute("DELETE FROM scipip_cocitations")
        self.conn.executemany(
            "INSERT INTO scipip_cocitations (a, b, count) VALUES (?, ?, ?)",
            [(a, b, c) for (a, b), c in counts.items()] + [(b, a, c) for (a, b), c in counts.items()],
        )
        self.conn.commit()
        return len(counts)

    def cocitations(self) -> dict[str, list[tuple[str, int]]]:
        out: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for a, b, c in self.conn.execute("SELECT a, b, count FROM scipip_cocitations ORDER BY a, count DESC, b"):
            out[a].append((b, c))
        return dict(out)

    def keyword_edges(self) -> list[tuple[str, str]]:
        return list(self.conn.execute("SELECT paper_id, keyword FROM scipip_paper_keywords ORDER BY rowid"))


def cocitation_counts(references: dict[str, Iterable[str]]) -> Counter:
    """{(a, b): n} with a < b: in how many citing papers a and b appear together."""
    counts: Counter = Counter()
    for cited in references.values():
        for a, b in itertools.combinations(sorted(set(cited)), 2):
            counts[(a, b)] += 1
    return counts


class KeywordGraph:
    """The paper–keyword bipartite graph (§3.1, Fig. 1) with the two queries SKC needs: keyword frequency
    (papers per keyword) and keyword co-occurrence (papers shared by two keywords)."""

    def __init__(self, edges: Iterable[tuple[str, str]]):
        self.paper_keywords: dict[str, list[str]] = defaultdict(list)
        self.keyword_papers: dict[str, set[str]] = defaultdict(set)
        for pid, kw in edges:
            if kw not in self.keyword_papers or pid not in self.keyword_papers[kw]:
                self.paper_keywords[pid].append(kw)
            self.keyword_papers[kw].add(pid)

    def frequency(self, keyword: str) -> int:
        return len(self.keyword_papers.get(keyword, ()))

    def keywords_of(self, paper_ids: Iterable[str]) -> list[str]:
        out: list[str] = []
        for p in paper_ids:
            for k in self.paper_keywords.get(p, ()):
                if k not in out:
                    out.append(k)
        return out

    def cooccurring(self, keyword: str) -> Counter:
        """Other keywords of the papers that have ``keyword``, with the number of such papers."""
        return self.cooccurring_many([keyword])[keyword]

    def _incidence(self):
        """Papers × keywords 0/1 sparse matrix (built once): co-occurrence counts of many seeds are then one
        sparse product in C instead of Python loops over every paper of a frequent keyword."""
        if getattr(self, "_csr", None) is None:
            from scipy.sparse import csr_matrix

            self._kw_list = list(self.keyword_papers)
            kw_col = {k: i for i, k in enumerate(self._kw_list)}
            papers = list(self.paper_keywords)
            rows = [r for r, p in enumerate(papers) for _ in self.paper_keywords[p]]
            cols = [kw_col[k] for p in papers for k in self.paper_keywords[p]]
            self._kw_col = kw_col
            self._csr = csr_matrix((np.ones(len(rows), dtype=np.int32), (rows, cols)), shape=(len(papers), len(kw_col)))
            self._csc = self._csr.tocsc()
        return self._csr, self._csc

    def cooccurring_many(self, keywords: Iterable[str], min_count: int = 1) -> dict[str, Counter]:
        """``cooccurring`` for several keywords at once, keeping counts >= ``min_count`` (filtered in the
        sparse result, before any Python-level work: frequent seeds co-occur with thousands of keywords)."""
        keywords = list(dict.fromkeys(keywords))
        out = {k: Counter() for k in keywords}
        present = [k for k in keywords if k in self.keyword_papers]
        if not present:
            return out
        csr, csc = self._incidence()
        seeds = csc[:, [self._kw_col[k] for k in present]]  # papers × seeds
        co = (seeds.T @ csr).tocsr()  # seeds × keywords: shared papers
        for i, k in enumerate(present):
            lo, hi = co.indptr[i], co.indptr[i + 1]
            cols, data = co.indices[lo:hi], co.data[lo:hi]
            keep = data >= min_count
            counts = out[k]
            for j, n in zip(cols[keep].tolist(), data[keep].tolist()):
                other = self._kw_list[j]
                if other != k:
                    counts[other] = int(n)
        return out


@dataclass
class LiteratureIndex:
    """Everything SKC retrieval reads, in memory. ``vectors[field]`` is unit-norm ``[len(ids), dim]`` with rows
    aligned to ``ids``; papers missing a field's embedding get a zero row (they never match)."""

    ids: list[str]
    vectors: dict[str, np.ndarray]
    graph: KeywordGraph
    cocite: dict[str, list[tuple[str, int]]]
    ann: dict[str, Any] = field(default_factory=dict)  # optional faiss index per field (build_ann)
    row: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.row = {p: i for i, p in enumerate(self.ids)}
        for name, mat in self.vectors.items():
            if mat.shape[0] != len(self.ids):
                raise ValueError(f"vectors[{name!r}] has {mat.shape[0]} rows for {len(self.ids)} papers")

    def rows(self, paper_ids: Iterable[str]) -> list[int]:
        return [self.row[p] for p in paper_ids]

    def build_ann(self, field_name: str, kind: str = "flat", hnsw_m: int = 32, ef_search: int = 128) -> None:
        """A faiss inner-product index over ``vectors[field_name]``: "flat" (exact, BLAS-blocked) or "hnsw"
        (approximate, sub-linear; check its recall against "flat" before trusting it)."""
        faiss = require_faiss()
        mat = np.ascontiguousarray(self.vectors[field_name], dtype=np.float32)
        if kind == "flat":
            ann = faiss.IndexFlatIP(mat.shape[1])
        elif kind == "hnsw":
            ann = faiss.IndexHNSWFlat(mat.shape[1], hnsw_m, faiss.METRIC_INNER_PRODUCT)
            ann.hnsw.efSearch = ef_search
        else:
            raise ValueError(f"ann kind must be 'flat' or 'hnsw', got {kind!r}")
        ann.add(mat)
        self.ann[field_name] = ann

    @classmethod
    def load(cls, db: LiteratureDB, model_id: str, fields: Iterable[str] = EMBED_FIELDS) -> LiteratureIndex:
        ids = db.summarized_ids()
        row = {p: i for i, p in enumerate(ids)}
        vectors: dict[str, np.ndarray] = {}
        for name in fields:
            got_ids, mat = db.load_embeddings(name, model_id)
            if not got_ids:
                continue
            full = np.zeros((len(ids), mat.shape[1]), dtype=np.float32)
            keep = [i for i, p in enumerate(got_ids) if p in row]
            full[[row[got_ids[i]] for i in keep]] = mat[keep]
            vectors[name] = unit_rows(full)
        if not vectors:
            raise ValueError(f"no embeddings for model {model_id!r} in {db.path}: run `scholar scipip build_db` first")
        graph = KeywordGraph((p, k) for p, k in db.keyword_edges() if p in row)
        cocite = {a: [(b, c) for b, c in lst if b in row] for a, lst in db.cocitations().items() if a in row}
        return cls(ids=ids, vectors=vectors, graph=graph, cocite=cocite)


def unit_rows(mat: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return (mat / np.where(norms == 0, 1.0, norms)).astype(np.float32)
