"""The Crawler's environment (PaSa §4.2, Table 1): one step API for inference, imitation data and PPO rollouts.

State = the user query + the paper queue. A *session* starts at S_q (the query) or S_{q+p} (the query and one
queued paper: title, abstract, section outline) and is ONE generation: the policy writes its actions
(``[Search] q1 [Search] q2 [Stop]`` or ``[Expand] s1 [Stop]``, Table 8), the environment parses them with the
strict grammar of :mod:`scholar_agents.pasa.actions` and executes them:

- ``[Search] <query>``: the papers search, restricted to papers published before the query date (§5.1); the
  switch ``search_date_filter: false`` searches the whole corpus instead (ours: the realistic setting, a user
  searching today's corpus) while expansion stays date-filtered, so no citation leaks a later paper;
- ``[Expand] <section>``: the references of that section of the session's paper, resolved to papers through the
  paper store (cited titles without an id through ``find_by_title``), date-filtered the same way — the official
  code filtered only searches, which lets expansion leak papers from the future (named switch
  ``date_filter_expand``);
- ``[Stop]``: ends the session; the crawl continues with the next queued paper (Table 1).

Related expansion (ours, ``related_expand``; a deviation from PaSa, whose papers all have full text): a paper
without sections still gets an S_{q+p} session, whose "sections" are searches derived from the paper: ``Title``
(its title) and ``Key phrase: <phrase>`` for YAKE key phrases of its abstract. ``[Expand] Key phrase: ...`` runs
that search (``related_k`` hits, under the query's [Search] before-date, batched with the step's other searches)
and queues the hits with ``found_by="related"``. One :class:`OutlineSection` list per session feeds the prompt,
the constrained grammar (``Crawler.constraint``) and the executor; :func:`gets_session` is the one rule deciding
which papers get a session (the environment, PPO's rollout and ``data_gen crawler_sessions``).

Hits per search: ``search_k`` for the Crawler's own, ``user_query_k`` for the user's words (``search_user_query``,
``fallback_search``, or the Crawler writing them verbatim), ``related_k`` for related searches; over a dense or
hybrid backend ``dense_search_k`` replaces ``search_k`` (:meth:`CrawlConfig.for_search`, applied by the environment
to the backend it is given, so every crawl follows the same rule whoever builds it).

One file (~650 lines) on purpose: the rules (:class:`CrawlConfig`), what a session offers (the outline), the
parser-executor and the queue bookkeeping share :class:`QueryState` and change together; split, every change would
touch three modules.

Every paper is added to the queue at most once per query (de-duplication against the whole queue). Each added
paper of depth < ``max_depth`` gets its own S_{q+p} session later (search hits are depth 1; PaSa §5.2 limits the
paper tree to depth 3). Budgets on actions, queue size, sessions and generated tokens end a query's crawl early.

Many queries advance together: :meth:`CrawlEnv.next_sessions` takes sessions round-robin across queries and
:meth:`CrawlEnv.step` executes a whole batch (all searches of the batch in one ``search_batch`` call).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Optional, Sequence

from scholar_agents.llm import Generation
from scholar_agents.papers.key_phrases import key_phrases
from scholar_agents.papers.paper import Paper, Reference
from scholar_agents.papers.search_base import SearchBackend
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.actions import EXPAND, SEARCH, STOP, parse_response
from scholar_agents.pasa.prompts import PROMPT_STYLES, crawler_expand_messages, crawler_search_messages
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.trajectory import (
    EXECUTED, S_Q, S_QP, ActionRecord, QueryTrajectory, QueueEntry, SessionRecord, char_spans_to_token_spans,
)
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)


@dataclass
class CrawlConfig:
    """The environment's rules and budgets. Presets: ``conf/crawler/*.yaml`` (key ``env``)."""

    search_k: int = 10  # papers per [Search] (ours: one results page, as a Google call returns)
    max_depth: int = 3  # PaSa §5.2: the paper tree is explored to depth 3 (search hits = depth 1)
    expand: bool = True  # false = Table 5 ablation "w/o [Expand]": no S_q+p sessions, [Expand] not executed
    date_filter: bool = True  # PaSa §5.1: only papers published before the query date
    date_filter_expand: bool = True  # also on expansion (the paper's intent); false = the official code
    # Ours: false = [Search] sees the whole corpus (the realistic setting: a user searches today's corpus, later
    # papers included), while expansion keeps date_filter_expand (a paper dated on or after the query never enters
    # through a citation). true = PaSa §5.1 (search restricted to papers before the query date).
    search_date_filter: bool = True
    allow_undated: bool = True  # papers with no known date pass the date filter
    resolve_titles: bool = True  # cited titles without a paper id are looked up with find_by_title
    title_min_score: float = 90.0  # fuzzy title match threshold (0-100)
    # Ours: a paper without sections cannot be expanded, so no S_q+p session is spent on it. false = PaSa's
    # literal Table 1 (a session for every queued paper), useful where every paper has full text.
    skip_sectionless: bool = True
    expand_abstract_chars: Optional[int] = None  # cut abstracts in S_q+p prompts (CPU presets); null = full
    # Ours: spell the answer format out in the session prompts, for UNTRAINED models (the prompted-agent baseline,
    # "PaSa-GPT-4o"). false = Table 8 verbatim, what the SFT data and a trained Crawler use.
    instructed_prompts: bool = False
    # The session prompts' wording: "paper" = Table 8 verbatim; "official" = the official code's agent_prompt.json,
    # what the released PaSa crawler checkpoints were trained on (serve them with it). Both styles parse the
    # official stop tokens [StopSearch] / [StopExpand] as [Stop].
    prompt_style: str = "paper"
    max_actions_per_session: int = 16  # actions beyond this in one response are not executed
    # Per-query budgets (null = unlimited). The paper has none besides depth; CPU presets set them.
    max_actions: Optional[int] = None  # [Search] + [Expand] executed
    max_queue: Optional[int] = None  # papers in the queue
    max_sessions: Optional[int] = None
    max_gen_tokens: Optional[int] = None  # tokens generated by the Crawler
    # Ours: when a query's S_q session executes no [Search] (the Crawler wrote none, or only empty /
    # malformed ones), search the user's query as written, so that a crawl never starts from nothing. Counted per
    # query (QueryTrajectory.fallback_searches). false = the learned policy alone (PaSa; PPO, imitation data and
    # `eval pasa` rows that measure the policy); `pasa search` turns it on (conf/pasa_search.yaml).
    fallback_search: bool = False
    # Ours: the user's query is also searched as written in every S_q session, after the Crawler's
    # own searches (skipped when the Crawler or the fallback already searched it verbatim): the agent's queue then
    # holds what the search it wraps finds at k, so it is never below it at that depth. Counted per query
    # (QueryTrajectory.user_query_searches), costs one action. false = PaSa (the learned policy alone).
    search_user_query: bool = False
    # Ours: hits of the user's own words (search_user_query, fallback_search); null = search_k. A user-words k
    # above search_k makes the Crawler's searches a supplement to the search it wraps: at equal papers its hits then
    # compete with the wrapped search's next ranks (docs/results/page_vs_search.md).
    user_query_k: Optional[int] = None
    # Ours: where the search the agent wraps is dense or hybrid (search=auto resolved), the Crawler's own searches
    # get this many hits and the user's words keep user_query_k (else search_k): the Crawler supplements the wrapped
    # search instead of displacing its next ranks. A rewrite adds vocabulary a lexical index lacks, less to a dense
    # one (query expansion by an LLM: +3 % to +15 % for BM25, smaller gains for dense retrievers; query2doc, Wang et
    # al. 2023). null = search_k on every backend. Resolved by `for_search` (docs/results/page_vs_search.md "The rule
    # by backend").
    dense_search_k: Optional[int] = None
    # Ours (a deviation from PaSa, whose corpus has full text): a paper without sections gets an expand session whose
    # outline is searches derived from the paper (``Title``; ``Key phrase: <phrase>`` for ``related_key_phrases``
    # YAKE phrases of its abstract, n-grams up to ``related_key_phrase_ngram`` words), each run with ``related_k``
    # hits. With expand=ar5iv|semantic_scholar the full text is fetched first: only papers still without sections
    # get related searches. Needs bounded max_actions and max_queue (an [Expand] now adds up to related_k papers).
    related_expand: bool = False
    related_k: int = 10
    related_key_phrases: int = 3
    related_key_phrase_ngram: int = 3
    related_title: bool = True  # offer the paper's title as a related search ("Title")

    def __post_init__(self) -> None:
        if self.prompt_style not in PROMPT_STYLES:
            raise UsageError(f"crawler.env.prompt_style must be one of {', '.join(PROMPT_STYLES)}, "
                             f"got {self.prompt_style!r}")
        if self.search_k < 1:
            raise ValueError(f"search_k must be >= 1, got {self.search_k}")
        if self.user_query_k is not None and self.user_query_k < 1:
            raise UsageError(f"crawler.env.user_query_k must be >= 1 or null, got {self.user_query_k}")
        if self.dense_search_k is not None and self.dense_search_k < 1:
            raise UsageError(f"crawler.env.dense_search_k must be >= 1 or null, got {self.dense_search_k}")
        if self.max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {self.max_depth}")
        for name in ("max_actions", "max_queue", "max_sessions", "max_gen_tokens"):
            v = getattr(self, name)
            if v is not None and v < 0:
                raise ValueError(f"{name} must be >= 0 or null, got {v}")
        if self.related_expand:
            if self.related_k < 1:
                raise UsageError(f"crawler.env.related_k must be >= 1, got {self.related_k}")
            if self.related_key_phrases < 0 or self.related_key_phrase_ngram < 1:
                raise UsageError("crawler.env.related_key_phrases must be >= 0 and related_key_phrase_ngram >= 1")
            if not self.related_title and self.related_key_phrases == 0:
                raise UsageError("crawler.env.related_expand offers no search with related_title=false and "
                                 "related_key_phrases=0")
            unbounded = [n for n in ("max_actions", "max_queue") if getattr(self, n) is None]
            if unbounded:
                raise UsageError(f"crawler.env.related_expand=true needs bounded budgets (each [Expand] of a paper "
                                 f"without sections adds up to related_k={self.related_k} papers): set "
                                 + ", ".join(f"crawler.env.{n}" for n in unbounded))

    def for_search(self, kind: str) -> "CrawlConfig":
        """The rules as they run over a backend of ``kind`` (``auto`` resolved): ``dense_search_k`` applied and
        consumed, so the returned config states the hits each search gets. A new config; ``self`` is unchanged."""
        if self.dense_search_k is None:
            return dataclasses.replace(self)
        if kind not in ("dense", "hybrid"):
            return dataclasses.replace(self, dense_search_k=None)
        return dataclasses.replace(self, search_k=self.dense_search_k, user_query_k=self.user_words_k,
                                   dense_search_k=None)

    @property
    def user_words_k(self) -> int:
        """Hits of a search of the user's own words (``user_query_k``, else ``search_k``)."""
        return self.user_query_k if self.user_query_k is not None else self.search_k


