"""The rows of an ``eval pasa`` report: what each row runs and what it yields per query.

A row (:class:`RowSpec`, ``rows`` in ``conf/eval_pasa.yaml``) is one method run through the same harness:
:func:`row_specs` expands the configured rows once per setting (``<row>@whole_corpus``) and per request form
(``<row>~<form>``), and :func:`setting_of` / :func:`phrasing_of` read those back from a row's name. The per-method
functions turn one chunk of queries into per-query result dicts (the lines of ``per_query/<row>.jsonl``):
:func:`search_rows` (search-only and paraphrase), :func:`agent_rows` (the Crawler + Selector; the PPO trainer's
held-out evaluation uses it too) and :func:`teacher_rows` (the verified teacher), with :func:`gold_in_store` and
:class:`CandidateCounter` for what every row records beside its metrics.
"""

from __future__ import annotations

import bisect
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from scholar_agents.data_gen.crawler_sessions import CrawlerSessionsConfig
from scholar_agents.data_gen.request_forms import FORMS, ORIGINAL
from scholar_agents.data_gen.verified_teacher import candidate_queries, verify_queries
from scholar_agents.eval.pasa.metrics import (
    QueryMetrics, agent_metrics, gold_count, gold_ranks, ranking_metrics, recall, top_metrics,
)
from scholar_agents.papers.dated_docs import date_key, normalize_date
from scholar_agents.papers.ids import norm_id
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.ranking import RANKINGS, order
from scholar_agents.validation import UsageError

METHODS = ("search", "paraphrase", "verified_teacher", "gold_blind_oracle", "agent", "search_rerank")
# PaSa §5.1 (search before the query date) | ours (search over the whole corpus, expansion still date-filtered)
SETTINGS = ("date_filtered", "whole_corpus")
WHOLE_CORPUS_SUFFIX = "@whole_corpus"
PHRASING_SEP = "~"  # <row>~<request form>[@whole_corpus]: the row on the queries rewritten into that form


@dataclass
class RowSpec:
    """One method of the report (``rows`` in ``conf/eval_pasa.yaml``)."""

    name: str
    method: str  # search | paraphrase | agent
    search: Optional[str] = None  # search kind for this row (bm25 | dense | hybrid); null = search.kind
    crawler_model: Optional[str] = None  # agent: the Crawler's model (null = llm.model)
    # agent: a LoRA adapter on the Crawler's model (a path; "none" = the base model); null = crawler.policy.adapter
    # when the row runs the preset's model, none when it names its own crawler_model
    adapter: Optional[str] = None
    constrained: Optional[bool] = None  # agent: override crawler.policy.constrained
    expand: Optional[bool] = None  # agent: override crawler.env.expand (Table 5 "w/o [Expand]")
    instructed_prompts: Optional[bool] = None  # agent: override crawler.env.instructed_prompts (untrained models)
    use_selector: Optional[bool] = None  # agent: override agent.use_selector
    ensemble: Optional[int] = None  # agent: override agent.ensemble
    ranking: Optional[str] = None  # agent: override agent.ranking (selector | crawl | fusion)
    label: Optional[str] = None  # shown in the table (default: name)
    limit: Optional[int] = None  # run this row on the first N queries only (slow agents next to cheap searches)
    # false = search the whole corpus (set by ``setting``, not by hand); null = crawler.env.search_date_filter
    search_date_filter: Optional[bool] = None
    # agent: override crawler.env.fallback_search (search the user's query when the Crawler writes no valid
    # [Search]); the default `agent` row sets true (the agent as `pasa search` runs it), rows that measure the
    # learned policy alone leave it null (= false in the presets)
    fallback_search: Optional[bool] = None
    # agent: override crawler.env.search_user_query (the user's query also searched as written, beside the
    # Crawler's searches: the agent never below the search it wraps at its k)
    search_user_query: Optional[bool] = None
    # agent: override crawler.env.related_expand (papers without sections get expand sessions of related searches)
    related_expand: Optional[bool] = None
    # agent: override crawler.env.search_k (the Crawler's own searches) and crawler.env.user_query_k (the user's words)
    search_k: Optional[int] = None
    user_query_k: Optional[int] = None
    # agent: override crawler.env.dense_search_k (the Crawler's searches' hits on a dense or hybrid backend; the
    # default `agent` row sets it as `pasa search` does)
    dense_search_k: Optional[int] = None
    # gold_blind_oracle: searches it may keep (null = crawler.env.max_actions); papers of each kept search whose
    # related searches become candidates
    max_searches: Optional[int] = None
    follow: Optional[int] = None
    # search_rerank: re-rank this many of the search's hits (the user's words) with the Selector; null = the
    # paper budget of the row named by ``budget_of`` per query, else 20
    rerank_k: Optional[int] = None
    budget_of: Optional[str] = None
    # the queries rewritten into this request form (data_gen/request_forms.py; set by ``phrasings``, not by hand)
    phrasing: Optional[str] = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"row {self.name!r}: method must be one of {METHODS}, got {self.method!r}")


