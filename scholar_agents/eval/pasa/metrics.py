"""PaSa's retrieval metrics (§5.2, Tables 2, 3, 5), per query; reports average them over queries.

- **crawler recall**: the share of a query's gold papers that reached the paper queue (before the Selector);
- **precision / recall**: of the papers the agent returns (the Selector's accepted set) against the gold set;
- **recall@k**: the share of gold papers among the top-k of a ranking (search results in rank order, or the
  agent's queue ranked by the Selector's P("True")).

Gold ids are compared after dropping arXiv version suffixes (``2101.00001v2`` == ``2101.00001``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Optional, Sequence

from scholar_agents.papers.ids import norm_id

RECALL_KS = (20, 50, 100)


def _gold(gold: Iterable[str]) -> set[str]:
    return {norm_id(g) for g in gold if str(g).strip()}


def recall(gold: Iterable[str], found: Iterable[str]) -> float:
    g = _gold(gold)
    if not g:
        raise ValueError("recall of a query without gold papers is undefined")
    return len(g & {norm_id(p) for p in found}) / len(g)


def precision(gold: Iterable[str], returned: Sequence[str]) -> float:
    """0 when nothing is returned (a query with no answer has no correct answers), as in eval.metrics."""
    r = {norm_id(p) for p in returned}
    return len(_gold(gold) & r) / len(r) if r else 0.0


def recall_at_k(gold: Iterable[str], ranking: Sequence[str], k: int) -> float:
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return recall(gold, ranking[:k])


@dataclass
class QueryMetrics:
    """One query's row. Metrics that do not apply to a method are None (shown as "-", as in Table 2)."""

    qid: str
    n_gold: int
    n_gold_in_corpus: int  # gold papers present in the paper store (the reachable ones)
    crawler_recall: Optional[float] = None
    precision: Optional[float] = None
    recall: Optional[float] = None
    recall_at_20: Optional[float] = None
    recall_at_50: Optional[float] = None
    recall_at_100: Optional[float] = None
    n_returned: Optional[int] = None  # papers the method returns (agent: selected; search: ranked)
    n_queue: Optional[int] = None
    actions: Optional[int] = None  # [Search] + [Expand] executed (Table 6's crawler actions)
    sessions: Optional[int] = None
    gen_tokens: Optional[int] = None
    wall_s: Optional[float] = None

    def to_dict(self) -> dict:
        return asdict(self)


def gold_ranks(gold: Iterable[str], ranking: Sequence[str]) -> list[int]:
    """The 1-based ranks at which the gold papers appear in a ranking: recall at any depth k <= len(ranking) is
    ``sum(r <= k) / len(gold)``, so a report can compare a search at the agent's own budget after the fact."""
    g = _gold(gold)
    return [i + 1 for i, p in enumerate(ranking) if norm_id(p) in g]


def gold_count(gold: Iterable[str]) -> int:
    """The number of distinct gold papers (version suffixes dropped): the denominator of every recall here."""
    return len(_gold(gold))


def recall_at_depth(ranks: Sequence[int], n_gold: int, k: int) -> float:
    if n_gold < 1:
        raise ValueError("recall of a query without gold papers is undefined")
    return sum(r <= k for r in ranks) / n_gold


def ndcg_at_k(gold: Iterable[str], ranking: Sequence[str], k: int) -> float:
    """Binary-relevance nDCG@k (Järvelin & Kekäläinen 2002): Σ rel_i / log2(i + 1) over the top k, over the ideal
    list's (min(k, |gold|) relevant papers first)."""
    g = _gold(gold)
    if not g:
        raise ValueError("nDCG of a query without gold papers is undefined")
    dcg = sum(1.0 / math.log2(i + 2) for i, p in enumerate(ranking[:k]) if norm_id(p) in g)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(g))))
    return dcg / ideal


RANK_K = 10  # what a user reads first (recall@10 and nDCG@10 of the final list)


def top_metrics(gold: Sequence[str], ranking: Sequence[str], k: int = RANK_K) -> dict[str, float]:
    return {f"recall_at_{k}": recall_at_k(gold, ranking, k), f"ndcg_at_{k}": ndcg_at_k(gold, ranking, k)}


def ranking_metrics(gold: Sequence[str], ranking: Sequence[str], ks: Sequence[int] = RECALL_KS) -> dict[str, float]:
    return {f"recall_at_{k}": recall_at_k(gold, ranking, k) for k in ks}


def agent_metrics(gold: Sequence[str], queue: Sequence[str], selected: Sequence[str],
                  ranking: Sequence[str]) -> dict[str, float]:
    """Crawler recall over the queue, precision/recall of the selected set, recall@k of the Selector ranking."""
    return {"crawler_recall": recall(gold, queue), "precision": precision(gold, selected),
            "recall": recall(gold, selected), **ranking_metrics(gold, ranking)}


METRIC_COLUMNS = ("crawler_recall", "precision", "recall", "recall_at_100", "recall_at_50", "recall_at_20")


def mean_metrics(rows: Sequence[dict], keys: Sequence[str]) -> dict[str, Optional[float]]:
    """Mean over queries of each key, ignoring None; None when no query has it."""
    out: dict[str, Optional[float]] = {}
    for k in keys:
        vals = [r[k] for r in rows if r.get(k) is not None and not (isinstance(r[k], float) and math.isnan(r[k]))]
        out[k] = sum(vals) / len(vals) if vals else None
    return out
