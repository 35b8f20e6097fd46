"""The SFT mix that teaches the Crawler which found papers to follow (related expand sessions), from the sessions of
`data_gen crawler_sessions crawler.env.related_expand=true` (gold-blind positives, `data_gen.related_found=user_query`):

    python scripts/related_sft_mix.py <sessions/train.jsonl> <out.jsonl> [--negatives-per-positive 2]
        [--search-sessions 300] [--seed 0]

- every related session that follows a search adding gold (a positive) is kept;
- related sessions with no such search ("[Stop]", or only A.1's random picks) are sampled at
  ``--negatives-per-positive`` per positive: most sessions are negatives, and a student of all of them learns to stop;
- ``--search-sessions`` of the search sessions are replayed, so that continuing the shipped adapter on expand sessions
  does not unlearn its searches (the same verified-teacher sessions it was trained on).
Prints the counts; the output rows are the input rows, shuffled with the seed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def build_mix(rows: list[dict], negatives_per_positive: float, search_sessions: int, seed: int) -> tuple[list[dict], dict]:
    rng = random.Random(seed)
    related = [r for r in rows if r.get("messages") and r["meta"].get("related")]
    positives = [r for r in related if r["meta"]["gold_sections"]]
    negatives = [r for r in related if not r["meta"]["gold_sections"]]
    searches = [r for r in rows if r.get("messages") and r["meta"].get("kind") == "search"]
    n_neg = min(len(negatives), int(round(negatives_per_positive * len(positives))))
    n_search = min(len(searches), search_sessions)
    mix = positives + rng.sample(negatives, n_neg) + rng.sample(searches, n_search)
    rng.shuffle(mix)
    counts = {"related_positive": len(positives), "related_negative_available": len(negatives),
              "related_negative_kept": n_neg, "search_available": len(searches), "search_kept": n_search,
              "rows": len(mix)}
    return mix, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sessions")
    ap.add_argument("out")
    ap.add_argument("--negatives-per-positive", type=float, default=2.0)
    ap.add_argument("--search-sessions", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    rows = []
    for n, line in enumerate(Path(a.sessions).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            print(f"{a.sessions}:{n}: not JSON ({e.msg})", file=sys.stderr)
            return 2
    mix, counts = build_mix(rows, a.negatives_per_positive, a.search_sessions, a.seed)
    if not counts["related_positive"]:
        print(f"{a.sessions}: no related session follows a search that adds gold: nothing to learn "
              "(was it built with crawler.env.related_expand=true?)", file=sys.stderr)
        return 2
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in mix))
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
