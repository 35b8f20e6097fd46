"""``scholar data_gen selector_pairs``: the Selector's SFT data, as PaSa Appendix B.

- **Positives**: <user query, gold paper> pairs; the teacher writes a decision and rationale with the Table 15
  prompt; pairs it labels False are rejected ("this contradicts the AutoScholarQuery label").
  ``keep_rejected_positives`` keeps them for small teacher models (whose decisions are close to chance): the
  teacher is then asked again with the decision forced to True and writes a rationale for it (counted).
- **Negatives**: a simulated partial crawl ("each paper has a 50% probability of being added to the paper
  queue"): the teacher's Table 7 queries are searched before the query date, the hits' sections are expanded
  one level, each candidate enters the queue with probability ``queue_prob``; queued papers that are not gold
  and that the teacher does not select become negatives (with the teacher's rationale).

The assistant message is ``pasa.prompts.selector_target(decision, rationale)``: the decision token FIRST, then
``Reason: ...`` — the released sft_selector format, and what ``train selector_sft`` / the Selector's P("True") use.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np
from omegaconf import DictConfig

from scholar_agents.data_gen.crawler_sessions import CrawlerSessionsConfig
from scholar_agents.data_gen.paper_access import open_corpus
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
from scholar_agents.data_gen.verified_teacher import candidate_queries, verify_queries
from scholar_agents.llm import SamplingParams
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.titles import TitleMatcher
from scholar_agents.pasa.prompts import SELECTOR_FALSE, SELECTOR_TRUE, selector_messages, selector_target
from scholar_agents.pasa.queries import ScholarQuery, load_pasa_queries
from scholar_agents.pasa.selectors.llm import Judgement, parse_judgement, truncate_abstract
from scholar_agents.validation import UsageError, existing_file, optional_positive_int, reading

log = logging.getLogger(__name__)
# Settings that change which items are read or how the output is assembled, not what a shard holds (the shards'
# item keys guard those): a re-run with other values still resumes.
_NOT_IN_FINGERPRINT = ("queries", "eval_fraction", "shard_size")

POSITIVE, NEGATIVE = "positive", "negative"


@dataclass
class SelectorPairsConfig:
    """``data_gen`` schema of ``scholar data_gen selector_pairs``. Presets: ``conf/data_gen/selector_pairs*.yaml``."""

    queries: str = "${paths.sample_dir}/autoscholarquery_dev.jsonl"  # PaSa-format queries (the train split in PaSa)
    # Positives. B: "for each user query and one of its corresponding papers" -> one gold paper per query;
    # null = every gold paper in the store.
    positives_per_query: Optional[int] = 1
    keep_rejected_positives: bool = False  # true for small teachers: keep, with a rationale forced to True (ours)
    # Ours, for small teachers: a queued non-gold paper the teacher selects stays a negative, with a rationale forced
    # to False (the paper drops it: the teacher may be right that it is relevant). Counted.
    keep_selected_negatives: bool = False
    # generate = the paper (the teacher writes the decision token then the rationale); next_token = ours for small
    # teachers that answer with prose: decision from P("True") vs P("False"), rationale generated after it.
    decision_source: str = "generate"
    require_abstract: bool = True  # a title-only paper gives the Selector nothing to judge (counted when skipped)
    # Negatives: the simulated crawl
    negatives: bool = True
    # Whose searches the simulated crawl runs: "llm" = the teacher's Table 7 queries (the paper); "verified" = ours:
    # the verified Crawler teacher's queries (data_gen/verified_teacher.py, CrawlerSessionsConfig's
    # defaults, <= 3 searches of `search_k` hits chosen with the gold papers), so the negatives are the non-gold
    # papers of the same searches that found the gold ones (hard negatives), and no LLM call writes queries.
    crawl_queries: str = "llm"
    queue_prob: float = 0.5  # B: "each paper has a 50% probability of being added to the paper queue"
    search_k: int = 10
    expand_hits: bool = True  # also queue the papers cited by the hits' sections (one expansion level)
    max_negative_candidates: Optional[int] = None  # queued non-gold papers judged per query (null = all)
    title_min_score: float = 90.0  # a non-gold id whose title matches a gold title is not a negative
    # Teacher generation
    max_abstract_chars: Optional[int] = None  # train and score with the same value (selector.max_abstract_chars)
    judge_max_new_tokens: int = 256
    query_max_new_tokens: int = 256  # Table 7 queries of the simulated crawl
    max_search_queries: Optional[int] = None
    query_response_prefix: str = ""  # as crawler_sessions' response_prefix (the same value shares the LLM cache)
    temperature: float = 0.0
    require_rationale: bool = True  # an answer without a rationale is not a training target (counted)
    eval_fraction: float = 0.0  # held-out pairs (by user query) written to eval.jsonl
    shard_size: int = 16  # user queries per shard


def _pair_row(q: ScholarQuery, paper: Paper, kind: str, decision: bool, rationale: str, abstract: str,
              teacher_text: str, forced: bool) -> dict:
    messages = selector_messages(q.question, paper.title, abstract)
    messages.append({"role": "assistant", "content": selector_target(decision, rationale)})
    return {"messages": messages,
            "meta": {"kind": kind, "label": decision, "qid": q.qid, "user_query": q.question,
                     "paper_id": paper.paper_id,
                     "teacher_output": teacher_text, "forced_decision": forced}}


def _candidates(search, store, queries: list[ScholarQuery], teacher, dg, stats: Counter) -> list[list[str]]:
    """Paper ids reached by each query's simulated crawl: search hits, then (optionally) the hits' citations."""
    flat, owner = [], []
    for i, tq in enumerate(teacher):
        for sq in tq.queries:
            flat.append(sq)
            owner.append(i)
    hits = search.search_batch(flat, k=int(dg.search_k), before=[queries[i].before for i in owner]) if flat else []
    found: list[list[str]] = [[] for _ in queries]
    for i, hs in zip(owner, hits):
        found[i] += [h.paper_id for h in hs if h.paper_id not in found[i]]
    if dg.expand_hits:
        for i, ids in enumerate(found):
            papers = store.get_many(ids)
            cited = [r.paper_id for pid in ids if pid in papers for s in papers[pid].sections for r in s.references
                     if r.paper_id]
            before = queries[i].before
            dated = store.get_many(cited, with_sections=False)
            # The date filter applies to expansion too (PaSa §5.1; the official code filtered only searches).
            cited = [c for c in dict.fromkeys(cited)
                     if c in dated and (before is None or not dated[c].date or dated[c].date < before)]
            stats["crawl_expanded_papers"] += len([c for c in cited if c not in ids])
            ids += [c for c in cited if c not in ids]
    return found


def forced_rationales(llm, prompts: list, decisions: list[bool], params) -> list[str]:
    """The teacher's rationale for a decision fixed in advance: the chat rendered with the answer's start
    ("True\nReason:" / "False\nReason:") and continued by the model."""
    starts = [llm.render(p) + f"{SELECTOR_TRUE if d else SELECTOR_FALSE}\nReason:" for p, d in zip(prompts, decisions)]
    return [" ".join(g.completions[0].text.split()) for g in llm.generate(starts, params)] if starts else []


def judge(llm, prompts: list, params, source: str, stats: Counter) -> list[tuple[Judgement, str]]:
    """The teacher's decision and rationale for each Table 15 prompt.

    ``generate`` (the paper): the teacher writes "True/False\nReason: ..."; an answer that does not start with a
    decision is unparseable (counted). ``next_token`` (ours, for small teachers that answer Table 15 with prose):
    the decision is the Selector's own rule — P("True") vs P("False") at the answer's first position (§4.3,
    normalised over the two) — and the rationale is generated after that decision token."""
    if source == "generate":
        gens = llm.generate(prompts, params)
        stats["teacher_judgement_prompts"] += len(prompts)
        return [(parse_judgement(g.completions[0].text), g.completions[0].text) for g in gens]
    if source != "next_token":
        raise ValueError(f"data_gen.decision_source must be 'generate' or 'next_token', got {source!r}")
    probs = np.asarray(llm.next_token_probs(prompts, [SELECTOR_TRUE, SELECTOR_FALSE]), dtype=np.float64)
    stats["teacher_next_token_prompts"] += len(prompts)
    p_true = probs[:, 0] / np.maximum(probs.sum(axis=1), 1e-12)
    decisions = [bool(p >= 0.5) for p in p_true]
    rationales = forced_rationales(llm, prompts, decisions, params)
    stats["teacher_judgement_prompts"] += len(prompts)
    out = []
    for d, r in zip(decisions, rationales):
        text = f"{SELECTOR_TRUE if d else SELECTOR_FALSE}\nReason: {r}"
        out.append((Judgement(decision=d, rationale=r, text=text), text))
    return out


def _verified_crawl_queries(search, queries: list[ScholarQuery], search_k: int, stats: Counter) -> list:
    """The verified Crawler teacher's searches for each query (``.queries``), before the query date (PaSa §5.1)."""
    d = CrawlerSessionsConfig()
    cands = [candidate_queries(q.question, q.gold_titles, n_key_phrases=d.key_phrases, ngram=d.key_phrase_ngram,
                               hindsight=d.hindsight, min_support=d.hindsight_min_support,
                               per_title=d.hindsight_phrases_per_title) for q in queries]
    verified = verify_queries(search, queries, cands, [q.before for q in queries], search_k, d.verified_max_queries,
                              d.verified_fallback_raw)
    stats["crawl_verified_queries"] += sum(len(v.kept) for v in verified)
    return verified