RELATED = "related"  # found_by of papers a related search added (search hits: the backend's name; references: expand)
TITLE_SECTION = "Title"
KEY_PHRASE_SECTION = "Key phrase: "


@dataclass(frozen=True)
class OutlineSection:
    """One "section" an S_{q+p} session offers to [Expand]: a heading of the paper and its references, or (ours,
    ``related_expand``) a named search derived from a sectionless paper."""

    name: str
    references: tuple[Reference, ...] = ()
    query: Optional[str] = None  # a related search's text; None = the section's cited references

    @property
    def related(self) -> bool:
        return self.query is not None


def related_outline(paper: Paper, cfg: CrawlConfig) -> list[OutlineSection]:
    """The related searches of a paper without sections: its title, then key phrases of its abstract (the title's
    when it has no abstract), de-duplicated case-insensitively."""
    out: list[OutlineSection] = []
    seen: set[str] = set()

    def add(name: str, query: str) -> None:
        query = " ".join(query.split())
        if query and query.lower() not in seen and "[" not in query:  # an action token cannot sit in a heading
            seen.add(query.lower())
            out.append(OutlineSection(name, query=query))

    if cfg.related_title and paper.title:
        add(TITLE_SECTION, paper.title)
    text = paper.abstract if paper.abstract.strip() else ""
    for kp in key_phrases(text, cfg.related_key_phrases, cfg.related_key_phrase_ngram) if text else []:
        add(KEY_PHRASE_SECTION + " ".join(kp.split()), kp)
    return out


