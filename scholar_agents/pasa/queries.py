"""Scholar queries in PaSa's own JSONL format (AutoScholarQuery / RealScholarQuery).

``{"qid", "question", "answer": [titles], "answer_arxiv_id": [ids], "source_meta": {"published_time": "YYYYMMDD"}}``;
the published time is the query date, and PaSa searches only for papers published before it (§5.1).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from scholar_agents.papers.ids import norm_id
from scholar_agents.validation import UsageError, jsonl_records

log = logging.getLogger(__name__)

_YMD = re.compile(r"^(\d{4})-?(\d{2})-?(\d{2})")


def iso_date(value: object) -> Optional[str]:
    """``20211031`` / ``2021-10-31`` / ``2021-10-31T...`` -> ``2021-10-31``; empty -> None."""
    if value is None or str(value).strip() == "":
        return None
    m = _YMD.match(str(value).strip())
    if not m:
        raise ValueError(f"not a date (YYYYMMDD or YYYY-MM-DD): {value!r}")
    return f"{m.group(1)}-{m.group(2)}-{m.group(3)}"


@dataclass
class ScholarQuery:
    qid: str
    question: str
    before: Optional[str] = None  # ISO date, exclusive: only papers published before it count
    gold_ids: list[str] = field(default_factory=list)  # answer_arxiv_id
    gold_titles: list[str] = field(default_factory=list)  # answer
    # "More like this" (ours): papers the crawl starts from beside its search session — each enters
    # the queue at depth 1 and is expanded where the store has its sections (bytedance/pasa #8)
    seed_papers: list[str] = field(default_factory=list)

    @classmethod
    def from_pasa(cls, d: dict, where: str = "") -> "ScholarQuery":
        if not isinstance(d, dict) or not str(d.get("question", "")).strip():
            raise ValueError(f"{where}: a PaSa query record needs a non-empty 'question'")
        meta = d.get("source_meta") or {}
        return cls(
            qid=str(d.get("qid") or where),
            question=str(d["question"]).strip(),
            before=iso_date(meta.get("published_time") if isinstance(meta, dict) else None),
            gold_ids=[str(x) for x in (d.get("answer_arxiv_id") or []) if x],
            gold_titles=[str(x) for x in (d.get("answer") or []) if x],
        )


def load_pasa_queries(path: str | Path, limit: Optional[int] = None, offset: int = 0) -> list[ScholarQuery]:
    """Queries ``offset .. offset+limit`` of a PaSa-format JSONL file (file order: a fixed, reproducible subset)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"query file {path} does not exist")
    out: list[ScholarQuery] = []
    seen: set[str] = set()
    for i, rec in jsonl_records(path):
        q = ScholarQuery.from_pasa(rec, where=f"{path}:{i}")
        if q.qid in seen:
            raise ValueError(f"{path}:{i}: duplicate qid {q.qid!r}")
        seen.add(q.qid)
        out.append(q)
    out = out[offset:]
    return out[:limit] if limit is not None else out


def read_qid_file(path) -> set[str]:
    """qids listed in ``path``: one qid a line, or JSONL records with a ``qid`` / ``meta.qid`` field (query records,
    Selector pairs, training sessions) — how a split keeps another split's queries out."""
    qids: set[str] = set()
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from e
            qid = rec.get("qid") or (rec.get("meta") or {}).get("qid")
            if not qid:
                raise ValueError(f"{path}:{n}: a JSONL line without `qid` or `meta.qid`: {line[:80]}")
            qids.add(str(qid))
        else:
            qids.add(line)
    return qids


def load_queries(qcfg) -> list[ScholarQuery]:
    """``queries.path`` (PaSa JSONL) with ``offset``/``limit``, minus the qids listed in ``exclude_qids_file``
    (one qid a line, or JSONL with a ``qid`` / ``meta.qid`` field, e.g. crawler sessions): how an evaluation keeps
    training queries out."""
    queries = load_pasa_queries(qcfg.path)
    exclude_file = qcfg.get("exclude_qids_file")
    if exclude_file:
        excluded = read_qid_file(exclude_file)
        before = len(queries)
        queries = [q for q in queries if q.qid not in excluded]
        log.info("excluded %d queries listed in %s", before - len(queries), exclude_file)
    offset = int(qcfg.get("offset") or 0)
    limit = qcfg.get("limit")
    queries = queries[offset:]
    return queries[: int(limit)] if limit is not None else queries


def seeded_query(store, paper_id: str, question: Optional[str] = None, before: Optional[str] = None,
                 qid: str = "query") -> ScholarQuery:
    """"More like this": a query seeded with a stored paper — its title as the question (unless one is given), the
    paper itself queued for expansion (``ScholarQuery.seed_papers``). An id the store lacks is a one-line error."""
    got = store.get(paper_id) or store.get(norm_id(paper_id))
    if got is None:
        raise UsageError(f"seed_paper={paper_id!r} is not in the paper store {store.path}")
    return ScholarQuery(qid, " ".join(str(question or got.title).split()), before=before, seed_papers=[got.paper_id])
