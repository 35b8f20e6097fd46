"""The search behind the page: the SAME ``Resources`` / ``PaSaAgent`` as ``scholar pasa search`` (one store, one
index, one model each for Crawler and Selector, built once), with the agent's event hook turned into page events."""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Optional

from omegaconf import DictConfig

from scholar_agents.llm.cache import CachedLLM
from scholar_agents.llm.cancel import GenerationCancelled, cancel_scope
from scholar_agents.llm.embedder import resolve_embedder_path
from scholar_agents.llm.factory import resolve_model_path
from scholar_agents.llm.model_files import human_count, parameter_count
from scholar_agents.papers.ids import norm_id
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.crawler import Crawler
from scholar_agents.pasa.queries import ScholarQuery, load_pasa_queries, seeded_query
from scholar_agents.pasa.resources import pasa_setup
from scholar_agents.pasa.search_run import write_search_run
from scholar_agents.pasa.selectors.embedding import BUNDLED_DIR, resolve_model_dir
from scholar_agents.pasa.selectors.factory import describe_selector
from scholar_agents.pasa.selectors.llm import SelectorPair
from scholar_agents.pasa.serve.jobs import Cancelled, Job
from scholar_agents.pasa.serve.tree import build_tree
from scholar_agents.pasa.serve.wording import session_line
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)


def action_summary(rec) -> list[dict]:
    return [{"kind": a.kind, "argument": a.argument, "status": a.status, "added": len(a.added),
             "candidates": a.candidates, "duplicates": a.duplicates, "dropped_by_date": a.dropped_by_date,
             "fallback": a.fallback, "found_by": getattr(a, "found_by", None)}
            for a in rec.actions if a.kind != "stop"]


SNIPPET_CHARS = 240


def snippet(abstract: str) -> Optional[str]:
    """The abstract's first sentence (cut at ``SNIPPET_CHARS``) for the one-line preview; None = no abstract."""
    text = " ".join((abstract or "").split())
    if not text:
        return None
    m = re.search(r"(?<=[.!?])\s+(?=[A-Z0-9])", text)
    first = text[: m.start()] if m and m.start() >= 40 else text
    return first if len(first) <= SNIPPET_CHARS else first[: SNIPPET_CHARS - 1].rstrip() + "…"


def _cache_counts(llms) -> tuple[int, int]:
    """(hits, misses) summed over the LLM response caches among ``llms`` (a backend without one counts 0)."""
    seen = {id(x): x for x in llms if isinstance(x, CachedLLM)}
    return sum(x.hits for x in seen.values()), sum(x.misses for x in seen.values())


def budget_left(cfg, state) -> dict:
    """What is left of each per-query budget of ``crawler.env`` (null = unlimited)."""
    used = {"max_actions": state.moves, "max_queue": len(state.in_queue), "max_sessions": state.sessions_started,
            "max_gen_tokens": state.traj.gen_tokens}
    return {k: (None if getattr(cfg, k) is None else max(getattr(cfg, k) - v, 0)) for k, v in used.items()}


# Below this share of papers with sections, [Expand] rarely has anything to read: the page says so once.
FEW_SECTIONS = 0.01
BIGGER = ("a bigger corpus: `scholar papers build papers=shared_corpus` (or your own papers=<name>), then "
          "`scholar pasa serve papers=shared_corpus`; live arXiv: `search=arxiv_api expand=ar5iv` (needs the network)")


def _model_fact(model: str) -> dict:
    try:
        path = resolve_model_path(model)
    except ValueError:
        path = model
    n = parameter_count(path) if Path(path).is_dir() else None
    return {"name": model.split("/")[-1] if not model.startswith("embedded:") else model, "params": n,
            "size": human_count(n)}


