"""Seeds x settings of session-level PPO on the known-answer crawl tasks: what the thresholds in
tests/train/ppo/test_learning.py and the tables in docs/ppo.md were measured with. Each run is the learning tests' own
`train crawler_ppo` through their harness (tests/fixtures/known_tasks.py: the tiny random Qwen2 after `train
crawler_sft` on the task's uniform sessions); one JSON line per run (means of the first 2 and the last 3 steps, and
the per-step curves).

    python scripts/ppo_known_tasks.py one_hop --seeds 0,1,2,3 total_steps=12
    python scripts/ppo_known_tasks.py one_hop --name gae estimator=gae
    python scripts/ppo_known_tasks.py cost total_steps=15
    # two_hops (TASK_SIZES: no decoys, 6 gold papers) — the γ1 test, seeds 0-7; then the value warm-up test
    python scripts/ppo_known_tasks.py two_hops --seeds 0,1,2,3,4,5,6,7 --name g05 gamma1=0.5 queries_per_step=16 \
        'expand_sessions=[16,32]' policy_freeze_steps=20 total_steps=35        # and --name g0 gamma1=0.0
    python scripts/ppo_known_tasks.py two_hops --name warmup gamma1=0.5 queries_per_step=16 \
        'expand_sessions=[16,32]' policy_freeze_steps=30 total_steps=30
    python scripts/ppo_known_tasks.py selector --selector --name a3 use_selector=true alpha=3 beta=1.0 \
        queries_per_step=16 'expand_sessions=[16,32]' policy_freeze_steps=20 total_steps=35   # and alpha=0.05, 1

`--selector` first trains the task's Selector (`train selector_sft` on the task's pairs: the Selector class and the
gold papers True, as many distractors False) and prints its accept rates. `--size crawl_task.decoys=true` measures
two_hops with decoys (docs/ppo.md: V̂ then has too few bridge states to tell them apart). Trailing key=value pairs
are ppo.* overrides.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

KEYS = ("optimal_action_rate", "optimal_share", "optimal_section_rate", "hub_stop_rate", "recall", "actions_per_query",
        "selector_section_rate", "selector_share", "selector_recall")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task", choices=["one_hop", "two_hops", "cost", "selector"])
    ap.add_argument("overrides", nargs="*", help="ppo.<key>=<value> without the ppo. prefix")
    ap.add_argument("--seeds", default="0,1,2,3")
    ap.add_argument("--name", default=None, help="run name (default: the task)")
    ap.add_argument("--root", default="outputs/ppo_known_tasks", help="tasks, start policies and runs go here")
    ap.add_argument("--size", action="append", default=[], help="a crawl_task override, e.g. crawl_task.gold_per_query=6")
    ap.add_argument("--selector", action="store_true", help="train the task's Selector first and reward with it")
    args = ap.parse_intermixed_args()

    import torch

    import tests.fixtures.known_tasks as harness

    torch.set_num_threads(1)
    harness.TASK_SIZES[args.task] = harness.TASK_SIZES.get(args.task, []) + args.size
    root = Path(args.root)
    kt = harness.KnownTasks(root / "base")
    if args.selector:
        kt.selector(args.task)
    ppo = dict(o.split("=", 1) for o in args.overrides)
    name = args.name or args.task
    for seed in [int(s) for s in args.seeds.split(",")]:
        t0, run_dir = time.time(), root / "runs" / f"{name}_s{seed}"
        if run_dir.exists():
            raise SystemExit(f"{run_dir} exists: choose another --name or remove it")
        rows = harness.run_ppo(kt, args.task, run_dir, **{"seed": seed, **ppo})

        def mean(key, part, rows=rows):
            vals = [r[f"task/{key}"] for r in rows[part] if f"task/{key}" in r]
            return round(sum(vals) / len(vals), 3) if vals else None

        print(json.dumps({"name": name, "seed": seed, "seconds": round(time.time() - t0), "steps": len(rows),
                          "first2": {k: mean(k, slice(0, 2)) for k in KEYS},
                          "last3": {k: mean(k, slice(-3, None)) for k in KEYS},
                          "curve_optimal_share": [r.get("task/optimal_share") for r in rows],
                          "curve_explained_var": [r.get("critic/vf_explained_var") for r in rows]}), flush=True)


if __name__ == "__main__":
    main()
