"""``scholar data_gen crawler_sessions``: the Crawler's imitation-learning sessions, exactly as PaSa Appendix A.1.

- **Search sessions** (start state S_q): the teacher writes search queries for a user query; the session is the
  Table 8 search prompt answered by ``[Search] q1 [Search] q2 ... [Stop]``. ``data_gen.teacher=llm`` (PaSa): the
  teacher LLM with the Table 7 prompt. ``data_gen.teacher=verified`` (ours, the CPU preset's default): candidate
  queries (the query, its key phrases, gold-title phrases it supports, optionally LLM rewrites) checked with the
  crawl environment's own search against the gold papers, greedy marginal gain
  (:mod:`scholar_agents.data_gen.verified_teacher`); the stats report each kept query's marginal recall and the
  recall the teacher reached next to the raw query's.
- **Expand sessions** (start state S_{q+p}): the generated queries are searched (our search backend, restricted
  to papers published before the query date); papers are sampled from the results; every section of the paper
  that cites a gold paper of the query is selected, every other section with probability 0.1 ("to enhance
  trajectory diversity"); the session is the Table 8 expand prompt answered by ``[Expand] s1 ... [Stop]``.

Prompts are rendered by the crawl environment itself (``CrawlEnv.state_messages``) and responses by the action
grammar's ``render_response``, so the SFT data is exactly what the Crawler sees and writes at inference.
Only papers with section → reference structure can start an expand session; in the bundled data few papers have
it (unarXive, research-town), and the report counts how many search hits had sections. With
``crawler.env.related_expand`` (ours) a sectionless hit gets a *related* expand session instead: its outline is
the paper's related searches, and a search is selected when its hits add gold papers the crawl had not found
(:func:`related_expand_sessions`). Which crawl (``data_gen.related_found``): ``user_query`` (default) = a gold-blind
one, the search of the user's own words that serving always runs (``crawler.env.search_user_query``): the papers
followed are its sectionless hits, and a positive is a search that adds gold to them; ``teacher`` = the verified
teacher's searches, which read the gold titles, so they have usually found what a related search would add (1.9 %
of sessions positive on the shared corpus: a student of that data learns to stop).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig

from scholar_agents.data_gen.paper_access import open_corpus
from scholar_agents.data_gen.request_forms import FORMS, ORIGINAL, rewrite
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
from scholar_agents.papers.ids import norm_id
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.titles import TitleMatcher
from scholar_agents.pasa.actions import EXPAND, SEARCH, render_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv, gets_session
from scholar_agents.pasa.queries import ScholarQuery, load_pasa_queries
from scholar_agents.validation import UsageError, existing_file, optional_positive_int, reading

log = logging.getLogger(__name__)
# Settings that change which items are read or how the output is assembled, not what a shard holds (the shards'
# item keys guard those): a re-run with other values still resumes.
_NOT_IN_FINGERPRINT = ("queries", "eval_fraction", "shard_size")
TEACHERS = ("llm", "verified")
RELATED_FOUND = ("user_query", "teacher")


@dataclass
class CrawlerSessionsConfig:
    """``data_gen`` schema of ``scholar data_gen crawler_sessions`` (presets: ``conf/data_gen/crawler_sessions*``)."""

    queries: str = "${paths.sample_dir}/autoscholarquery_dev.jsonl"  # PaSa-format queries (the train split in PaSa)
    search_sessions: bool = True
    expand_sessions: bool = True
    # Who writes the [Search] queries: "llm" = PaSa Table 7 (the paper); "verified" = ours (verified_teacher.py):
    # candidates checked against the gold papers with the environment's own search, greedy marginal gain.
    teacher: str = "llm"
    # Table 7 teacher generation
    max_new_tokens: int = 256
    temperature: float = 0.0
    max_search_queries: Optional[int] = None  # cap on [Search] actions per session (null = all the teacher wrote)
    # Ours, for small teachers: the start of the Table 7 answer written for the model (e.g. '["'). Empty = the paper.
    response_prefix: str = ""
    # teacher=verified (ours): at most `verified_max_queries` kept searches per session, each verified with
    # crawler.env.search_k hits; candidates = the query, `key_phrases` YAKE phrases of it (<= `key_phrase_ngram`
    # words), gold-title phrases it supports (`hindsight`: the title and `hindsight_phrases_per_title` YAKE phrases
    # of it with >= `hindsight_min_support` of their content words in the query), Table 7 LLM queries when
    # `llm_candidates`. `verified_fallback_raw`: a query whose candidates find no gold paper gets "[Search] <query>".
    verified_max_queries: int = 3
    key_phrases: int = 5
    key_phrase_ngram: int = 3
    hindsight: bool = True
    hindsight_min_support: float = 0.5
    hindsight_phrases_per_title: int = 5
    # ours: the question's content without its request head ("propose X") as the first candidate
    # (verified_teacher.py `topic`): the searches then read the same whatever form the user asks in
    topic_candidate: bool = False
    # ours: each verified search session also asked in these request forms (data_gen/request_forms.py:
    # imperative, papers_that, looking_for, show_me, multi_sentence) with the same gold and the same verified
    # searches; `request_forms_per_query`: that many of them per query, drawn with the seed (null = all). Listing
    # `original` makes the question's own phrasing one of the forms drawn (else it is always kept): with
    # request_forms_per_query=1, each query is asked once, in one phrasing (the CPU recipe's budget)
    request_forms: list = field(default_factory=list)
    request_forms_per_query: Optional[int] = None
    llm_candidates: bool = False
    verified_fallback_raw: bool = True
    # Expand sessions (A.1)
    search_k: int = 10  # results per generated query
    papers_per_query: int = 3  # expand sessions per user query (PaSa: 9,978 expand / 3,011 search sessions ~ 3.3)
    other_section_prob: float = 0.1  # A.1: a section citing no gold paper is selected with 10% probability
    keep_empty_expand: bool = True  # sessions in which no section was selected ("[Stop]" alone) are kept
    # crawler.env.related_expand (ours): the crawl whose papers are followed and whose hits a related search must add
    # gold to: user_query (gold-blind: the user's own words searched with crawler.env.search_k, what serving runs)
    # | teacher (the verified teacher's searches: hindsight, they already hold most of what following would add)
    related_found: str = "user_query"
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


def related_expand_sessions(env, search, jobs: list[tuple[ScholarQuery, Paper, set[str]]], rng_of,
                            other_prob: float, stats: Counter) -> list[dict]:
    """Expand sessions on papers without sections (``crawler.env.related_expand``, ours): the session's outline is
    the paper's related searches (``CrawlEnv.outline``: its title, key phrases of its abstract). Every related
    search is run with the environment's own search (``related_k`` hits, the query's [Search] before-date), all of
    them in one batched call; a search is selected when its hits add a gold paper that the query's searches had not
    found (``jobs``: (query, paper, papers already found)), any other with probability ``other_prob`` (A.1's
    diversity rule). The student sees the paper and the outline only, never the gold."""
    outlines = [env.outline(p) for _, p, _ in jobs]
    flat = [(i, o) for i, ol in enumerate(outlines) for o in ol]
    befores = [env.search_before(jobs[i][0].before) if env.cfg.date_filter else None for i, _ in flat]
    hits = search.search_batch([o.query for _, o in flat], k=env.cfg.related_k, before=befores) if flat else []
    stats["related_searches"] += len(flat)
    by_job: list[list[tuple]] = [[] for _ in jobs]
    for (i, o), hs in zip(flat, hits):
        by_job[i].append((o, [h.paper_id for h in hs]))
    rows = []
    for (q, paper, found), entries in zip(jobs, by_job):
        if not entries:
            continue
        gold = {norm_id(g) for g in q.gold_ids}
        seen = {norm_id(p) for p in found}
        rng = rng_of(q, paper)
        selected, by_gold, by_chance = [], [], []
        for o, ids in entries:
            if ({norm_id(p) for p in ids} & gold) - seen:
                by_gold.append(o.name)
                selected.append(o.name)
            elif rng.random() < other_prob:
                by_chance.append(o.name)
                selected.append(o.name)
        response = render_response(EXPAND, selected)
        messages = env.state_messages(q.question, paper, outline=[o for o, _ in entries]) + [
            {"role": "assistant", "content": response}]
        rows.append({"messages": messages, "meta": {"kind": EXPAND, "related": True, "qid": q.qid,
                                                    "user_query": q.question, "paper_id": paper.paper_id,
                                                    "gold_sections": by_gold, "random_sections": by_chance}})
    return rows


def _user_query_related_jobs(env, search, store, queries: list[ScholarQuery], dg, seed: int,
                             stats: Counter) -> list[tuple[ScholarQuery, Paper, set[str]]]:
    """``data_gen.related_found=user_query``: the gold-blind crawl is the user's own words searched as serving
    does (``crawler.env.search_k`` hits, the query's before-date); up to ``papers_per_query`` of its sectionless
    hits are followed (seeded), and a related search is judged against everything that search found."""
    befores = [env.search_before(q.before) for q in queries] if env.cfg.date_filter else None
    hits = search.search_batch([q.question for q in queries], k=env.cfg.search_k, before=befores)
    jobs = []
    for q, hs in zip(queries, hits):
        ids = [h.paper_id for h in hs]
        papers = store.get_many(ids)
        eligible = [papers[i] for i in ids if i in papers and not papers[i].sections
                    and gets_session(papers[i], env.cfg)]
        stats["user_query_hits"] += len(ids)
        stats["user_query_hits_gold"] += len({norm_id(i) for i in ids} & {norm_id(g) for g in q.gold_ids})
        rng = random.Random(f"{seed}/related_papers/{q.qid}")
        for paper in rng.sample(eligible, min(int(dg.papers_per_query), len(eligible))):
            jobs.append((q, paper, set(ids)))
    return jobs


def _llm_teacher(llm, queries: list[ScholarQuery], dg, seed: int, stats: Counter):
    return generate_teacher_queries(llm.get(), [q.question for q in queries], int(dg.max_new_tokens),
                                    float(dg.temperature), seed, dg.max_search_queries, stats,
                                    str(dg.response_prefix))


def _verified_teacher(llm, env, search, queries: list[ScholarQuery], dg, seed: int, stats: Counter):
    """Candidates verified with the environment's own search (verified_teacher.py): (kept queries, their
    per-query meta) per user query."""
    llm_qs: list[list[str]] = [[] for _ in queries]
    if dg.llm_candidates:
        teacher, _ = _llm_teacher(llm, queries, dg, seed, stats)
        llm_qs = [tq.queries for tq in teacher]
    cands = [candidate_queries(q.question, q.gold_titles, lq, n_key_phrases=int(dg.key_phrases),
                               ngram=int(dg.key_phrase_ngram), hindsight=bool(dg.hindsight),
                               min_support=float(dg.hindsight_min_support),
                               per_title=int(dg.hindsight_phrases_per_title),
                               topic_first=bool(dg.get("topic_candidate", False)))
             for q, lq in zip(queries, llm_qs)]
    befores = [env.search_before(q.before) if env.cfg.date_filter else None for q in queries]
    verified = verify_queries(search, queries, cands, befores, env.cfg.search_k, int(dg.verified_max_queries),
                              bool(dg.verified_fallback_raw))
    stats["verified_candidates_searched"] += sum(len(c) for c in cands)
    return verified


def _forms_of(qid: str, dg, seed: int) -> list[str]:
    """The request forms this query's search session is also asked in (``data_gen.request_forms``)."""
    forms = [str(f) for f in (dg.get("request_forms") or [])]
    k = dg.get("request_forms_per_query")
    if k is None or int(k) >= len(forms):
        return forms
    return sorted(random.Random(f"{seed}/request_forms/{qid}").sample(forms, int(k)), key=forms.index)


