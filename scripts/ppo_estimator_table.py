"""The estimator comparison's table and curves (scripts/ppo_estimators.sh runs the runs):

    python scripts/ppo_estimator_table.py OUT [--estimators grpo rloo paper_mc gae]

reads ``OUT/<estimator>/main/metrics.jsonl`` (one row per step) and the held-out rows ``eval_<tag>.jsonl`` (per query,
greedy crawls of the adapter's held-out queries), and writes ``OUT/estimators.md`` (budget per step, training
signal, held-out crawler recall with the paired 95 % interval against the start; with ``ppo.forced_members`` the
free and forced crawls apart) and ``OUT/estimators.png`` (gold hits per session and held-out recall against step; the
free crawls' searches when forced). A run still going is reported at the steps it has done.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rows(path: Path) -> list[dict]:
    from scholar_agents.validation import read_jsonl

    return read_jsonl(path) if path.exists() else []


def _mean(rows: list[dict], key: str) -> float | None:
    v = [r[key] for r in rows if r.get(key) is not None and r[key] == r[key]]
    return float(np.mean(v)) if v else None


def _f(x, nd=2) -> str:
    return "—" if x is None else f"{x:.{nd}f}"


def heldout(run: Path) -> list[tuple[str, int, dict[str, float]]]:
    """(tag, step, {qid: crawler recall}) of every held-out evaluation, in step order."""
    out = []
    for f in run.glob("eval_*.jsonl"):
        tag = f.stem[len("eval_"):]
        step = 0 if tag == "start" else 10 ** 9 if tag == "end" else int(tag.removeprefix("step"))
        rec = {r["qid"]: r["crawler_recall"] for r in _rows(f) if r.get("crawler_recall") is not None}
        out.append((tag, step, rec))
    return sorted(out, key=lambda x: x[1])


def summarise(name: str, run: Path) -> dict | None:
    from scholar_agents.eval.bootstrap import paired_diff

    steps = _rows(run / "metrics.jsonl")
    if not steps:
        return None
    first, last = steps[:5], steps[-5:]
    tokens = [r["rollout/sessions"] * r["rollout/response_tokens"] for r in steps if "rollout/sessions" in r]
    evals = heldout(run)
    if evals and evals[-1][0] == "end":
        evals[-1] = ("end", len(steps), evals[-1][2])
    row = {"estimator": name, "steps": len(steps), "sessions": _mean(steps, "rollout/sessions"),
           "crawls": _mean(steps, "rollout/search_sessions"), "tokens": float(np.mean(tokens)) if tokens else None,
           "seconds": _mean(steps, "timing_s/step"),
           "gold_first": _mean(first, "reward/gold_hits"), "gold_last": _mean(last, "reward/gold_hits"),
           "search_first": _mean(first, "rollout/search_per_session"), "search_last": _mean(last, "rollout/search_per_session"),
           "flat": _mean(steps, "group/flat_share"), "return_std": _mean(steps, "group/return_std"),
           "kl": _mean(last, "actor/kl_to_sft"), "evals": [(t, s, float(np.mean(list(r.values())))) for t, s, r in evals if r]}
    if len(evals) >= 2 and evals[0][0] == "start":
        start, final = evals[0][2], evals[-1][2]
        qids = sorted(set(start) & set(final))
        d = paired_diff([final[q] for q in qids], [start[q] for q in qids])
        row["paired"] = (d.diff, d.ci, len(qids), evals[-1][1])
    # per [Search] / [Expand] written: [Stop] is free (cost_stop 0) and a policy may drop it, which would move a
    # per-action figure with no change in what the crawl did
    written = [(r.get("reward/session_reward"), r.get("rollout/search_per_session", 0)
                + r.get("rollout/expand_per_session", 0)) for r in steps]
    per_action = [reward / n for reward, n in written if reward is not None and n > 0]
    row["reward_per_action"] = (float(np.mean(per_action[:5])), float(np.mean(per_action[-5:]))) if per_action else None
    row["gold_differs"] = _mean(steps, "group/gold_differs_share")
    row["curve"] = [(r["step"], r.get("reward/gold_hits")) for r in steps]
    # ppo.forced_members: the free and the forced crawls of each group apart, in blocks of 10 steps
    if any("group/forced_searches_per_crawl" in r for r in steps):
        row["forced"] = [(blk[0]["step"], blk[-1]["step"],
                          {k: _mean(blk, f"group/{k}") for k in FORCED_KEYS}) for blk in
                         (steps[i:i + 10] for i in range(0, len(steps), 10))]
        row["free_search_curve"] = [(r["step"], r.get("group/free_searches_per_crawl")) for r in steps]
    return row


FORCED_KEYS = ("free_searches_per_crawl", "forced_searches_per_crawl", "free_gold_hits_per_crawl",
               "forced_gold_hits_per_crawl", "free_reward_per_crawl", "forced_reward_per_crawl")


def markdown(rows: list[dict], out: Path) -> str:
    lines = [f"# Estimators on real queries (`{out}`)", "",
             "Budget and training signal per step (means over the steps done; first / last 5 steps); held-out = greedy "
             "crawler recall on the adapter's held-out dev queries; paired = last evaluation − start over the same "
             "queries, 95 % bootstrap interval.", "",
             "| estimator | steps | search sessions (crawls) / step | sessions / step | generated tokens / step | s / step "
             "| gold hits / session, first → last 5 | searches / session, first → last 5 "
             "| Eq. 1 reward / search or expand, first → last 5 | flat groups | groups whose gold differs "
             "| within-group std of R | KL / token, last 5 | held-out recall by step | last − start, paired |",
             "|---|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|---:|---|---|"]
    for r in rows:
        ev = ", ".join(f"{s}: {v:.3f}" for _, s, v in r["evals"]) or "—"
        if "paired" in r:
            d, ci, n, s = r["paired"]
            pair = f"{d:+.3f} ({ci[0]:+.3f} to {ci[1]:+.3f}), {n} queries, step {s}" if ci else f"{d:+.3f}"
        else:
            pair = "—"
        rpa = r["reward_per_action"]
        per_action = f"{_f(rpa[0])} → {_f(rpa[1])}" if rpa else "—"
        lines.append(f"| `{r['estimator']}` | {r['steps']} | {_f(r['crawls'], 1)} | {_f(r['sessions'], 1)} | "
                     f"{_f(r['tokens'], 0)} | {_f(r['seconds'], 0)} | {_f(r['gold_first'])} → {_f(r['gold_last'])} | "
                     f"{_f(r['search_first'])} → {_f(r['search_last'])} | {per_action} | {_f(r['flat'])} | "
                     f"{_f(r['gold_differs'])} | {_f(r['return_std'])} | "
                     f"{_f(r['kl'], 3)} | {ev} | {pair} |")
    for r in rows:
        if "forced" not in r:
            continue
        lines += ["", f"`{r['estimator']}` with forced members (`ppo.forced_members`): per crawl, the free members' "
                  "(sampled from π) beside the forced ones' (at least `ppo.forced_searches` searches), means over "
                  "each block of steps", "",
                  "| steps | searches: free / forced | gold hits: free / forced | Eq. 1 reward: free / forced |",
                  "|---|---|---|---|"]
        for lo, hi, m in r["forced"]:
            lines.append(f"| {lo}–{hi} | {_f(m['free_searches_per_crawl'])} / {_f(m['forced_searches_per_crawl'])} | "
                         f"{_f(m['free_gold_hits_per_crawl'])} / {_f(m['forced_gold_hits_per_crawl'])} | "
                         f"{_f(m['free_reward_per_crawl'])} / {_f(m['forced_reward_per_crawl'])} |")
    return "\n".join(lines) + "\n"


def _running_mean(ys: np.ndarray, k: int = 5) -> np.ndarray:
    """A centred k-step mean that averages only the steps there are at either end (no zero padding)."""
    return np.convolve(ys, np.ones(k), mode="same") / np.convolve(np.ones(len(ys)), np.ones(k), mode="same")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    forced = [r for r in rows if "free_search_curve" in r]
    fig, axes = plt.subplots(1, 3 if forced else 2, figsize=(16 if forced else 11, 4))
    a, b = axes[0], axes[1]
    for r in forced:  # does π learn to write the second search unforced?
        xs = [x for x, v in r["free_search_curve"] if v is not None]
        ys = np.array([v for _, v in r["free_search_curve"] if v is not None])
        if len(ys) >= 5:
            ys = _running_mean(ys)
        axes[2].plot(xs, ys, label=r["estimator"])
        axes[2].set(xlabel="step", ylabel="searches / free crawl (5-step mean)", title="free members")
    for r in rows:
        xs = [s for s, g in r["curve"] if g is not None]
        ys = np.array([g for _, g in r["curve"] if g is not None])
        if len(ys) >= 5:  # a 5-step running mean: one step holds a handful of queries
            ys = _running_mean(ys)
        a.plot(xs, ys, label=r["estimator"])
        b.plot([s for _, s, _ in r["evals"]], [v for _, _, v in r["evals"]], marker="o", label=r["estimator"])
    a.set(xlabel="step", ylabel="gold hits / session (5-step mean)", title="training")
    b.set(xlabel="step", ylabel="held-out crawler recall", title="held-out (greedy)")
    for ax in axes:
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--estimators", nargs="+", default=["grpo", "rloo", "paper_mc", "gae"])
    a = ap.parse_args()
    rows = [r for e in a.estimators if (r := summarise(e, a.out / e / "main")) is not None]
    if not rows:
        print(f"no runs with metrics under {a.out}", file=sys.stderr)
        return 1
    text = markdown(rows, a.out)
    (a.out / "estimators.md").write_text(text)
    plot(rows, a.out / "estimators.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
