"""PPO runs that differ in Eq. 2's reward (e.g. the Selector), side by side (does the reward still
pay for anything?): per run, from its ``metrics.jsonl`` / ``metrics.json`` — Selector-only hits and gold hits a
session (step 1, and the mean of steps 3 to the end), papers added, the session return, actions a session, KL to
π_sft at the end, seconds a step, held-out crawler recall start → end — as a markdown table, and a PNG of the
per-step Selector-only and gold hits.

    python scripts/ppo_reward_compare.py embedding=/work/runs/ppo_dense_embedding/main \
        provenance=/work/runs/ppo_dense_provenance/main --out /work/runs/ppo_dense_reward
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def load(run: Path) -> tuple[list[dict], dict]:
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    if not steps:
        raise SystemExit(f"{run}/metrics.jsonl: no steps")
    final = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").is_file() else {}
    return steps, final


def mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def summary(steps: list[dict], final: dict, first: int = 3) -> dict:
    late = [s for s in steps if s["step"] >= first] or steps
    col = lambda k, rows: mean([float(s[k]) for s in rows])  # noqa: E731
    start, end = final.get("eval_start") or {}, final.get("eval") or {}
    return {
        "steps": len(steps),
        "selector_only_hits_step1": float(steps[0]["reward/selector_only_hits"]),
        "papers_added_step1": float(steps[0]["reward/papers_added"]),
        "selector_only_hits": col("reward/selector_only_hits", late),
        "gold_hits": col("reward/gold_hits", late),
        "papers_added": col("reward/papers_added", late),
        "session_return": col("rollout/session_return", late),
        "actions_per_session": col("rollout/actions_per_session", late),
        "kl_end": float(steps[-1]["actor/kl_to_sft"]),
        "seconds_per_step": col("timing_s/step", steps),
        "recall_start": start.get("crawler_recall"), "recall_end": end.get("crawler_recall"),
        "eval_queries": end.get("queries") or start.get("queries"),
    }


def table(rows: dict[str, dict], first: int = 3) -> str:
    names = list(rows)
    fmt = lambda v, p=2: "n/a" if v is None else f"{v:.{p}f}"  # noqa: E731
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    spec = [("Selector-only hits / session, step 1 (of papers added)",
             lambda r: f"{r['selector_only_hits_step1']:.1f} (of {r['papers_added_step1']:.0f})"),
            (f"Selector-only hits / session, steps {first}–end", lambda r: fmt(r["selector_only_hits"], 1)),
            (f"gold hits / session, steps {first}–end", lambda r: fmt(r["gold_hits"])),
            (f"papers added / session, steps {first}–end", lambda r: fmt(r["papers_added"], 1)),
            (f"session return, steps {first}–end", lambda r: fmt(r["session_return"], 1)),
            (f"actions / session, steps {first}–end", lambda r: fmt(r["actions_per_session"])),
            ("KL to π_sft / token, last step", lambda r: fmt(r["kl_end"], 3)),
            ("s / step", lambda r: fmt(r["seconds_per_step"], 0)),
            ("held-out crawler recall, start → end",
             lambda r: f"{fmt(r['recall_start'], 3)} → {fmt(r['recall_end'], 3)} ({r['eval_queries']} queries)")]
    for label, f in spec:
        lines.append(f"| {label} | " + " | ".join(f(rows[n]) for n in names) + " |")
    return "\n".join(lines)


def plot(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, steps in curves.items():
        x = [s["step"] for s in steps]
        axes[0].plot(x, [s["reward/selector_only_hits"] for s in steps], marker="o", label=name)
        axes[1].plot(x, [s["reward/gold_hits"] for s in steps], marker="o", label=name)
    for ax, title in zip(axes, ("Selector-only hits / session", "gold hits / session")):
        ax.set_title(title)
        ax.set_xlabel("PPO step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="name=<PPO run dir> (its metrics.jsonl)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--first", type=int, default=3, help="the steady part starts at this step")
    a = ap.parse_args(argv)
    curves, rows = {}, {}
    for spec in a.runs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise SystemExit(f"expected name=<run dir>, got {spec!r}")
        steps, final = load(Path(path))
        curves[name], rows[name] = steps, summary(steps, final, a.first)
    a.out.mkdir(parents=True, exist_ok=True)
    md = table(rows, a.first)
    (a.out / "reward_compare.md").write_text(md + "\n")
    (a.out / "reward_compare.json").write_text(json.dumps(rows, indent=1))
    plot(curves, a.out / "reward_compare.png")
    print(md)
    return rows


if __name__ == "__main__":
    main()