def _in_form(env, row: dict, q: ScholarQuery, form: str, response: str) -> dict:
    """``row`` (a search session) with the user query asked in request ``form``: same gold, same verified searches."""
    asked = rewrite(q.question, form)
    meta = dict(row["meta"], user_query=asked, form=form, original_question=q.question)
    return {"messages": env.state_messages(asked) + [{"role": "assistant", "content": response}], "meta": meta}


def sessions_for_shard(llm, env, search, store, queries: list[ScholarQuery], dg, seed: int) -> tuple[list[dict], dict]:
    """``llm``: a LazyLLM (loaded only when the teacher asks it)."""
    stats: Counter = Counter()
    search_queries: list[list[str]] = []
    if dg.teacher == "verified":
        verified = _verified_teacher(llm, env, search, queries, dg, seed, stats)
        rows: list[dict] = []
        for q, v in zip(queries, verified):
            stats["user_queries"] += 1
            search_queries.append(v.queries)
            if not v.kept:
                stats["user_queries_without_teacher_queries"] += 1
                rows.append({"messages": None, "meta": {"kind": "failed_teacher_queries", "qid": q.qid,
                                                        "failure": "no_candidate_finds_gold"}})
                continue
            stats["verified_fallback_raw_query"] += int(v.fallback)
            if dg.search_sessions:
                response = render_response(SEARCH, v.queries)
                rows.append({"messages": env.state_messages(q.question) + [{"role": "assistant", "content": response}],
                             "meta": {"kind": SEARCH, "qid": q.qid, "user_query": q.question, "teacher": "verified",
                                      "verified": [asdict(k) for k in v.kept], "candidates": v.candidates,
                                      "teacher_recall": v.teacher_recall, "raw_query_recall_at_k": v.raw_recall_at_k,
                                      "raw_query_recall_at_budget": v.raw_recall_at_budget,
                                      "fallback_raw_query": v.fallback}})
                stats["search_sessions"] += 1
                asked = _forms_of(q.qid, dg, seed)
                original = rows[-1]
                if "original" in (dg.get("request_forms") or []) and "original" not in asked:
                    rows.pop()  # the original phrasing is one of the sampled forms and was not drawn
                for form in asked:
                    if form != "original":
                        rows.append(_in_form(env, original, q, form, response))
                    stats[f"search_sessions_{form}"] += 1
    else:
        teacher, raw = _llm_teacher(llm, queries, dg, seed, stats)
        rows = []
        for q, tq, text in zip(queries, teacher, raw):
            stats["user_queries"] += 1
            search_queries.append(tq.queries)
            if not tq.queries:
                stats["user_queries_without_teacher_queries"] += 1
                rows.append({"messages": None, "meta": {"kind": "failed_teacher_queries", "qid": q.qid,
                                                        "raw_output": text, "failure": tq.failure}})
                continue
            if dg.search_sessions:
                response = render_response(SEARCH, tq.queries)
                rows.append({"messages": env.state_messages(q.question) + [{"role": "assistant", "content": response}],
                             "meta": {"kind": SEARCH, "qid": q.qid, "user_query": q.question, "raw_output": text,
                                      "repairs": tq.repairs}})
                stats["search_sessions"] += 1
    if dg.expand_sessions:
        flat, owner = [], []
        for i, sqs in enumerate(search_queries):
            for sq in sqs:
                flat.append(sq)
                owner.append(i)
        # the environment's rule: before the query date (PaSa §5.1) unless crawler.env.search_date_filter=false
        befores = [env.search_before(queries[i].before) for i in owner] if env.cfg.date_filter else None
        hits = search.search_batch(flat, k=int(dg.search_k), before=befores) if flat else []
        per_query: list[list] = [[] for _ in queries]
        for i, h in zip(owner, hits):
            per_query[i].append(h)
        related_jobs: list[tuple[ScholarQuery, Paper, set[str]]] = []
        gold_blind = env.cfg.related_expand and dg.related_found == "user_query"
        if gold_blind:
            related_jobs = _user_query_related_jobs(env, search, store, queries, dg, seed, stats)
        for q, hit_lists in zip(queries, per_query):
            ids = _merge_hits(hit_lists)
            papers = store.get_many(ids)
            # the crawl environment's own rule for which papers get an expand session (gets_session)
            eligible = [papers[i] for i in ids if i in papers and gets_session(papers[i], env.cfg)
                        and (any(s.heading for s in papers[i].sections) or not papers[i].sections)]
            stats["search_hits"] += len(ids)
            stats["search_hits_with_sections"] += sum(bool(p.sections) for p in eligible)
            if not eligible:
                stats["user_queries_without_sectioned_hits"] += 1
                continue
            rng = random.Random(f"{seed}/crawler_sessions/{q.qid}")
            chosen = rng.sample(eligible, min(int(dg.papers_per_query), len(eligible)))
            gold_titles = TitleMatcher([(g, t) for g, t in zip(q.gold_ids, q.gold_titles)],
                                       min_score=float(dg.title_min_score))
            for paper in chosen:
                if not paper.sections:  # related expansion: searched for the whole shard at once, below
                    if not gold_blind:
                        related_jobs.append((q, paper, set(ids)))
                    continue
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
        related = related_expand_sessions(
            env, search, related_jobs, lambda q, p: random.Random(f"{seed}/related/{q.qid}/{p.paper_id}"),
            float(dg.other_section_prob), stats)
        for row in related:
            if not row["meta"]["gold_sections"] and not row["meta"]["random_sections"]:
                stats["related_sessions_empty"] += 1
                if not dg.keep_empty_expand:
                    continue
            if row["meta"]["gold_sections"]:
                stats["related_sessions_adding_gold"] += 1
            stats["related_sessions"] += 1
            stats["related_searches_gold"] += len(row["meta"]["gold_sections"])
            stats["related_searches_random"] += len(row["meta"]["random_sections"])
            rows.append(row)
    return rows, dict(stats)


