"""PPO rollouts: which queries a step trains on, the paper's session sampling scheme on the ONE crawl environment,
and the sessions turned into training samples (action steps, rewards from :mod:`.rewards`, bootstrap children).
The sampler itself, and its weight sync, is :mod:`.rollout_engine`.

Sampling (PaSa App. A.2, per device and step): ``queries_per_step`` user queries -> one S_q search session each;
then ``expand_sessions[0]`` S_{q+p} sessions on papers sampled at random from the search results; then
``expand_sessions[1]`` more on papers sampled from what those expansions added (4 + 6 + 6 = 16 sessions). Sessions
are NOT crawled to the end of the queue: the cross-session bootstrap of Eq. 3 stands in for the rest of the tree.

The critic-free estimators (``ppo.estimator=grpo|rloo``) have no V̂ to bootstrap from, so they sample WHOLE crawls
instead (:func:`collect_crawls`): ``group_size`` crawls of each query, each run to the end of the environment's
budgets as ``pasa search`` crawls (``pasa.crawler.crawl``), every record tagged with its crawl. The group shares
its prompts' prefill: a round whose prompts every member has (round 0: the S_q sessions) is one call with
``n = group_size`` samples per prompt.

Each session becomes a :class:`SessionSample`: its prompt and response token ids and its *steps* — the actions
a_t of Eq. 3, each owning a contiguous run of response tokens (the tokens before/after the parsed actions, EOS
included, belong to the nearest action, so every generated token is trained), with its reward and the papers whose
S_{q+p_j} values bootstrap the return.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from scholar_agents.pasa.actions import STOP
from scholar_agents.pasa.crawl_env import CrawlEnv, Session, gets_session
from scholar_agents.pasa.crawler import Crawler
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.trajectory import EXECUTED, S_Q, SessionRecord
from scholar_agents.train.ppo.rewards import INVALID, RewardConfig, reward_actions

if TYPE_CHECKING:
    from scholar_agents.train.ppo.config import PPOConfig

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------------
# which queries a step trains on


class QuerySampler:
    """Training queries in a fresh random order each pass, ``n`` at a time. Every rank draws the same global
    batch and keeps its own slice, so a run with 2 processes x k queries sees the queries of 1 process x 2k.
    The whole state is two integers (plus the seed): checkpoints restore it exactly."""

    def __init__(self, n_queries: int, seed: int):
        if n_queries < 1:
            raise ValueError("no training queries")
        self.n, self.seed = n_queries, seed
        self.epoch, self.pos = 0, 0

    def _order(self) -> list[int]:
        order = list(range(self.n))
        random.Random(self.seed * 1_000_003 + self.epoch).shuffle(order)
        return order

    def next(self, k: int) -> list[int]:
        out: list[int] = []
        while len(out) < k:
            order = self._order()
            take = order[self.pos:self.pos + k - len(out)]
            out += take
            self.pos += len(take)
            if self.pos >= self.n:
                self.epoch, self.pos = self.epoch + 1, 0
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos, "n": self.n, "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        if state["n"] != self.n:
            raise ValueError(f"the checkpoint's sampler covers {state['n']} training queries, this run has {self.n}")
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])


# --------------------------------------------------------------------------------------------------------------
# the sampling scheme (App. A.2)


def starts_session(env: CrawlEnv, depth: int, paper) -> bool:
    """Would the environment give ``paper`` queued at ``depth`` its own S_{q+p} session? (the rule of
    ``CrawlEnv._apply`` / ``next_sessions``: :func:`gets_session`, budgets aside). A paper that never gets a session
    has no reward-to-go."""
    c = env.cfg
    return c.expand and depth < c.max_depth and gets_session(paper, c)


def collect_sessions(env: CrawlEnv, crawler: Crawler, queries: Sequence[ScholarQuery], expand_sessions: Sequence[int],
                     rng: random.Random) -> tuple[list[SessionRecord], dict[str, float]]:
    """Search sessions for ``queries``, then rounds of expand sessions on papers sampled (``rng``) from the
    previous round's results. Returns the records (in generation order) and counters."""
    states = env.reset(queries)
    sessions: list[Session] = [env.search_session(s) for s in states]
    records: list[SessionRecord] = []
    stats = Counter()
    for round_idx in range(len(expand_sessions) + 1):
        if not sessions:
            break
        gens = crawler.generate(sessions, run=round_idx)
        new = env.step(sessions, gens)
        records += new
        stats[f"sessions_round{round_idx}"] += len(new)
        if round_idx == len(expand_sessions):
            break
        # The next round's candidates: every paper this round added that can be expanded (it has sections).
        by_id = {s.session_id: s for s in sessions}
        pool = [(by_id[r.session_id], i, pid) for r in new for i, a in enumerate(r.actions) for pid in a.added]
        papers = env.store.get_many(sorted({pid for _, _, pid in pool})) if pool else {}
        eligible = [(s, i, pid) for s, i, pid in pool
                    if pid in papers and starts_session(env, s.depth + 1, papers[pid])]
        stats[f"expand_candidates_round{round_idx + 1}"] += len(eligible)
        picks = rng.sample(eligible, min(expand_sessions[round_idx], len(eligible)))
        sessions = [env.expand_session(s.state, papers[pid], depth=s.depth + 1, parent_session_id=s.session_id,
                                       parent_action_index=i) for s, i, pid in picks]
    return records, dict(stats)


