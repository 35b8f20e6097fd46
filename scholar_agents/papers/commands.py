"""``scholar papers build`` and ``scholar papers search``.

    scholar papers build                                   # bundled sample -> store + hybrid index (cache dir)
    scholar papers build papers=shared_corpus              # the 97k-paper development corpus
    scholar papers search query="3D scene graphs" before=2023-01-01 search=bm25 k=5
    scholar papers search queries_file=queries.jsonl       # PaSa-format JSONL: each query's own date filters
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scholar_agents.llm.embedder import build_embedder
from scholar_agents.papers.corpus import build_store, to_papers_config
from scholar_agents.papers.index import KINDS, load_or_build_search, to_search_config
from scholar_agents.papers.loaders import LOADERS
from scholar_agents.papers.store import PaperStore
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.validation import (
    UsageError, existing_file, one_of, optional_positive_int, parse_date, positive_int, reading,
)

log = logging.getLogger(__name__)


def _embedder_for(cfg: DictConfig, kind: str, components: list[str]):
    needs = kind == "dense" or (kind in ("hybrid", "auto") and "dense" in components)  # auto may resolve to hybrid
    if not needs:
        return None
    return build_embedder(cfg.embedder)


def check_sources(pcfg) -> None:
    """The corpus files of a ``papers`` config: known formats, and every required file present."""
    if not pcfg.sources:
        raise UsageError(f"papers={pcfg.name} lists no sources: add papers.sources=[{{format: ..., path: ...}}]")
    for i, src in enumerate(pcfg.sources):
        if src.format not in LOADERS:
            raise UsageError(f"papers.sources[{i}].format={src.format!r}: unknown format; known: "
                             f"{', '.join(sorted(LOADERS))}")
        if not src.optional and not Path(src.path).exists():
            raise UsageError(f"papers.sources[{i}].path={src.path!r}: no such file ({src.format}); mark it "
                             "`optional: true` to build without it")


def build(cfg: DictConfig) -> dict[str, Any]:
    """Load the ``papers`` sources into the store, resolve cited titles, then build/refresh the search index."""
    pcfg = to_papers_config(cfg.papers)
    check_sources(pcfg)
    report: dict[str, Any] = {"papers": pcfg.name, "store": build_store(pcfg, progress=True)}
    if cfg.get("index", True):
        scfg = to_search_config(cfg.search)
        if scfg.kind == "online":
            log.info("search.kind=online keeps no local index: nothing to build")
        else:
            with PaperStore(pcfg.store, readonly=True) as store:
                backend = load_or_build_search(scfg, store, _embedder_for(cfg, scfg.kind, scfg.hybrid_components),
                                               pcfg.index_dir, progress=True)
            report["index"] = {"dir": pcfg.index_dir, "kind": scfg.kind, **backend.build_info}
    out = run_dir(cfg) / "build_report.json"
    out.write_text(json.dumps(report, indent=1))
    s = report["store"]
    print(f"paper store {s['store']}: {s['papers']} papers ({s['with_abstract']} with abstract, "
          f"{s['with_sections']} with sections, {s['resolved_references']}/{s['references']} references resolved)"
          f" [{s['status']}]")
    if "index" in report:
        parts = [f"{k}: {v['status']} ({v['seconds']:.1f}s)" for k, v in report["index"].items()
                 if isinstance(v, dict) and "status" in v]
        print(f"search index {pcfg.index_dir} ({report['index']['kind']}): " + ", ".join(parts))
    print(f"report: {out}")
    return report


def _read_queries(path: str) -> list[dict[str, Any]]:
    """PaSa-format JSONL (``question``, ``source_meta.published_time``, ``qid``) or one query per line; each
    query's date is checked (a bad one names its line)."""
    p = existing_file(path, "queries_file")
    with reading("queries_file", p):
        queries = _parse_queries(p)
    for q in queries:
        q["date"] = parse_date(q["date"], f"queries_file {p}:{q['line']}: source_meta.published_time")
    if not queries:
        raise UsageError(f"queries_file={str(path)!r} holds no query")
    return queries


