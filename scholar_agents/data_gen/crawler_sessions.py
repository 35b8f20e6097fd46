"""``scholar data_gen crawler_sessions``: the Crawler's imitation-learning sessions, exactly as PaSa Appendix A.1.

- **Search sessions** (start state S_q): the teacher LLM writes search queries for a user query with the Table 7
  prompt; the session is the Table 8 search prompt answered by ``[Search] q1 [Search] q2 ... [Stop]``.
- **Expand sessions** (start state S_{q+p}): the generated queries are searched (our search backend, restricted
  to papers published before the query date); papers are sampled from the results; every section of the paper
  that cites a gold paper of the query is selected, every other section with probability 0.1 ("to enhance
  trajectory diversity"); the session is the Table 8 expand prompt answered by ``[Expand] s1 ... [Stop]``.

Prompts are rendered by the crawl environment itself (``CrawlEnv.state_messages``) and responses by the action
grammar's ``render_response``, so the SFT data is exactly what the Crawler sees and writes at inference.
Only papers with section → reference structure can start an expand session; in the bundled data few papers have
it (unarXive, research-town), and the report counts how many search hits had sections.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from scholar_agents.data_gen.shards import (
    LazyLLM,
    ShardedRun,
    held_out_keys,
    run_shards,
    search_fingerprint,
    write_json,
    write_jsonl,
)
from scholar_agents.data_gen.teacher_queries import generate_teacher_queries
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.titles import TitleMatcher
from scholar_agents.pasa.actions import EXPAND, SEARCH, render_response
from scholar_agents.pasa.queries import ScholarQuery, load_pasa_queries

log = logging.getLogger(__name__)
# Settings that change which items are read or how the output is assembled, not what a shard holds (the shards'
# item keys guard those): a re-run with other values still resumes.
_NOT_IN_FINGERPRINT = ("queries", "eval_fraction", "shard_size")


@dataclass
class CrawlerSessionsConfig:
    """``data_gen`` schema of ``scholar data_gen crawler_sessions`` (presets: ``conf/data_gen/crawler_sessions*``)."""

    queries: str = "${paths.sample_dir}/autoscholarquery_dev.jsonl"  # PaSa-format queries (the train split in PaSa)
    search_sessions: bool = True
    expand_sessions: bool = True
    # Table 7 teacher generation
    max_new_tokens: int = 256
    temperature: float = 0.0
    max_search_queries: Optional[int] = None  # cap on [Search] actions per session (null = all the teacher wrote)
    # Ours, for small teachers: the start of the Table 7 answer written for the model (e.g. '["'). Empty = the paper.
    response_prefix: str = ""
    # Expand sessions (A.1)
    search_k: int = 10  # results per generated query
    papers_per_query: int = 3  # expand sessions per user query (PaSa: 9,978 expand / 3,011 search sessions ~ 3.3)
    other_section_prob: float = 0.1  # A.1: a section citing no gold paper is selected with 10% probability
    keep_empty_expand: bool = True  # sessions in which no section was selected ("[Stop]" alone) are kept
    title_min_score: float = 90.0  # cited titles without an id are matched to the gold titles
    eval_fraction: float = 0.0  # held-out sessions (by user query) written to eval.jsonl
    shard_size: int = 16  # user queries per shard


def _merge_hits(hit_lists: list[list]) -> list[str]:
    """Round-robin over the generated queries' rankings: rank 0 of every query first, then rank 1, ..."""
    out: list[str] = []
    seen: set[str] = set()
    for rank in range(max((len(h) for h in hit_lists), default=0)):
        for hits in hit_lists:
            if rank < len(hits) and hits[rank].paper_id not in seen:
                seen.add(hits[rank].paper_id)
                out.append(hits[rank].paper_id)
    return out


