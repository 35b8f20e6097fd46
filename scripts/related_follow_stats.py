"""Which found papers a Crawler followed (crawler.env.related_expand), read from an `eval pasa` run's trajectories:

    python scripts/related_follow_stats.py <eval run dir> <queries.jsonl> [row ...]

Per agent row (default: every row with trajectories): queries, related expand sessions (S_q+p on a paper without
sections), how many of them wrote at least one [Expand], the [Expand]s by outline entry (Title / Key phrase), papers
those searches added to the queue, gold papers they added (the queries file's gold), and the share of followed
papers whose searches added gold. Prints a markdown table; then, per action class (the Crawler's [Search]es, its
related [Expand]s), the gold an action added on average and the Eq. 1 return that earns with the gold-only reward
(alpha x gold - c, PaSa Table 9's alpha 1.5 and c 0.1): whether following, as the policy did it, pays for its action.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from scholar_agents.papers.ids import norm_id
from scholar_agents.pasa.queries import load_pasa_queries
from scholar_agents.train.ppo.rewards import RewardConfig


def is_related_session(session: dict) -> bool:
    """An S_q+p session on a paper without sections, whose outline is related searches: the record's ``related``
    field; trajectories written before it existed are read from the prompt they keep (the outline starts with the
    title search)."""
    if "related" in session:
        return bool(session["related"])
    prompt = " ".join(m.get("content", "") for m in session.get("prompt") or [])
    return 'Sections: ["Title"' in prompt


def follow_stats(trajectories: list[dict], gold_of: dict[str, set[str]]) -> dict:
    c: Counter = Counter()
    for t in trajectories:
        c["queries"] += 1
        gold = gold_of.get(t["qid"], set())
        related_here = 0
        for s in t["sessions"]:
            acts = s.get("actions") or []
            related = [a for a in acts if a.get("found_by") == "related"]
            if s.get("start_state") != "S_q+p":
                continue
            if not (related or is_related_session(s)):
                continue
            c["related_sessions"] += 1
            if not related:
                continue
            c["sessions_following"] += 1
            gold_added = 0
            for a in related:
                c["expands_title" if a.get("argument") == "Title" else "expands_key_phrase"] += 1
                added = {norm_id(p) for p in a.get("added") or []}
                c["papers_added"] += len(added)
                gold_added += len(added & gold)
            c["gold_added"] += gold_added
            c["followed_papers_adding_gold"] += int(gold_added > 0)
            related_here += 1
        c["queries_following"] += int(related_here > 0)
    return dict(c)


def action_returns(trajectories: list[dict], gold_of: dict[str, set[str]],
                   reward: RewardConfig = RewardConfig()) -> dict[str, dict]:
    """Per action class, over executed actions: count, gold added (an action's ``added`` papers are new to the
    queue, so each gold paper counts once a crawl), gold per action and Eq. 1's alpha * that - c."""
    out: dict[str, Counter] = {"search": Counter(), "related expand": Counter()}
    for t in trajectories:
        gold = gold_of.get(t["qid"], set())
        for s in t["sessions"]:
            for a in s.get("actions") or []:
                if a.get("status") != "executed":
                    continue
                cls = "related expand" if a.get("found_by") == "related" else (
                    "search" if a.get("kind") == "search" else None)
                if cls is None:
                    continue
                out[cls]["actions"] += 1
                out[cls]["gold"] += len({norm_id(p) for p in a.get("added") or []} & gold)
    res = {}
    for cls, c in out.items():
        n = c["actions"]
        kind = "expand" if cls == "related expand" else "search"
        per = c["gold"] / n if n else 0.0
        res[cls] = {"actions": n, "gold": c["gold"], "gold_per_action": per,
                    "return_per_action": reward.alpha * per - reward.cost(kind) if n else None}
    return res


def returns_table(returns: dict[str, dict[str, dict]]) -> str:
    lines = ["| row | action | executed | gold added | gold / action | Eq. 1 return / action (gold only) |",
             "|---|---|---:|---:|---:|---:|"]
    for row, by_cls in returns.items():
        for cls, r in by_cls.items():
            ret = "-" if r["return_per_action"] is None else f"{r['return_per_action']:+.3f}"
            lines.append(f"| {row} | {cls} | {r['actions']} | {r['gold']} | {r['gold_per_action']:.3f} | {ret} |")
    return "\n".join(lines) + "\n"


def table(stats: dict[str, dict]) -> str:
    lines = ["| row | queries | related sessions | sessions with an [Expand] | [Expand] Title / Key phrase | papers added "
             "| gold added | followed papers adding gold |", "|---|---:|---:|---:|---|---:|---:|---|"]
    for row, c in stats.items():
        follow = c.get("sessions_following", 0)
        share = f"{c.get('followed_papers_adding_gold', 0)} of {follow}" if follow else "-"
        lines.append(f"| {row} | {c.get('queries', 0)} | {c.get('related_sessions', 0)} | {follow} | "
                     f"{c.get('expands_title', 0)} / {c.get('expands_key_phrase', 0)} | {c.get('papers_added', 0)} | "
                     f"{c.get('gold_added', 0)} | {share} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    run, queries = Path(argv[0]), argv[1]
    gold_of = {q.qid: {norm_id(g) for g in q.gold_ids} for q in load_pasa_queries(queries)}
    files = sorted((run / "trajectories").glob("*.jsonl"))
    if argv[2:]:
        files = [f for f in files if f.stem in set(argv[2:])]
    if not files:
        print(f"no trajectories under {run}/trajectories", file=sys.stderr)
        return 2
    stats, returns = {}, {}
    for f in files:
        rows = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        stats[f.stem] = follow_stats(rows, gold_of)
        returns[f.stem] = action_returns(rows, gold_of)
    print(table(stats))
    print(returns_table(returns))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