def session_outline(paper: Paper, cfg: CrawlConfig) -> list[OutlineSection]:
    """What an S_{q+p} session on ``paper`` offers to [Expand]: its sections, or its related searches (ours)."""
    if paper.sections:
        return [OutlineSection(s.heading, tuple(s.references)) for s in paper.sections]
    if cfg.related_expand:
        return related_outline(paper, cfg)
    return []


def gets_session(paper: Optional[Paper], cfg: CrawlConfig) -> bool:
    """The one rule for which queued papers get an S_{q+p} session (depth and budgets aside): a paper with
    sections; a sectionless one under ``related_expand``; every paper when ``skip_sectionless`` is false."""
    if paper is None:
        return False
    if paper.sections or not cfg.skip_sectionless:
        return True
    return cfg.related_expand and bool((cfg.related_title and paper.title.strip())
                                       or (cfg.related_key_phrases > 0 and paper.abstract.strip()))


@dataclass
class Session:
    """A session ready to be generated: its start state and its place in the paper tree."""

    session_id: str
    state: "QueryState" = field(repr=False)
    start_state: str  # S_q | S_q+p
    prompt: list[dict[str, str]]
    paper: Optional[Paper] = None
    depth: int = 0
    parent_session_id: Optional[str] = None
    parent_action_index: Optional[int] = None
    outline: list[OutlineSection] = field(default_factory=list)  # what [Expand] may name (prompt, grammar, executor)

    @property
    def allowed_action(self) -> str:
        # Table 8: search sessions search, expand sessions expand.
        return SEARCH if self.start_state == S_Q else EXPAND