def verified_summary(rows: list[dict], max_queries: int, search_k: int) -> dict[str, Any]:
    """The verified teacher over the TRAIN search sessions: its recall (the ceiling a student imitating it can
    reach with <= max_queries searches) next to the raw user query's at the environment's k and at the same paper
    budget, and each kept position's mean marginal recall."""
    # one per user query: its request-form copies repeat its searches (and its original may not be kept)
    metas = list({r["meta"]["qid"]: r["meta"] for r in reversed(rows)
                  if r["meta"]["kind"] == SEARCH and "verified" in r["meta"]}.values())
    if not metas:
        return {"search_sessions": 0}
    n = len(metas)
    by_pos: list[list[float]] = [[] for _ in range(max_queries)]
    sources: Counter = Counter()
    for m in metas:
        for i, k in enumerate(m["verified"]):
            by_pos[i].append(k["marginal_recall"])
            sources[k["source"]] += 1
    return {
        "search_sessions": n,
        "mean_teacher_recall": sum(m["teacher_recall"] for m in metas) / n,
        f"mean_raw_query_recall_at_{search_k}": sum(m["raw_query_recall_at_k"] for m in metas) / n,
        f"mean_raw_query_recall_at_{search_k * max_queries}": sum(m["raw_query_recall_at_budget"] for m in metas) / n,
        "mean_kept_queries": sum(len(m["verified"]) for m in metas) / n,
        "mean_candidates": sum(m["candidates"] for m in metas) / n,
        "fallback_raw_query": sum(bool(m["fallback_raw_query"]) for m in metas),
        # the mean over sessions that kept a query at that position
        "mean_marginal_recall_by_position": [sum(v) / len(v) if v else None for v in by_pos],
        "kept_queries_by_source": dict(sources),
        "sessions_with_several_searches": sum(len(m["verified"]) > 1 for m in metas),
        "papers_per_search": search_k,
        "max_queries": max_queries,
    }


