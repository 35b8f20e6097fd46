"""Group rollouts of the critic-free estimators (``ppo.estimator=grpo|rloo``): crawls per second at group size 1
and G (8), on the hf and the vLLM engine, with the group's shared prefill against one call per member.

``rollout.collect_crawls`` runs G whole crawls of every query. Its round 0 is every member's S_q session of the same
queries — the same prompts — and goes out as ONE generate call with ``n = G`` samples per prompt (vLLM's ``n``,
HF's ``num_return_sequences``; ``Crawler.generate_shared``); so does any later round whose prompts all members
still share. The baseline, ``share_prefill=False``, is one call per member and round (each with its own seed), as
the rollout did before. Both run here in the same process on the same engine, model, queries, corpus and budgets,
one after the other (``--repeats`` times, interleaved; the median is printed), sampling at temperature 1 under the
action grammar (``crawler.policy.constrained``: the untrained model then writes valid actions, so its crawls go
on past round 0). Printed: crawls per second of each mode, the shared / per-member ratio at G, and G's crawls per
second over group size 1's. On vLLM the baseline already reuses round 0's prompt through the prefix cache
(``llm.enable_prefix_caching``, on by default): what the shared call saves there is the G-1 extra calls.

Corpus: the bundled sample (arXiv metadata + unarXive full texts with sections) in a temporary paper store, BM25.
Model: the embedded SmolLM2-135M (``--model``; converted once per machine into the user's cache).

    OMP_NUM_THREADS=1 nice -n 5 python bench/group_rollout.py > bench_group_rollout.log 2>&1
    python bench/group_rollout.py --engines hf --group-size 4 --queries 4 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from crawl import SAMPLE, sample_store  # bench/crawl.py: the bundled sample corpus in a paper store


def run_mode(store, search, llm, queries, group_size: int, share: bool, args) -> dict:
    from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
    from scholar_agents.pasa.crawler import Crawler, CrawlerConfig
    from scholar_agents.train.ppo.rollout import collect_crawls

    env = CrawlEnv(store, search, CrawlConfig(search_k=10, max_sessions=args.max_sessions, expand_abstract_chars=600),
                   tokenizer=llm.tokenizer)
    crawler = Crawler(llm, CrawlerConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0,
                                         constrained=True, max_actions_per_session=2, batch_sessions=args.batch))
    t0 = time.perf_counter()
    records, _, stats = collect_crawls(env, crawler, queries, group_size, share_prefill=share)
    wall = time.perf_counter() - t0
    return {"group_size": group_size, "mode": "shared prefill" if share else "per-member calls",
            "crawls": stats["crawls"], "sessions": len(records), "wall_s": wall, "crawls_per_s": stats["crawls"] / wall,
            "generate_calls": crawler.calls, "rounds": stats["rounds"], "rounds_shared": stats["rounds_shared"],
            "gen_s": crawler.timing["gen"], "gen_tokens": sum(len(r.response_token_ids) for r in records)}


def bench_engine(engine: str, store, search, queries, args) -> dict:
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    t0 = time.perf_counter()
    llm = build_llm(LLMConfig(backend=engine, model=args.model, dtype="auto", device="cpu", batch_size=args.batch * 8,
                              max_model_len=2048, cache_path=None, enforce_eager=True, cpu_kvcache_space_gib=2))
    load_s = time.perf_counter() - t0
    try:
        run_mode(store, search, llm, queries[:1], 2, True, args)  # warm-up: first-call costs go to no mode
        modes = [(1, False), (args.group_size, False), (args.group_size, True)]  # group size 1: the same either way
        runs: dict[tuple[int, bool], list[dict]] = {m: [] for m in modes}
        for _ in range(args.repeats):
            for g, share in modes:
                runs[(g, share)].append(run_mode(store, search, llm, queries, g, share, args))
    finally:
        llm.close()
    rows = []
    for m in modes:
        med = dict(runs[m][0])
        for k in ("wall_s", "crawls_per_s", "gen_s"):
            med[k] = statistics.median(r[k] for r in runs[m])
        med["crawls_per_s_all"] = [round(r["crawls_per_s"], 3) for r in runs[m]]
        rows.append(med)
    one, per_member, shared = rows
    return {"engine": engine, "load_s": load_s, "rows": rows,
            "shared_over_per_member": shared["crawls_per_s"] / per_member["crawls_per_s"],
            "group_over_one_shared": shared["crawls_per_s"] / one["crawls_per_s"],
            "group_over_one_per_member": per_member["crawls_per_s"] / one["crawls_per_s"]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded:smollm2", help="HF dir or embedded:smollm2")
    ap.add_argument("--engines", default="hf,vllm", help="comma-separated: hf, vllm")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--queries", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="crawler.policy.batch_sessions (sessions per member call)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--max-sessions", type=int, default=3, help="sessions per crawl (crawler.env.max_sessions)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write the results here")
    args = ap.parse_args(argv)

    from scholar_agents.papers.index import SearchConfig, load_or_build_search
    from scholar_agents.pasa.queries import load_pasa_queries

    queries = load_pasa_queries(SAMPLE / "autoscholarquery_dev.jsonl", limit=args.queries)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        store = sample_store(Path(tmp))
        search = load_or_build_search(SearchConfig(kind="bm25"), store, None, Path(tmp) / "index")
        for engine in args.engines.split(","):
            results.append(bench_engine(engine.strip(), store, search, queries, args))
        store.close()
    print(f"\nmodel {args.model}, {len(queries)} queries, group size 1 and {args.group_size}, <= {args.max_sessions} "
          f"sessions per crawl, <= {args.max_new_tokens} new tokens, temperature 1, constrained; median of "
          f"{args.repeats}")
    print(f"{'engine':>6} {'G':>3} {'mode':>17} {'crawls':>6} {'sessions':>8} {'calls':>5} {'shared':>6} "
          f"{'wall s':>7} {'crawls/s':>8}  (each repeat)")
    for res in results:
        for r in res["rows"]:
            print(f"{res['engine']:>6} {r['group_size']:>3} {r['mode']:>17} {r['crawls']:>6} {r['sessions']:>8} "
                  f"{r['generate_calls']:>5} {r['rounds_shared']:>6} {r['wall_s']:>7.2f} {r['crawls_per_s']:>8.3f}  "
                  f"{r['crawls_per_s_all']}")
    for res in results:
        print(f"{res['engine']}: shared / per-member crawls per second at G={args.group_size}: "
              f"{res['shared_over_per_member']:.2f}x; G={args.group_size} over G=1: "
              f"{res['group_over_one_shared']:.2f}x shared, {res['group_over_one_per_member']:.2f}x per-member "
              f"(engine built in {res['load_s']:.0f} s)")
    out = {"model": args.model, "queries": len(queries), "group_size": args.group_size, "batch": args.batch,
           "max_new_tokens": args.max_new_tokens, "max_sessions": args.max_sessions, "repeats": args.repeats,
           "engines": results}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