def settings_of(setting: Optional[str], env_search_date_filter: bool = True) -> list[str]:
    """The settings a run reports: ``setting`` (date_filtered | whole_corpus | both) or, when null, the one
    ``crawler.env.search_date_filter`` names."""
    if setting is None:
        return ["date_filtered" if env_search_date_filter else "whole_corpus"]
    if setting == "both":
        return list(SETTINGS)
    if setting not in SETTINGS:
        raise UsageError(f"setting must be date_filtered, whole_corpus, both or null, got {setting!r}")
    return [setting]


def row_specs(rows: Any, settings: Sequence[str] = ("date_filtered",),
              phrasings: Optional[Sequence[str]] = None) -> list[RowSpec]:
    """The rows, once per setting: a whole-corpus copy is named ``<row>@whole_corpus`` when both settings run
    (alone it keeps its name; the report states the setting). With ``phrasings`` (request forms), each row also
    runs once per form on the rewritten queries, named ``<row>~<form>`` (``original`` keeps the row's name)."""
    rows = OmegaConf.to_container(rows, resolve=True) if isinstance(rows, DictConfig) or hasattr(rows, "_content") \
        else rows
    base = [RowSpec(**r) for r in rows]
    if phrasings:
        unknown = [f for f in phrasings if f not in FORMS]
        if unknown or len(set(phrasings)) != len(phrasings):
            raise UsageError(f"phrasings must be distinct request forms of {', '.join(FORMS)}; got {list(phrasings)}")
        # a re-rank row's budget is its own form's agent row's (the same queries, asked the same way)
        base = [b if f == ORIGINAL else dataclasses.replace(
                    b, name=f"{b.name}{PHRASING_SEP}{f}", phrasing=f, label=f"{b.label or b.name} [{f}]",
                    budget_of=f"{b.budget_of}{PHRASING_SEP}{f}" if b.budget_of else None)
                for f in phrasings for b in base]
    specs = []
    for setting in settings:
        for b in base:
            if setting == "date_filtered":
                specs.append(dataclasses.replace(b, search_date_filter=True))
            elif len(settings) == 1:
                specs.append(dataclasses.replace(b, search_date_filter=False))
            else:
                specs.append(dataclasses.replace(b, name=b.name + WHOLE_CORPUS_SUFFIX, search_date_filter=False,
                                                 label=(b.label or b.name) + " [whole corpus]",
                                                 budget_of=b.budget_of + WHOLE_CORPUS_SUFFIX if b.budget_of else None))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"row names must be unique, got {names}")
    return specs


def setting_of(name: str) -> str:
    return "whole_corpus" if name.endswith(WHOLE_CORPUS_SUFFIX) else "date_filtered"


def phrasing_of(name: str) -> str:
    """The request form a row's queries were asked in (``original`` unless the name carries ``~<form>``)."""
    base = name.removesuffix(WHOLE_CORPUS_SUFFIX)
    return base.split(PHRASING_SEP, 1)[1] if PHRASING_SEP in base else "original"


def group_of(name: str) -> tuple[str, str]:
    """Rows are compared only within one setting and one phrasing (the same queries, searched the same way)."""
    return setting_of(name), phrasing_of(name)


# --------------------------------------------------------------------------------------------------------------
# evaluating one row on a batch of queries


