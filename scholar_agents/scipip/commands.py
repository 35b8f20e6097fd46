"""``scholar scipip build_db | retrieve | ideas``: the SciPIP task functions (``scholar eval ideas`` is in
:mod:`scholar_agents.eval.ideas`, beside the judge it runs)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from scholar_agents.llm import build_llm
from scholar_agents.llm.base import SamplingParams
from scholar_agents.llm.embedder import build_embedder
from scholar_agents.papers.store import PaperStore
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.scipip.config import SciPIPConfig
from scholar_agents.scipip.db_build import build_literature_db
from scholar_agents.scipip.idea_generation import IdeaPipeline, load_backgrounds, runs_to_markdown
from scholar_agents.scipip.literature_db import LiteratureDB, LiteratureIndex
from scholar_agents.scipip.output_parsers import normalize_keyword, parse_keywords
from scholar_agents.scipip.prompts import tau2_keywords
from scholar_agents.scipip.skc import skc_retrieve
from scholar_agents.typed_config import typed
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)


def scipip_config(cfg: DictConfig) -> SciPIPConfig:
    """The typed `scipip` node (validated against the dataclass, interpolations resolved)."""
    return typed(SciPIPConfig, cfg.scipip, "scipip")


def _write(out: Path, name: str, obj: Any) -> Path:
    path = out / name
    if isinstance(obj, str):
        path.write_text(obj, encoding="utf-8")
    else:
        path.write_text(json.dumps(obj, indent=2, ensure_ascii=False), encoding="utf-8")
    return path


def _check_inputs(sc: SciPIPConfig, backgrounds: bool = False) -> None:
    """The paper store (and the backgrounds file) exist: checked before any model loads, so a
    missing file fails in a second, not after minutes of loading."""
    if not Path(sc.store_path).is_file():
        raise UsageError(f"scipip.store_path={sc.store_path!r}: no such paper store; `scholar papers build` writes it "
                         "(with this command's papers=<name>: the bundled sample by default), or point "
                         "scipip.store_path at yours")
    if backgrounds and not Path(sc.backgrounds_path).is_file():
        raise UsageError(f"scipip.backgrounds_path={sc.backgrounds_path!r}: no such file")


def build_db(cfg: DictConfig) -> dict:
    """Summarise, link and embed papers of the paper store into SciPIP's tables (resumable)."""
    sc = scipip_config(cfg)
    _check_inputs(sc)
    out = run_dir(cfg)
    store = PaperStore(sc.store_path, readonly=True)
    llm = build_llm(cfg.llm)
    embedder = build_embedder(cfg.embedder)
    try:
        stats = build_literature_db(store, llm, embedder, sc.db)
    finally:
        llm.close()
        store.close()
    stats["store_path"] = sc.store_path
    _write(out, "build_db.json", stats)
    log.info("literature DB: %s", json.dumps(stats))
    return stats


def _load_index(sc: SciPIPConfig, embedder):
    db = LiteratureDB(sc.store_path)
    return db, LiteratureIndex.load(db, embedder.model_id)


def retrieve(cfg: DictConfig) -> dict:
    """SKC retrieval for the configured backgrounds; reports every stage's size (§3.2)."""
    sc = scipip_config(cfg)
    _check_inputs(sc, backgrounds=True)
    out = run_dir(cfg)
    backgrounds = load_backgrounds(sc.backgrounds_path, sc.num_backgrounds, sc.background_offset)
    embedder = build_embedder(cfg.embedder)
    db, index = _load_index(sc, embedder)
    failures = 0
    if sc.skc.query_keywords == "llm" and sc.skc.mode != "abstract" and sc.skc.mode != "background":
        llm = build_llm(cfg.llm)
        gens = llm.generate([tau2_keywords(b["background"], sc.db.max_keywords) for b in backgrounds],
                            SamplingParams(max_new_tokens=sc.db.max_new_tokens_keywords))
        llm.close()
        keywords = []
        for g in gens:
            parsed = parse_keywords(g.text, max_num=sc.db.max_keywords)
            failures += not parsed.ok
            keywords.append(parsed.keywords)
    else:
        keywords = [[normalize_keyword(k) for k in b["entities"]] for b in backgrounds]
    qvecs = embedder.encode([b["background"] for b in backgrounds], kind="doc")
    store = PaperStore(sc.store_path, readonly=True)
    rows = []
    for b, kws, q in zip(backgrounds, keywords, qvecs):
        res = skc_retrieve(q, kws, index, sc.skc)
        titles = store.get_many(res.papers, with_sections=False)
        rows.append({"id": b["id"], "background": b["background"], "query_keywords": kws, **res.to_dict(),
                     "titles": [titles[p].title if p in titles else "" for p in res.papers]})
    store.close()
    db.close()
    stage_names = sorted({k for r in rows for k in r["stages"]})
    md = [f"# SKC retrieval (mode `{sc.skc.mode}`, database: {len(index.ids)} papers)", "",
          "| background | " + " | ".join(stage_names) + " |", "|---" * (len(stage_names) + 1) + "|"]
    for r in rows:
        md.append(f"| {r['id']} | " + " | ".join(str(r["stages"].get(k, "")) for k in stage_names) + " |")
    for r in rows:
        md += ["", f"## {r['id']}", "", r["background"], "", f"query keywords: {', '.join(r['query_keywords'])}",
               f"expanded + filtered keywords: {', '.join(r['keywords'])}", ""]
        md += [f"{i + 1}. `{p}` {t}" for i, (p, t) in enumerate(zip(r["papers"], r["titles"]))]
    result = {"mode": sc.skc.mode, "database_papers": len(index.ids), "keyword_parse_failures": failures, "backgrounds": rows}
    _write(out, "retrieval.json", result)
    _write(out, "retrieval.md", "\n".join(md) + "\n")
    return result


def ideas(cfg: DictConfig) -> dict:
    """Dual-path idea generation for the configured backgrounds (§3.3): ideas.json + ideas.md."""
    sc = scipip_config(cfg)
    _check_inputs(sc, backgrounds=True)
    out = run_dir(cfg)
    backgrounds = load_backgrounds(sc.backgrounds_path, sc.num_backgrounds, sc.background_offset)
    embedder = build_embedder(cfg.embedder)
    db, index = _load_index(sc, embedder)
    store = PaperStore(sc.store_path, readonly=True)
    llm = build_llm(cfg.llm)
    try:
        runs = IdeaPipeline(llm, embedder, index, db, store, sc).run(backgrounds)
    finally:
        llm.close()
        store.close()
        db.close()
    data = {"llm": str(cfg.llm.model), "database_papers": len(index.ids), "runs": [r.to_dict() for r in runs]}
    path = _write(out, "ideas.json", data)
    _write(out, "ideas.md", runs_to_markdown(runs, f"SciPIP ideas ({cfg.llm.model}, {len(index.ids)}-paper database)"))
    failures: dict[str, int] = {}
    for r in runs:
        for k, v in r.failures.items():
            failures[k] = failures.get(k, 0) + v
    summary = {"ideas_json": str(path), "backgrounds": len(runs), "failures": failures,
               "ideas_per_variant": {v: sum(len(r.variants()[v]) for r in runs) for v in ("scipip", "brainstorm", "retrieval", "direct")},
               "retrieval_stages": [r.retrieval.get("stages", {}) for r in runs]}
    _write(out, "summary.json", summary)
    return summary
