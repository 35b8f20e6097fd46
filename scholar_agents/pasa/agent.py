"""The end-to-end PaSa agent (§4.1, Figure 1): the Crawler fills a paper queue, the Selector reads every queued
paper, and the papers come back ranked by the Selector's P("True") with its decision (and, on request, its
rationale). ``ensemble > 1`` merges the queues of several crawler runs before selection (PaSa-7b-ensemble,
Table 2: two runs).

The same object is the "prompted agent" baseline (PaSa-GPT-4o in Table 2): PaSa with an untrained instruct model
as Crawler and Selector.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from scholar_agents.pasa.actions import SEARCH
from scholar_agents.pasa.crawl_env import SEED_SESSION, CrawlEnv
from scholar_agents.pasa.crawler import Crawler, crawl
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.ranking import check_ranking
from scholar_agents.pasa.ranking import order as rank_order
from scholar_agents.pasa.selectors.llm import Selector, SelectorPair
from scholar_agents.pasa.trajectory import QueryTrajectory

log = logging.getLogger(__name__)


@dataclass
class AgentConfig:
    ensemble: int = 1  # crawler runs whose queues are merged (PaSa-7b-ensemble: 2); runs > 1 need sampling
    # false = ablation: no Selector; every crawled paper is returned (crawl order), so precision/recall are the
    # crawler's own. (Table 5's "w/o Selector as RM" is a PPO reward switch, see `ppo`.)
    use_selector: bool = True
    rationales: bool = False  # generate the Selector's rationale for the selected papers (slow: a generation each)
    rationale_limit: int = 20  # at most this many rationales per query (the top-ranked selected papers)
    # With an event hook (the live page): the Selector scores in micro-batches sized to take about this long, with
    # an event between them, so a cancel waits at most about one of them (<= 2 s). Without a hook, one call.
    event_batch_s: float = 1.0
    # The order of the returned papers (pasa/ranking.py): selector (PaSa §4.3, the paper presets) | crawl | fusion
    # (reciprocal-rank fusion of both). "selected" is the Selector's decision in every order.
    ranking: str = "selector"


@dataclass
class RankedPaper:
    paper_id: str
    title: str
    date: str
    score: Optional[float]  # Selector P("True") (None without Selector)
    selected: bool
    depth: int  # 1 = found by a search, 2+ = by expanding a paper of depth - 1
    runs: list[int] = field(default_factory=list)  # ensemble runs whose queue held it
    rationale: Optional[str] = None
    # the retriever that first added it to a queue (the search backend's name, "expand", "seed"): selector=provenance
    # judges a paper by the evidence that retriever did not use
    found_by: str = ""


@dataclass
class AgentResult:
    qid: str
    query: str
    before: Optional[str]
    papers: list[RankedPaper]  # in agent.ranking's order (crawl order without Selector)
    trajectories: list[QueryTrajectory]
    crawl_seconds: float = 0.0  # this query's share of the batched crawl (wall time / queries)
    select_seconds: float = 0.0
    mark: str = ""  # what "selected" means here (Selector.mark's note), or why nothing is marked

    @property
    def selected(self) -> list[RankedPaper]:
        return [p for p in self.papers if p.selected]

    @property
    def queue_ids(self) -> list[str]:
        return [p.paper_id for p in sorted(self.papers, key=lambda p: self._order[p.paper_id])]

    def __post_init__(self) -> None:
        # crawl order of the merged queue: run 0's queue first, then what later runs added
        order: dict[str, int] = {}
        for t in self.trajectories:
            for e in t.queue:
                order.setdefault(e.paper_id, len(order))
        self._order = order

    @property
    def no_valid_action(self) -> bool:
        """No [Search] / [Expand] of the crawl was executed: the Crawler wrote nothing usable."""
        return sum(t.n_moves for t in self.trajectories) == 0

    @property
    def fallback_searches(self) -> int:
        """Searches of the user's query made by ``crawler.env.fallback_search`` (the Crawler wrote no valid one)."""
        return sum(t.fallback_searches for t in self.trajectories)

    @property
    def user_query_searches(self) -> int:
        """Searches of the user's query made by ``crawler.env.search_user_query`` (beside the Crawler's own)."""
        return sum(t.user_query_searches for t in self.trajectories)

    def crawl_note(self) -> Optional[str]:
        """The line the output shows when the crawl yielded no valid action, or fell back to searching the query
        (else None)."""
        if self.fallback_searches:
            return ("the Crawler wrote no valid [Search] for this query: your query was searched as written "
                    "(crawler.env.fallback_search=true)")
        if not self.no_valid_action:
            return None
        sessions = sum(len(t.sessions) for t in self.trajectories)
        errors = _sum_counts(t.grammar_errors for t in self.trajectories)
        statuses = _sum_counts(t.action_statuses for t in self.trajectories)
        failed = sum(1 for t in self.trajectories for s in t.sessions if s.finish_reason == "error")
        parts = [f"{sessions} session{'s' if sessions != 1 else ''}",
                 "grammar errors: " + (", ".join(f"{k} x{v}" for k, v in sorted(errors.items())) or "none")]
        if statuses:
            parts.append("action statuses: " + ", ".join(f"{k} x{v}" for k, v in sorted(statuses.items())))
        if failed:
            parts.append(f"{failed} prompt(s) rejected by the model")
        return f"the Crawler wrote no valid action for this query ({'; '.join(parts)}): no paper was crawled"

    def to_dict(self, with_trajectories: bool = False) -> dict:
        d = {"qid": self.qid, "query": self.query, "before": self.before, "no_valid_action": self.no_valid_action,
             "papers": [asdict(p) for p in self.papers], "crawl_seconds": self.crawl_seconds,
             "select_seconds": self.select_seconds, "mark": self.mark,
             "actions": sum(t.n_moves for t in self.trajectories),
             "fallback_searches": self.fallback_searches,
             "first_search_valid": [t.first_search_valid for t in self.trajectories],
             "sessions": sum(len(t.sessions) for t in self.trajectories),
             "grammar_errors": _sum_counts(t.grammar_errors for t in self.trajectories),
             "action_statuses": _sum_counts(t.action_statuses for t in self.trajectories)}
        if with_trajectories:
            d["trajectories"] = [t.to_dict() for t in self.trajectories]
        return d