def gold_in_store(queries: Sequence[ScholarQuery], store) -> dict[str, int]:
    ids = {norm_id(g) for q in queries for g in q.gold_ids}
    present = set(store.get_many(list(ids), with_sections=False)) if ids else set()
    return {q.qid: sum(norm_id(g) in present for g in set(q.gold_ids)) for q in queries}


class CandidateCounter:
    """How many papers a search before a date ranks over: the store's papers dated strictly before it (a partial
    date counts as its first day, as the indexes do; undated papers pass when ``keep_undated``), or all of them."""

    def __init__(self, store, keep_undated: bool = True):
        dates = store.dates()
        self._keys = sorted(date_key(d) for d in dates if d)
        self._undated = len(dates) - len(self._keys) if keep_undated else 0
        self.total = len(dates)

    def __call__(self, before: Optional[str]) -> int:
        b = normalize_date(before)
        if b is None:
            return self.total
        return bisect.bisect_left(self._keys, date_key(b)) + self._undated


def search_rows(rankings: Sequence[Sequence[str]], queries: Sequence[ScholarQuery], in_store: dict[str, int],
                wall_s: float, candidates: Optional[Sequence[int]] = None) -> list[dict]:
    out = []
    for i, (q, ranking) in enumerate(zip(queries, rankings)):
        m = QueryMetrics(q.qid, len(set(q.gold_ids)), in_store[q.qid], n_returned=len(ranking),
                         wall_s=wall_s / max(len(queries), 1), **ranking_metrics(q.gold_ids, ranking))
        d = m.to_dict()
        # the gold papers' ranks (and the normalised gold count): recall at the agent's own budget, after the fact
        d["gold_ranks"] = gold_ranks(q.gold_ids, ranking)
        d["n_gold_ids"] = gold_count(q.gold_ids)
        if candidates is not None:
            d["candidates_searched"] = candidates[i]
        out.append(d)
    return out


def orderings_metrics(gold: Sequence[str], result) -> dict[str, float]:
    """recall@10 and nDCG@10 of the agent's papers in each order of ``pasa/ranking.py`` (``<ranking>_recall_at_10``,
    ``<ranking>_ndcg_at_10``): the same crawl and the same scores, ordered three ways. Empty
    without Selector scores or gold."""
    if not gold_count(gold) or any(p.score is None for p in result.papers):
        return {}
    score = {p.paper_id: p.score for p in result.papers}
    crawl = result.queue_ids
    scores = [score[pid] for pid in crawl]
    out = {}
    for how in RANKINGS:
        ranked = [crawl[i] for i in order(scores, how)]
        out.update({f"{how}_{k}": v for k, v in top_metrics(gold, ranked).items()})
    return out


def agent_rows(results, queries: Sequence[ScholarQuery], in_store: dict[str, int],
               candidates: Optional[Sequence[int]] = None, fallback_search: bool = False) -> list[dict]:
    """``fallback_search``: whether the row ran with crawler.env.fallback_search (else ``fallback`` is None)."""
    out = []
    for i, (q, r) in enumerate(zip(queries, results)):
        ranking = [p.paper_id for p in r.papers]
        selected = [p.paper_id for p in r.selected]
        trajs = r.trajectories
        m = QueryMetrics(
            q.qid, len(set(q.gold_ids)), in_store[q.qid], n_returned=len(selected), n_queue=len(ranking),
            actions=sum(t.n_moves for t in trajs), sessions=sum(len(t.sessions) for t in trajs),
            gen_tokens=sum(t.gen_tokens for t in trajs), wall_s=r.crawl_seconds + r.select_seconds,
            **agent_metrics(q.gold_ids, r.queue_ids, selected, ranking))
        d = m.to_dict()
        d.update(orderings_metrics(q.gold_ids, r))
        d["grammar_errors"] = r.to_dict()["grammar_errors"]
        d["action_statuses"] = r.to_dict()["action_statuses"]
        d["stopped_by"] = [t.stopped_by for t in trajs]
        # did the Crawler's own first action search (share of ensemble runs), and how often did
        # crawler.env.fallback_search search the query for it (per run: 0 or 1)
        valid = [t.first_search_valid for t in trajs if t.first_search_valid is not None]
        d["valid_search"] = sum(valid) / len(valid) if valid else None
        d["fallback_searches"] = r.fallback_searches
        d["user_query_searches"] = r.user_query_searches
        d["fallback"] = r.fallback_searches > 0 if fallback_search else None
        if candidates is not None:
            d["candidates_searched"] = candidates[i]
        out.append(d)
    return out


