"""Known-answer crawl tasks for session-level PPO: a generated corpus and queries whose optimal Crawler
behaviour is known, so that a learning test fails when the PPO math is wrong — what CleanRL's and SB3's CartPole
thresholds and TRL's reward-goes-up tests do for their algorithms.

Every query has one *hub* paper that its [Search] finds (its topic words are in the hub's title and abstract and
nowhere else but the Selector class below; ``crawler.env.search_k=1`` returns the hub alone). The hub's sections
cite different things, and the section headings are shuffled per hub, so the policy must read the outline:

- ``one_hop``: ``Related Work`` cites the gold papers, the other sections cite distractors. The optimum expands
  ``Related Work`` (Eq. 1: α per gold paper, − c per action).
- ``two_hops``: ``Background`` cites a *bridge* paper (not gold), whose sections all cite the gold papers; the
  hub's other sections cite decoy papers whose ``Appendix`` cites distractors (the outline is what lets the value
  model V̂(S_{q+p}) tell a bridge — with a ``Related Work`` — from a decoy: both titles are random words). Bridges and
  decoys have as many sections as a hub (a decoy's others cite nothing findable). The optimum expands the hub's
  ``Background`` although it adds no gold paper: its value reaches the hub's session only through Eq. 3's
  cross-session term γ1 · Σ_j V̂(S_{q+p_j}). ``crawl_task.decoys=false`` (the learning test's variant): the other
  sections cite leaf distractors instead, so the bridge is the only S_{q+p} a hub expansion starts.
- ``cost``: ``Related Work`` cites the gold papers, every other section cites only titles that are in no store
  (expansion finds nothing). The optimum is one [Expand] then [Stop]: actions per query fall as PPO learns c.
- ``selector``: ``Related Work`` cites the gold papers, ``Applications`` cites ``selector_class`` papers of the
  *Selector class* — not gold, but surveys of the query's topic (its words in their titles, "A survey of" in their
  abstracts), so a Selector that judges topicality accepts them — beside distractors; the other sections cite
  distractors. Under Eq. 2 a class paper pays α when the Selector is the auxiliary reward, so expanding
  Applications pays α · |class| − c: taken when α is large, not when it is small — its rate and the class's share
  of what is collected rise with α (PaSa Table 6's direction).

``uniform_sft.jsonl`` holds imitation sessions that choose uniformly among the valid actions (any number of
distinct sections in any order, or [Stop]), rendered with the crawl environment's own prompts: ``crawler_sft`` on
it gives a start policy that writes the grammar and prefers nothing, and ``task.json`` names the optimal action of
every state, for the learning tests' optimal-action rate.

    scholar data_gen crawl_tasks crawl_task=two_hops out_dir=outputs/crawl_tasks/two_hops
"""

from __future__ import annotations

import gzip
import json
import logging
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.pasa.actions import EXPAND, SEARCH, render_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.typed_config import typed

log = logging.getLogger(__name__)

