"""The cost of related expansion: searches and wall time per query at the default budget, with and without
``crawler.env.related_expand``, side by side in one process.

Expansion multiplies searches: each [Expand] of a sectionless paper is a search of ``related_k`` hits. The
environment batches every search of a crawl step (the Crawler's, the user's words, every related search) into one
``search_batch`` call per k, so a crawl's cost grows by less than its number of searches. Printed:

- per query, for each mode: searches, search calls, seconds in search, sessions, papers, wall time;
- the ratio of wall time (related / without) — what a user pays;
- batching: every related search the crawl's sessions offered (what a Crawler that expanded them all would run),
  one call each against one batched call on the same index: the ratio = one-by-one seconds / batched seconds.

The agent is `pasa search`'s default (SmolLM2 + the shipped adapter, grammar-constrained, the user's words searched)
on the bundled sample's held-out queries (70-99), no Selector (its cost does not depend on the switch beyond the
papers it reads, reported as papers per query).

    nice -n 10 python bench/related_expand.py --queries 10 > bench_related_expand.log 2>&1
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from scholar_agents.eval.pasa.rows import RowSpec
from scholar_agents.hydra_app import compose
from scholar_agents.pasa.crawler import crawl
from scholar_agents.pasa.queries import load_queries
from scholar_agents.pasa.resources import Resources, pasa_setup


def run_mode(res: Resources, queries, related: bool, search_name: str) -> tuple[dict, list]:
    agent = res.agent(RowSpec(name="bench", method="agent", use_selector=False, related_expand=related,
                              search_user_query=True, fallback_search=True))
    env, crawler = agent.env, agent.crawler
    t0 = time.perf_counter()
    trajs = crawl(env, crawler, queries, progress=False)
    wall = time.perf_counter() - t0
    n = max(len(queries), 1)
    related_queries = [a.searched for t in trajs for s in t.sessions for a in s.actions if a.found_by == "related"]
    row = {
        "mode": "related_expand" if related else "without", "search": search_name,
        "searches_per_query": env.searches / n, "search_calls_per_query": env.search_calls / n,
        "search_s_per_query": round(env.timing["env_search"] / n, 4),
        "sessions_per_query": sum(len(t.sessions) for t in trajs) / n,
        "related_expands_per_query": len(related_queries) / n,
        "papers_per_query": sum(len(t.queue) for t in trajs) / n,
        "gen_s_per_query": round(crawler.timing["gen"] / n, 3), "wall_s_per_query": round(wall / n, 3),
    }
    return row, trajs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=10)
    ap.add_argument("--search", default="bm25", help="search backend (bm25 | hybrid | auto)")
    args = ap.parse_args()
    cfg = compose("pasa_search", [f"search={args.search}", "queries.path=${paths.sample_dir}/autoscholarquery_dev.jsonl",
                                  "queries.offset=70", f"queries.limit={args.queries}", "llm.cache_path=null"])
    res = Resources(pasa_setup(cfg))
    queries = load_queries(cfg.queries)
    name = res.resolved_search_kind()
    rows, trajs = [], {}
    search = res.search()
    for related in (False, True):
        row, trajs[related] = run_mode(res, queries, related, name)
        rows.append(row)
        print(json.dumps(row), flush=True)
    base, rel = rows
    # batching: the related searches this run made, replayed one call each vs one call for all
    # every related search the sessions offered (what a Crawler expanding all of them would run), in one step
    env = res.agent(RowSpec(name="outline", method="agent", use_selector=False, related_expand=True)).env
    offered = [(s.paper_id, t.before) for t in trajs[True] for s in t.sessions if s.paper_id]
    papers = res.store.get_many(sorted({p for p, _ in offered}), with_sections=False)
    jobs = [(o.query, b) for p, b in offered if p in papers and not papers[p].sections
            for o in env.outline(papers[p])]
    k = int(cfg.crawler.env.related_k)
    if jobs:
        t0 = time.perf_counter()
        search.search_batch([q for q, _ in jobs], k=k, before=[b for _, b in jobs])
        batched = time.perf_counter() - t0
        t0 = time.perf_counter()
        for q, b in jobs:
            search.search_batch([q], k=k, before=[b])
        single = time.perf_counter() - t0
        print(f"batching: the {len(jobs)} related searches the sessions offered, one call {batched:.3f} s vs one "
              f"call each {single:.3f} s: ratio {single / max(batched, 1e-9):.1f}x")
    print(f"related expansion: {rel['searches_per_query']:.1f} vs {base['searches_per_query']:.1f} searches a query "
          f"({rel['searches_per_query'] / max(base['searches_per_query'], 1e-9):.2f}x) in "
          f"{rel['search_calls_per_query']:.1f} vs {base['search_calls_per_query']:.1f} search calls; wall "
          f"{rel['wall_s_per_query']:.2f} vs {base['wall_s_per_query']:.2f} s a query: ratio "
          f"{rel['wall_s_per_query'] / max(base['wall_s_per_query'], 1e-9):.2f}x; papers a query "
          f"{rel['papers_per_query']:.1f} vs {base['papers_per_query']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