def pairs_for_shard(llm, search, store, queries: list[ScholarQuery], dg, seed: int) -> tuple[list[dict], dict]:
    stats: Counter = Counter()
    jobs: list[tuple[ScholarQuery, Paper, str]] = []  # (query, paper, kind)
    for q in queries:
        stats["user_queries"] += 1
        rng = random.Random(f"{seed}/selector_pairs/positives/{q.qid}")
        gold = store.get_many(q.gold_ids, with_sections=False)
        golds = [gold[g] for g in q.gold_ids if g in gold]
        stats["gold_not_in_store"] += len(q.gold_ids) - len(golds)
        if dg.require_abstract:
            stats["gold_without_abstract"] += sum(1 for p in golds if not p.abstract)
            golds = [p for p in golds if p.abstract]
        if dg.positives_per_query is not None and len(golds) > int(dg.positives_per_query):
            golds = rng.sample(golds, int(dg.positives_per_query))
        jobs += [(q, p, POSITIVE) for p in golds]
    if dg.negatives:
        if dg.get("crawl_queries", "llm") == "verified":
            teacher = _verified_crawl_queries(search, queries, int(dg.search_k), stats)
        else:
            teacher, _ = generate_teacher_queries(llm, [q.question for q in queries], int(dg.query_max_new_tokens),
                                                  float(dg.temperature), seed, dg.max_search_queries, stats,
                                                  str(dg.query_response_prefix))
        for q, ids in zip(queries, _candidates(search, store, queries, teacher, dg, stats)):
            rng = random.Random(f"{seed}/selector_pairs/queue/{q.qid}")
            gold_titles = TitleMatcher(list(zip(q.gold_ids, q.gold_titles)), min_score=float(dg.title_min_score))
            papers = store.get_many(ids, with_sections=False)
            queued = []
            for pid in ids:
                if pid in q.gold_ids or pid not in papers:
                    continue
                p = papers[pid]
                if len(gold_titles) and gold_titles.match(p.title) is not None:
                    stats["crawl_hits_matching_gold_title"] += 1
                    continue
                if dg.require_abstract and not p.abstract:
                    stats["crawl_hits_without_abstract"] += 1
                    continue
                if rng.random() < float(dg.queue_prob):
                    queued.append(p)
            stats["crawl_candidates_queued"] += len(queued)
            if dg.max_negative_candidates is not None:
                queued = queued[: int(dg.max_negative_candidates)]
            jobs += [(q, p, NEGATIVE) for p in queued]
    if not jobs:
        return [], dict(stats)
    abstracts = [truncate_abstract(p.abstract, dg.max_abstract_chars) for _, p, _ in jobs]
    prompts = [selector_messages(q.question, p.title, a) for (q, p, _), a in zip(jobs, abstracts)]
    params = SamplingParams(max_new_tokens=int(dg.judge_max_new_tokens), temperature=float(dg.temperature), seed=seed)
    judgements = judge(llm, prompts, params, str(dg.decision_source), stats)
    rows: list[dict] = []
    forced_jobs: list[int] = []
    keep = {POSITIVE: bool(dg.keep_rejected_positives), NEGATIVE: bool(dg.keep_selected_negatives)}
    for i, ((q, p, kind), (j, text)) in enumerate(zip(jobs, judgements)):
        if j.decision is None:
            stats[f"{kind}_unparseable_decision"] += 1
            if keep[kind]:
                forced_jobs.append(i)
            continue
        if kind == POSITIVE and not j.decision:
            stats["positive_rejected_teacher_false"] += 1
            if keep[kind]:
                forced_jobs.append(i)
            continue
        if kind == NEGATIVE and j.decision:
            stats["negative_dropped_teacher_selected"] += 1
            if keep[kind]:
                forced_jobs.append(i)
            continue
        if not j.rationale and dg.require_rationale:
            stats[f"{kind}_without_rationale"] += 1
            continue
        rows.append(_pair_row(q, p, kind, j.decision, j.rationale or "-", abstracts[i], text, False))
        stats[f"{kind}_pairs"] += 1
    if forced_jobs:
        # Kept against the teacher's decision: the label is the data's (gold or not), and the teacher writes the
        # rationale of that decision (the chat rendered with the answer's start "True/False\nReason:").
        labels = [jobs[i][2] == POSITIVE for i in forced_jobs]
        forced = forced_rationales(llm, [prompts[i] for i in forced_jobs], labels, params)
        stats["teacher_forced_prompts"] += len(forced_jobs)
        for i, label, rationale in zip(forced_jobs, labels, forced):
            q, p, kind = jobs[i]
            if not rationale:
                stats[f"{kind}_forced_without_rationale"] += 1
                continue
            teacher_text = f"{SELECTOR_TRUE if label else SELECTOR_FALSE}\nReason: {rationale}"
            rows.append(_pair_row(q, p, kind, label, rationale, abstracts[i], teacher_text, True))
            stats[f"{kind}_pairs_forced_{str(label).lower()}"] += 1
            stats[f"{kind}_pairs"] += 1
    rows.sort(key=lambda r: (r["meta"]["qid"], r["meta"]["kind"] != POSITIVE, r["meta"]["paper_id"]))
    return rows, dict(stats)