TASKS = ("one_hop", "two_hops", "cost", "selector")
GOLD_SECTION = "Related Work"  # one_hop, cost, selector (hub) and two_hops (bridge): cites the gold papers
BRIDGE_SECTION = "Background"  # two_hops: cites the bridge paper
SELECTOR_SECTION = "Applications"  # selector: cites the Selector-class papers
DECOY_SECTION = "Appendix"  # two_hops: a decoy's one section (distractors); its outline tells it from the bridge
OTHER_SECTIONS = ("Introduction", "Experiments", "Discussion", "Conclusion")
QUERY_DATE = "2025-01-01"  # every query is dated after every paper: the date filter never hides the answer
PAPER_DATE = "2020-06-01"
_ONSETS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@dataclass
class CrawlTaskConfig:
    """One generated task. ``scholar data_gen crawl_tasks task=<name>`` (conf ``data_gen_crawl_tasks.yaml``)."""

    task: str = "one_hop"
    n_train: int = 64  # training queries (one hub each)
    n_eval: int = 16  # held-out queries (their own hubs, never seen in training)
    gold_per_query: int = 3
    cited_per_section: int = 3  # papers (or unresolvable titles) each non-gold section cites
    other_sections: int = 2  # sections besides the task's own (from OTHER_SECTIONS)
    selector_class: int = 1  # ``selector``: class papers the Applications section cites (besides distractors)
    # ``two_hops``: true (default) = the hub's other sections cite decoys shaped like the bridge, so V̂ must read the
    # outline to tell them apart; false (ours, the learning test's) = they cite leaf distractors, as in one_hop, and
    # every S_{q+p} a hub expansion starts is the bridge's — Eq. 3's bootstrap alone then separates Background
    decoys: bool = True
    sft_samples_per_state: int = 4  # uniform imitation responses per session state
    seed: int = 0

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        for name in ("n_train", "gold_per_query", "cited_per_section", "sft_samples_per_state"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_eval < 0 or self.selector_class < 1:
            raise ValueError("n_eval must be >= 0 and selector_class >= 1")
        if not 1 <= self.other_sections <= len(OTHER_SECTIONS):
            raise ValueError(f"other_sections must be in 1..{len(OTHER_SECTIONS)}, got {self.other_sections}")


@dataclass
class TaskQuery:
    """One query's known answer: what each expandable paper's optimal [Expand] is, and which papers are which."""

    qid: str
    question: str
    topic: str  # the words the optimal [Search] uses (the question's content words)
    hub: str
    gold: list[str]
    optimal: dict[str, list[str]]  # paper id -> the optimal session's sections ([] = [Stop] at once)
    bridge: str | None = None
    selector_class: list[str] = field(default_factory=list)
    distractors: list[str] = field(default_factory=list)

    def to_pasa(self, titles: dict[str, str]) -> dict[str, Any]:
        """The PaSa query record (AutoScholarQuery's fields) that every query loader reads."""
        return {"qid": self.qid, "question": self.question, "answer": [titles[g] for g in self.gold],
                "answer_arxiv_id": list(self.gold), "source_meta": {"published_time": QUERY_DATE}}


class _Words:
    """Pronounceable pseudo-words, each used once per corpus: a topic word found in a title can only come from the
    places the generator put it, so BM25 finds exactly the papers meant to be found."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def word(self) -> str:
        while True:
            w = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(self.rng.randint(3, 4)))
            if w not in self.used:
                self.used.add(w)
                return w

    def phrase(self, n: int) -> str:
        return " ".join(self.word() for _ in range(n))


class _Builder:
    def __init__(self, cfg: CrawlTaskConfig):
        self.cfg = cfg
        self.rng = random.Random(f"crawl_tasks/{cfg.task}/{cfg.seed}")
        self.words = _Words(self.rng)
        self.papers: dict[str, Paper] = {}

    def paper(self, pid: str, title: str, abstract: str = "", sections: list[Section] | None = None) -> str:
        self.papers[pid] = Paper(pid, title, abstract or f"We study {title.lower()}.", PAPER_DATE,
                                 sections=sections or [], source="crawl_task")
        return pid

    def leaves(self, prefix: str, n: int) -> list[str]:
        """Papers with no sections (no S_{q+p} session of their own), on topics nobody asks about."""
        return [self.paper(f"{prefix}{i}", self.words.phrase(3).capitalize()) for i in range(n)]

    def unresolvable(self) -> list[Reference]:
        """Cited titles that are in no store: expanding them adds nothing."""
        return [Reference(title=f"{self.words.phrase(4).capitalize()} (not in the corpus)")
                for _ in range(self.cfg.cited_per_section)]

    def padded(self, secs: list[Section]) -> list[Section]:
        """A bridge or decoy gets as many sections as a hub (fillers citing nothing findable), in a random order:
        every expandable paper then has the same number of valid first actions, so the uniform start policy is the
        same in every state (P([Stop] first) = 1 / (sections + 1)) and a tiny model needs no outline to imitate it."""
        fillers = [h for h in OTHER_SECTIONS if h not in {x.heading for x in secs}]
        secs = secs + [Section(h, self.unresolvable()) for h in self.rng.sample(fillers, self.cfg.other_sections)]
        self.rng.shuffle(secs)
        return secs

    def hub_sections(self, own: list[tuple[str, list[Reference]]], q: str) -> list[Section]:
        """The task's own sections plus ``other_sections`` distractor ones, in a random order per hub."""
        c = self.cfg
        others = self.rng.sample(OTHER_SECTIONS, c.other_sections)
        secs = [Section(h, refs) for h, refs in own]
        for j, h in enumerate(others):
            if c.task == "cost":
                refs = self.unresolvable()
            elif c.task == "two_hops" and c.decoys:  # decoys shaped like the bridge, leading to distractors
                decoy = self.paper(f"{q}-decoy{j}", self.words.phrase(3).capitalize(), sections=self.padded(
                    [Section(DECOY_SECTION, [Reference(p) for p in self.leaves(f"{q}-decoy{j}-d", c.cited_per_section)])]))
                refs = [Reference(decoy)]
            else:
                refs = [Reference(p) for p in self.leaves(f"{q}-{h[:3].lower()}", c.cited_per_section)]
            secs.append(Section(h, refs))
        self.rng.shuffle(secs)
        return secs

    def query(self, i: int, split: str) -> TaskQuery:
        c = self.cfg
        q = f"{c.task}-{split}{i:03d}"
        topic = self.words.phrase(2)
        gold = self.leaves(f"{q}-gold", c.gold_per_query)
        own: list[tuple[str, list[Reference]]]
        tq = TaskQuery(q, f"Which papers study {topic}?", topic, hub=f"{q}-hub", gold=gold, optimal={})
        if c.task == "two_hops":
            # every section of the bridge cites the gold papers (its first [Expand] finds them all): the bridge's
            # own choice is not under test, its value V̂(S_{q+bridge}) is, and it should be clearly high
            tq.bridge = self.paper(f"{q}-bridge", self.words.phrase(3).capitalize(), sections=[
                Section(s.heading, [Reference(g) for g in gold]) for s in self.padded([Section(GOLD_SECTION)])])
            own = [(BRIDGE_SECTION, [Reference(tq.bridge)])]
            tq.optimal = {tq.hub: [BRIDGE_SECTION], tq.bridge: [self.papers[tq.bridge].outline[0]]}
        else:
            own = [(GOLD_SECTION, [Reference(g) for g in gold])]
            tq.optimal = {tq.hub: [GOLD_SECTION]}
        if c.task == "selector":
            # on the query's topic (its words once in the title) but not gold: found only through Applications,
            # since search_k=1 returns the hub, whose title and abstract repeat the topic
            tq.selector_class = [self.paper(f"{q}-sel{j}", title := f"{topic.capitalize()} {self.words.phrase(2)}",
                                            f"A survey of {title.lower()}.") for j in range(c.selector_class)]
            filler = self.leaves(f"{q}-app", max(c.cited_per_section - c.selector_class, 0))
            own.append((SELECTOR_SECTION, [Reference(p) for p in tq.selector_class + filler]))
            tq.optimal[tq.hub] = [GOLD_SECTION, SELECTOR_SECTION]  # when α · |class| > c (the Selector accepts)
        self.paper(tq.hub, f"{topic.capitalize()}: {self.words.phrase(2)}",
                   f"A study of {topic}. We review {topic} and its uses.", sections=self.hub_sections(own, q))
        if c.task == "two_hops":
            for sec in self.papers[tq.hub].sections:
                for r in sec.references:
                    if r.paper_id and "-decoy" in r.paper_id:
                        tq.optimal[r.paper_id] = []  # a decoy's session: nothing to gain, [Stop]
        tq.distractors = sorted(p for p in self.papers if p.startswith(q) and p not in
                                {tq.hub, tq.bridge, *gold, *tq.selector_class})
        return tq


def build_task(cfg: CrawlTaskConfig) -> tuple[list[Paper], dict[str, list[TaskQuery]]]:
    """The corpus and the train / eval queries of one task: a pure function of ``cfg`` (seeded)."""
    b = _Builder(cfg)
    splits = {"train": [b.query(i, "train") for i in range(cfg.n_train)],
              "eval": [b.query(i, "eval") for i in range(cfg.n_eval)]}
    return list(b.papers.values()), splits


def uniform_sessions(cfg: CrawlTaskConfig, papers: dict[str, Paper], queries: list[TaskQuery], env) -> list[dict]:
    """Imitation sessions choosing uniformly among the valid actions: [Search] with the query's topic in S_q (the one
    search the task needs); in S_{q+p}, k ~ U{0..n} distinct sections in a random order, then [Stop]. ``env`` renders
    the prompts (``CrawlEnv.state_messages``: what the Crawler is trained and served with)."""
    rng = random.Random(f"uniform_sft/{cfg.task}/{cfg.seed}")
    rows = []
    for tq in queries:
        rows.append({"messages": env.state_messages(tq.question) + [
            {"role": "assistant", "content": render_response(SEARCH, [tq.topic])}],
            "meta": {"kind": SEARCH, "qid": tq.qid}})
        for pid in tq.optimal:
            outline = papers[pid].outline
            for _ in range(cfg.sft_samples_per_state):
                chosen = rng.sample(outline, rng.randint(0, len(outline)))
                rows.append({"messages": env.state_messages(tq.question, papers[pid]) + [
                    {"role": "assistant", "content": render_response(EXPAND, chosen)}],
                    "meta": {"kind": EXPAND, "qid": tq.qid, "paper_id": pid}})
    return rows


def _write_jsonl(path: Path, rows: list[dict], gz: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with (gzip.open(tmp, "wt", encoding="utf-8") if gz else tmp.open("w", encoding="utf-8")) as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(path)  # atomic: a crash never leaves half a file that a later run would read


def crawl_tasks(cfg: DictConfig) -> dict:
    """``scholar data_gen crawl_tasks``: write one task's corpus, queries, uniform SFT sessions and known answers."""
    tcfg = typed(CrawlTaskConfig, cfg.crawl_task, "crawl_task")
    env_cfg = typed(CrawlConfig, {**OmegaConf.to_container(cfg.crawler.env, resolve=True), **TASK_ENV}, "crawler.env")
    out = Path(str(cfg.out_dir))
    out.mkdir(parents=True, exist_ok=True)
    papers, splits = build_task(tcfg)
    by_id = {p.paper_id: p for p in papers}
    titles = {p.paper_id: p.title for p in papers}
    env = CrawlEnv(None, None, env_cfg)  # prompts only: state_messages reads the Paper given
    _write_jsonl(out / "papers.jsonl.gz", [p.to_dict() for p in papers], gz=True)
    for split, qs in splits.items():
        _write_jsonl(out / f"{split}.jsonl", [tq.to_pasa(titles) for tq in qs])
    sft = uniform_sessions(tcfg, by_id, splits["train"], env)
    _write_jsonl(out / "uniform_sft.jsonl", sft)
    overrides = task_overrides(tcfg.task, out)
    (out / "task.json").write_text(json.dumps({
        "config": asdict(tcfg), "crawler_env": TASK_ENV, "overrides": overrides,
        "queries": {s: [asdict(tq) for tq in qs] for s, qs in splits.items()}}, indent=1))
    summary = {"task": tcfg.task, "out_dir": str(out), "papers": len(papers),
               "train_queries": len(splits["train"]), "eval_queries": len(splits["eval"]),
               "uniform_sft_sessions": len(sft), "overrides": overrides}
    log.info("crawl task %s: %d papers, %d + %d queries, %d uniform SFT sessions -> %s", tcfg.task, len(papers),
             len(splits["train"]), len(splits["eval"]), len(sft), out)
    log.info("train/evaluate on it with: %s", " ".join(overrides))
    return summary


# The environment every task is built for: one search hit (the hub), the paper's depth 3 (PaSa §5.2).
TASK_ENV = {"search_k": 1, "max_depth": 3, "skip_sectionless": True}


def task_overrides(task: str, out: Path) -> list[str]:
    """The Hydra overrides that point a command (``train crawler_ppo``, ``train crawler_sft``, ``eval pasa``) at a
    generated task: its corpus as the ``papers`` group, its queries, BM25 search and the task's environment."""
    src = f"[{{format:paper_jsonl,path:'{out / 'papers.jsonl.gz'}'}}]"
    return [f"papers.name=crawl_task_{task}", f"papers.sources={src}", "search=bm25",
            *(f"crawler.env.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in TASK_ENV.items())]
