"""The search behind the page: the SAME ``Resources`` / ``PaSaAgent`` as ``scholar pasa search`` (one store, one
index, one model each for Crawler and Selector, built once), with the agent's event hook turned into page events."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import asdict
from typing import Callable, Optional

from omegaconf import DictConfig

from scholar_agents.pasa.queries import ScholarQuery, load_pasa_queries
from scholar_agents.pasa.serve.jobs import Job
from scholar_agents.papers.ids import norm_id
from scholar_agents.pasa.serve.tree import build_tree

log = logging.getLogger(__name__)


def action_summary(rec) -> list[dict]:
    return [{"kind": a.kind, "argument": a.argument, "status": a.status, "added": len(a.added),
             "fallback": a.fallback} for a in rec.actions if a.kind != "stop"]


def budget_left(cfg, state) -> dict:
    """What is left of each per-query budget of ``crawler.env`` (null = unlimited)."""
    used = {"max_actions": state.moves, "max_queue": len(state.in_queue), "max_sessions": state.sessions_started,
            "max_gen_tokens": state.traj.gen_tokens}
    return {k: (None if getattr(cfg, k) is None else max(getattr(cfg, k) - v, 0)) for k, v in used.items()}


class SearchService:
    """Owns the models. ``run(job, emit)`` is the queue's worker function; ``rationale`` asks the Selector why."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self._lock = threading.Lock()  # one model in memory: a search and a rationale never run together
        self._res = None
        self._agent = None
        self.load_error: Optional[str] = None
        self.load_seconds: Optional[float] = None
        gold_path = cfg.serve.get("gold_queries")
        self.gold: dict[str, ScholarQuery] = {}
        if gold_path:
            for q in load_pasa_queries(gold_path):
                self.gold[q.qid] = q
        self._gold_by_text = {" ".join(q.question.lower().split()): q for q in self.gold.values()}

    # ---- loading ----

    def agent(self):
        if self._agent is None:
            from scholar_agents.pasa.resources import Resources

            t0 = time.perf_counter()
            self._res = Resources(self.cfg)
            self._agent = self._res.agent()
            self.load_seconds = round(time.perf_counter() - t0, 1)
            log.info("agent ready in %.1f s", self.load_seconds)
        return self._agent

    def preload(self) -> None:
        with self._lock:
            try:
                self.agent()
            except Exception as e:  # noqa: BLE001 — shown in the page; searches retry the load
                log.exception("loading the agent failed")
                self.load_error = f"{type(e).__name__}: {e}".splitlines()[0][:500]

    def setting(self) -> dict:
        """What the page shows next to the search box: the composed backends (known before loading)."""
        c = self.cfg
        env = c.crawler.env
        return {"search": str(c.search.kind), "expand": str(c.expand.kind) if c.get("expand") else "store",
                "crawler": str(c.llm.model), "selector": str((c.get("selector_llm") or c.llm).model),
                "budgets": {k: env.get(k) for k in ("max_actions", "max_queue", "max_sessions", "max_gen_tokens")},
                "max_depth": env.max_depth, "date_filter": bool(env.date_filter),
                "loaded": self._agent is not None, "load_seconds": self.load_seconds, "load_error": self.load_error}

    def paper_info(self, ids: list[str]) -> dict[str, dict]:
        if self._res is None:
            return {}
        got = self._res.store.get_many(ids, with_sections=False)
        return {pid: {"title": p.title, "date": p.date} for pid, p in got.items()}

    def gold_for(self, qid: Optional[str] = None, question: Optional[str] = None) -> list[str]:
        q = self.gold.get(str(qid)) if qid is not None else None
        if q is None and question:
            q = self._gold_by_text.get(" ".join(question.lower().split()))
        return list(q.gold_ids) if q else []

    # ---- a search ----

    def run(self, job: Job, emit: Callable[[str, dict], None]) -> dict:
        with self._lock:
            if self._agent is None:
                emit("loading", {"what": "paper store, search index, Crawler and Selector"})
            agent = self.agent()
            t0 = time.perf_counter()
            env_cfg = agent.env.cfg

            def on_event(kind: str, data: dict) -> None:
                if kind == "step":
                    [state] = data["states"]
                    for rec in data["records"]:
                        emit("session", {"session": rec.session_id, "start": rec.start_state,
                                         "paper": rec.paper_id, "actions": action_summary(rec),
                                         "grammar_errors": [e.get("code") for e in rec.grammar_errors]})
                    emit("progress", {"run": data["run"], "queue": len(state.in_queue),
                                      "sessions": state.sessions_started, "actions": state.moves,
                                      "pending": len(state.pending), "budget_left": budget_left(env_cfg, state),
                                      "seconds": round(time.perf_counter() - t0, 2)})
                elif kind == "select":
                    emit("selecting", {"papers": data["papers"]})

            query = ScholarQuery(job.id, job.query, before=job.before)
            [result] = agent.run([query], progress=False, on_event=on_event)
            gold = self.gold_for(question=job.query)
            gold_set = {norm_id(g) for g in gold}
            papers = [{**asdict(p), "gold": norm_id(p.paper_id) in gold_set} for p in result.papers]
            trees = [build_tree(t.to_dict(), self.paper_info, gold) for t in result.trajectories]
            return {"papers": papers, "note": result.crawl_note(), "selected": len(result.selected),
                    "stopped_by": [t.stopped_by for t in result.trajectories], "trees": trees,
                    "seconds": round(time.perf_counter() - t0, 2), "query": job.query, "before": job.before}

    def rationale(self, query: str, paper_id: str) -> dict:
        """The Selector's decision and rationale for one paper (PaSa Table 15: decision token first, then why)."""
        from scholar_agents.pasa.selector import SelectorPair

        with self._lock:
            agent = self.agent()
            if agent.selector is None:
                return {"decision": None, "rationale": "agent.use_selector=false: no Selector"}
            paper = self._res.store.get(paper_id)
            if paper is None:
                raise KeyError(paper_id)
            [j] = agent.selector.judge([SelectorPair.of(query, paper)])
            return {"decision": j.decision, "rationale": j.rationale}