def _selector_name(cfg: DictConfig) -> str:
    """The Selector's model as the page names it: the LLM's, or the embedding / cross-encoder model directory."""
    kind = str(cfg.selector.get("kind", "llm"))
    if kind == "llm":
        return str((cfg.get("selector_llm") or cfg.llm).model)
    if kind in ("embedding", "provenance"):
        d = resolve_model_dir(cfg.selector.get("model"))
        name = "embedding Selector (bundled)" if d == BUNDLED_DIR else f"embedding Selector {d}"
        if kind == "provenance":  # the lexical head judges dense hits only
            routes = ", ".join(cfg.selector.get("lexical_for") or [])
            name = f"provenance Selector: {name}; lexical Selector for {routes or 'no'} hits"
        return name
    return f"cross-encoder {cfg.selector.get('model')}"


def _selector_fact(cfg: DictConfig) -> dict:
    kind = str(cfg.selector.get("kind", "llm"))
    if kind == "llm":
        return _model_fact(str((cfg.get("selector_llm") or cfg.llm).model))
    n = parameter_count(resolve_embedder_path("embedded:minilm"))  # both no-LLM Selectors are MiniLM-sized
    return {"name": _selector_name(cfg), "params": n, "size": human_count(n)}


def headline(facts: dict) -> str:
    """The page's one plain line on what it searches: "3,523 papers (sample), 2013–2026; [Expand] can read the
    sections of 35 of them" (the figures behind it are one click away)."""
    years = ""
    if facts.get("first_date") and facts.get("last_date"):
        a, b = str(facts["first_date"])[:4], str(facts["last_date"])[:4]
        years = f", {a}" if a == b else f", {a}–{b}"
    line = f"{facts['papers']:,} papers ({facts['name']}){years}"
    if facts["expand"] != "store":
        return f"{line}; [Expand] reads full texts through {facts['expand']}"
    ws = int(facts.get("with_sections") or 0)
    if not ws:
        return f"{line}; none has sections, so [Expand] cannot read anything: the crawl is its searches"
    return f"{line}; [Expand] can read the sections of {ws:,} of them"


def corpus_facts(cfg: DictConfig) -> dict:
    """The facts of :meth:`SearchService.corpus` (a store that is not built yet is said to be so)."""
    papers = cfg.papers
    facts: dict = {"name": str(papers.get("name") or "?"), "store": str(papers.store), "built": False,
                   "search": str(cfg.search.kind), "expand": str(cfg.expand.kind) if cfg.get("expand") else "store",
                   "crawler": _model_fact(str(cfg.llm.model)),
                   "selector": _selector_fact(cfg), "bigger": BIGGER}
    if Path(str(papers.store)).is_file():
        with PaperStore(str(papers.store), readonly=True) as store:
            st = store.stats()
            first, last = store.date_range()
        facts.update(built=True, papers=st["papers"], with_sections=st["with_sections"], first_date=first,
                     last_date=last)
        facts["headline"] = headline(facts)
        share = st["with_sections"] / max(st["papers"], 1)
        if facts["expand"] == "store" and share < FEW_SECTIONS:
            facts["expand_note"] = (
                f"only {st['with_sections']:,} of these {st['papers']:,} papers have sections, so [Expand] almost never "
                f"finds anything to read: the crawl is mostly its searches" if st["with_sections"] else
                "no paper in this corpus has sections: [Expand] cannot happen, the crawl is its searches")
    return facts


