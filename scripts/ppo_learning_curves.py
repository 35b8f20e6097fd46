"""Learning curves of session-level PPO on the known-answer crawl tasks, each beside its ablation:
one_hop; two_hops with γ1 = 0.5 beside γ1 = 0 (Eq. 3's cross-session bootstrap); cost with c = 0.1 beside c = 0
(Eq. 1's action cost); selector with α = 3 beside α = 0.05 (Eq. 2, the Selector as reward). Every run is the
learning tests' own `train crawler_ppo` (tests/train/ppo/test_learning.py's thresholds, through their harness and
recipes in tests/fixtures/known_tasks.py) from `--base` after `train crawler_sft` on the task's uniform sessions.
Writes one PNG per task — optimal-action rate, crawler recall (the Selector class's recall on selector, actions per
query on cost), session return, KL to π_sft, the value's explained variance, entropy; mean over seeds, per step —
and `curves.json` (the per-seed curves, seeds, wall time).

    python scripts/ppo_learning_curves.py --out outputs/ppo_learning_curves                    # tiny random Qwen2
    python scripts/ppo_learning_curves.py --base embedded:smollm2 --sft-steps 30 --tasks two_hops --seeds 0 \
        --out outputs/ppo_curves_smollm2 lr=3e-5 queries_per_step=8 "expand_sessions=[8,16]" policy_freeze_steps=5 \
        total_steps=15                                                            # SmolLM2 (docs/ppo.md), ~56 min

Trailing key=value pairs are ppo.* overrides for every run (e.g. total_steps=4 for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PANELS = (("task/optimal_action_rate", "optimal-action rate"), ("task/recall", "crawler recall"),
          ("rollout/session_return", "session return"), ("actor/kl_to_sft", "KL to π_sft (per token)"),
          ("critic/vf_explained_var", "value explained variance"), ("actor/entropy", "entropy (per token)"))


def settings(harness) -> dict[str, list[tuple[str, dict]]]:
    """Per task: (label, ppo overrides) — the learning tests' recipes, the ablation second."""
    two = dict(harness.TWO_HOPS)
    return {
        "one_hop": [("paper_mc", {}), ("gae", {"estimator": "gae"})],
        "two_hops": [("γ1 = 0.5", {"gamma1": 0.5, **two}), ("γ1 = 0 (no bootstrap)", {"gamma1": 0.0, **two})],
        # the test's 15 steps; without Eq. 1's cost an [Expand] that finds nothing is free, so nothing teaches [Stop]
        "cost": [("c = 0.1", {"total_steps": 15}),
                 ("c = 0 (no action cost)", {"total_steps": 15, "cost_expand": 0.0})],
        "selector": [("α = 3", {"alpha": 3.0, "use_selector": "true", "beta": 1.0, **two}),
                     ("α = 0.05", {"alpha": 0.05, "use_selector": "true", "beta": 1.0, **two})],
    }


def plot(task: str, curves: dict[str, list[list[dict]]], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swap = {"selector": ("task/selector_recall", "Selector-class recall"),
            "cost": ("task/actions_per_query", "actions per query ([Search] + [Expand]; optimum 2)")}
    panels = [(swap[task] if task in swap and k == "task/recall" else (k, t)) for k, t in PANELS]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (key, title) in zip(axes.flat, panels):
        for label, runs in curves.items():
            steps = max(len(r) for r in runs)
            xs, ys = [], []
            for i in range(steps):
                vals = [r[i][key] for r in runs if i < len(r) and key in r[i] and r[i][key] == r[i][key]]
                if vals:
                    xs.append(i)
                    ys.append(sum(vals) / len(vals))
            ax.plot(xs, ys, marker=".", label=label)
        frozen = [r.get("actor/frozen", 0.0) for r in next(iter(curves.values()))[0]]
        if any(frozen):
            ax.axvspan(-0.5, sum(f == 1.0 for f in frozen) - 0.5, color="0.9", zorder=0)
        if key == "critic/vf_explained_var":  # a step whose returns barely vary gives EV << −1 (1 − Var[R−V]/Var[R])
            ax.set_ylim(-1.0, 1.0)
            title += " (axis from −1)"
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("PPO step")
    axes.flat[0].legend(fontsize=8)
    n = len(next(iter(curves.values())))
    fig.suptitle(f"{task}: mean of {n} seed(s); grey = value warm-up (policy frozen)")
    fig.tight_layout()
    path = out / f"{task}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("overrides", nargs="*", help="ppo.<key>=<value> without the ppo. prefix, for every run")
    ap.add_argument("--tasks", default="one_hop,two_hops,cost,selector")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--base", default=None, help="the start policy's base model (default: the tests' tiny Qwen2)")
    ap.add_argument("--sft-lr", type=float, default=None,
                    help="learning rate of the start policy's and the Selector's SFT (default: 3e-3 on the tiny "
                         "random model, 1e-4 on a --base: a pretrained model at 3e-3 forgets its language)")
    ap.add_argument("--sft-steps", type=int, default=150, help="the start policy's SFT steps (batch 8)")
    ap.add_argument("--selector-steps", type=int, default=100, help="the selector task's Selector SFT steps (batch 8)")
    ap.add_argument("--out", default="outputs/ppo_learning_curves")
    args = ap.parse_intermixed_args()

    import torch

    import tests.fixtures.known_tasks as harness

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sft_lr = args.sft_lr if args.sft_lr is not None else (1e-4 if args.base else 3e-3)
    kt = harness.KnownTasks(out / "base", base=args.base, sft_lr=sft_lr, sft_steps=args.sft_steps,
                            selector_steps=args.selector_steps)
    extra = dict(o.split("=", 1) for o in args.overrides)
    seeds = [int(s) for s in args.seeds.split(",")]
    summary = {"base": args.base or "tiny random Qwen2 (tests/fixtures/llm.py)", "seeds": seeds, "overrides": extra,
               "sft_lr": sft_lr, "sft_steps": args.sft_steps, "selector_steps": args.selector_steps, "tasks": {}}
    t_all = time.time()
    for task in args.tasks.split(","):
        if task == "selector":
            kt.selector(task)
        t0, curves = time.time(), {}
        for label, ppo in settings(harness)[task]:
            slug = "".join(c if c.isascii() and c.isalnum() else "_" for c in label)  # Hydra: ASCII paths
            curves[label] = [harness.run_ppo(kt, task, out / "runs" / f"{task}_{slug}_s{seed}",
                                             **{**ppo, "seed": seed, **extra}) for seed in seeds]
        png = plot(task, curves, out)
        summary["tasks"][task] = {"png": str(png), "seconds": round(time.time() - t0), "curves": curves}
        print(json.dumps({"task": task, "png": str(png), "seconds": summary["tasks"][task]["seconds"]}), flush=True)
        summary["seconds"] = round(time.time() - t_all)
        (out / "curves.json").write_text(json.dumps(summary))  # after each task: a long run's finished tasks stay


if __name__ == "__main__":
    main()