# Seeds (crawler seed + run): a round whose prompts every member shares is ONE call with n = G samples per prompt
# (run = rnd * G; vLLM seeds its g-th sample run + g); any other round is one call per member g, run =
# (g + 1) * _MEMBER_RUNS + rnd, a block of its own per member, far from the shared calls' block 0, because the hf
# backend seeds its b-th batch with seed + b (neighbouring seeds would share streams)
_MEMBER_RUNS = 1000


def _same_prompts(member_sessions: Sequence[Sequence[Session]]) -> bool:
    first = member_sessions[0]
    return all(len(m) == len(first) and all(a.prompt == b.prompt and a.start_state == b.start_state
                                            for a, b in zip(m, first)) for m in member_sessions[1:])


def first_forced_crawl(group_size: int, forced_members: int, n_queries: int) -> int | None:
    """The crawl index of the first forced crawl in :func:`collect_crawls`' numbering (member g of query i is crawl
    g × n_queries + i, the forced members last); None without forced members."""
    return (group_size - forced_members) * n_queries if forced_members else None


def collect_crawls(env: CrawlEnv, crawler: Crawler, queries: Sequence[ScholarQuery], group_size: int,
                   batch_sessions: int | None = None, share_prefill: bool = True,
                   forced_members: int = 0, forced_searches: int = 2,
                   ) -> tuple[list[SessionRecord], list[int], dict[str, float]]:
    """``group_size`` whole crawls of every query (the groups of GRPO / RLOO: Shao et al. 2024, Ahmadian et al.
    2024), each to its end — queue exhausted or a budget spent (``CrawlEnv.done``), as ``pasa.crawler.crawl`` does.
    Crawl ``g * len(queries) + i`` is member g of query i (``env.reset(queries, run=g)``: session ids
    ``<qid>#<g>/<n>``). Each round takes every member's ready sessions (up to ``batch_sessions`` per member,
    default ``crawler.cfg.batch_sessions``). Round 0 — every member's S_q sessions of the same queries, the same
    prompts — is ONE call with ``n = group_size`` samples per prompt (``Crawler.generate_shared``: the prompt is
    prefilled once, sample g goes to member g); so is any later round whose prompts all members still share (more
    queries than ``batch_sessions``). A round whose prompts differ between members is one call per member with a
    seed of its own: a vLLM request's seed fixes its sample, so members batched under one seed would repeat one
    crawl. ``share_prefill=False``: every round per member (the baseline of ``bench/group_rollout.py``).
    ``forced_members`` (ours, ``ppo.forced_members``): the LAST that many members of each group write their S_q
    session under the action grammar with at least ``forced_searches`` [Search] actions, so that a group holds
    crawls with a second search for its baseline to credit or blame; the free members share one call, the forced
    ones another. Returns the records (generation order: member 0's, then member 1's, ... in every round), the
    crawl index of each record, and counters."""
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if not 0 <= forced_members < group_size:
        raise ValueError(f"forced_members must be in [0, group_size={group_size}), got {forced_members}")
    n_free = group_size - forced_members
    min_of = [1] * n_free + [forced_searches] * forced_members
    n = crawler.cfg.batch_sessions if batch_sessions is None else batch_sessions
    members = [env.reset(queries, run=g) for g in range(group_size)]
    crawl_of = {id(st): g * len(queries) + i for g, states in enumerate(members) for i, st in enumerate(states)}
    records: list[SessionRecord] = []
    crawls: list[int] = []
    stats = Counter()
    for rnd in itertools.count():
        ready = [env.next_sessions(states, n) for states in members]  # members' states are independent
        if not any(ready):
            break
        if share_prefill and group_size > 1 and _same_prompts(ready):
            gens = []  # the free members' samples, then the forced ones' (seeds run .. run + G − 1, as one call's)
            for lo, hi in ((0, n_free), (n_free, group_size)):
                if hi > lo:
                    gens += crawler.generate_shared(ready[lo:hi], run=rnd * group_size + lo, min_searches=min_of[lo])
            stats["rounds_shared"] += 1
        else:
            gens = [crawler.generate(sessions, run=(g + 1) * _MEMBER_RUNS + rnd, min_searches=min_of[g])
                    if sessions else [] for g, sessions in enumerate(ready)]
        for sessions, member_gens in zip(ready, gens):
            if not sessions:
                continue
            new = env.step(sessions, member_gens)
            records += new
            crawls += [crawl_of[id(s.state)] for s in sessions]
            stats["sessions_round0"] += sum(r.start_state == S_Q for r in new)
        stats["rounds"] = rnd + 1
    stats["rounds_shared"] += 0
    stats["crawls"] = len(crawl_of)
    stats["crawls_forced"] = forced_members * len(queries)
    stats["crawls_stopped_by_budget"] = sum(st.traj.stopped_by is not None for states in members for st in states)
    return records, crawls, dict(stats)