def selector_pairs(cfg: DictConfig) -> dict:
    dg = cfg.data_gen
    if dg.get("crawl_queries", "llm") not in ("llm", "verified"):
        raise UsageError(f"data_gen.crawl_queries must be llm or verified, got {dg.crawl_queries!r}")
    out_dir = Path(str(cfg.out_dir))
    limit = optional_positive_int(cfg.get("limit"), "limit", "the first N user queries; null = all")
    with reading("data_gen.queries", dg.queries):
        queries = load_pasa_queries(existing_file(dg.queries, "data_gen.queries"), limit=limit)
    fingerprint = {"task": "selector_pairs", "model": str(cfg.llm.model), "backend": str(cfg.llm.backend),
                   "seed": int(cfg.seed), "data_gen": {k: dg[k] for k in dg if k not in _NOT_IN_FINGERPRINT},
                   "search": search_fingerprint(cfg)}
    run = ShardedRun(out_dir, fingerprint, overwrite=bool(cfg.get("overwrite", False)))
    store, search = open_corpus(cfg)
    llm = LazyLLM(cfg.llm)
    try:
        rows, stats, computed = run_shards(
            run, queries, lambda q: q.qid, int(dg.shard_size),
            lambda chunk: pairs_for_shard(llm.get(), search, store, chunk, dg, int(cfg.seed)), "selector pairs")
    finally:
        llm.close()
        store.close()
    llm_prompts = sum(v for k, v in computed.items() if k.endswith("_prompts"))
    eval_qids = held_out_keys(sorted({r["meta"]["qid"] for r in rows}), float(dg.eval_fraction), int(cfg.seed))
    files = {"train": str(out_dir / "train.jsonl")}
    write_jsonl(files["train"], [r for r in rows if r["meta"]["qid"] not in eval_qids])
    if eval_qids:
        files["eval"] = str(out_dir / "eval.jsonl")
        write_jsonl(files["eval"], [r for r in rows if r["meta"]["qid"] in eval_qids])
    report = {"model": str(cfg.llm.model), "queries_file": str(dg.queries), "user_queries": len(queries),
              "pairs": len(rows), "by_kind": dict(Counter(r["meta"]["kind"] for r in rows)),
              "counts": dict(stats), "shards": {"resumed": run.resumed, "computed": run.computed},
              "llm_prompts_this_run": llm_prompts, "files": files}
    write_json(out_dir / "stats.json", report)
    log.info("selector pairs: %s in %s", report["by_kind"], out_dir)
    return {"out_dir": str(out_dir), "stats": report}