def _parse_queries(p: Path) -> list[dict[str, Any]]:
    out = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            try:
                d = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{p}:{lineno}: invalid JSON ({e.msg})") from e
            q = d.get("question") or d.get("query")
            if not q:
                raise ValueError(f"{p}:{lineno}: a query record needs `question`")
            if not isinstance(q, str):
                raise ValueError(f"{p}:{lineno}: `question` must be a string")
            out.append({"qid": d.get("qid", f"q{lineno}"), "query": q, "line": lineno,
                        "date": (d.get("source_meta") or {}).get("published_time")})
        else:
            out.append({"qid": f"q{lineno}", "query": line.strip(), "line": lineno, "date": None})
    return out


def search(cfg: DictConfig) -> dict[str, Any]:
    """Run ``query`` (or every query of ``queries_file``) through the configured backend; print and save hits."""
    pcfg = to_papers_config(cfg.papers)
    scfg = to_search_config(cfg.search)
    # Everything the user typed is checked before an index or a model is loaded.
    one_of(cfg.search.get("kind", "hybrid"), "search.kind", KINDS)  # before the index is built
    k = positive_int(cfg.k if cfg.get("k") is not None else scfg.k, "k", "the number of hits per query")
    before = parse_date(cfg.get("before"), "before")
    limit = optional_positive_int(cfg.get("limit"), "limit", "the first N queries of queries_file; null = all")
    if cfg.get("queries_file") and cfg.get("query"):
        raise UsageError("give query='...' or queries_file=path.jsonl, not both")
    if cfg.get("queries_file"):
        queries = _read_queries(str(cfg.queries_file))[:limit]
    elif cfg.get("query") is not None and str(cfg.query).strip():
        queries = [{"qid": "q0", "query": str(cfg.query), "date": None}]
    else:
        raise UsageError("give query='...' or queries_file=path.jsonl")
    # An explicit before= wins; otherwise each PaSa query's own date applies (PaSa §3.1: only earlier papers count).
    dates = [before if before is not None or not cfg.get("use_query_dates", True) else q["date"] for q in queries]
    if not Path(pcfg.store).exists():
        raise UsageError(f"paper store {pcfg.store} does not exist: run `scholar papers build papers={pcfg.name}`")
    with PaperStore(pcfg.store, readonly=True) as store:
        backend = load_or_build_search(scfg, store, _embedder_for(cfg, scfg.kind, scfg.hybrid_components),
                                       pcfg.index_dir, progress=True)
        results = backend.search_batch([q["query"] for q in queries], k=k, before=dates)
        papers = store.get_many([h.paper_id for hits in results for h in hits], with_sections=False)
    records = []
    for q, date, hits in zip(queries, dates, results):
        print(f"\n[{q['qid']}] {q['query']}" + (f"   (before {date})" if date else ""))
        print(f"{'rank':>4}  {'score':>8}  {'paper id':<14} {'date':<10}  title")
        rows = []
        for h in hits:
            p = papers.get(h.paper_id)
            title, pdate = (p.title, p.date) if p else ("(not in store)", "")
            print(f"{h.rank + 1:>4}  {h.score:>8.4f}  {h.paper_id:<14} {pdate:<10}  {title[:90]}")
            rows.append({"rank": h.rank, "score": h.score, "paper_id": h.paper_id, "date": pdate, "title": title})
        if not hits:
            print(f"      (no hits{': no indexed paper published before ' + date + ' matches' if date else ''})")
        records.append({**{f: v for f, v in q.items() if f != "line"}, "before": date, "hits": rows})
    out = run_dir(cfg) / "search_results.json"
    out.write_text(json.dumps({"papers": pcfg.name, "search": OmegaConf.to_container(cfg.search, resolve=True),
                               "k": k, "results": records}, indent=1, ensure_ascii=False))
    print(f"\nresults: {out}")
    return {"results": records, "path": str(out)}