def _sum_counts(dicts) -> dict[str, int]:
    out: dict[str, int] = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def _next_batch(size_cap: int, seconds: float, n: int, target_s: float) -> int:
    """The next micro-batch size: as many pairs as took ``target_s`` at the last batch's pace, within [1, cap]."""
    per_pair = seconds / max(n, 1)
    return max(1, min(size_cap, int(target_s / max(per_pair, 1e-6))))


def merge_queues(trajectories: Sequence[QueryTrajectory]) -> dict[str, tuple[int, list[int]]]:
    """The union of one query's paper queues over ensemble runs (PaSa-7b-ensemble), in crawl order (run 0's queue
    first, then what later runs added): paper id -> (smallest depth, the runs whose queue held it)."""
    merged: dict[str, tuple[int, list[int]]] = {}
    for t in trajectories:
        for e in t.queue:
            depth, found = merged.get(e.paper_id, (e.depth, []))
            merged[e.paper_id] = (min(depth, e.depth), found + [t.run])
    return merged


def queue_provenance(trajectories: Sequence[QueryTrajectory], search_name: str) -> dict[str, str]:
    """Paper id -> the retriever whose action first added it to one of these queues: ``search_name`` for a
    [Search] (the crawl's one search backend), ``expand`` for a paper's references, ``related`` for a related
    search of a sectionless paper (``crawler.env.related_expand``), ``seed`` for a seed paper."""
    out: dict[str, str] = {}
    for t in trajectories:
        actions = {s.session_id: s.actions for s in t.sessions}
        for e in t.queue:
            if e.paper_id in out:
                continue
            if e.session_id == SEED_SESSION:
                out[e.paper_id] = "seed"
                continue
            acts = actions.get(e.session_id) or []
            act = acts[e.action_index] if 0 <= e.action_index < len(acts) else None
            if act is not None and act.found_by:
                out[e.paper_id] = act.found_by  # e.g. "related": a related search of a sectionless paper
            else:
                kind = act.kind if act is not None else ""
                out[e.paper_id] = search_name if kind == SEARCH else kind
    return out


