"""A PPO run's held-out evaluations against search at equal budget, and against each other, paired over queries:

    python scripts/ppo_eval_vs_search.py <search per_query.jsonl> <name>=<eval.jsonl> [<name>=<eval.jsonl> ...]

`<search per_query.jsonl>`: an `eval pasa` search row's per-query file on the same queries, corpus and setting
(it keeps each query's gold ranks to depth 100). Each `<eval.jsonl>` is a PPO run's `eval_<tag>.jsonl` (or an `eval
pasa` agent row's per-query file). Prints, per evaluation: crawler recall, papers and actions a query, and crawler
recall minus the search's recall cut at the same number of papers, query by query (the equal budget of `eval pasa`),
with the 95 % paired bootstrap interval; then each later evaluation minus each earlier one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from scholar_agents.eval.bootstrap import BootstrapConfig, paired_diff
from scholar_agents.eval.pasa.metrics import recall_at_depth


def _read(path: str) -> dict[str, dict]:
    out = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.strip():
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON ({e.msg})") from e
            if r.get("crawler_recall") is not None or "gold_ranks" in r:
                out[r["qid"]] = r
    return out


def _cell(d) -> str:
    lo, hi = d.ci if d.ci else (float("nan"), float("nan"))
    verdict = "above" if lo > 0 else "below" if hi < 0 else "tie"
    return f"{d.mean_a:.3f} vs {d.mean_b:.3f}: **{d.diff:+.3f}** ({lo:+.3f} to {hi:+.3f}), {verdict}"


def compare(search: dict[str, dict], evals: dict[str, dict[str, dict]], boot: BootstrapConfig = BootstrapConfig()) -> str:
    lines = ["| evaluation | queries | papers / query | actions / query | crawler recall vs search at equal budget |",
             "|---|---:|---:|---:|---|"]
    for name, rows in evals.items():
        qids = [q for q in rows if q in search]
        if not qids:
            raise SystemExit(f"{name}: no query in common with the search file")
        crawl = [rows[q]["crawler_recall"] for q in qids]
        budget = [recall_at_depth(search[q]["gold_ranks"], search[q]["n_gold_ids"], int(rows[q].get("n_queue") or 0))
                  for q in qids]
        papers = sum(rows[q].get("n_queue") or 0 for q in qids) / len(qids)
        actions = sum(rows[q].get("actions") or 0 for q in qids) / len(qids)
        lines.append(f"| {name} | {len(qids)} | {papers:.1f} | {actions:.2f} | {_cell(paired_diff(crawl, budget, boot))} |")
    names = list(evals)
    if len(names) > 1:
        lines += ["", "| evaluation | minus | queries | crawler recall, paired |", "|---|---|---:|---|"]
        for i, a in enumerate(names):
            for b in names[:i]:
                qids = [q for q in evals[a] if q in evals[b]]
                d = paired_diff([evals[a][q]["crawler_recall"] for q in qids],
                                [evals[b][q]["crawler_recall"] for q in qids], boot)
                lines.append(f"| {a} | {b} | {len(qids)} | {_cell(d)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    search = _read(argv[0])
    evals = {a.split("=", 1)[0]: _read(a.split("=", 1)[1]) for a in argv[1:]}
    print(compare(search, evals))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
