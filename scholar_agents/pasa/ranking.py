"""How the agent orders the papers it returns (``agent.ranking``).

- ``selector``: by the Selector's score, ties in crawl order (PaSa §4.3: P("True") ranks the results);
- ``crawl``: the crawl's own order (the merged paper queue: the Crawler's searches in the order it wrote them, each
  search's hits in the search's order, then what expansions added);
- ``fusion``: reciprocal-rank fusion of the two (Cormack, Clarke & Büttcher 2009: Σ 1 / (k + rank), k = 60), a
  switch that needs no calibration between the two orders.

"selected" is the Selector's decision whatever the order.
"""

from __future__ import annotations

from typing import Optional, Sequence

from scholar_agents.validation import UsageError

RANKINGS = ("selector", "crawl", "fusion")
RRF_K = 60  # Cormack et al. 2009's constant


def check_ranking(name: str, key: str = "agent.ranking") -> str:
    if name not in RANKINGS:
        raise UsageError(f"{key} must be one of {', '.join(RANKINGS)}, got {name!r}")
    return name


def order(scores: Sequence[Optional[float]], how: str, k: int = RRF_K) -> list[int]:
    """Indices of papers given in crawl order, ordered by ``how``. Without scores (no Selector) every ranking is the
    crawl order."""
    n = len(scores)
    check_ranking(how)
    if how == "crawl" or n == 0 or any(s is None for s in scores):
        return list(range(n))
    by_score = sorted(range(n), key=lambda i: -scores[i])  # stable: ties keep crawl order
    if how == "selector":
        return by_score
    selector_rank = {i: r for r, i in enumerate(by_score, start=1)}
    fused = {i: 1.0 / (k + selector_rank[i]) + 1.0 / (k + i + 1) for i in range(n)}
    return sorted(range(n), key=lambda i: -fused[i])
