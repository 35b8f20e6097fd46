"""Building SciPIP's literature database (§3.1, Eq. 1–2) through the LLM interface, incrementally.

Four LLM stages per paper — τ1 summary, τ1 second turn (motivations = background, details = ideas), τ2
keywords, τ3 concise methods — then embeddings of background, ideas, summary (and abstract, for the "Abstract"
ablation). Each stage only asks about papers it has not done yet and commits after every chunk, so an
interrupted build resumes where it stopped and a finished one costs zero LLM calls on a second run.
Outputs that break the prompt's format are counted, stored with ``*_ok = 0`` and a fallback text (so retrieval
still works), and can be retried with ``retry_failed``.

Inputs (Eq. 1): τ1 reads title, abstract and introduction, τ3 the method section. The paper store keeps section
headings and references, not text: with ``sections=fulltext`` (the default) the two sections are read from the
full-text files the store was built from (:mod:`scholar_agents.scipip.full_text`); a paper without them, or
``sections=abstract``, gets "Introduction: (not available)" and the title + abstract for its method. The build's
``inputs`` stats count which was used.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from scholar_agents.llm.base import LLM, SamplingParams
from scholar_agents.llm.constraints import OutputConstraint
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.store import PaperStore
from scholar_agents.runtime.progress import progress_bar
from scholar_agents.scipip import prompts
from scholar_agents.scipip.config import LiteratureDBConfig
from scholar_agents.scipip.full_text import FullText, store_full_text_sources
from scholar_agents.scipip.literature_db import EMBED_FIELDS, LiteratureDB
from scholar_agents.scipip.output_parsers import (
    clean_free_text,
    parse_keywords,
    parse_motivations_details,
    parse_summary,
)

log = logging.getLogger(__name__)

NO_INTRODUCTION = "(not available)"


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", (text or "").strip()) if s]


def select_papers(store: PaperStore, cfg: LiteratureDBConfig, paper_ids: Sequence[str] | None = None) -> list[str]:
    if paper_ids is None and cfg.paper_ids_file:
        path = Path(cfg.paper_ids_file)
        if not path.exists():
            raise FileNotFoundError(f"scipip.db.paper_ids_file {path} does not exist")
        paper_ids = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    if paper_ids is None:
        paper_ids = store.ids()
        if cfg.limit is not None:
            paper_ids = paper_ids[: cfg.limit]
    return list(dict.fromkeys(paper_ids))


def cited_ids(paper: Paper, sections: Sequence[str]) -> list[str]:
    """Resolved references of ``paper``, from all sections or only those whose heading contains one of
    ``sections`` (case-insensitive; e.g. ["introduction"], the official code's choice)."""
    wanted = [s.lower() for s in sections]
    out: list[str] = []
    for sec in paper.sections:
        if wanted and not any(w in sec.heading.lower() for w in wanted):
            continue
        for ref in sec.references:
            if ref.paper_id and ref.paper_id not in out:
                out.append(ref.paper_id)
    return out


class LiteratureDBBuilder:
    """Runs the stages over ``paper_ids``; ``stats`` counts prompts, parse failures and fallbacks."""

    def __init__(self, store: PaperStore, db: LiteratureDB, llm: LLM | None, embedder, cfg: LiteratureDBConfig):
        self.store, self.db, self.llm, self.embedder, self.cfg = store, db, llm, embedder, cfg
        self.stats: dict[str, dict[str, int]] = {}
        self.full_text = FullText({})  # filled by run() when cfg.sections == "fulltext"

    def _count(self, stage: str, key: str, n: int = 1) -> None:
        self.stats.setdefault(stage, {"prompts": 0, "ok": 0, "failed": 0})
        self.stats[stage][key] = self.stats[stage].get(key, 0) + n

    def _abstract(self, p: Paper) -> str:
        return (p.abstract or "")[: self.cfg.max_abstract_chars]

    def _run_stage(
        self,
        stage: str,
        papers: dict[str, Paper],
        make_prompt: Callable[[Paper], object],
        max_new_tokens: int,
        store_result: Callable[[Paper, str], bool],
        constraint: OutputConstraint | None = None,
    ) -> None:
        """One batched LLM call for the papers of ``papers`` that still need ``stage``."""
        pending = self.db.pending(list(papers), stage, self.cfg.retry_failed)
        self._count(stage, "prompts", 0)
        if not pending:
            return
        if self.llm is None:
            raise ValueError(f"{len(pending)} papers need the {stage} stage but no LLM was given")
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0,
                                constraint=constraint if self.cfg.constrained else None)
        gens = self.llm.generate([make_prompt(papers[pid]) for pid in pending], params)
        self._count(stage, "prompts", len(pending))
        for pid, gen in zip(pending, gens):
            ok = store_result(papers[pid], gen.text)
            self._count(stage, "ok" if ok else "failed")

    # ---- the four LLM stages ----

    def _introduction(self, p: Paper) -> str:
        return self.full_text.introduction(p.paper_id)[: self.cfg.max_section_chars]

    def _method_text(self, p: Paper) -> str:
        return self.full_text.method(p.paper_id)[: self.cfg.max_section_chars]

    def _summary_chat(self, p: Paper):
        return prompts.tau1_summary(p.title, self._abstract(p), self._introduction(p) or NO_INTRODUCTION)

    def _store_summary(self, p: Paper, text: str) -> bool:
        summary, ok = parse_summary(text)
        if not summary:
            summary = p.title  # fallback: the title still describes the paper for clustering
        self.db.put_summary(p.paper_id, summary, ok, text)
        return ok

    def _details_chat(self, p: Paper):
        said = self.db._raw(p.paper_id).get("summary", "")
        return prompts.tau1_details(self._summary_chat(p), said)

    def _store_details(self, p: Paper, text: str) -> bool:
        parsed = parse_motivations_details(text)
        background, ideas = parsed.background, parsed.ideas
        if not parsed.motivations or not parsed.details:
            # Fallback: the abstract's opening (motivation) and the rest (what the paper does).
            sents = _sentences(p.abstract)
            background = background or " ".join(sents[:2]) or p.title
            ideas = ideas or " ".join(sents[2:]) or " ".join(sents) or p.title
            self._count("details", "fallback")
        self.db.put_details(p.paper_id, background, ideas, parsed.ok, text)
        return parsed.ok

    def _keywords_chat(self, p: Paper):
        return prompts.tau2_keywords(f"{p.title}. {self._abstract(p)}", self.cfg.max_keywords)

    def _store_keywords(self, p: Paper, text: str) -> bool:
        parsed = parse_keywords(text, max_num=self.cfg.max_keywords)
        self._count("keywords", "dropped_candidates", parsed.dropped)
        self.db.put_keywords(p.paper_id, parsed.keywords, parsed.ok, text)
        return parsed.ok

    def _method_chat(self, p: Paper):
        return prompts.tau3_concise_method(self._method_text(p) or f"{p.title}. {self._abstract(p)}")

    def _count_inputs(self, papers: dict[str, Paper]) -> dict[str, dict[str, int]]:
        """Which text stood in for each paper's introduction and method section (Eq. 1's T_n, T_m)."""
        intro = sum(bool(self._introduction(p)) for p in papers.values())
        method = sum(bool(self._method_text(p)) for p in papers.values())
        return {"sections": self.cfg.sections,
                "introduction": {"fulltext": intro, "not_available": len(papers) - intro},
                "method": {"fulltext": method, "abstract": len(papers) - method}}

    def _store_method(self, p: Paper, text: str) -> bool:
        method = clean_free_text(text)
        ok = len(method.split()) >= 10
        if not ok:
            method = p.abstract or p.title
        self.db.put_method(p.paper_id, method, ok, text)
        return ok

    # ---- embeddings (Eq. 2) ----

    def _embed(self, ids: list[str], papers: dict[str, Paper]) -> None:
        if self.embedder is None:
            raise ValueError("building the literature database needs an embedder")
        abstracts = {pid: f"{p.title}. {p.abstract}" if p.abstract else p.title for pid, p in papers.items()}
        for name in EMBED_FIELDS:
            done = self.db.embedded_ids(name, self.embedder.model_id)
            todo = [p for p in ids if p not in done]
            texts = self.db.field_texts(name, todo, abstracts=abstracts)
            todo = [p for p in todo if p in texts]
            self._count("embeddings", name, len(todo))
            for i in range(0, len(todo), 4096):
                chunk = todo[i : i + 4096]
                vecs = self.embedder.encode([texts[p] for p in chunk], batch_size=self.cfg.embed_batch_size, kind="doc")
                self.db.put_embeddings(name, self.embedder.model_id, chunk, vecs)
                self.db.commit()

    def _reparse(self, papers: dict[str, Paper]) -> None:
        """Re-apply the parsers to the stored raw outputs (no LLM), then drop the embeddings of the papers whose
        texts may have changed so that the embedding pass recomputes them."""
        stores = {"summary": self._store_summary, "details": self._store_details, "keywords": self._store_keywords,
                  "method": self._store_method}
        touched = []
        for pid, paper in progress_bar(papers.items(), desc="scipip reparse", unit=" papers"):
            raw = self.db._raw(pid)
            for stage, store in stores.items():
                if stage in raw:
                    ok = store(paper, raw[stage])
                    self._count(f"reparse_{stage}", "ok" if ok else "failed")
            if raw:
                touched.append(pid)
        for i in range(0, len(touched), 500):
            chunk = touched[i : i + 500]
            self.db.conn.execute(
                f"DELETE FROM scipip_embeddings WHERE field != 'abstract' AND paper_id IN ({','.join('?' * len(chunk))})", chunk
            )
        self.db.commit()
        self._embed(touched, {p: papers[p] for p in touched})

    def run(self, paper_ids: Sequence[str]) -> dict:
        t0 = time.perf_counter()
        papers = self.store.get_many(list(paper_ids))
        missing = [p for p in paper_ids if p not in papers]
        no_abstract = [p for p, paper in papers.items() if not paper.abstract]
        # Title-only stubs cannot be summarised; they stay in the paper store but not in SciPIP's database.
        papers = {p: paper for p, paper in papers.items() if paper.abstract}
        log.info("literature DB: %d papers (%d missing from the store, %d without abstract skipped)",
                 len(papers), len(missing), len(no_abstract))
        if self.cfg.sections == "fulltext":
            sources = store_full_text_sources(self.store)
            if not sources:
                log.warning("sections=fulltext but the store %s was built from no full-text file (unarxive, "
                            "research_town): every paper's introduction / method falls back to its abstract",
                            self.store.path)
            self.full_text = FullText.read(sources, papers)
        inputs = self._count_inputs(papers)
        log.info("literature DB inputs: %s", inputs)
        for pid, paper in papers.items():
            refs = cited_ids(paper, self.cfg.citation_sections)
            if refs:
                self.db.put_references(pid, refs)
        self.db.commit()
        if self.cfg.reparse:
            self._reparse(papers)
            order: list[str] = []
        else:
            order = sorted(papers, key=lambda pid: len(papers[pid].abstract or ""))
        # Waves of `chunk_size` papers go through all four stages and the embeddings before the next wave starts
        # (committed after each): an interrupted build keeps complete papers, and each stage is still one
        # batched LLM call per wave. Similar abstract lengths in a wave waste less padding.
        bar = progress_bar(total=len(order), desc="scipip literature DB", unit=" papers")
        for i in range(0, len(order), self.cfg.chunk_size):
            wave = {pid: papers[pid] for pid in order[i : i + self.cfg.chunk_size]}
            self._run_stage("summary", wave, self._summary_chat, self.cfg.max_new_tokens_summary, self._store_summary,
                            prompts.SUMMARY_FORMAT)
            self.db.commit()
            self._run_stage("details", wave, self._details_chat, self.cfg.max_new_tokens_details, self._store_details,
                            prompts.DETAILS_FORMAT)
            self._run_stage("keywords", wave, self._keywords_chat, self.cfg.max_new_tokens_keywords, self._store_keywords,
                            prompts.keywords_format(self.cfg.max_keywords))
            self._run_stage("method", wave, self._method_chat, self.cfg.max_new_tokens_method, self._store_method,
                            prompts.METHOD_FORMAT)
            self.db.commit()
            self._embed(list(wave), wave)
            bar.update(len(wave))
        bar.close()
        n_pairs = self.db.rebuild_cocitations()
        llm_prompts = sum(s.get("prompts", 0) for k, s in self.stats.items() if k != "embeddings")
        return {
            "papers": len(papers),
            "missing_from_store": len(missing),
            "inputs": inputs,
            "skipped_without_abstract": len(no_abstract),
            "llm_prompts": llm_prompts,
            "stages_this_run": self.stats,
            "stages_total": self.db.stage_counts(),
            "cocited_pairs": n_pairs,
            "citing_papers": len(self.db.references()),
            "keyword_edges": len(self.db.keyword_edges()),
            "seconds": round(time.perf_counter() - t0, 1),
        }


def build_literature_db(
    store: PaperStore, llm: LLM | None, embedder, cfg: LiteratureDBConfig, paper_ids: Sequence[str] | None = None
) -> dict:
    """Summarise, link and embed the selected papers of ``store`` into SciPIP's tables in the same file."""
    ids = select_papers(store, cfg, paper_ids)
    with LiteratureDB(store.path) as db:
        return LiteratureDBBuilder(store, db, llm, embedder, cfg).run(ids)
