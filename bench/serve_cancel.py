"""Cancel latency of `scholar pasa serve`, per phase, on the embedded defaults (the goal: <= 2 s from the click).

The real service and queue (the page's own code path, no HTTP). First, cold: the first search after the models
load, cancelled ``--mid`` seconds into its first generation. Then a search runs to its end once (the baseline: how
long each phase takes, uncancelled), then once per phase it is cancelled — at the crawl's start (`running`: the
first generation step is in flight), ``--mid`` seconds into that generation (`generation`: mid-answer, what
llm/cancel.py interrupts), or at the Selector's start (`selecting`) — from another thread, as the page's Cancel
button does, and the time from the cancel to the search's end is measured. Printed per phase: the cancel latency,
the phase's uncancelled length (for a generation: the first crawl step's), and their ratio (the share of the phase
a user still waits for), side by side in one process.

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

# (event, seconds after it): at a phase's start (a cancel that must stop the step or batch in flight), or mid-answer
PHASES = {"crawl": ("running", 0.0), "generation": ("running", None), "selector": ("selecting", 0.0)}


def run_once(service, query: str, cancel_at: str | None, delay: float = 0.0) -> dict:
    """One search; with ``cancel_at``, cancelled from another thread ``delay`` s after that event's first
    occurrence."""
    from scholar_agents.pasa.serve.jobs import SearchQueue

    seen: dict[str, float] = {}
    queue = SearchQueue(service.run, max_queue=1)
    try:
        t0 = time.perf_counter()
        job = queue.submit(query, None)
        events, finished, clicked = [], False, {}
        timer = None

        def click():
            clicked["at"] = time.perf_counter()
            queue.cancel(job.id)

        while not finished:
            new, finished = queue.wait_events(job, len(events), timeout=0.05)
            for kind, _ in new:
                seen.setdefault(kind, time.perf_counter() - t0)
                if cancel_at and kind == cancel_at and timer is None:
                    timer = threading.Timer(delay, click)
                    timer.start()
            events += new
        end = time.perf_counter()
        if timer is not None:
            timer.cancel()
        # a cancel that came after the end (the step was shorter than the delay) measured nothing
        cancelled_at = clicked.get("at")
        return {"state": job.state, "seen": seen, "total": end - t0, "mid_step": "session" not in seen or (
                    cancelled_at is not None and seen["session"] > cancelled_at - t0),
                "latency": None if cancelled_at is None or job.state != "cancelled" else end - cancelled_at,
                "partial": len((job.result or {}).get("papers", [])) if job.state == "cancelled" else None}
    finally:
        queue.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--query", default="Give me papers about contrastive learning for sentence embeddings")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--mid", type=float, default=1.0,
                    help="seconds into the first generation for the mid-answer cancel")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args()
    from scholar_agents.hydra_app import compose
    from scholar_agents.pasa.serve.service import SearchService

    # no caches: every run pays for its crawl and its Selector (the LLM response cache and the Selector's memo
    # would make the repeated runs instant)
    service = SearchService(compose("pasa_serve", ["llm.cache_path=null", "selector_llm.cache_path=null", "selector.memo_size=0", *a.overrides]))
    t = time.perf_counter()
    service.preload()
    st = service.setting()
    print(f"agent loaded in {time.perf_counter() - t:.1f} s (warm-up {st['warm_seconds']} s; {st['crawler']})")
    cold = run_once(service, a.query, "running", a.mid)  # the first search after start-up, mid-answer
    base = run_once(service, a.query, None)  # the baseline phases
    s = base["seen"]
    crawl_len = s.get("selecting", base["total"]) - s.get("running", 0.0)
    select_len = s.get("result", base["total"]) - s.get("selecting", base["total"])
    step_len = s.get("session", base["total"]) - s.get("running", 0.0)  # the first generation and its step
    lengths = {"crawl": crawl_len, "generation": step_len, "selector": select_len}
    print(f"baseline search: {base['total']:.2f} s ({base['state']}); crawl phase {crawl_len:.2f} s (first step "
          f"{step_len:.2f} s), Selector phase {select_len:.2f} s")
    if cold["latency"] is not None:
        print(f"cold first search, cancelled {a.mid:.1f} s into its first generation ("
              f"{'mid-answer' if cold['mid_step'] else 'after it'}): {cold['latency']:.2f} s to stop, "
              f"{cold['latency'] / max(step_len, 1e-9):.2f} of a first step")
    else:
        print(f"cold first search: ended ({cold['state']}) before the cancel at {a.mid:.1f} s")
    print(f"{'phase':10s} {'cancel at':16s} {'latency s (each)':26s} {'phase s':>8s} {'latency/phase':>14s} "
          f"{'papers kept':>11s}")
    worst = 0.0 if cold["latency"] is None else cold["latency"]
    for phase, (event, delay) in PHASES.items():
        d = a.mid if delay is None else delay
        runs = [run_once(service, a.query, event, d) for _ in range(a.repeats)]
        lat = [r["latency"] for r in runs if r["latency"] is not None]
        event = f"{event}+{d:.1f}s" if d else event
        if not lat:
            print(f"{phase:10s} {event:16s} (the search ended before the cancel)")
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