def collect(env: CrawlEnv, crawler: Crawler, queries: Sequence[ScholarQuery], p: "PPOConfig",
            rng: random.Random) -> tuple[list[SessionRecord], list[int] | None, dict[str, float]]:
    """The sampling ``ppo.estimator`` needs: App. A.2's sessions for the estimators with a critic (``paper_mc``,
    ``gae``; no crawl tags), ``group_size`` whole crawls per query for the critic-free ones (``grpo``, ``rloo``)."""
    if not p.uses_value:
        return collect_crawls(env, crawler, queries, p.group_size, forced_members=p.forced_members,
                              forced_searches=p.forced_searches)
    records, counts = collect_sessions(env, crawler, queries, [int(n) for n in p.expand_sessions], rng)
    return records, None, counts


# --------------------------------------------------------------------------------------------------------------
# steps and rewards


@dataclass
class ActionStep:
    """Step t of Eq. 3: the action's response tokens ``[start, end)``, its reward r(s_t, a_t) (Eq. 1) and the
    papers it added whose S_{q+p_j} values bootstrap the return (``children``)."""

    kind: str  # search | expand | stop | invalid
    start: int
    end: int
    added: list[str] = field(default_factory=list)
    reward: float = 0.0
    hits: int = 0  # new papers with I(q, p, t) = 1 (gold or Selector-accepted)
    gold_hits: int = 0
    children: list[str] = field(default_factory=list)
    child_values: float = 0.0  # Σ_j V̂(S_{q+p_j}), filled in by the trainer
    found_by: str | None = None  # "related": an [Expand] that ran a related search (the Selector routes by it)

    @property
    def n_tokens(self) -> int:
        return self.end - self.start


@dataclass
class SessionSample:
    """One session as PPO trains on it."""

    record: SessionRecord
    steps: list[ActionStep]
    crawl: int | None = None  # collect_crawls' crawl index (grpo / rloo group their crawls by it)

    @property
    def prompt_ids(self) -> list[int]:
        return self.record.prompt_token_ids

    @property
    def response_ids(self) -> list[int]:
        return self.record.response_token_ids

    @property
    def reward(self) -> float:
        return sum(s.reward for s in self.steps)


def action_steps(record: SessionRecord) -> list[ActionStep]:
    """Partition the response tokens into one run per parsed action (Eq. 3's a_t). Action k owns the tokens from
    the end of action k-1 to its own end; the last one also owns the trailing tokens (e.g. EOS). A response with
    no parsed action, or whose text could not be aligned with its tokens, is ONE ``invalid`` step."""
    n = len(record.response_token_ids)
    if n == 0:
        return []
    acts = [a for a in record.actions if a.token_end is not None]
    if not acts or not record.token_spans_ok or len(acts) != len(record.actions):
        return [ActionStep(INVALID, 0, n)]
    steps: list[ActionStep] = []
    start = 0
    for k, a in enumerate(acts):
        end = n if k == len(acts) - 1 else min(max(a.token_end, start + 1), n)
        added = list(a.added) if a.status == EXECUTED and a.kind != STOP else []
        if end <= start:  # no token left for this action (pathological spans): its papers go to the previous step
            steps[-1].added += added
            continue
        steps.append(ActionStep(a.kind, start, end, added=added, found_by=a.found_by))
        start = end
    return steps


def build_samples(records: Sequence[SessionRecord], env: CrawlEnv, gold: dict[str, set[str]], selector,
                  reward_cfg: RewardConfig, bootstrap_all_papers: bool = False,
                  crawls: Sequence[int] | None = None) -> list[SessionSample]:
    """Steps, rewards (:func:`.rewards.reward_actions`) and bootstrap children for every session with generated
    tokens (``crawls``: each record's crawl, from :func:`collect_crawls`)."""
    crawl_of = [None] * len(records) if crawls is None else list(crawls)
    samples = [SessionSample(r, action_steps(r), c) for r, c in zip(records, crawl_of) if r.response_token_ids]
    added = sorted({p for s in samples for st in s.steps for p in st.added})
    papers = env.store.get_many(added, with_sections=True) if added else {}
    reward_actions(samples, papers, gold, selector, reward_cfg, str(getattr(env.search, "name", "") or "search"))
    for s in samples:
        child_depth = s.record.depth + 1
        for st in s.steps:
            st.children = [p for p in st.added if p in papers and (
                bootstrap_all_papers or starts_session(env, child_depth, papers[p]))]
    return samples
