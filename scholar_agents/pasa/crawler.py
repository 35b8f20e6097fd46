"""The Crawler policy (PaSa §4.2): an LLM that writes one session's actions per generation, for many sessions at
once, and the rollout loop that drives the crawl environment with it.

``crawl(env, crawler, queries)`` is the one rollout used by ``pasa search``, ``eval pasa``, data generation and
benchmarks: each iteration takes up to ``batch_sessions`` ready sessions across ALL queries, generates them in one
batched call and executes them in one environment step, until every query's queue is exhausted or its budget spent.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Sequence

from scholar_agents.llm import LLM, Completion, Generation, OutputConstraint, SamplingParams
from scholar_agents.llm.base import REPETITION_OFF
from scholar_agents.pasa.actions import QUERY_MAX_CHARS, SEARCH, action_constraint, render_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv, Session
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.trajectory import S_Q, QueryTrajectory
from scholar_agents.runtime.progress import progress_bar

log = logging.getLogger(__name__)

SEARCH_WRITERS = ("model", "user_query")


@dataclass
class CrawlerConfig:
    """How the Crawler generates. Presets: ``conf/crawler/*.yaml`` (key ``policy``)."""

    max_new_tokens: int = 160  # one session: a few "[Search] <query>" or "[Expand] <section>" and "[Stop]"
    temperature: float = 0.0  # greedy for a single run; an ensemble (runs > 1) needs sampling
    top_p: float = 1.0
    seed: int = 0  # run r of an ensemble samples with seed + r
    logprobs: bool = False  # PPO rollouts record the sampling logprobs
    batch_sessions: int = 32  # sessions per generate call, across queries
    # Ours: decode each session under Table 8's action grammar (actions.action_constraint: [Search] queries, or
    # [Expand] over the paper's real section names, then [Stop]) so that an untrained model writes valid actions.
    # false = the paper (its trained Crawler generates freely). PPO must run unconstrained: its log-probs are the
    # model's own distribution and its training data was generated freely (see docs/pasa.md).
    # null (the CPU preset, ours) = constrained for a model without a Crawler adapter, free when
    # crawler.policy.adapter is applied (the SFT Crawler writes its own actions; resolved by pasa.resources.Resources)
    constrained: Optional[bool] = False
    max_actions_per_session: int = 6  # the grammar's cap on [Search] / [Expand] actions in one response
    # the grammar's cap on one [Search] query (characters; at least 3, never empty). 60 keeps a base model's queries
    # short; the shipped adapter copies the user's question (cpu_smollm2: 200, so a question is not cut mid-word)
    max_query_chars: int = QUERY_MAX_CHARS
    # Ours: a PEFT LoRA adapter applied on the Crawler's model (``llm.model``) when the Crawler is built by
    # `pasa search` / `eval pasa` (llm/adapters.py). The CPU preset ships the verified-teacher SFT of SmolLM2
    # (assets/crawler_adapter, scripts/train_default_crawler.sh); null = the base model. Not used by PPO or SFT
    # (they train their own configured model) nor by an eval row that names its own crawler_model.
    adapter: Optional[str] = None
    # Who writes the S_q session: "model" (the paper: the Crawler writes its [Search] queries) or "user_query"
    # (ours): the environment searches the user's query verbatim and the Crawler writes only S_{q+p} sessions. What
    # trains and measures the expansion policy alone — the known-answer crawl tasks (data_gen/crawl_tasks.py),
    # whose tiny random policies cannot copy a query — and the search-then-expand baseline; PPO trains no token of
    # such a search session (it has none).
    search: str = "model"

    def __post_init__(self) -> None:
        if self.search not in SEARCH_WRITERS:
            raise ValueError(f"crawler.policy.search must be one of {', '.join(SEARCH_WRITERS)}, got {self.search!r}")
        if self.constrained and self.logprobs:
            raise ValueError(
                "crawler.policy.constrained=true cannot be used for PPO rollouts: the recorded log-probs are the "
                "model's unconstrained distribution, so the PPO ratio would not be that of the sampled actions. "
                "Train with crawler.policy.constrained=false (constrain only search/eval of an untrained model)")
        if not 3 <= self.max_query_chars <= 1000:
            raise ValueError(f"crawler.policy.max_query_chars must be in [3, 1000], got {self.max_query_chars}")
        if self.max_actions_per_session < 1:
            raise ValueError(f"crawler.policy.max_actions_per_session must be >= 1, got {self.max_actions_per_session}")


@dataclass
class CrawlerPreset:
    """The ``crawler`` config group: the environment's rules (``env``) and the policy's sampling (``policy``)."""

    env: CrawlConfig = field(default_factory=CrawlConfig)
    policy: CrawlerConfig = field(default_factory=CrawlerConfig)


class Crawler:
    """Batched session generation with an LLM on any backend. Tracks the time spent generating."""

    def __init__(self, llm: LLM, cfg: CrawlerConfig | None = None):
        self.llm = llm
        self.cfg = cfg or CrawlerConfig()
        self.timing = Counter()  # gen seconds
        self.calls = 0
        self.failed_prompts = 0

    def sampling(self, run: int = 0) -> SamplingParams:
        c = self.cfg
        # No repetition control (the llm preset's is for prose): a [Search] copies the user's words, a session
        # repeats its action tokens, and PPO's log-probs must be the model's own.
        return SamplingParams(max_new_tokens=c.max_new_tokens, temperature=c.temperature, top_p=c.top_p,
                              seed=c.seed + run, logprobs=c.logprobs, **REPETITION_OFF)

    def generate(self, sessions: Sequence[Session], run: int = 0, n: int = 1,
                 min_searches: int = 1) -> list[Generation]:
        """One batched generation for all sessions, ``n`` samples of each (vLLM's ``n``, HF's
        ``num_return_sequences``: the prompt is sent once). A prompt the backend rejects (e.g. longer than the model's
        context) gets empty "error" completions — counted in ``failed_prompts`` — instead of failing the batch.
        ``min_searches`` > 1 (PPO's forced exploration, ``ppo.forced_members``): every S_q session is decoded under
        the action grammar with at least that many [Search] actions — a behaviour policy, not π: the trainer scores
        the sampled tokens with the model's own unconstrained log-probs."""
        t0 = time.perf_counter()
        params = replace(self.sampling(run), n=n)
        todo = list(range(len(sessions)))
        gens: list[Optional[Generation]] = [None] * len(sessions)
        if min_searches > 1 and self.cfg.search == "model":
            forced = [i for i in todo if sessions[i].start_state == S_Q]
            if forced:
                constraint = self.constraint(sessions[forced[0]], min_searches)  # every S_q session shares it
                out = self._generate([sessions[i] for i in forced], replace(params, constraint=constraint))
                for i, g in zip(forced, out):
                    gens[i] = g
                todo = [i for i in todo if gens[i] is None]
        if self.cfg.search == "user_query":  # the environment's own search: no tokens, nothing to train
            for i in [i for i in todo if sessions[i].start_state == S_Q]:
                text = render_response(SEARCH, [sessions[i].state.query.question])
                gens[i] = Generation(prompt_text="", prompt_token_ids=[],
                                     completions=[Completion(text, [], None, "stop") for _ in range(n)])
            todo = [i for i in todo if gens[i] is None]
        if todo:
            batch = [sessions[i] for i in todo]
            out = self._generate_constrained(batch, params) if self.cfg.constrained else self._generate(batch, params)
            if len(out) != len(batch):
                raise RuntimeError(f"the LLM returned {len(out)} generations for {len(batch)} prompts")
            for i, g in zip(todo, out):
                gens[i] = g
        self.timing["gen"] += time.perf_counter() - t0
        self.calls += 1
        return gens  # type: ignore[return-value]

    def generate_shared(self, members: Sequence[Sequence[Session]], run: int = 0,
                        min_searches: int = 1) -> list[list[Generation]]:
        """The sessions of ``G = len(members)`` group members whose prompts coincide position by position (every
        member's S_q sessions of the same queries), generated in ONE call with ``n = G`` samples per prompt: the
        prompt is prefilled once, and sample g goes to member g. Sample g is drawn with seed ``seed + run + g`` on
        vLLM (a request with ``n`` seeds its g-th sample so) and from the call's one stream on hf: G distinct
        samples, the same for a fixed seed. The constrained path shares too (hf masks each returned row with its
        own grammar matcher; vLLM fans ``n`` out into requests with a grammar each). Returns each member's
        generations, in its sessions' order."""
        if not members:
            return []
        first = members[0]
        for m in members[1:]:
            if len(m) != len(first) or any(a.prompt != b.prompt or a.start_state != b.start_state
                                           for a, b in zip(m, first)):
                raise ValueError("generate_shared needs the same prompts, in the same order, for every member")
        gens = self.generate(first, run=run, n=len(members), min_searches=min_searches)
        return [[Generation(g.prompt_text, g.prompt_token_ids, [g.completions[k]]) for g in gens]
                for k in range(len(members))]

    def constraint(self, session: Session, min_searches: int = 1) -> OutputConstraint:
        """The session's action grammar: searches for S_q (at least ``min_searches``), the names of the session's
        outline for S_q+p (the paper's headings, or its related searches: the same list the prompt shows)."""
        sections = [o.name for o in session.outline] if session.paper is not None else []
        return action_constraint(session.allowed_action, sections, self.cfg.max_actions_per_session,
                                 self.cfg.max_query_chars, min_searches=min_searches)

    def _generate_constrained(self, sessions: Sequence[Session], params: SamplingParams) -> list[Generation]:
        """One batched call per distinct grammar (every search session shares one; an expansion's grammar
        names its paper's sections), results in the sessions' order."""
        groups: dict[OutputConstraint, list[int]] = {}
        for i, sess in enumerate(sessions):
            groups.setdefault(self.constraint(sess), []).append(i)
        out: list[Optional[Generation]] = [None] * len(sessions)
        for constraint, idx in groups.items():
            gens = self._generate([sessions[i] for i in idx], replace(params, constraint=constraint))
            for i, g in zip(idx, gens):
                out[i] = g
        return out  # type: ignore[return-value]

    def _generate(self, sessions: Sequence[Session], params: SamplingParams) -> list[Generation]:
        prompts = [s.prompt for s in sessions]
        try:
            gens = self.llm.generate(prompts, params)
        except ValueError as batch_error:
            log.warning("crawler batch rejected (%s); generating its %d prompts one by one", batch_error, len(prompts))
            gens = []
            for p in prompts:
                try:
                    gens.append(self.llm.generate([p], params)[0])
                except ValueError as e:
                    self.failed_prompts += 1
                    log.warning("crawler prompt rejected: %s", e)
                    gens.append(Generation(prompt_text="", prompt_token_ids=[],
                                           completions=[Completion("", [], None, "error") for _ in range(params.n)]))
        return gens


def crawl(env: CrawlEnv, crawler: Crawler, queries: Sequence[ScholarQuery], run: int = 0,
          batch_sessions: Optional[int] = None, progress: bool = True,
          on_step: Optional[Callable[[list, list], None]] = None) -> list[QueryTrajectory]:
    """Crawl every query to the end (queue exhausted or a budget spent), advancing many queries together.
    ``on_step(records, states)`` is called after every environment step with the step's SessionRecords and the
    queries' QueryStates (``pasa serve`` streams them; an exception it raises ends the crawl, e.g. a cancel)."""
    n = crawler.cfg.batch_sessions if batch_sessions is None else batch_sessions
    if n < 1:
        raise ValueError(f"batch_sessions must be >= 1, got {n}")
    states = env.reset(queries, run=run)
    bar = progress_bar(total=len(states), desc=f"crawl run {run}", unit="query", disable=not progress)
    done_before = 0
    sessions_run = 0
    while True:
        sessions = env.next_sessions(states, n)
        if not sessions:
            break
        gens = crawler.generate(sessions, run=run)
        records = env.step(sessions, gens)
        if on_step is not None:
            on_step(records, states)
        sessions_run += len(sessions)
        done_now = sum(env.done(s) for s in states)
        bar.update(done_now - done_before)
        bar.set_postfix(sessions=sessions_run)
        done_before = done_now
    bar.update(len(states) - done_before)
    bar.close()
    return [env.finish(s) for s in states]
