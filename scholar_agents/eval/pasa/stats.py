"""The statistics of an ``eval pasa`` report, over the per-query rows of each method.

:func:`summarize` gives each row's means over queries with the bootstrap interval of each mean
(``eval/bootstrap.py``); :func:`comparisons` pairs every crawling row (agent or verified teacher) with every
search-only row of the same setting and phrasing on the queries both ran (crawler recall vs the search's recall@k,
and at equal budget); :func:`crawler_pairs` pairs crawling rows with each other (e.g. after PPO minus after SFT).
The per-query metrics themselves are ``eval/pasa/metrics.py``; the Markdown is ``eval/pasa/report.py``.
"""

from __future__ import annotations

import math
import statistics

from scholar_agents.eval.bootstrap import BootstrapConfig, mean_ci, paired_diff
from scholar_agents.eval.pasa.metrics import METRIC_COLUMNS, RANK_K, mean_metrics, recall_at_depth
from scholar_agents.eval.pasa.rows import group_of, phrasing_of, setting_of


def summarize(rows_by_name: dict[str, list[dict]], boot: BootstrapConfig = BootstrapConfig()) -> dict[str, dict]:
    """Means over queries, each metric with its bootstrap interval (``<metric>_ci``)."""
    keys = (*METRIC_COLUMNS, "actions", "sessions", "gen_tokens", "wall_s", "n_queue", "n_returned", "valid_search")
    out = {}
    for name, rows in rows_by_name.items():
        s = mean_metrics(rows, keys)
        for m in (*METRIC_COLUMNS, "actions", "n_queue"):
            if s.get(m) is not None:
                ci = mean_ci([r.get(m) for r in rows], boot)
                s[f"{m}_ci"] = list(ci) if ci else None
        s["queries"] = len(rows)
        if any(r.get("fallback") is not None for r in rows):  # queries crawler.env.fallback_search searched
            s["fallback_queries"] = sum(bool(r.get("fallback")) for r in rows)
        errs: dict[str, int] = {}
        for r in rows:
            for k, v in (r.get("grammar_errors") or {}).items():
                errs[k] = errs.get(k, 0) + v
        if errs:
            s["grammar_errors"] = errs
        cands = [r["candidates_searched"] for r in rows if r.get("candidates_searched") is not None]
        if cands:
            s["candidates_searched_mean"] = sum(cands) / len(cands)
            s["candidates_searched_median"] = statistics.median(cands)
        out[name] = s
    return out


def _crawling_rows(rows_by_name: dict[str, list[dict]]) -> list[str]:
    """Rows whose every query has a crawler recall (agents, the verified teacher)."""
    return [n for n, rs in rows_by_name.items() if rs and all(r.get("crawler_recall") is not None for r in rs)]


def _paired(a_rows: list[dict], b_rows: list[dict]) -> list[tuple[dict, dict]]:
    """(a, b) per query both rows ran, in a's order."""
    by_qid = {r["qid"]: r for r in b_rows}
    return [(a, by_qid[a["qid"]]) for a in a_rows if a["qid"] in by_qid]


def comparisons(rows_by_name: dict[str, list[dict]], boot: BootstrapConfig = BootstrapConfig(),
                k: int = 20) -> list[dict]:
    """Each crawling row (agent or verified teacher) against each search-only row of the same setting, paired over
    the queries both ran, with the bootstrap interval of the difference:

    - ``crawler_recall`` vs the search's recall@k (PaSa Table 2's comparison: the agent at <= max_actions);
    - the agent's recall@k (its queue ranked by the Selector) vs the search's recall@k;
    - **equal budget**: ``crawler_recall`` vs the search's recall at the agent's own queue size for that query
      (the search ranking is retrieved to max(ks); a deeper queue counts as ``capped``, the search side is then a
      lower bound).
    """
    searches = [n for n, rs in rows_by_name.items() if rs and all("gold_ranks" in r for r in rs)]
    out = []
    for a_name in _crawling_rows(rows_by_name):
        for s_name in searches:
            if group_of(a_name) != group_of(s_name):
                continue
            pairs = _paired(rows_by_name[a_name], rows_by_name[s_name])
            if not pairs:
                continue
            budget = [recall_at_depth(s["gold_ranks"], s["n_gold_ids"], int(a.get("n_queue") or 0))
                      for a, s in pairs]
            capped = sum(1 for a, s in pairs if (a.get("n_queue") or 0) > (s.get("n_returned") or 0))
            row = {
                "crawler": a_name, "search": s_name, "setting": setting_of(a_name), "queries": len(pairs),
                "actions_mean": sum(a.get("actions") or 0 for a, _ in pairs) / len(pairs),
                "max_actions": max(a.get("actions") or 0 for a, _ in pairs),
                "queue_mean": sum(a.get("n_queue") or 0 for a, _ in pairs) / len(pairs),
                "crawler_recall_vs_recall_at_k": paired_diff(
                    [a["crawler_recall"] for a, _ in pairs], [s[f"recall_at_{k}"] for _, s in pairs], boot).to_dict(),
                "equal_budget": paired_diff([a["crawler_recall"] for a, _ in pairs], budget, boot).to_dict(),
                "budget_capped_queries": capped, "k": k, "phrasing": phrasing_of(a_name),
            }
            if all(a.get(f"recall_at_{k}") is not None for a, _ in pairs):
                row["recall_at_k_vs_recall_at_k"] = paired_diff(
                    [a[f"recall_at_{k}"] for a, _ in pairs], [s[f"recall_at_{k}"] for _, s in pairs], boot).to_dict()
            out.append(row)
    return out