def teacher_rows(search, queries: Sequence[ScholarQuery], befores: Sequence[Optional[str]], in_store: dict[str, int],
                 candidates: Sequence[int], search_k: int) -> list[dict]:
    """The verified teacher's searches as a row (an oracle: it reads the gold papers), with the data_gen defaults
    (``CrawlerSessionsConfig``) so that the row is the ceiling of the Crawler trained on that data."""
    d = CrawlerSessionsConfig()
    t0 = time.perf_counter()
    cands = [candidate_queries(q.question, q.gold_titles, n_key_phrases=d.key_phrases, ngram=d.key_phrase_ngram,
                               hindsight=d.hindsight, min_support=d.hindsight_min_support,
                               per_title=d.hindsight_phrases_per_title) for q in queries]
    verified = verify_queries(search, queries, cands, befores, search_k, d.verified_max_queries,
                              d.verified_fallback_raw)
    wall = (time.perf_counter() - t0) / max(len(queries), 1)
    out = []
    for q, v, n_cand in zip(queries, verified, candidates):
        m = QueryMetrics(q.qid, len(set(q.gold_ids)), in_store[q.qid], crawler_recall=recall(q.gold_ids, v.found),
                         n_queue=len(v.found), actions=len(v.kept), wall_s=wall,
                         **ranking_metrics(q.gold_ids, v.found))
        out.append({**m.to_dict(), "candidates_searched": n_cand, "searched": v.queries,
                    "raw_query_recall_at_k": v.raw_recall_at_k})
    return out


def oracle_rows(crawls, queries: Sequence[ScholarQuery], in_store: dict[str, int], candidates: Sequence[int],
                wall: float) -> list[dict]:
    """The gold-blind oracle's crawls (``eval/pasa/oracle.py``) as a row: crawler recall of every paper its kept
    searches retrieved, the searches kept in each round."""
    out = []
    for q, c, n_cand in zip(queries, crawls, candidates):
        m = QueryMetrics(q.qid, len(set(q.gold_ids)), in_store[q.qid], crawler_recall=recall(q.gold_ids, c.found),
                         n_queue=len(c.found), actions=len(c.searched), wall_s=wall,
                         **ranking_metrics(q.gold_ids, c.found))
        out.append({**m.to_dict(), "candidates_searched": n_cand, "searched": c.searched, "rounds": c.rounds,
                    "followed_searches": sum(r > 1 for r in c.rounds), "oracle_candidates": c.candidates})
    return out


def rerank_rows(rankings: Sequence[Sequence[str]], scores: Sequence[Sequence[float]], queries: Sequence[ScholarQuery],
                in_store: dict[str, int], wall: float, candidates: Sequence[int]) -> list[dict]:
    """"Search, then re-rank with the Selector" (the trivial pipeline an agent's ranked list must beat): each
    query's search hits (``rankings``, the search's order) and the Selector's scores of them. The row's recall@k
    is of the Selector's order; ``crawl_*`` / ``selector_*`` / ``fusion_*`` at 10 are the three orders of
    ``pasa/ranking.py``, as for an agent row (the search's order standing for the crawl's)."""
    out = []
    for q, hits, sc, n_cand in zip(queries, rankings, scores, candidates):
        ranked = [hits[i] for i in order(list(sc), "selector")] if hits else []
        m = QueryMetrics(q.qid, len(set(q.gold_ids)), in_store[q.qid], crawler_recall=recall(q.gold_ids, hits),
                         n_queue=len(hits), actions=1, wall_s=wall, **ranking_metrics(q.gold_ids, ranked))
        d = {**m.to_dict(), "candidates_searched": n_cand}
        if gold_count(q.gold_ids):
            for how in RANKINGS:
                ordered = [hits[i] for i in order(list(sc), how)] if hits else []
                d.update({f"{how}_{k}": v for k, v in top_metrics(q.gold_ids, ordered).items()})
        out.append(d)
    return out