def cites_gold(section, gold_ids: set[str], gold_titles: TitleMatcher) -> bool:
    for ref in section.references:
        if ref.paper_id and ref.paper_id in gold_ids:
            return True
        if ref.title and len(gold_titles) and gold_titles.match(ref.title) is not None:
            return True
    return False


def expand_session(env, q: ScholarQuery, paper: Paper, rng: random.Random, other_prob: float,
                   gold_titles: TitleMatcher, stats: Counter) -> dict[str, Any] | None:
    """One A.1 expand session on ``paper`` (None when no section has a usable heading)."""
    gold_ids = set(q.gold_ids)
    selected, by_gold, by_chance = [], [], []
    for sec in paper.sections:
        heading = " ".join((sec.heading or "").split())
        if not heading:
            continue
        if cites_gold(sec, gold_ids, gold_titles):
            by_gold.append(heading)
            selected.append(heading)
        elif rng.random() < other_prob:
            by_chance.append(heading)
            selected.append(heading)
    if not paper.outline:
        return None
    try:
        response = render_response(EXPAND, list(dict.fromkeys(selected)))
    except ValueError as e:  # a heading holding an action token cannot be written in the grammar
        stats["expand_heading_not_writable"] += 1
        log.warning("%s / %s: %s", q.qid, paper.paper_id, e)
        return None
    messages = env.state_messages(q.question, paper) + [{"role": "assistant", "content": response}]
    return {"messages": messages, "meta": {"kind": EXPAND, "qid": q.qid, "user_query": q.question,
                                           "paper_id": paper.paper_id, "gold_sections": by_gold,
                                           "random_sections": by_chance}}


def sessions_for_shard(llm, env, search, store, queries: list[ScholarQuery], dg, seed: int) -> tuple[list[dict], dict]:
    stats: Counter = Counter()
    teacher, raw = generate_teacher_queries(llm, [q.question for q in queries], int(dg.max_new_tokens),
                                            float(dg.temperature), seed, dg.max_search_queries, stats,
                                            str(dg.response_prefix))
    rows: list[dict] = []
    for q, tq, text in zip(queries, teacher, raw):
        stats["user_queries"] += 1
        if not tq.queries:
            stats["user_queries_without_teacher_queries"] += 1
            rows.append({"messages": None, "meta": {"kind": "failed_teacher_queries", "qid": q.qid, "raw_output": text,
                                                    "failure": tq.failure}})
            continue
        if dg.search_sessions:
            response = render_response(SEARCH, tq.queries)
            rows.append({"messages": env.state_messages(q.question) + [{"role": "assistant", "content": response}],
                         "meta": {"kind": SEARCH, "qid": q.qid, "user_query": q.question, "raw_output": text,
                                  "repairs": tq.repairs}})
            stats["search_sessions"] += 1
    if dg.expand_sessions:
        flat, owner = [], []
        for i, tq in enumerate(teacher):
            for sq in tq.queries:
                flat.append(sq)
                owner.append(i)
        befores = [queries[i].before for i in owner] if env.cfg.date_filter else None
        hits = search.search_batch(flat, k=int(dg.search_k), before=befores) if flat else []
        per_query: list[list] = [[] for _ in queries]
        for i, h in zip(owner, hits):
            per_query[i].append(h)
        for q, hit_lists in zip(queries, per_query):
            ids = _merge_hits(hit_lists)
            papers = store.get_many(ids)
            with_sections = [papers[i] for i in ids if i in papers and any(s.heading for s in papers[i].sections)]
            stats["search_hits"] += len(ids)
            stats["search_hits_with_sections"] += len(with_sections)
            if not with_sections:
                stats["user_queries_without_sectioned_hits"] += 1
                continue
            rng = random.Random(f"{seed}/crawler_sessions/{q.qid}")
            chosen = rng.sample(with_sections, min(int(dg.papers_per_query), len(with_sections)))
            gold_titles = TitleMatcher([(g, t) for g, t in zip(q.gold_ids, q.gold_titles)],
                                       min_score=float(dg.title_min_score))
            for paper in chosen:
                row = expand_session(env, q, paper, rng, float(dg.other_section_prob), gold_titles, stats)
                if row is None:
                    continue
                if not row["meta"]["gold_sections"] and not row["meta"]["random_sections"]:
                    stats["expand_sessions_empty"] += 1
                    if not dg.keep_empty_expand:
                        continue
                if row["meta"]["gold_sections"]:
                    stats["expand_sessions_citing_gold"] += 1
                stats["expand_sessions"] += 1
                stats["expand_sections_gold"] += len(row["meta"]["gold_sections"])
                stats["expand_sections_random"] += len(row["meta"]["random_sections"])
                rows.append(row)
    return rows, dict(stats)