class SearchService:
    """Owns the models. ``run(job, emit)`` is the queue's worker function; ``rationale`` asks the Selector why."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.setup = pasa_setup(cfg)  # typed when the server starts: a bad value fails there, not at the first search
        self._lock = threading.Lock()  # one model in memory: a search and a rationale never run together
        self._res = None
        self._agent = None
        self.load_error: Optional[str] = None
        self.load_seconds: Optional[float] = None
        self.warm_seconds: Optional[float] = None
        gold_path = cfg.serve.get("gold_queries")
        self.gold: dict[str, ScholarQuery] = {}
        if gold_path:
            for q in load_pasa_queries(gold_path):
                self.gold[q.qid] = q
        self._gold_by_text = {" ".join(q.question.lower().split()): q for q in self.gold.values()}

    # ---- loading ----

    def agent(self):
        if self._agent is None:
            # lazy: looked up at call time so tests can swap resources.Resources for a fake
            from scholar_agents.pasa.resources import Resources

            t0 = time.perf_counter()
            self._res = Resources(self.setup)
            agent = self._res.agent()
            self.load_seconds = round(time.perf_counter() - t0, 1)
            log.info("agent ready in %.1f s", self.load_seconds)
            t1 = time.perf_counter()
            try:
                if self.cfg.serve.warm_up:  # serve.warm_up (ServeConfig): false = the first search pays it
                    self.warm_up(agent)
                    self.warm_seconds = round(time.perf_counter() - t1, 1)
                    log.info("Crawler and Selector warmed in %.1f s", self.warm_seconds)
            except Exception as e:  # noqa: BLE001 — a cold first search, not a dead server
                log.warning("warming the Crawler and Selector failed (the first search will be slower): %s", e)
            self._agent = agent
        return self._agent

    def warm_up(self, agent) -> None:
        """One short Crawler generation on a real S_q prompt (its action grammar compiled, the decoder's kernels
        chosen) and one Selector batch, so that the first search costs what later ones cost. Past the LLM response
        cache: nothing is stored."""
        from dataclasses import replace

        [state] = agent.env.reset([ScholarQuery("warm-up", "warm up the models")])
        sessions = agent.env.next_sessions([state], 1)
        backend = getattr(agent.crawler.llm, "llm", agent.crawler.llm)
        if sessions:
            Crawler(backend, replace(agent.crawler.cfg, max_new_tokens=4)).generate(sessions)
        if agent.selector is not None:
            papers = []
            for p in self._res.store.iter_papers(with_sections=False, batch_size=8):
                papers.append(p)
                if len(papers) == 8:
                    break
            if papers:
                agent.selector.score([SelectorPair.of("warm up the models", p) for p in papers])

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
                "crawler": str(c.llm.model), "selector": _selector_name(c),
                "selector_line": describe_selector(c.selector, str((c.get("selector_llm") or c.llm).model)),
                "budgets": {k: env.get(k) for k in ("max_actions", "max_queue", "max_sessions", "max_gen_tokens")},
                "max_depth": env.max_depth, "date_filter": bool(env.date_filter),
                "loaded": self._agent is not None, "load_seconds": self.load_seconds,
                "warm_seconds": self.warm_seconds, "load_error": self.load_error}

    def corpus(self) -> dict:
        """What the page searches, from the facts `scholar papers build` reports: the store's name,
        paper count, date range and papers with sections, the search kind, each model with its size, and whether
        [Expand] can happen at all. Read once (the store opened read-only, the models' safetensors headers)."""
        if getattr(self, "_corpus", None) is None:
            self._corpus = corpus_facts(self.cfg)
        return self._corpus

    def check_seed(self, paper_id: str) -> str:
        """A "more like this" seed checked before it is queued: the paper's id as the store has it, or one
        UsageError line that names the corpus, never its file."""
        def find(store):
            got = store.get(paper_id) or store.get(norm_id(paper_id))
            return None if got is None else got.paper_id

        if self._res is not None:
            found = find(self._res.store)
        elif Path(str(self.cfg.papers.store)).is_file():
            with PaperStore(str(self.cfg.papers.store), readonly=True) as store:
                found = find(store)
        else:
            raise UsageError("seed_paper: the paper store is not built yet (scholar papers build)")
        if found is None:
            name = self.cfg.papers.get("name") or "this corpus"
            raise UsageError(f"seed_paper={paper_id!r} is not a paper of the corpus {name!r}: pick a paper of a "
                             f"result list (its arXiv id)")
        return found

    def partial_result(self, crawled: dict[int, list[str]], job: Job, seconds: float,
                       states: dict[int, list], agent) -> dict:
        """What a cancelled search had crawled: the union of its runs' queues in crawl order, unscored, and each
        run's tree as far as it got (its last finished step)."""
        order = list(dict.fromkeys(pid for r in sorted(crawled) for pid in crawled[r]))
        if job.seed_paper:
            order = [pid for pid in order if norm_id(pid) != norm_id(job.seed_paper)]
        info = self.paper_info(order)
        gold = self.gold_for(question=job.query)
        gold_set = {norm_id(g) for g in gold}
        papers = [{"paper_id": pid, "title": info.get(pid, {}).get("title", pid), "date": info.get(pid, {}).get("date"),
                   "snippet": info.get(pid, {}).get("snippet"), "score": None, "selected": False, "depth": None,
                   "runs": [], "rationale": None, "gold": norm_id(pid) in gold_set}
                  for pid in order]
        trees = []
        for r in sorted(states):
            for st in states[r]:
                tree = build_tree(agent.env.finish(st).to_dict(), self.paper_info, gold)
                tree["end"] = f"cancelled after {tree['sessions']} session{'s' if tree['sessions'] != 1 else ''}"
                trees.append(tree)
        if not trees:  # cancelled before the first session finished: the question alone
            trees = [build_tree({"user_query": job.query, "qid": job.id, "before": job.before}, None, gold)
                     | {"end": "cancelled before the first session finished"}]
        return {"papers": papers, "cancelled": True, "selected": 0, "seconds": round(seconds, 2), "trees": trees,
                "stopped_by": [], "query": job.query, "before": job.before, "seed": self._seed_info(job),
                "replaced_by": job.replaced_by,
                "note": (f"cancelled: the {len(papers)} papers crawled before the cancel, in crawl order, not judged "
                         f"by the Selector" if papers else "cancelled before any paper was crawled")}

    def paper_info(self, ids: list[str]) -> dict[str, dict]:
        if self._res is None:
            return {}
        got = self._res.store.get_many(ids, with_sections=False)
        return {pid: {"title": p.title, "date": p.date, "snippet": snippet(p.abstract)} for pid, p in got.items()}

    def _seed_info(self, job: Job) -> Optional[dict]:
        if not job.seed_paper:
            return None
        info = self.paper_info([job.seed_paper]).get(job.seed_paper, {})
        return {"paper_id": job.seed_paper, "title": info.get("title") or job.seed_paper}

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
            llms = [agent.crawler.llm, getattr(agent.selector, "llm", None)]
            hits0, misses0 = _cache_counts(llms)
            last = {"hits": hits0, "misses": misses0}

            crawled: dict[int, list[str]] = {}  # run -> its queue in crawl order, as far as it got
            states: dict[int, list] = {}  # run -> its query states after the last finished step (a cancel's tree)

            def on_event(kind: str, data: dict) -> None:
                if kind == "step":
                    crawled[data["run"]] = [e.paper_id for e in data["states"][0].traj.queue]
                    states[data["run"]] = data["states"]
                    [state] = data["states"]
                    hits, misses = _cache_counts(llms)
                    cached = misses == last["misses"] and hits > last["hits"]  # every answer of the step was stored
                    last.update(hits=hits, misses=misses)
                    titles = self.paper_info([r.paper_id for r in data["records"] if r.paper_id])
                    for rec in data["records"]:
                        actions = action_summary(rec)
                        errors = [e.get("code") for e in rec.grammar_errors]
                        title = titles.get(rec.paper_id, {}).get("title") if rec.paper_id else None
                        emit("session", {"session": rec.session_id, "start": rec.start_state,
                                         "paper": rec.paper_id, "actions": actions, "grammar_errors": errors,
                                         "cached": cached,
                                         "text": session_line(rec.start_state, rec.paper_id, actions, errors, title)})
                    emit("progress", {"run": data["run"], "queue": len(state.in_queue),
                                      "sessions": state.sessions_started, "actions": state.moves,
                                      "pending": len(state.pending), "budget_left": budget_left(env_cfg, state),
                                      "seconds": round(time.perf_counter() - t0, 2)})
                elif kind == "select":
                    emit("selecting", {"papers": data["papers"]})
                elif kind == "select_progress":
                    emit("select_progress", data)

            if job.seed_paper:  # "more like this": the paper's title searched, the paper expanded
                job.seed_paper = self.check_seed(job.seed_paper)  # the store's own id (one line if it went away)
                query = seeded_query(self._res.store, job.seed_paper, job.query or None, job.before, qid=job.id)
                job.query = query.question
            else:
                query = ScholarQuery(job.id, job.query, before=job.before)
            try:
                with cancel_scope(job.cancel_requested):  # generation and scoring stop at the next token / batch
                    [result] = agent.run([query], progress=False, on_event=on_event)
            except (Cancelled, GenerationCancelled):  # what was crawled stays on the page, tree included
                c = Cancelled()
                c.partial = self.partial_result(crawled, job, time.perf_counter() - t0, states, agent)
                raise c from None
            gold = self.gold_for(question=job.query)
            gold_set = {norm_id(g) for g in gold}
            ranked = result.papers
            if job.seed_paper:  # the seed is the question, not an answer to it
                ranked = [p for p in ranked if norm_id(p.paper_id) != norm_id(job.seed_paper)]
            info = self.paper_info([p.paper_id for p in ranked])
            papers = [{**asdict(p), "gold": norm_id(p.paper_id) in gold_set,
                       "snippet": info.get(p.paper_id, {}).get("snippet")} for p in ranked]
            trees = [build_tree(t.to_dict(), self.paper_info, gold) for t in result.trajectories]
            hits, misses = _cache_counts(llms)
            return {"papers": papers, "note": result.crawl_note(), "selected": sum(p["selected"] for p in papers),
                    "mark": result.mark,
                    "stopped_by": [t.stopped_by for t in result.trajectories], "trees": trees,
                    "seconds": round(time.perf_counter() - t0, 2), "query": job.query, "before": job.before,
                    "seed": self._seed_info(job),
                    "cache": {"hits": hits - hits0, "misses": misses - misses0,
                              "all_cached": misses == misses0 and hits > hits0},
                    "run": self.save_run(job, result)}

    def save_run(self, job: Job, result) -> Optional[str]:
        """A finished page search as a run directory, the files `pasa search` writes, under
        ``<serve.runs_root>/page_searches/<time>_<id>``; its path relative to the runs root (None when
        ``serve.save_runs=false``)."""
        scfg = self.cfg.serve
        if not scfg.get("save_runs", True):
            return None
        root = Path(str(scfg.runs_root))
        rel = Path("page_searches") / f"{time.strftime('%Y%m%d-%H%M%S')}_{job.id}"
        setting = {**self._res.describe(), "query": job.query, "before": job.before, "source": "pasa serve"}
        write_search_run(root / rel, [result], setting)
        return str(rel)

    def rationale(self, query: str, paper_id: str, found_by: str = "") -> dict:
        """The Selector's decision and rationale for one paper (PaSa Table 15: decision token first, then why);
        ``found_by``: the retriever that found it (the list's ``found_by``)."""
        with self._lock:
            agent = self.agent()
            if agent.selector is None:
                return {"decision": None, "rationale": "agent.use_selector=false: no Selector"}
            paper = self._res.store.get(paper_id)
            if paper is None:
                raise KeyError(paper_id)
            [j] = agent.selector.judge([SelectorPair.of(query, paper, found_by=found_by)])
            out = {"decision": j.decision, "rationale": j.rationale, "disagrees": j.disagrees, "score": j.score}
            mark = agent.selector.mark
            if j.score is not None and mark.threshold != agent.selector.threshold:
                # the decision the list showed: its mark (selector.mark=card), not the F1 threshold judge() decides at
                out["decision"] = None if mark.threshold is None else bool(j.score >= mark.threshold)
                out["unmarked"] = mark.threshold is None
            return out
