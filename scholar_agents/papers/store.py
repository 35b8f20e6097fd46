"""The paper store: every Paper (metadata, ordered sections, their references) in one SQLite file.

One store serves search-index building, the crawl environment's expansion (section -> cited papers), data
generation and evaluation. SQLite in WAL mode: many readers, one writer, no server, one file to copy to a cluster.
Titles are indexed twice: an exact compact key (``titles.title_key``) and an FTS5 index over the normalised title,
which yields fuzzy-match candidates in milliseconds at 100k+ papers (rapidfuzz then scores only those).
"""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.papers.titles import normalize_title, title_similarity
from scholar_agents.runtime.progress import progress_bar

log = logging.getLogger(__name__)

SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS papers (
    pk INTEGER PRIMARY KEY,              -- rowid alias: the FTS index points here
    id TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    norm_title TEXT NOT NULL,
    title_key TEXT NOT NULL,
    abstract TEXT NOT NULL DEFAULT '',
    date TEXT NOT NULL DEFAULT '',
    authors TEXT NOT NULL DEFAULT '[]',  -- JSON list
    categories TEXT NOT NULL DEFAULT '[]',
    source TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS papers_title_key ON papers(title_key);
CREATE TABLE IF NOT EXISTS sections (
    paper_id TEXT NOT NULL, idx INTEGER NOT NULL, heading TEXT NOT NULL,
    PRIMARY KEY (paper_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS refs (
    paper_id TEXT NOT NULL, section_idx INTEGER NOT NULL, idx INTEGER NOT NULL,
    ref_id TEXT,                         -- the cited paper's id once known
    ref_title TEXT,                      -- the cited title as written (kept after resolution)
    PRIMARY KEY (paper_id, section_idx, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS refs_ref_id ON refs(ref_id);
CREATE VIRTUAL TABLE IF NOT EXISTS titles_fts USING fts5(norm_title, content='papers', content_rowid='pk');
CREATE VIRTUAL TABLE IF NOT EXISTS titles_vocab USING fts5vocab(titles_fts, 'row');
CREATE TRIGGER IF NOT EXISTS papers_ai AFTER INSERT ON papers BEGIN
    INSERT INTO titles_fts(rowid, norm_title) VALUES (new.pk, new.norm_title);
END;
CREATE TRIGGER IF NOT EXISTS papers_au AFTER UPDATE OF norm_title ON papers WHEN old.norm_title != new.norm_title BEGIN
    INSERT INTO titles_fts(titles_fts, rowid, norm_title) VALUES ('delete', old.pk, old.norm_title);
    INSERT INTO titles_fts(rowid, norm_title) VALUES (new.pk, new.norm_title);
END;
"""

# Upsert: a later record fills in what an earlier one lacked and never erases it (a title-only gold stub loaded
# first is completed by the arXiv metadata record; a stub loaded after a full record changes nothing).
# Dates: the more precise one wins ("2019" < "2019-05" < "2019-05-12").
_UPSERT = """
INSERT INTO papers (id, title, norm_title, title_key, abstract, date, authors, categories, source)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(id) DO UPDATE SET
    title = CASE WHEN excluded.title != '' THEN excluded.title ELSE title END,
    norm_title = CASE WHEN excluded.title != '' THEN excluded.norm_title ELSE norm_title END,
    title_key = CASE WHEN excluded.title != '' THEN excluded.title_key ELSE title_key END,
    abstract = CASE WHEN length(excluded.abstract) > 0 THEN excluded.abstract ELSE abstract END,
    date = CASE WHEN length(excluded.date) >= length(date) THEN excluded.date ELSE date END,
    authors = CASE WHEN excluded.authors != '[]' THEN excluded.authors ELSE authors END,
    categories = CASE WHEN excluded.categories != '[]' THEN excluded.categories ELSE categories END,
    source = CASE WHEN source = '' THEN excluded.source
                  WHEN excluded.source = '' OR instr(',' || source || ',', ',' || excluded.source || ',') > 0 THEN source
                  ELSE source || ',' || excluded.source END
"""

_COLUMNS = "id, title, abstract, date, authors, categories, source"


class PaperStoreError(RuntimeError):
    """The store file is missing, corrupt or not a PaperStore."""


class PaperStore:
    """``PaperStore(path)`` opens (or creates) the store; ``readonly=True`` never writes and requires the file."""

    def __init__(self, path: str | Path, readonly: bool = False, immutable: bool = False):
        self.path = Path(path)
        self.readonly = readonly = readonly or immutable
        self._lock = threading.RLock()
        if readonly:
            if not self.path.exists():
                raise FileNotFoundError(f"paper store {self.path} does not exist (build it with `scholar papers build`)")
            # immutable: a finished build nobody writes any more (the ranks of a job on a shared file system): no
            # lock, no -wal / -shm file, so it works on a read-only mount and under per-node (localflock) locks
            uri = f"file:{self.path.resolve()}?mode=ro" + ("&immutable=1" if immutable else "")
            self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False)
        try:
            self._init_db()
        except sqlite3.DatabaseError as e:
            self._conn.close()
            raise PaperStoreError(f"{self.path} is not a usable PaperStore SQLite database: {e}") from e

    def _init_db(self) -> None:
        c = self._conn
        if not self.readonly:
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.executescript(_SCHEMA)
            c.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            c.commit()
        row = c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None or row[0] != SCHEMA_VERSION:
            raise PaperStoreError(f"{self.path}: unsupported PaperStore schema version {row and row[0]!r}")

    # --- writing ------------------------------------------------------------------------------------------------

    def add(self, papers: Iterable[Paper], batch_size: int = 5000, progress: bool = False) -> int:
        """Insert or merge ``papers`` (see the upsert rules above) in transactions of ``batch_size``; returns the
        number of records written. A record with sections replaces the paper's stored sections."""
        if self.readonly:
            raise PaperStoreError(f"{self.path} was opened read-only")
        # Loading into an empty store (the big first corpus) indexes titles once at the end: per-row FTS triggers
        # make a 97k-paper load ~3x slower. Later, incremental adds keep the index current row by row.
        bulk = len(self) == 0
        if bulk:
            with self._lock, self._conn:
                self._conn.execute("DROP TRIGGER IF EXISTS papers_ai")
                self._conn.execute("DROP TRIGGER IF EXISTS papers_au")
        n = 0
        batch: list[Paper] = []
        bar = progress_bar(desc=f"store {self.path.name}", unit=" papers", disable=not progress)
        try:
            for p in papers:
                batch.append(p)
                if len(batch) >= batch_size:
                    n += self._write_batch(batch)
                    bar.update(len(batch))
                    batch = []
            if batch:
                n += self._write_batch(batch)
                bar.update(len(batch))
        finally:
            bar.close()
            if bulk:
                with self._lock:
                    with self._conn:
                        self._conn.execute("INSERT INTO titles_fts(titles_fts) VALUES ('rebuild')")
                    self._conn.executescript(_SCHEMA)  # recreates the triggers
        return n

    def _write_batch(self, batch: list[Paper]) -> int:
        rows = []
        sec_rows: list[tuple] = []
        ref_rows: list[tuple] = []
        replace_ids: list[str] = []
        for p in batch:
            if not p.paper_id:
                raise ValueError(f"paper without paper_id: {p.title!r}")
            norm = normalize_title(p.title)
            rows.append((p.paper_id, p.title or "", norm, norm.replace(" ", ""), p.abstract or "", p.date or "",
                         json.dumps(p.authors, ensure_ascii=False), json.dumps(p.categories, ensure_ascii=False),
                         p.source or ""))
            if p.sections:
                replace_ids.append(p.paper_id)
                for si, s in enumerate(p.sections):
                    sec_rows.append((p.paper_id, si, s.heading))
                    for ri, r in enumerate(s.references):
                        ref_rows.append((p.paper_id, si, ri, r.paper_id, r.title))
        with self._lock, self._conn:
            self._conn.executemany(_UPSERT, rows)
            if replace_ids:
                for i in range(0, len(replace_ids), 500):
                    chunk = replace_ids[i:i + 500]
                    marks = ",".join("?" * len(chunk))
                    self._conn.execute(f"DELETE FROM sections WHERE paper_id IN ({marks})", chunk)
                    self._conn.execute(f"DELETE FROM refs WHERE paper_id IN ({marks})", chunk)
                # the same paper may appear twice in one batch with sections: the later record wins
                self._conn.executemany("INSERT OR REPLACE INTO sections VALUES (?, ?, ?)", sec_rows)
                self._conn.executemany("INSERT OR REPLACE INTO refs VALUES (?, ?, ?, ?, ?)", ref_rows)
        return len(rows)

    def resolve_references(self, fuzzy: bool = True, min_score: float = 90.0, progress: bool = False) -> dict[str, int]:
        """Give unresolved references (title only) the id of the stored paper with that title. Run after loading
        all corpora: a bibliography loaded first can cite papers loaded later. Returns counts."""
        if self.readonly:
            raise PaperStoreError(f"{self.path} was opened read-only")
        titles = [r[0] for r in self._conn.execute(
            "SELECT DISTINCT ref_title FROM refs WHERE ref_id IS NULL AND ref_title IS NOT NULL")]
        resolved: list[tuple[str, str]] = []
        for t in progress_bar(titles, desc="resolve references", disable=not progress):
            pid = self.find_by_title(t, fuzzy=fuzzy, min_score=min_score)
            if pid is not None:
                resolved.append((pid, t))
        with self._lock, self._conn:
            self._conn.executemany("UPDATE refs SET ref_id = ? WHERE ref_id IS NULL AND ref_title = ?", resolved)
        remaining = self._conn.execute("SELECT COUNT(*) FROM refs WHERE ref_id IS NULL").fetchone()[0]
        stats = {"titles": len(titles), "resolved_titles": len(resolved), "unresolved_refs": remaining}
        log.info("resolved %d of %d distinct cited titles; %d references remain title-only",
                 len(resolved), len(titles), remaining)
        return stats

    # --- reading ------------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        with self._lock:
            return self._conn.execute("SELECT COUNT(*) FROM papers").fetchone()[0]

    def __contains__(self, pid: object) -> bool:
        if not isinstance(pid, str):
            return False
        with self._lock:
            return self._conn.execute("SELECT 1 FROM papers WHERE id = ?", (pid,)).fetchone() is not None

    def ids(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT id FROM papers ORDER BY pk")]

    def dates(self) -> list[str]:
        """Every paper's date as stored ("" = undated), in no particular order (candidate counts per query date)."""
        with self._lock:
            return [r[0] for r in self._conn.execute("SELECT date FROM papers")]

    def get(self, pid: str) -> Paper | None:
        return self.get_many([pid]).get(pid)

    def get_many(self, ids: Sequence[str], with_sections: bool = True) -> dict[str, Paper]:
        """The stored papers among ``ids`` (missing ids are absent from the result)."""
        out: dict[str, Paper] = {}
        uniq = list(dict.fromkeys(ids))
        with self._lock:
            for i in range(0, len(uniq), 500):
                chunk = uniq[i:i + 500]
                marks = ",".join("?" * len(chunk))
                for row in self._conn.execute(f"SELECT {_COLUMNS} FROM papers WHERE id IN ({marks})", chunk):
                    out[row[0]] = _row_to_paper(row)
                if with_sections:
                    self._attach_sections(out, chunk)
        return out

    def _attach_sections(self, papers: dict[str, Paper], ids: list[str]) -> None:
        ids = [i for i in ids if i in papers]
        if not ids:
            return
        marks = ",".join("?" * len(ids))
        by_key: dict[tuple[str, int], Section] = {}
        for pid, idx, heading in self._conn.execute(
                f"SELECT paper_id, idx, heading FROM sections WHERE paper_id IN ({marks}) ORDER BY paper_id, idx", ids):
            s = Section(heading, [])
            papers[pid].sections.append(s)
            by_key[(pid, idx)] = s
        if not by_key:
            return
        for pid, sidx, ref_id, ref_title in self._conn.execute(
                f"SELECT paper_id, section_idx, ref_id, ref_title FROM refs WHERE paper_id IN ({marks}) "
                "ORDER BY paper_id, section_idx, idx", ids):
            s = by_key.get((pid, sidx))
            if s is not None:
                s.references.append(Reference(paper_id=ref_id, title=ref_title))

    def iter_papers(self, with_sections: bool = True, batch_size: int = 2000, order_by: str = "pk") -> Iterator[Paper]:
        """Every paper, streamed in insertion order (``order_by="date"`` for time order, undated first)."""
        if order_by not in {"pk", "date", "id"}:
            raise ValueError(f"order_by must be pk, date or id, got {order_by!r}")
        order = "date, pk" if order_by == "date" else order_by
        cur = self._conn.cursor()
        cur.execute(f"SELECT {_COLUMNS} FROM papers ORDER BY {order}")
        while True:
            rows = cur.fetchmany(batch_size)
            if not rows:
                return
            batch = {r[0]: _row_to_paper(r) for r in rows}
            if with_sections:
                with self._lock:
                    self._attach_sections(batch, list(batch))
            yield from batch.values()

    def find_by_title(self, title: str, fuzzy: bool = True, min_score: float = 90.0,
                      candidates: int = 50) -> str | None:
        """The id of the paper titled ``title``: exact on the normalised compact key, then (``fuzzy``) the best
        of ``candidates`` FTS5 matches scoring >= ``min_score`` (0-100, see ``titles.title_similarity``)."""
        hit = self.match_title(title, fuzzy=fuzzy, min_score=min_score, candidates=candidates)
        return hit[0] if hit else None

    def match_title(self, title: str, fuzzy: bool = True, min_score: float = 90.0,
                    candidates: int = 50, rare_terms: int = 4) -> tuple[str, float] | None:
        """``(paper_id, score)`` of the best title match, or None (see :meth:`find_by_title`)."""
        norm = normalize_title(title)
        if not norm:
            return None
        with self._lock:
            # several records can share a title (versions, stubs): prefer the one with an abstract
            row = self._conn.execute(
                "SELECT id FROM papers WHERE title_key = ? ORDER BY abstract = '', pk LIMIT 1",
                (norm.replace(" ", ""),)).fetchone()
            if row is not None:
                return row[0], 100.0
            if not fuzzy:
                return None
            # Candidates share at least two of the title's four rarest indexed words. An OR over all words ranks
            # tens of thousands of rows at 97k papers ("learning", "for": ~60 ms); this takes ~4 ms and still
            # finds every fuzzy match in the unarXive/research-town bibliographies. Typos (unindexed) are skipped.
            tokens = list(dict.fromkeys(norm.split()))
            marks = ",".join("?" * len(tokens))
            df = self._conn.execute(f"SELECT term, doc FROM titles_vocab WHERE term IN ({marks})", tokens).fetchall()
            rare = [t for t, _ in sorted(df, key=lambda r: r[1])[:rare_terms]]
            if not rare:
                return None
            if len(rare) < 3:
                query = " OR ".join(f'"{t}"' for t in rare)
            else:
                query = " OR ".join(f'("{a}" AND "{b}")' for a, b in itertools.combinations(rare, 2))
            rows = self._conn.execute(
                "SELECT p.id, p.norm_title FROM titles_fts JOIN papers p ON p.pk = titles_fts.rowid "
                "WHERE titles_fts MATCH ? ORDER BY rank LIMIT ?", (query, candidates)).fetchall()
        best: tuple[str, float] | None = None
        for pid, cand in rows:
            score = title_similarity(norm, cand)
            if score >= min_score and (best is None or score > best[1]):
                best = (pid, score)
        return best

    def stats(self) -> dict[str, int]:
        q = lambda sql: self._conn.execute(sql).fetchone()[0]  # noqa: E731
        return {
            "papers": q("SELECT COUNT(*) FROM papers"),
            "with_abstract": q("SELECT COUNT(*) FROM papers WHERE abstract != ''"),
            "with_sections": q("SELECT COUNT(DISTINCT paper_id) FROM sections"),
            "references": q("SELECT COUNT(*) FROM refs"),
            "resolved_references": q("SELECT COUNT(*) FROM refs WHERE ref_id IS NOT NULL"),
        }

    def date_range(self) -> tuple[str | None, str | None]:
        """The oldest and the newest dated paper's date (None, None for a store with no dated paper)."""
        first, last = self._conn.execute("SELECT MIN(date), MAX(date) FROM papers WHERE date != ''").fetchone()
        return first, last

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Free-form build metadata (e.g. which source files the store was built from)."""
        if self.readonly:
            raise PaperStoreError(f"{self.path} was opened read-only")
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "PaperStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PaperStore({str(self.path)!r}, readonly={self.readonly})"


def _row_to_paper(row: tuple) -> Paper:
    pid, title, abstract, date, authors, categories, source = row
    return Paper(paper_id=pid, title=title, abstract=abstract, date=date, authors=json.loads(authors),
                 categories=json.loads(categories), sections=[], source=source)
