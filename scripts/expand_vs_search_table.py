"""The figures of scripts/expand_vs_search.sh in one table per run: every crawling row (agents, the gold-blind
oracle with and without following, the hindsight teacher) against every search row at equal paper budget, and the
agents' ranked top 10 against "search, then Selector re-rank" at the same number of papers (paired 95 % intervals).

    python scripts/expand_vs_search_table.py outputs/expand_vs_search          # every run dir below it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cell(d: dict | None) -> str:
    if not d:
        return "—"
    lo, hi = d["ci"] if d.get("ci") else (d["diff"], d["diff"])
    word = " **above**" if lo > 0 else " **below**" if hi < 0 else " tie"
    return f"{d['diff']:+.3f} ({lo:+.3f} to {hi:+.3f}){word}"


def run_table(run: Path) -> str:
    s = json.loads((run / "summary.json").read_text())
    summary, labels = s["summary"], {}
    out = [f"#### {run.parent.name} / {run.name}", "",
           "| row | vs | queries | papers (mean) | searches | crawler recall | vs recall@k | **equal budget** |",
           "|---|---|---:|---:|---:|---:|---|---|"]
    for c in s["comparisons"]:
        a = summary[c["crawler"]]
        out.append(f"| {labels.get(c['crawler'], c['crawler'])} | {c['search']} | {c['queries']} | "
                   f"{c['queue_mean']:.1f} | {c['actions_mean']:.2f} | {a['crawler_recall']:.3f} | "
                   f"{cell(c['crawler_recall_vs_recall_at_k'])} | {cell(c['equal_budget'])} |")
    for p in s.get("crawler_pairs", []):
        if p["row"].startswith("oracle") and p["minus"].startswith("oracle") or \
                p["row"].startswith(("agent_related", "agent_rl")) and p["minus"].startswith("agent"):
            out.append(f"| {p['row']} | {p['minus']} (paired crawler recall) | {p['queries']} | | | | "
                       f"{cell(p['crawler_recall'])} | |")
    if s.get("rerank_pairs"):
        out += ["", "| agent top 10 (Selector order) | minus: search top 10 or re-rank | queries | agent papers | "
                "re-ranked papers | recall@10 | nDCG@10 |", "|---|---|---:|---:|---:|---|---|"]
        for p in s["rerank_pairs"]:
            rerank = p.get("rerank_papers_mean")
            out.append(f"| {p['row']} | {p['minus']} | {p['queries']} | {p['queue_mean']:.1f} | "
                       f"{'-' if rerank is None else f'{rerank:.1f}'} | {cell(p['recall_at_10'])} | "
                       f"{cell(p['ndcg_at_10'])} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    runs = sorted(p.parent for p in Path(argv[0]).glob("*/*/summary.json"))
    if not runs:
        print(f"no run with a summary.json under {argv[0]}/<set>/<setting>/", file=sys.stderr)
        return 2
    print("\n".join(run_table(r) for r in runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
