"""The gold-blind oracle (ours): the reachable ceiling of a Crawler that searches and follows what it found.

The verified teacher (``data_gen/verified_teacher.py``) chooses among candidates that include phrases of the gold
papers' titles: its ceiling is hindsight, which no policy that cannot read the gold can reach. This oracle chooses
with the gold too — greedy marginal gain, as the teacher does — but only among searches a policy could write from
what it sees:

- round 1: the request's own gold-blind candidates (its topic, the request itself, YAKE key phrases of it);
- round r + 1: the related searches (``crawler.env.related_expand``: the title and key phrases of the abstract) of
  the papers that the searches kept so far found (the first ``follow`` hits of each).

A candidate becomes available once the paper it derives from has been found, so the greedy choice runs in rounds
by construction. When no candidate seen so far adds a gold paper, the next request candidate is searched anyway
(its papers' related searches then become candidates), as long as a search would remain to follow them; it stops
at ``max_searches`` searches or when nothing is left to try. Its recall is what
choosing *which found papers to follow* can reach at that number of searches, under the environment's own search
(k and before-date).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from scholar_agents.data_gen.verified_teacher import candidate_queries
from scholar_agents.papers.ids import norm_id
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.crawl_env import CrawlConfig, related_outline
from scholar_agents.pasa.queries import ScholarQuery


@dataclass
class OracleCrawl:
    searched: list[str] = field(default_factory=list)  # the kept searches, in the order kept
    rounds: list[int] = field(default_factory=list)  # each kept search's round (1 = the request's candidates)
    found: list[str] = field(default_factory=list)  # every paper the kept searches retrieved, in retrieval order
    candidates: int = 0  # distinct candidate searches run


def gold_blind_oracle(search, store: PaperStore, queries: Sequence[ScholarQuery], befores: Sequence[Optional[str]],
                      env_cfg: CrawlConfig, max_searches: int, follow: int = 10,
                      n_key_phrases: int = 5) -> list[OracleCrawl]:
    """One :class:`OracleCrawl` per query (see the module docstring). The request's candidates are searched with
    ``env_cfg.search_k`` hits, related searches with ``env_cfg.related_k``."""
    if max_searches < 1:
        raise ValueError(f"max_searches must be >= 1, got {max_searches}")
    out = []
    for q, before in zip(queries, befores):
        gold = {norm_id(g) for g in q.gold_ids}
        crawl = OracleCrawl()
        first = [c.query for c in candidate_queries(q.question, [], hindsight=False, topic_first=True,
                                                    n_key_phrases=n_key_phrases)]
        hits: dict[str, list[str]] = {}  # candidate text -> its hits
        rnd: dict[str, int] = {}

        def run(texts: list[str], k: int, r: int) -> None:
            todo = [t for t in dict.fromkeys(texts) if t not in hits]
            if not todo:
                return
            for t, hs in zip(todo, search.search_batch(todo, k=k, before=before)):
                hits[t] = [h.paper_id for h in hs]
                rnd[t] = r
            crawl.candidates += len(todo)

        run(first, env_cfg.search_k, 1)
        covered: set[str] = set()
        followed: set[str] = set()
        while len(crawl.searched) < max_searches:
            best, gain = None, 0
            for t, hs in hits.items():
                if t in crawl.searched:
                    continue
                g = len({norm_id(p) for p in hs} & gold - covered)
                if g > gain:
                    best, gain = t, g
            if best is None:
                # nothing seen adds gold: search the next request candidate anyway, so that its papers can be
                # followed (a related search may reach what no search of the request does)
                best = next((t for t in first if t in hits and t not in crawl.searched), None)
                if best is None or len(crawl.searched) + 1 >= max_searches:
                    break
            crawl.searched.append(best)
            crawl.rounds.append(rnd[best])
            covered |= {norm_id(p) for p in hits[best]} & gold
            # the papers this search found can now be followed: their related searches become candidates
            new = [p for p in hits[best][:follow] if p not in followed]
            followed.update(new)
            papers = store.get_many(new, with_sections=False) if new else {}
            related = [o.query for p in new if p in papers for o in related_outline(papers[p], env_cfg)]
            run(related, env_cfg.related_k, rnd[best] + 1)
        if not crawl.searched and first:  # a budget of one search and no gold in reach: the request's first
            crawl.searched, crawl.rounds = [first[0]], [1]
        seen: set[str] = set()
        for t in crawl.searched:
            for p in hits.get(t, []):
                if p not in seen:
                    seen.add(p)
                    crawl.found.append(p)
        out.append(crawl)
    return out
