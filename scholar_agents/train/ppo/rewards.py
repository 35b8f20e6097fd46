"""The Crawler's reward (PaSa Eqs. 1–2), all of it: the costs and α, the match indicator, every action of a batch
rewarded with ONE batched Selector call, and the reward parts the logs show.

The Selector's P("True") is a single-token reward model (PaSa §4.3): the new papers of all the batch's actions are
judged together, and an action's reward is α · (papers gold or accepted) − c(action).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scholar_agents.pasa.actions import SEARCH
from scholar_agents.papers.ids import norm_id

if TYPE_CHECKING:
    from scholar_agents.papers.paper import Paper
    from scholar_agents.pasa.queries import ScholarQuery

INVALID = "invalid"  # a response without any parsed action: one step, charged RewardConfig.cost_invalid

# The samples below are :class:`.rollout.SessionSample` (untyped here: rollout.py builds them with these rewards,
# and an annotation import back would close an import circle).


@dataclass(frozen=True)
class RewardConfig:
    """PaSa Table 9 defaults."""

    alpha: float = 1.5  # reward per newly found matching paper (Eq. 1)
    cost_search: float = 0.1  # c([Search])
    cost_expand: float = 0.1  # c([Expand])
    cost_stop: float = 0.0  # c([Stop])
    # Eq. 2: a new paper counts when it is gold OR the Selector accepts it. False = the Table 5 ablation
    # "w/o Selector as RM" (gold-only, sparse rewards).
    use_selector: bool = True
    cost_invalid: float = 0.1  # ours: a malformed action costs like a Search (the paper has none)

    def cost(self, action_kind: str) -> float:
        costs = {"search": self.cost_search, "expand": self.cost_expand, "stop": self.cost_stop,
                 INVALID: self.cost_invalid}
        if action_kind not in costs:
            raise ValueError(f"unknown action kind {action_kind!r}; expected one of {sorted(costs)}")
        return costs[action_kind]


def match_indicators(
    new_papers: Sequence[str], gold: set[str], selector_accepts: Sequence[bool] | None, use_selector: bool
) -> list[int]:
    """I(q, p_i, t) of Eq. 2 for the papers an action added. ``new_papers`` are already de-duplicated against
    the queue Q_t by the crawl environment (p_i ∉ Q_t), so only the match condition is checked here."""
    if use_selector and selector_accepts is None:
        raise ValueError("use_selector=True needs the Selector's decisions for the new papers")
    if selector_accepts is not None and len(selector_accepts) != len(new_papers):
        raise ValueError(f"{len(selector_accepts)} Selector decisions for {len(new_papers)} papers")
    out = []
    for i, pid in enumerate(new_papers):
        hit = pid in gold or (use_selector and bool(selector_accepts[i]))  # type: ignore[index]
        out.append(int(hit))
    return out


def action_reward(
    action_kind: str,
    new_papers: Sequence[str],
    gold: set[str],
    selector_accepts: Sequence[bool] | None,
    cfg: RewardConfig,
) -> tuple[float, int]:
    """r(s_t, a_t) = α · Σ_i I(q, p_i, t) − c(a_t)  (Eq. 1). Returns (reward, number of matching papers)."""
    hits = sum(match_indicators(new_papers, gold, selector_accepts, cfg.use_selector))
    return cfg.alpha * hits - cfg.cost(action_kind), hits


def gold_sets(queries: Sequence["ScholarQuery"]) -> dict[str, set[str]]:
    """Each query's gold paper ids, normalised: the "gold" side of Eq. 2's indicator."""
    return {q.qid: {norm_id(g) for g in q.gold_ids} for q in queries}


def reward_actions(samples: Sequence, papers: Mapping[str, "Paper"], gold: dict[str, set[str]],
                   selector, cfg: RewardConfig, search_name: str) -> None:
    """r(s_t, a_t) (Eq. 1), its matching papers and its gold papers, set on every step of every sample. With
    ``cfg.use_selector`` the Selector scores all new papers of the batch in ONE batched call, each action's papers
    with the retriever that returned them (``search_name`` for a [Search]; selector=provenance judges a paper by the
    evidence that retriever did not use)."""
    requests, owners = [], []
    for s in samples:
        for st in s.steps:
            if st.added and cfg.use_selector:
                found_by = st.found_by or (search_name if st.kind == SEARCH else st.kind)
                requests.append((s.record.user_query, [papers[p] for p in st.added if p in papers], found_by))
                owners.append(st)
    decisions: dict[int, list[bool]] = {}
    if requests:
        if selector is None:
            raise ValueError("ppo.use_selector=true needs a Selector (selector_llm)")
        for st, (_, plist, _), dec in zip(owners, requests, selector.accept_many(requests)):
            accepted = {p.paper_id for p, d in zip(plist, dec) if d}
            decisions[id(st)] = [p in accepted for p in st.added]
    for s in samples:
        g = gold.get(s.record.qid, set())
        for st in s.steps:
            ids = [norm_id(p) for p in st.added]
            accepts = decisions.get(id(st), [False] * len(ids)) if cfg.use_selector else None
            st.reward, st.hits = action_reward(st.kind, ids, g, accepts, cfg)
            st.gold_hits = sum(p in g for p in ids)


def reward_stats(samples: Sequence, cost_of) -> dict[str, float]:
    """Per-session means of the reward parts (what the paper's Eq. 1 adds up), for the logs."""
    n = max(len(samples), 1)
    steps = [st for s in samples for st in s.steps]
    kinds = Counter(st.kind for st in steps)
    return {
        "reward/session_reward": sum(s.reward for s in samples) / n,
        "reward/hits": sum(st.hits for st in steps) / n,
        "reward/gold_hits": sum(st.gold_hits for st in steps) / n,
        "reward/selector_only_hits": sum(st.hits - st.gold_hits for st in steps) / n,
        "reward/papers_added": sum(len(st.added) for st in steps) / n,
        "reward/action_cost": sum(cost_of(st.kind) for st in steps) / n,
        "rollout/actions_per_session": len(steps) / n,
        "rollout/search_per_session": kinds.get("search", 0) / n,
        "rollout/expand_per_session": kinds.get("expand", 0) / n,
        "rollout/invalid_per_session": kinds.get(INVALID, 0) / n,
        "rollout/bootstrapped_papers": sum(len(st.children) for st in steps) / n,
    }