@dataclass
class _Pending:
    paper_id: Optional[str]  # None = the S_q session
    depth: int
    parent_session_id: Optional[str] = None
    parent_action_index: Optional[int] = None


SEED_SESSION = "seed"  # the queue entries of a query's seed papers name this instead of a session


class QueryState:
    """One query's crawl in progress: the queue, the papers waiting for a session, counters, records."""

    def __init__(self, query: ScholarQuery, run: int, before: Optional[str]):
        self.query = query
        self.run = run
        self.traj = QueryTrajectory(qid=query.qid, user_query=query.question, before=before, run=run)
        self.in_queue: set[str] = set()
        self.pending: deque[_Pending] = deque([_Pending(None, 0)])
        for i, pid in enumerate(dict.fromkeys(query.seed_papers)):  # "more like this": queued, then expanded
            self.in_queue.add(pid)
            self.traj.queue.append(QueueEntry(pid, 1, SEED_SESSION, i))
            self.pending.append(_Pending(pid, 1))
        self.records: dict[str, SessionRecord] = {}
        self.sessions_started = 0
        self.moves = 0  # executed [Search]/[Expand]
        self.skipped_sectionless = 0
        self.in_flight = 0
        self.t_start = time.perf_counter()

    @property
    def before(self) -> Optional[str]:
        return self.traj.before

    def next_session_id(self) -> str:
        sid = f"{self.query.qid}#{self.run}/{self.sessions_started}"
        self.sessions_started += 1
        return sid


def _first_search_valid(parsed, records: Sequence[ActionRecord]) -> bool:
    """Whether the response's first action is a [Search] with a non-empty argument that was executed (text
    before it aside): an empty, miscased or cut-off first [Search] is an error spanning an earlier start."""
    if not parsed.actions or parsed.actions[0].kind != SEARCH:
        return False
    first = parsed.actions[0]
    bad = ("empty_argument", "miscased_action_token", "truncated_action", "unknown_action")
    if any(e.code in bad and e.start < first.start for e in parsed.errors):
        return False
    return records[0].status == EXECUTED


def _norm_heading(h: str) -> str:
    h = h.strip().strip("\"'`“”‘’.,:;").lower()
    h = re.sub(r"^(?:\d+(?:\.\d+)*|[ivxlc]+\.|[a-z]\.)\s+", "", h)  # "3.1 Related Work", "II. Method"
    return " ".join(h.split())