class PaSaAgent:
    def __init__(self, env: CrawlEnv, crawler: Crawler, selector: Optional[Selector], cfg: AgentConfig | None = None):
        self.env = env
        self.crawler = crawler
        self.selector = selector
        self.cfg = cfg or AgentConfig()
        if self.cfg.ensemble < 1:
            raise ValueError(f"ensemble must be >= 1, got {self.cfg.ensemble}")
        if self.cfg.ensemble > 1 and crawler.cfg.temperature == 0:
            raise ValueError("an ensemble of greedy crawler runs repeats one run: set crawler.policy.temperature > 0")
        if self.cfg.use_selector and selector is None:
            raise ValueError("use_selector=true needs a Selector")
        check_ranking(self.cfg.ranking)

    def _score_in_timed_batches(self, pairs: list, on_event: Callable[[str, dict], None]) -> np.ndarray:
        """The Selector's scores in micro-batches of about ``cfg.event_batch_s`` each (the first of 2 pairs sets the
        pace), a ``select_progress`` event before each and one at the end: the live page's cancel lands between
        them. The same pairs as one call, scored in smaller batches."""
        cap = max(int(getattr(self.selector, "batch_size", 32) or 32), 1)
        parts, start, size = [], 0, min(2, cap)
        while start < len(pairs):
            on_event("select_progress", {"done": start, "of": len(pairs)})
            chunk = pairs[start:start + size]
            t = time.perf_counter()
            parts.append(np.asarray(self.selector.score(chunk), dtype=np.float64))
            size = _next_batch(cap, time.perf_counter() - t, len(chunk), self.cfg.event_batch_s)
            start += len(chunk)
        on_event("select_progress", {"done": len(pairs), "of": len(pairs)})
        return np.concatenate(parts) if parts else np.zeros(0)

    def run(self, queries: Sequence[ScholarQuery], progress: bool = True,
            on_event: Optional[Callable[[str, dict], None]] = None) -> list[AgentResult]:
        """Crawl, select, rank. ``on_event(kind, data)`` (``pasa serve``'s live view) gets ``("step", {run,
        records, states})`` after every crawl step and ``("select", {papers})`` before the Selector reads them."""
        t0 = time.perf_counter()

        def step_hook(r: int):
            return None if on_event is None else (
                lambda records, states: on_event("step", {"run": r, "records": records, "states": states}))

        runs = [crawl(self.env, self.crawler, queries, run=r, progress=progress, on_step=step_hook(r))
                for r in range(self.cfg.ensemble)]
        crawl_s = (time.perf_counter() - t0) / max(len(queries), 1)
        per_query = [[runs[r][i] for r in range(len(runs))] for i in range(len(queries))]

        merged = [merge_queues(trajs) for trajs in per_query]
        search_name = str(getattr(self.env.search, "name", "") or "search")
        found_by = [queue_provenance(trajs, search_name) for trajs in per_query]
        papers = self.env.store.get_many([p for m in merged for p in m], with_sections=False)

        if on_event is not None:
            on_event("select", {"papers": sum(len(m) for m in merged), "merged": merged})
        t1 = time.perf_counter()
        scores: list[list[Optional[float]]] = [[None] * len(m) for m in merged]
        if self.cfg.use_selector:
            pairs = [SelectorPair.of(q.question, papers[pid], qid=q.qid, found_by=by.get(pid, ""))
                     for q, m, by in zip(queries, merged, found_by) for pid in m]
            if on_event is None:
                flat = self.selector.score(pairs, show_progress=progress) if pairs else []
            else:
                flat = self._score_in_timed_batches(pairs, on_event)
            i = 0
            for qi, m in enumerate(merged):
                scores[qi] = [float(s) for s in flat[i:i + len(m)]]
                i += len(m)
        select_s = (time.perf_counter() - t1) / max(len(queries), 1)

        # "selected" is the mark a reader sees (Selector.mark, selector.mark): the decision threshold, or where
        # pasa search / pasa serve ask for the card's, the one fitted for precision on real crawls' hits
        mark = self.selector.mark if self.cfg.use_selector else None
        results = []
        for q, m, sc, trajs, by in zip(queries, merged, scores, per_query, found_by):
            ranked = []
            for (pid, (depth, found)), s in zip(m.items(), sc):
                p = papers[pid]
                selected = True if s is None else bool(mark.threshold is not None and s >= mark.threshold)
                ranked.append(RankedPaper(pid, p.title, p.date, s, selected, depth, found, found_by=by.get(pid, "")))
            if self.cfg.use_selector:  # agent.ranking: the Selector's order, the crawl's, or their fusion
                ranked = [ranked[i] for i in rank_order([r.score for r in ranked], self.cfg.ranking)]
            results.append(AgentResult(q.qid, q.question, q.before, ranked, trajs, crawl_s, select_s,
                                       mark=mark.note if mark is not None else ""))
        if self.cfg.rationales and self.cfg.use_selector:
            self._add_rationales(results, papers)
        return results

    def _add_rationales(self, results: list[AgentResult], papers: dict) -> None:
        todo = [(r, rp) for r in results for rp in r.selected[: self.cfg.rationale_limit]]
        if not todo:
            return
        judged = self.selector.judge([SelectorPair.of(r.query, papers[rp.paper_id], found_by=rp.found_by)
                                      for r, rp in todo])
        for (_, rp), j in zip(todo, judged):
            rp.rationale = j.rationale


def results_table(result: AgentResult, top: Optional[int] = 20, width: int = 80) -> str:
    """A readable Markdown table of one query's ranked papers."""
    rows = result.papers if top is None else result.papers[:top]
    with_rationale = any(p.rationale for p in rows)
    head = f"### {result.query}\n\n"
    head += (f"before {result.before or '-'} · {len(result.papers)} papers crawled · {len(result.selected)} selected"
             + (f" ({result.mark})" if result.mark else "") + "\n\n")
    note = result.crawl_note()
    if note:
        head += f"**{note}**\n\n"
    cols = ["#", 'P(relevant)', "selected", "date", "paper", "title"] + (["rationale"] if with_rationale else [])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for i, p in enumerate(rows, 1):
        title = p.title if len(p.title) <= width else p.title[: width - 1] + "…"
        cells = [str(i), "-" if p.score is None else f"{p.score:.3f}", "yes" if p.selected else "no", p.date or "-",
                 p.paper_id, title.replace("|", "/")]
        if with_rationale:
            cells.append((p.rationale or "").replace("|", "/").replace("\n", " ")[:200])
        lines.append("| " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"