def crawler_sessions(cfg: DictConfig) -> dict:
    dg = cfg.data_gen
    out_dir = Path(str(cfg.out_dir))
    limit = optional_positive_int(cfg.get("limit"), "limit", "the first N user queries; null = all")
    if dg.teacher not in TEACHERS:
        raise UsageError(f"data_gen.teacher must be one of {', '.join(TEACHERS)}, got {dg.teacher!r}")
    if dg.get("related_found", "user_query") not in RELATED_FOUND:
        raise UsageError(f"data_gen.related_found must be one of {', '.join(RELATED_FOUND)}, got {dg.related_found!r}")
    if dg.get("request_forms"):
        bad = [f for f in dg.request_forms if f not in FORMS]
        if bad:
            raise UsageError(f"data_gen.request_forms: unknown {bad}; forms: {', '.join(FORMS)} (with {ORIGINAL} "
                             "listed, the original phrasing is one of the forms drawn; else it is always kept)")
        if dg.teacher != "verified":
            raise UsageError("data_gen.request_forms needs data_gen.teacher=verified (the forms reuse its searches)")
    if dg.get("request_forms_per_query") is not None and int(dg.request_forms_per_query) < 1:
        raise UsageError(f"data_gen.request_forms_per_query must be >= 1 or null, got {dg.request_forms_per_query}")
    if int(dg.verified_max_queries) < 1:
        raise UsageError(f"data_gen.verified_max_queries must be >= 1, got {dg.verified_max_queries}")
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
    log.info("teacher: %s", "verified (candidates checked against the gold papers with the environment's search)"
             if dg.teacher == "verified" else "llm (PaSa Table 7)")
    llm = LazyLLM(cfg.llm)
    try:
        rows, stats, computed = run_shards(
            run, queries, lambda q: q.qid, int(dg.shard_size),
            lambda chunk: sessions_for_shard(llm, env, search, store, chunk, dg, int(cfg.seed)),
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
    train_rows = [r for r in sessions if r["meta"]["qid"] not in eval_qids]
    report = {"model": str(cfg.llm.model), "teacher": str(dg.teacher), "queries_file": str(dg.queries),
              "search_backend": getattr(search, "resolved_kind", str(cfg.search.kind)),
              "user_queries": len(queries), "counts": dict(stats), "sessions": len(sessions),
              "by_kind": dict(Counter(r["meta"]["kind"] for r in sessions)),
              "shards": {"resumed": run.resumed, "computed": run.computed},
              "llm_prompts_this_run": llm_prompts, "files": files}
    if dg.teacher == "verified":
        report["verified_teacher"] = verified_summary(train_rows, int(dg.verified_max_queries),
                                                      int(cfg.crawler.env.search_k))
    write_json(out_dir / "stats.json", report)
    log.info("crawler sessions: %s in %s", report["by_kind"], out_dir)
    return {"out_dir": str(out_dir), "stats": report}