class CrawlEnv:
    """``env.reset(queries)`` -> states; ``env.next_sessions(states, n)`` -> sessions to generate;
    ``env.step(sessions, generations)`` -> session records (and the queues grow)."""

    def __init__(self, store: PaperStore, search: SearchBackend, cfg: CrawlConfig | None = None, tokenizer=None,
                 fulltext=None):
        self.store = store
        self.search = search
        # the rules as they run over this backend (dense_search_k applied): every crawl, whoever builds it
        self.cfg = (cfg or CrawlConfig()).for_search(getattr(search, "name", ""))
        self.tokenizer = tokenizer  # aligns actions with generated token ids when given
        # expand=ar5iv|semantic_scholar (papers/live/fulltext.py): fetches the sections of a queued paper the store
        # has none for, just before its S_q+p session; None (expand=store) reads the store as it is.
        self.fulltext = fulltext
        self._title_cache: dict[str, Optional[str]] = {}
        self._outline_cache: dict[str, list[OutlineSection]] = {}
        self.timing = Counter()  # seconds: env_search, env_expand, env_other
        self.searches = 0  # queries searched (the Crawler's, the fallback's, related searches)
        self.search_calls = 0  # search_batch calls they took (the bench's cost figure)

    # ---- states and sessions ----

    def reset(self, queries: Sequence[ScholarQuery], run: int = 0) -> list[QueryState]:
        return [QueryState(q, run, q.before if self.cfg.date_filter else None) for q in queries]

    def search_before(self, before: Optional[str]) -> Optional[str]:
        """The before-date a [Search] uses: the query's (PaSa §5.1) or none (``search_date_filter: false``)."""
        return before if self.cfg.search_date_filter else None

    def state_messages(self, user_query: str, paper: Paper | str | None = None,
                       outline: Optional[list[OutlineSection]] = None) -> list[dict[str, str]]:
        """S_q (``paper=None``) or S_{q+p}: the chat the Crawler sees. PPO rebuilds S_{q+p_j} for Eq. 3 with it."""
        if paper is None:
            return crawler_search_messages(user_query, instructed=self.cfg.instructed_prompts,
                                           style=self.cfg.prompt_style)
        if isinstance(paper, str):
            got = self.store.get(paper)
            if got is None:
                raise KeyError(f"paper {paper!r} is not in the store {self.store.path}")
            paper = got
        abstract = " ".join(paper.abstract.split())
        n = self.cfg.expand_abstract_chars
        if n is not None and len(abstract) > n:
            cut = abstract[:n]
            abstract = cut[: cut.rfind(" ")] if cut.rfind(" ") > n // 2 else cut
        outline = self.outline(paper) if outline is None else outline
        return crawler_expand_messages(user_query, paper.title, abstract, [o.name for o in outline],
                                       instructed=self.cfg.instructed_prompts, style=self.cfg.prompt_style)

    def outline(self, paper: Paper) -> list[OutlineSection]:
        """The paper's outline under this environment's rules (cached: YAKE runs once per paper)."""
        if paper.sections:
            return session_outline(paper, self.cfg)
        key = paper.paper_id
        if key not in self._outline_cache:
            self._outline_cache[key] = session_outline(paper, self.cfg)
        return self._outline_cache[key]

    def search_session(self, state: QueryState) -> Session:
        return Session(state.next_session_id(), state, S_Q, self.state_messages(state.query.question))

    def expand_session(self, state: QueryState, paper: Paper | str, depth: int = 1,
                       parent_session_id: Optional[str] = None, parent_action_index: Optional[int] = None) -> Session:
        """An S_{q+p} session on any paper (PPO samples papers from search results this way, PaSa A.2)."""
        if isinstance(paper, str):
            got = self.store.get(paper)
            if got is None:
                raise KeyError(f"paper {paper!r} is not in the store {self.store.path}")
            paper = got
        outline = self.outline(paper)
        return Session(state.next_session_id(), state, S_QP,
                       self.state_messages(state.query.question, paper, outline=outline), paper=paper, depth=depth,
                       parent_session_id=parent_session_id, parent_action_index=parent_action_index, outline=outline)

    def budget_reason(self, state: QueryState) -> Optional[str]:
        c = self.cfg
        if c.max_actions is not None and state.moves >= c.max_actions:
            return "max_actions"
        if c.max_queue is not None and len(state.in_queue) >= c.max_queue:
            return "max_queue"
        if c.max_sessions is not None and state.sessions_started >= c.max_sessions:
            return "max_sessions"
        if c.max_gen_tokens is not None and state.traj.gen_tokens >= c.max_gen_tokens:
            return "max_gen_tokens"
        return None

    def done(self, state: QueryState) -> bool:
        return state.in_flight == 0 and (not state.pending or self.budget_reason(state) is not None)

    def next_sessions(self, states: Sequence[QueryState], n: int) -> list[Session]:
        """Up to ``n`` sessions, taken round-robin across queries in queue order (so every query advances)."""
        t0 = time.perf_counter()
        out: list[Session] = []
        active = [s for s in states if s.pending]
        while active and len(out) < n:
            still = []
            # Fetch the next candidate of every active query in one store call.
            heads = {s.pending[0].paper_id for s in active if s.pending[0].paper_id is not None}
            if heads and self.fulltext is not None:
                self.fulltext.ensure(sorted(heads))
            papers = self.store.get_many(list(heads)) if heads else {}
            for s in active:
                if len(out) >= n:
                    still.append(s)
                    continue
                reason = self.budget_reason(s)
                if reason is not None:
                    if s.traj.stopped_by is None:
                        s.traj.stopped_by = reason
                    s.pending.clear()
                    continue
                item = s.pending.popleft()
                if item.paper_id is None:
                    out.append(self.search_session(s))
                else:
                    paper = papers.get(item.paper_id)
                    if not gets_session(paper, self.cfg):
                        s.skipped_sectionless += 1
                    else:
                        out.append(self.expand_session(s, paper, item.depth, item.parent_session_id,
                                                       item.parent_action_index))
                if s.pending:
                    still.append(s)
            active = still
        for sess in out:
            sess.state.in_flight += 1
        self.timing["env_other"] += time.perf_counter() - t0
        return out

    # ---- the step ----

    def step(self, sessions: Sequence[Session], generations: Sequence[Generation]) -> list[SessionRecord]:
        """Parse and execute each session's generated actions (first completion of each generation)."""
        if len(sessions) != len(generations):
            raise ValueError(f"{len(sessions)} sessions but {len(generations)} generations")
        t0 = time.perf_counter()
        records: list[SessionRecord] = []
        search_jobs: list[tuple[ActionRecord, str, Optional[str], int]] = []  # (action, query, before, k)
        expand_jobs: list[tuple[ActionRecord, Session, list[Reference]]] = []
        for sess, gen in zip(sessions, generations):
            rec = self._parse(sess, gen, search_jobs, expand_jobs)
            records.append(rec)
        t1 = time.perf_counter()
        found: dict[int, list[str]] = {}
        # One search_batch call per distinct k: the Crawler's searches (search_k) and the related searches of
        # sectionless papers (related_k) of the whole batch of sessions.
        for k in sorted({job[3] for job in search_jobs}):
            jobs = [job for job in search_jobs if job[3] == k]
            hits = self.search.search_batch([q for _, q, _, _ in jobs], k=k, before=[b for _, _, b, _ in jobs])
            self.search_calls += 1
            self.searches += len(jobs)
            for (ar, _, _, _), hs in zip(jobs, hits):
                ar.candidates = len(hs)
                found[id(ar)] = [h.paper_id for h in hs]
        t2 = time.perf_counter()
        if expand_jobs:
            found.update(self._expand(expand_jobs))
        t3 = time.perf_counter()
        for sess, rec in zip(sessions, records):
            self._apply(sess, rec, found)
        self.timing["env_search"] += t2 - t1
        self.timing["env_expand"] += t3 - t2
        self.timing["env_other"] += (t1 - t0) + (time.perf_counter() - t3)
        return records

    def _parse(self, sess: Session, gen: Generation, search_jobs: list, expand_jobs: list) -> SessionRecord:
        state = sess.state
        comp = gen.completions[0]
        parsed = parse_response(comp.text, truncated=comp.finish_reason == "length")
        rec = SessionRecord(
            session_id=sess.session_id, qid=state.query.qid, user_query=state.query.question, before=state.before,
            start_state=sess.start_state, paper_id=sess.paper.paper_id if sess.paper else None, depth=sess.depth,
            parent_session_id=sess.parent_session_id, parent_action_index=sess.parent_action_index,
            prompt=sess.prompt, prompt_token_ids=list(gen.prompt_token_ids), response_text=comp.text,
            response_token_ids=list(comp.token_ids), response_logprobs=comp.logprobs,
            finish_reason=comp.finish_reason, grammar_errors=[e.to_dict() for e in parsed.errors],
            related=any(o.related for o in sess.outline),
        )
        n_tokens = len(comp.token_ids) if comp.token_ids else (
            len(self.tokenizer.encode(comp.text, add_special_tokens=False)) if self.tokenizer else len(comp.text.split()))
        state.traj.gen_tokens += n_tokens
        for e in parsed.errors:
            state.traj.grammar_errors[e.code] = state.traj.grammar_errors.get(e.code, 0) + 1
        if parsed.errors:
            log.debug("session %s: grammar errors %s in %r", sess.session_id, parsed.error_codes(), comp.text[:200])
        spans = None
        if self.tokenizer is not None and comp.token_ids and parsed.actions:
            spans = char_spans_to_token_spans(self.tokenizer, comp.token_ids, comp.text,
                                              [(a.start, a.end) for a in parsed.actions])
            rec.token_spans_ok = spans is not None
            if spans is None:
                log.warning("session %s: response text does not decode from its token ids; no token spans",
                            sess.session_id)
        seen: set[str] = set()
        n_moves = 0
        question = " ".join(state.query.question.split()).lower()
        for i, a in enumerate(parsed.actions):
            ar = ActionRecord(a.kind, a.argument, a.start, a.end)
            if spans is not None:
                ar.token_start, ar.token_end = spans[i]
            rec.actions.append(ar)
            if a.kind == STOP:
                continue
            key = " ".join(a.argument.lower().split())
            if n_moves >= self.cfg.max_actions_per_session:
                ar.status = "session_action_limit"
            elif a.kind == EXPAND and not self.cfg.expand:
                ar.status = "expand_disabled"
            elif a.kind != sess.allowed_action:
                ar.status = "not_allowed"
            elif a.kind == EXPAND and not (sections := self._sections(sess, a.argument)):
                ar.status = "unknown_section"
            elif key in seen:
                ar.status = "duplicate_action"
            elif self.cfg.max_actions is not None and state.moves >= self.cfg.max_actions:
                ar.status = "over_budget"
            else:
                seen.add(key)
                n_moves += 1
                state.moves += 1
                if a.kind == SEARCH:  # the user's words, written by the Crawler, are still the user's words
                    k = self.cfg.user_words_k if key == question else self.cfg.search_k
                    search_jobs.append((ar, a.argument, self.search_before(state.before), k))
                elif sections[0].related:
                    ar.found_by, ar.searched = RELATED, sections[0].query
                    search_jobs.append((ar, sections[0].query, self.search_before(state.before), self.cfg.related_k))
                else:
                    expand_jobs.append((ar, sess, [r for sec in sections for r in sec.references]))
        if sess.start_state == S_Q:
            state.traj.first_search_valid = _first_search_valid(parsed, rec.actions)
            if self.cfg.fallback_search and not any(a.kind == SEARCH and a.status == EXECUTED for a in rec.actions):
                self._fallback(state, rec, search_jobs)
            if self.cfg.search_user_query and not any(
                    a.kind == SEARCH and a.status == EXECUTED and " ".join(a.argument.split()).lower() == question
                    for a in rec.actions):
                self._fallback(state, rec, search_jobs, wrapped=True)
        return rec

    def _fallback(self, state: "QueryState", rec: SessionRecord, search_jobs: list, wrapped: bool = False) -> None:
        """``fallback_search`` (or, ``wrapped``, ``search_user_query``): the user's query searched as written,
        recorded as an action of the session marked ``fallback`` (no token span: the Crawler did not write it)."""
        if self.cfg.max_actions is not None and state.moves >= self.cfg.max_actions:
            return
        end = len(rec.response_text)
        ar = ActionRecord(SEARCH, state.query.question, end, end, fallback=True)
        rec.actions.append(ar)
        state.moves += 1
        if wrapped:
            state.traj.user_query_searches += 1
        else:
            state.traj.fallback_searches += 1
        search_jobs.append((ar, state.query.question, self.search_before(state.before), self.cfg.user_words_k))

    @staticmethod
    def _sections(sess: Session, argument: str) -> list[OutlineSection]:
        """The session's outline entries named by an [Expand] argument (case, quotes and numbering ignored; a
        heading used twice names both)."""
        want = _norm_heading(argument)
        return [o for o in sess.outline if _norm_heading(o.name) == want]

    def _expand(self, jobs: list[tuple[ActionRecord, Session, list[Reference]]]) -> dict[int, list[str]]:
        """Section references -> paper ids (resolved, date-filtered), for a batch of [Expand] actions."""
        ids = {r.paper_id for _, _, refs in jobs for r in refs if r.paper_id}
        known = self.store.get_many(list(ids), with_sections=False) if ids else {}
        resolved: dict[int, list[str]] = {}
        for ar, _, refs in jobs:
            ar.candidates = len(refs)
            out: list[str] = []
            for r in refs:
                pid = r.paper_id if r.paper_id in known else None
                if pid is None and r.title and self.cfg.resolve_titles:
                    pid = self._find_title(r.title)
                if pid is None:
                    ar.unresolved += 1
                else:
                    out.append(pid)
            resolved[id(ar)] = out
        # Dates of the title-resolved papers, in one call.
        need = {p for ps in resolved.values() for p in ps if p not in known}
        if need:
            known.update(self.store.get_many(list(need), with_sections=False))
        for ar, sess, _ in jobs:
            before = sess.state.before if self.cfg.date_filter_expand else None
            keep = []
            for pid in resolved[id(ar)]:
                if before is None or self._before(known[pid].date, before):
                    keep.append(pid)
                else:
                    ar.dropped_by_date += 1
            resolved[id(ar)] = keep
        return resolved

    def _find_title(self, title: str) -> Optional[str]:
        if title not in self._title_cache:
            self._title_cache[title] = self.store.find_by_title(title, fuzzy=True, min_score=self.cfg.title_min_score)
        return self._title_cache[title]

    def _before(self, date: str, before: str) -> bool:
        if not date:
            return self.cfg.allow_undated
        # ISO strings compare in time order; a coarser date ("2021-10") counts as its first day.
        return date < before

    def _apply(self, sess: Session, rec: SessionRecord, found: dict[int, list[str]]) -> None:
        """Add each executed action's papers to the queue in order: de-duplicated, within the queue budget."""
        state = sess.state
        child_depth = sess.depth + 1
        for i, ar in enumerate(rec.actions):
            state.traj.action_statuses[ar.status] = state.traj.action_statuses.get(ar.status, 0) + 1
            if ar.status != EXECUTED or ar.kind == STOP:
                continue
            seen_here: set[str] = set()
            for pid in found.get(id(ar), []):
                if pid in state.in_queue or pid in seen_here:
                    ar.duplicates += 1
                    continue
                seen_here.add(pid)
                if self.cfg.max_queue is not None and len(state.in_queue) >= self.cfg.max_queue:
                    ar.dropped_queue_full += 1
                    continue
                state.in_queue.add(pid)
                ar.added.append(pid)
                state.traj.queue.append(QueueEntry(pid, child_depth, rec.session_id, i))
                if self.cfg.expand and child_depth < self.cfg.max_depth:
                    state.pending.append(_Pending(pid, child_depth, rec.session_id, i))
        state.traj.sessions.append(rec)
        state.records[rec.session_id] = rec
        if rec.parent_session_id in state.records:
            state.records[rec.parent_session_id].child_session_ids.append(rec.session_id)
        state.in_flight = max(state.in_flight - 1, 0)
        if self.done(state):
            state.traj.wall_time_s = time.perf_counter() - state.t_start
            if state.pending and state.traj.stopped_by is None:
                state.traj.stopped_by = self.budget_reason(state)

    def finish(self, state: QueryState) -> QueryTrajectory:
        """The query's trajectory (call when :meth:`done`)."""
        if not state.traj.wall_time_s:
            state.traj.wall_time_s = time.perf_counter() - state.t_start
        state.traj.sessions_skipped = state.skipped_sectionless
        return state.traj
