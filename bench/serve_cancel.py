"""Cancel latency of `scholar pasa serve`, per phase, on the embedded defaults (issue 39 item 2: <= 2 s).

The real service and queue (the page's own code path, no HTTP): a search runs to its end once (the baseline: how
long each phase takes, uncancelled), then once per phase it is cancelled at that phase's first event — the crawl's
start (`running`: the first generation step is in flight) or the Selector's (`selecting`) — from another thread, as the page's Cancel
button does, and the time from the cancel to the search's end is measured. Printed per phase: the cancel latency,
the phase's uncancelled length, and their ratio (the share of the phase a user still waits for), side by side in
one process.

    python bench/serve_cancel.py [--query "..."] [--repeats 2] [overrides for pasa_serve ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# cancelled at the phase's start: the worst case, a cancel that must wait for the step or batch in flight
PHASES = {"crawl": "running", "selector": "selecting"}


def run_once(service, query: str, cancel_at: str | None) -> dict:
    """One search; with ``cancel_at``, cancelled from another thread at that event's first occurrence."""
    from scholar_agents.pasa.serve.jobs import SearchQueue

    seen: dict[str, float] = {}
    queue = SearchQueue(service.run, max_queue=1)
    try:
        t0 = time.perf_counter()
        job = queue.submit(query, None)
        events, finished, cancelled_at = [], False, None
        while not finished:
            new, finished = queue.wait_events(job, len(events), timeout=1.0)
            for kind, _ in new:
                seen.setdefault(kind, time.perf_counter() - t0)
                if cancel_at and kind == cancel_at and cancelled_at is None:
                    cancelled_at = time.perf_counter()
                    threading.Thread(target=queue.cancel, args=(job.id,)).start()
            events += new
        end = time.perf_counter()
        return {"state": job.state, "seen": seen, "total": end - t0,
                "latency": None if cancelled_at is None else end - cancelled_at,
                "partial": len((job.result or {}).get("papers", [])) if job.state == "cancelled" else None}
    finally:
        queue.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--query", default="Give me papers about contrastive learning for sentence embeddings")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    from scholar_agents.hydra_app import compose
    from scholar_agents.pasa.serve.service import SearchService

    # no caches: every run pays for its crawl and its Selector (the LLM response cache and the Selector's memo
    # would make the repeated runs instant)
    service = SearchService(compose("pasa_serve", ["llm.cache_path=null", "selector_llm.cache_path=null", "selector.memo_size=0", *a.overrides]))
    t = time.perf_counter()
    service.preload()
    print(f"agent loaded in {time.perf_counter() - t:.1f} s ({service.setting()['crawler']})")
    base = run_once(service, a.query, None)  # warm: the baseline phases
    s = base["seen"]
    crawl_len = s.get("selecting", base["total"]) - s.get("running", 0.0)
    select_len = s.get("result", base["total"]) - s.get("selecting", base["total"])
    lengths = {"crawl": crawl_len, "selector": select_len}
    print(f"baseline search: {base['total']:.2f} s ({base['state']}); crawl phase {crawl_len:.2f} s, "
          f"Selector phase {select_len:.2f} s")
    print(f"{'phase':10s} {'cancel at':16s} {'latency s (each)':26s} {'phase s':>8s} {'latency/phase':>14s} "
          f"{'papers kept':>11s}")
    worst = 0.0
    for phase, event in PHASES.items():
        runs = [run_once(service, a.query, event) for _ in range(a.repeats)]
        lat = [r["latency"] for r in runs if r["latency"] is not None]
        if not lat:
            print(f"{phase:10s} {event:16s} (the search never reached this phase)")
            continue
        med = statistics.median(lat)
        worst = max(worst, max(lat))
        print(f"{phase:10s} {event:16s} {med:6.2f} {str([round(x, 2) for x in lat]):19s} "
              f"{lengths[phase]:8.2f} {med / max(lengths[phase], 1e-9):14.2f} "
              f"{str([r['partial'] for r in runs]):>11s}")
    print(f"worst cancel latency {worst:.2f} s (goal <= 2 s): {'met' if worst <= 2.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
