"""The first search after `scholar pasa serve` loads its models, against the searches after it, with and without the
warm-up (``serve.warm_up``: one short Crawler generation and one Selector batch when the models load).

The real service and queue (the page's own code path, no HTTP), caches off (the LLM response cache and the
Selector's memo would make a repeated search free). Each arm runs in its own process, so the second arm cannot
inherit the first one's warm interpreter (kernels chosen, grammars compiled, lazy imports done): the cold arm
(``serve.warm_up=false``) is the baseline. Per arm: load and warm-up seconds, the first search, the median of the
searches after it, and first / later; then the warmed first search against the cold one, side by side. Three
different requests, the same order in both arms.

    python bench/serve_first_search.py [--queries "a" "b" "c"] [overrides for pasa_serve ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

QUERIES = ("Give me papers about contrastive learning for sentence embeddings",
           "Which papers evaluate hallucination in large vision-language models?",
           "I'm looking for work on speculative decoding to speed up LLM inference")
NO_CACHE = ["llm.cache_path=null", "selector_llm.cache_path=null", "selector.memo_size=0"]


def timed_search(service, query: str) -> tuple[float, str]:
    """One search through the page's queue, to its last event: (seconds, final state)."""
    from scholar_agents.pasa.serve.jobs import SearchQueue

    queue = SearchQueue(service.run, max_queue=1)
    try:
        t0 = time.perf_counter()
        job = queue.submit(query, None)
        seen, finished = 0, False
        while not finished:
            new, finished = queue.wait_events(job, seen, timeout=0.05)
            seen += len(new)
        return time.perf_counter() - t0, job.state
    finally:
        queue.close()


def arm(warm: bool, queries: list[str], overrides: list[str]) -> dict:
    """One process's measurements (run with --arm)."""
    from scholar_agents.hydra_app import compose
    from scholar_agents.pasa.serve.service import SearchService

    service = SearchService(compose("pasa_serve", [*NO_CACHE, f"serve.warm_up={str(warm).lower()}", *overrides]))
    t = time.perf_counter()
    service.preload()
    loaded = time.perf_counter() - t
    if service.load_error:
        raise SystemExit(f"loading the agent failed: {service.load_error}")
    runs = [timed_search(service, q) for q in queries]
    bad = [s for _, s in runs if s != "done"]
    if bad:
        raise SystemExit(f"a search ended {bad[0]!r}, not done")
    return {"warm": warm, "load_s": loaded, "warm_s": service.warm_seconds, "searches_s": [s for s, _ in runs]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", nargs="+", default=list(QUERIES))
    ap.add_argument("--arm", choices=("warm", "cold"), help=argparse.SUPPRESS)  # the child process's side
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    if len(a.queries) < 2:
        ap.error("--queries needs at least two requests: the first search and one after it")
    if a.arm:
        print(json.dumps(arm(a.arm == "warm", a.queries, a.overrides)))
        return 0
    results = {}
    for side in ("cold", "warm"):
        out = subprocess.run([sys.executable, __file__, "--arm", side, "--queries", *a.queries, *a.overrides],
                             capture_output=True, text=True, cwd=REPO)
        if out.returncode != 0:
            print(out.stderr[-3000:], file=sys.stderr)
            print(f"the {side} arm failed (rc {out.returncode})", file=sys.stderr)
            return out.returncode or 1
        results[side] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{len(a.queries)} requests, caches off, one process per arm")
    print(f"{'arm':6s} {'load s':>7s} {'warm-up s':>9s} {'first s':>8s} {'later s (median)':>17s} {'first/later':>11s}")
    for side, r in results.items():
        first, later = r["searches_s"][0], statistics.median(r["searches_s"][1:])
        warm_s = "-" if r["warm_s"] is None else f"{r['warm_s']:.1f}"
        print(f"{side:6s} {r['load_s']:7.1f} {warm_s:>9s} {first:8.2f} {later:17.2f} {first / later:11.2f}")
    cold_first, warm_first = results["cold"]["searches_s"][0], results["warm"]["searches_s"][0]
    print(f"first search, warmed / cold: {warm_first:.2f} s / {cold_first:.2f} s = {warm_first / cold_first:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