def crawler_sessions(cfg: DictConfig) -> dict:
    from scholar_agents.data_gen.paper_access import open_corpus
    from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv

    from scholar_agents.validation import UsageError, existing_file, optional_positive_int, reading

    dg = cfg.data_gen
    out_dir = Path(str(cfg.out_dir))
    limit = optional_positive_int(cfg.get("limit"), "limit", "the first N user queries; null = all")
    if cfg.crawler.env.get("prompt_style", "paper") != "paper":
        # the sessions' answers are written in Table 8's grammar; an official-style prompt would pair with them
        raise UsageError("data_gen crawler_sessions writes Table 8 sessions: keep crawler.env.prompt_style=paper "
                         "(official is for serving the released checkpoints)")
    with reading("data_gen.queries", dg.queries):
        queries = load_pasa_queries(existing_file(dg.queries, "data_gen.queries"), limit=limit)
    fingerprint = {"task": "crawler_sessions", "model": str(cfg.llm.model), "backend": str(cfg.llm.backend),
                   "seed": int(cfg.seed), "data_gen": {k: dg[k] for k in dg if k not in _NOT_IN_FINGERPRINT},
                   "env": dict(cfg.crawler.env), "search": search_fingerprint(cfg)}
    run = ShardedRun(out_dir, fingerprint, overwrite=bool(cfg.get("overwrite", False)))
    store, search = open_corpus(cfg)
    env = CrawlEnv(store, search, CrawlConfig(**dict(cfg.crawler.env)))
    llm = LazyLLM(cfg.llm)
    try:
        rows, stats, computed = run_shards(
            run, queries, lambda q: q.qid, int(dg.shard_size),
            lambda chunk: sessions_for_shard(llm.get(), env, search, store, chunk, dg, int(cfg.seed)),
            "crawler sessions")
    finally:
        llm.close()
        store.close()
    llm_prompts = computed.get("teacher_query_prompts", 0)
    sessions = [r for r in rows if r["messages"] is not None]
    failed = [r["meta"] for r in rows if r["messages"] is None]
    eval_qids = held_out_keys(sorted({r["meta"]["qid"] for r in sessions}), float(dg.eval_fraction), int(cfg.seed))
    files = {"train": str(out_dir / "train.jsonl")}
    write_jsonl(files["train"], [r for r in sessions if r["meta"]["qid"] not in eval_qids])
    if eval_qids:
        files["eval"] = str(out_dir / "eval.jsonl")
        write_jsonl(files["eval"], [r for r in sessions if r["meta"]["qid"] in eval_qids])
    write_jsonl(out_dir / "teacher_failures.jsonl", failed)
    report = {"model": str(cfg.llm.model), "queries_file": str(dg.queries), "user_queries": len(queries),
              "counts": dict(stats), "sessions": len(sessions),
              "by_kind": dict(Counter(r["meta"]["kind"] for r in sessions)),
              "shards": {"resumed": run.resumed, "computed": run.computed},
              "llm_prompts_this_run": llm_prompts, "files": files}
    write_json(out_dir / "stats.json", report)
    log.info("crawler sessions: %s in %s", report["by_kind"], out_dir)
    return {"out_dir": str(out_dir), "stats": report}

