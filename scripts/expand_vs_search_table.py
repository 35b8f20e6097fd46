"""The figures of scripts/expand_vs_search.sh in one table per run: every crawling row (agents, the gold-blind
oracle with and without following, the hindsight teacher) against every search row at equal paper budget, and the
agents' ranked top 10 against "search, then Selector re-rank" at the same number of papers, and each agent row's ranked
top 10 against the other agent rows of its request form (after RL minus its SFT start; paired 95 % intervals).

    python scripts/expand_vs_search_table.py outputs/expand_vs_search          # every run dir below it
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scholar_agents.eval.bootstrap import paired_diff


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
                "re-ranked papers | recall@10 (agent, minus) | recall@10 | nDCG@10 |", "|---|---|---:|---:|---:|---|---|---|"]
        for p in s["rerank_pairs"]:
            rerank, r10 = p.get("rerank_papers_mean"), p["recall_at_10"]
            out.append(f"| {p['row']} | {p['minus']} | {p['queries']} | {p['queue_mean']:.1f} | "
                       f"{'-' if rerank is None else f'{rerank:.1f}'} | {r10['mean_a']:.3f}, {r10['mean_b']:.3f} | "
                       f"{cell(r10)} | {cell(p['ndcg_at_10'])} |")
    out += agent_pairs_table(run)
    return "\n".join(out) + "\n"


def _form(row: str) -> str:
    return row.partition("~")[2]


def agent_pairs_table(run: Path) -> list[str]:
    """The ranked top 10 (recall@10 of the Selector's order) of each agent row minus each other agent row of the
    same request form, query by query, from the run's per-query rows (the summary pairs crawler recall only): after RL
    minus its start, related minus plain, and a supplement row (``agent_k<k>``) minus the page's ``agent``."""
    per_query = {p.stem: {r["qid"]: r for r in map(json.loads, p.read_text().splitlines()) if r}
                 for p in sorted((run / "per_query").glob("agent*.jsonl"))}
    pairs = [(a, b) for a in per_query for b in per_query
             if a != b and _form(a) == _form(b) and (
                 a.startswith(("agent_rl", "agent_related")) and not (b.startswith("agent_rl")
                                                                     and a.startswith("agent_related"))
                 or a.startswith("agent_k") and b.partition("~")[0] == "agent")]  # the supplement minus the page
    if not pairs:
        return []
    out = ["", "| agent top 10 (Selector order) | minus: agent row | queries | recall@10 | nDCG@10 |",
           "|---|---|---:|---|---|"]
    for a, b in pairs:
        qids = sorted(set(per_query[a]) & set(per_query[b]))
        cells = []
        for metric in ("selector_recall_at_10", "selector_ndcg_at_10"):
            d = paired_diff([per_query[a][q][metric] for q in qids], [per_query[b][q][metric] for q in qids])
            cells.append(cell({"diff": d.diff, "ci": d.ci}))
        out.append(f"| {a} | {b} | {len(qids)} | {cells[0]} | {cells[1]} |")
    return out


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