def crawler_pairs(rows_by_name: dict[str, list[dict]], boot: BootstrapConfig = BootstrapConfig()) -> list[dict]:
    """Crawling rows against each other in the same setting (a later row minus an earlier one, e.g. after PPO
    minus after SFT): the paired difference of crawler recall on the queries both ran."""
    crawling = _crawling_rows(rows_by_name)
    out = []
    for i, a_name in enumerate(crawling):
        for b_name in crawling[:i]:
            if group_of(a_name) != group_of(b_name):
                continue
            pairs = _paired(rows_by_name[a_name], rows_by_name[b_name])
            if pairs:
                out.append({"row": a_name, "minus": b_name, "setting": setting_of(a_name), "queries": len(pairs),
                            "crawler_recall": paired_diff([a["crawler_recall"] for a, _ in pairs],
                                                          [b["crawler_recall"] for _, b in pairs], boot).to_dict()})
    return out


def ranking_pairs(rows_by_name: dict[str, list[dict]], boot: BootstrapConfig = BootstrapConfig()) -> list[dict]:
    """For each agent row with Selector scores: the Selector's order and the fusion against the crawl's own order,
    recall@10 and nDCG@10 of the final list, paired over the row's queries."""
    out = []
    for name, rows in rows_by_name.items():
        rows = [r for r in rows if r.get(f"crawl_recall_at_{RANK_K}") is not None]
        if not rows:
            continue
        for how in ("selector", "fusion"):
            entry = {"row": name, "ranking": how, "queries": len(rows)}
            for m in (f"recall_at_{RANK_K}", f"ndcg_at_{RANK_K}"):
                entry[m] = paired_diff([r[f"{how}_{m}"] for r in rows], [r[f"crawl_{m}"] for r in rows],
                                       boot).to_dict()
            out.append(entry)
    return out


def _search_top(row: dict, k: int) -> dict[str, float]:
    """A plain search row's recall@k and nDCG@k from its gold ranks (the same definitions as eval/pasa/metrics.py)."""
    ranks, n = row["gold_ranks"], row["n_gold_ids"]
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, n)))
    return {f"recall_at_{k}": recall_at_depth(ranks, n, k),
            f"ndcg_at_{k}": sum(1.0 / math.log2(r + 1) for r in ranks if r <= k) / ideal}


def rerank_pairs(rows_by_name: dict[str, list[dict]], methods: dict[str, str],
                 boot: BootstrapConfig = BootstrapConfig()) -> list[dict]:
    """Each agent row's ranked top 10 (its Selector's order: what the page shows first) against the lists it must
    not lose to, recall@10 and nDCG@10 paired over the queries both ran, in the same setting and phrasing:

    - each plain search row's own top 10 (``minus_kind: search``: the search the agent wraps, the user's words);
    - each "search, then Selector re-rank" row (``minus_kind: search_rerank``) at the number of papers it searched.
    ``methods``: row name -> its method."""
    out = []
    for a_name, a_rows in rows_by_name.items():
        if methods.get(a_name) != "agent":
            continue
        for b_name, b_rows in rows_by_name.items():
            kind = methods.get(b_name)
            if kind not in ("search", "search_rerank") or group_of(a_name) != group_of(b_name):
                continue
            if kind == "search" and not (b_rows and all("gold_ranks" in r for r in b_rows)):
                continue
            pairs = [(a, b) for a, b in _paired(a_rows, b_rows)
                     if a.get(f"selector_recall_at_{RANK_K}") is not None
                     and (kind == "search" or b.get(f"selector_recall_at_{RANK_K}") is not None)]
            if not pairs:
                continue
            b_top = [(_search_top(b, RANK_K) if kind == "search" else
                      {m: b[f"selector_{m}"] for m in (f"recall_at_{RANK_K}", f"ndcg_at_{RANK_K}")}) for _, b in pairs]
            entry = {"row": a_name, "minus": b_name, "minus_kind": kind, "queries": len(pairs),
                     "queue_mean": sum(a.get("n_queue") or 0 for a, _ in pairs) / len(pairs),
                     "rerank_papers_mean": (sum(b.get("n_queue") or 0 for _, b in pairs) / len(pairs)
                                            if kind == "search_rerank" else None)}
            for m in (f"recall_at_{RANK_K}", f"ndcg_at_{RANK_K}"):
                entry[m] = paired_diff([a[f"selector_{m}"] for a, _ in pairs], [t[m] for t in b_top], boot).to_dict()
            out.append(entry)
    return out

