"""Returns, advantages and baselines for session-level PPO: every estimator, behind one interface.

A Crawler trajectory is split into sessions (PaSa §4.2); a session is one generation in which the Crawler emits
actions a_{t_i} … a_{t_{i+1}-1} ([Search]/[Expand] … [Stop]). Steps below are *actions* within one session.
An estimator turns a batch of rolled-out sessions — their per-action rewards (Eqs. 1–2), per-token log-probs under
π_old and π_sft, and V̂_old where it uses a critic — into per-token advantages and value targets
(:class:`SessionTargets`); ``ppo.estimator`` picks it from :data:`ESTIMATORS`:

- ``paper_mc`` — the paper's Monte-Carlo session return with cross-session bootstrap (Eq. 3) and A = R − V (Eq. 4),
  credited per action;
- ``gae`` — token-level GAE with a per-token KL penalty, what the official PaSa code (an old TRL fork) does;
- ``grpo`` / ``rloo`` — critic-free (``uses_value = False``): the return of a WHOLE crawl compared with the other
  crawls of its query's group (:class:`GroupEstimator`; rollout.collect_crawls samples the groups).

The math is in the pure functions below (hand-checked in tests/train/ppo/test_math.py); the classes only wire a
session's actions, tokens and values into them.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Sequence

import numpy as np

if TYPE_CHECKING:
    from scholar_agents.train.ppo.config import PPOConfig
    from scholar_agents.train.ppo.rollout import SessionSample


def action_kl(logp_policy: Sequence[float], logp_sft: Sequence[float]) -> float:
    """log π_θ(a_t|s_t) − log π_sft(a_t|s_t) for one action, from its tokens' log-probabilities (the per-token
    KL terms of Eq. 3 summed over the action's tokens)."""
    lp, ls = np.asarray(logp_policy, dtype=np.float64), np.asarray(logp_sft, dtype=np.float64)
    if lp.shape != ls.shape:
        raise ValueError(f"policy/SFT log-prob shapes differ: {lp.shape} vs {ls.shape}")
    return float((lp - ls).sum())


def session_returns(
    rewards: Sequence[float],
    child_values: Sequence[float],
    kl: Sequence[float],
    gamma0: float = 1.0,
    gamma1: float = 0.1,
    beta: float = 0.1,
) -> np.ndarray:
    """Eq. 3, for every action t of one session:

        R̂_t = Σ_{k=0}^{end−t} γ0^k [ r(s_{t+k}, a_{t+k}) + γ1 · Σ_j V̂(S_{q+p_j}) − β · log π_θ/π_sft (a_{t+k}) ]

    ``child_values[k]`` = Σ_j V̂(S_{q+p_j}) over the papers a_k added (the reward-to-go of the sessions those
    papers will start), ``kl[k]`` = log π_θ(a_k|s_k) − log π_sft(a_k|s_k). Defaults are PaSa Table 9.
    """
    r, v, d = (np.asarray(x, dtype=np.float64) for x in (rewards, child_values, kl))
    if not (r.shape == v.shape == d.shape) or r.ndim != 1:
        raise ValueError(f"rewards/child_values/kl must be 1-D of one length, got {r.shape}, {v.shape}, {d.shape}")
    step = r + gamma1 * v - beta * d
    out = np.zeros_like(step)
    running = 0.0
    for t in range(len(step) - 1, -1, -1):  # reverse discounted cumulative sum
        running = step[t] + gamma0 * running
        out[t] = running
    return out


def advantages(returns: Sequence[float], values: Sequence[float]) -> np.ndarray:
    """Â(s_t, a_t) = R̂_t − V̂_φ(s_t)  (Eq. 4)."""
    r, v = np.asarray(returns, dtype=np.float64), np.asarray(values, dtype=np.float64)
    if r.shape != v.shape:
        raise ValueError(f"returns/values shapes differ: {r.shape} vs {v.shape}")
    return r - v


def gae(
    token_rewards: Sequence[float], token_values: Sequence[float], gamma: float = 1.0, lam: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over one session's generated tokens (the official code's estimator):
    δ_t = r_t + γ V_{t+1} − V_t, A_t = Σ (γλ)^k δ_{t+k}; returns (advantages, returns = A + V). The value after
    the last token is 0 (the session ends at [Stop])."""
    r, v = np.asarray(token_rewards, dtype=np.float64), np.asarray(token_values, dtype=np.float64)
    if r.shape != v.shape or r.ndim != 1:
        raise ValueError(f"token_rewards/token_values must be 1-D of one length, got {r.shape}, {v.shape}")
    adv = np.zeros_like(r)
    last = 0.0
    for t in range(len(r) - 1, -1, -1):
        next_v = v[t + 1] if t + 1 < len(r) else 0.0
        delta = r[t] + gamma * next_v - v[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv, adv + v


def gae_token_rewards(
    action_token_counts: Sequence[int],
    rewards: Sequence[float],
    child_values: Sequence[float],
    token_kl: Sequence[float],
    gamma1: float = 0.1,
    beta: float = 0.1,
) -> np.ndarray:
    """Token-level rewards for ``gae``: −β·KL on every token, plus r(s_t,a_t) + γ1·Σ V̂(children) on the last
    token of each action (the reward placement of TRL-style PPO)."""
    counts = list(action_token_counts)
    kl = np.asarray(token_kl, dtype=np.float64)
    if sum(counts) != len(kl):
        raise ValueError(f"action token counts sum to {sum(counts)} but there are {len(kl)} token KL values")
    if not (len(counts) == len(rewards) == len(child_values)):
        raise ValueError("one reward and one child value per action are required")
    out = -beta * kl
    end = 0
    for n, r, v in zip(counts, rewards, child_values):
        if n < 1:
            raise ValueError("every action has at least one token")
        end += n
        out[end - 1] += r + gamma1 * v
    return out


# --------------------------------------------------------------------------------------------------------------
# the interface


@dataclass
class SessionTargets:
    advantages: np.ndarray  # per response token
    returns: np.ndarray  # per response token (paper_mc: R̂_t at the first token of action t)
    value_mask: np.ndarray  # positions that train V̂ (paper_mc: each action's first token; gae: every token)
    session_return: float  # R̂ at the session's start state
    kl: float  # Σ over the session's tokens of log π_old − log π_sft
    bootstrap: float  # γ1 · Σ_t Σ_j V̂(S_{q+p_j})


class Estimator(abc.ABC):
    """One way to turn a batch of sessions into :class:`SessionTargets`, the whole batch at once (a group baseline
    needs its neighbours). ``uses_value``: whether it reads V̂ (the trainer builds, trains and checkpoints a value
    model only for those)."""

    name: ClassVar[str]
    uses_value: ClassVar[bool] = True

    @abc.abstractmethod
    def targets(self, samples: Sequence["SessionSample"], logp_old: Sequence[np.ndarray],
                logp_ref: Sequence[np.ndarray], values_old: Sequence[np.ndarray],
                cfg: "PPOConfig") -> list[SessionTargets]:
        """Per-token advantages and value targets of every session of the batch."""


class SessionEstimator(Estimator):
    """An estimator whose targets for a session read that session only (Eqs. 3–4, GAE)."""

    def targets(self, samples, logp_old, logp_ref, values_old, cfg) -> list[SessionTargets]:
        return [self.session(s, lo, lr, v, cfg) for s, lo, lr, v in zip(samples, logp_old, logp_ref, values_old)]

    @abc.abstractmethod
    def session(self, sample: "SessionSample", logp_old: np.ndarray, logp_ref: np.ndarray, values_old: np.ndarray,
                cfg: "PPOConfig") -> SessionTargets:
        """One session's targets."""


def _token_kl(logp_old, logp_ref) -> np.ndarray:
    return np.asarray(logp_old, dtype=np.float64) - np.asarray(logp_ref, dtype=np.float64)


class PaperMC(SessionEstimator):
    """PaSa Eqs. 3–4: R̂_t per action (reward, γ1-bootstrap on the sessions the action's papers start, −β·KL),
    Â = R̂ − V̂(s_t) shared by every token of action t; V̂ trained at each action's first token."""

    name = "paper_mc"

    def session(self, sample, logp_old, logp_ref, values_old, cfg) -> SessionTargets:
        n, steps, token_kl = len(sample.response_ids), sample.steps, _token_kl(logp_old, logp_ref)
        kl = [float(token_kl[s.start:s.end].sum()) for s in steps]
        R = session_returns([s.reward for s in steps], [s.child_values for s in steps], kl, cfg.gamma0, cfg.gamma1,
                            cfg.beta)
        A = advantages(R, values_old[[s.start for s in steps]])
        adv, ret, value_mask = np.zeros(n), np.zeros(n), np.zeros(n)
        for s, a_t, r_t in zip(steps, A, R):
            adv[s.start:s.end] = a_t  # every token of action t shares Â(s_t, a_t)
            ret[s.start] = r_t
            value_mask[s.start] = 1.0
        return SessionTargets(adv, ret, value_mask, float(R[0]), float(token_kl.sum()),
                              cfg.gamma1 * float(sum(s.child_values for s in steps)))


class GAE(SessionEstimator):
    """The official code's estimator: token-level GAE(γ0, λ) with −β·KL on every token and each action's reward
    (plus its γ1-bootstrap) on its last token; V̂ trained on every token."""

    name = "gae"

    def session(self, sample, logp_old, logp_ref, values_old, cfg) -> SessionTargets:
        steps, token_kl = sample.steps, _token_kl(logp_old, logp_ref)
        tok_r = gae_token_rewards([s.n_tokens for s in steps], [s.reward for s in steps],
                                  [s.child_values for s in steps], token_kl, cfg.gamma1, cfg.beta)
        adv, ret = gae(tok_r, values_old, gamma=cfg.gamma0, lam=cfg.gae_lambda)
        return SessionTargets(adv, ret, np.ones(len(adv)), float(ret[0]), float(token_kl.sum()),
                              cfg.gamma1 * float(sum(s.child_values for s in steps)))


# --------------------------------------------------------------------------------------------------------------
# critic-free: group baselines over whole crawls


def rloo_advantages(returns: Sequence[float], groups: Sequence) -> np.ndarray:
    """RLOO (Kool et al. 2019, "Buy 4 REINFORCE samples, get a baseline for free!"; Ahmadian et al. 2024, "Back to
    Basics"): A_i = R_i − mean of the OTHER returns of i's group = G/(G−1)·(R_i − mean). A group of one has no
    baseline: its advantage is 0."""
    R = np.asarray(returns, dtype=np.float64)
    out = np.zeros_like(R)
    for idx in _group_index(groups).values():
        if len(idx) > 1:
            out[idx] = R[idx] - (R[idx].sum() - R[idx]) / (len(idx) - 1)
    return out


def grpo_advantages(returns: Sequence[float], groups: Sequence, scale: bool = True, eps: float = 1e-4) -> np.ndarray:
    """GRPO's outcome advantage (Shao et al. 2024, DeepSeekMath §4.1.2): A_i = (R_i − mean)/(std + eps) over i's
    group, std the sample standard deviation (Bessel, as TRL's GRPOTrainer: ``torch.std``; its eps 1e-4).
    ``scale=False`` is Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): R_i − mean, no division
    by std (which up-weights groups whose returns barely differ); Dr. GRPO's other fix, no per-sequence length
    normalisation, is already how the trainer sums the loss (over a minibatch's tokens / their count). A group of
    one gets 0."""
    R = np.asarray(returns, dtype=np.float64)
    out = np.zeros_like(R)
    for idx in _group_index(groups).values():
        if len(idx) > 1:
            c = R[idx] - R[idx].mean()
            out[idx] = c / (R[idx].std(ddof=1) + eps) if scale else c
    return out


def _group_index(keys: Sequence) -> dict:
    out: dict = {}
    for i, k in enumerate(keys):
        out.setdefault(k, []).append(i)
    return {k: np.asarray(v) for k, v in out.items()}


class GroupEstimator(Estimator):
    """Critic-free estimators over whole crawls (``ppo.estimator=grpo|rloo``; rollout.collect_crawls samples
    ``ppo.group_size`` crawls of each query from the current policy, each to the end of its budgets).

    A crawl's return is R = Σ over ALL its sessions and actions of Eq. 1's r(s_t, a_t) − β · Σ over all its
    generated tokens of log π_old/π_sft: an [Expand] whose papers lead to gold one session later is credited
    through the crawl's return, not through V̂ (there is none: γ1 and the bootstrap play no part). The KL is in the
    return, as Eq. 3 puts it (and TRL's PPO/RLOO do), by default: then Eq. 5's loss is unchanged and the update
    needs no extra reference forward (log π_sft comes from the scoring pass every estimator already runs).
    ``ppo.kl_in_return=false`` moves it into the loss instead (β·k3 per token, TRL's GRPO; the same scored
    log π_sft, still no extra forward). Measured on the cost task (tests/train/ppo/test_learning.py): at β = 0.1
    neither placement learns a −0.1 action cost in 30 steps; at β = 0 both grpo and rloo do. The crawl's group
    advantage goes to EVERY generated token of every session of the crawl; Eq. 5's clip is unchanged; no value loss (value targets empty). Crawls are grouped by query id (two draws
    of one query in a step share a group: same query, same baseline). Only sessions with generated tokens are
    samples: under ``crawler.policy.search=user_query`` the environment's own search session (no tokens, the same
    query for every member) is not in R, and a crawl with no generated token at all has nothing to train and is not
    in its group's baseline."""

    uses_value = False

    @abc.abstractmethod
    def advantages(self, returns: np.ndarray, groups: list, cfg: "PPOConfig") -> np.ndarray:
        """One advantage per crawl from the crawls' returns and their groups (query ids)."""

    def targets(self, samples, logp_old, logp_ref, values_old, cfg) -> list[SessionTargets]:
        kl = [float(_token_kl(lo, lr).sum()) for lo, lr in zip(logp_old, logp_ref)]
        ret: dict[int, float] = {}
        query: dict[int, str] = {}
        for s, k in zip(samples, kl):
            if s.crawl is None:
                raise ValueError(f"ppo.estimator={self.name} needs whole crawls (rollout.collect_crawls): a session "
                                 f"without a crawl tag")
            ret[s.crawl] = ret.get(s.crawl, 0.0) + s.reward - (cfg.beta * k if cfg.kl_in_return else 0.0)
            query[s.crawl] = s.record.qid
        crawls = sorted(ret)
        adv = dict(zip(crawls, self.advantages(np.array([ret[c] for c in crawls]), [query[c] for c in crawls], cfg)))
        out = []
        for s, k in zip(samples, kl):
            n = len(s.response_ids)
            out.append(SessionTargets(np.full(n, adv[s.crawl]), np.zeros(n), np.zeros(n), ret[s.crawl], k, 0.0))
        return out


class RLOO(GroupEstimator):
    """``ppo.estimator=rloo``: :func:`rloo_advantages` over the query's crawls."""

    name = "rloo"

    def advantages(self, returns, groups, cfg):
        return rloo_advantages(returns, groups)


class GRPO(GroupEstimator):
    """``ppo.estimator=grpo``: :func:`grpo_advantages`; ``ppo.scale_rewards=false`` = Dr. GRPO."""

    name = "grpo"

    def advantages(self, returns, groups, cfg):
        return grpo_advantages(returns, groups, scale=cfg.scale_rewards)


ESTIMATORS: dict[str, Estimator] = {e.name: e for e in (PaperMC(), GAE(), GRPO(), RLOO())}


def group_stats(samples: Sequence["SessionSample"], targets: Sequence[SessionTargets],
                beta: float = 0.0, forced_from: int | None = None) -> dict[str, float]:
    """Is there a signal for the group baseline? (Logged every step under grpo / rloo.) Per query, its
    crawls' returns R (``session_return`` holds the crawl's R) and gold hits. ``group/return_std``: mean over groups
    of the std of R; ``group/flat_share``: share of groups whose crawls all returned the same R (every token's
    advantage 0: nothing to learn from that query this step); ``group/gold_differs_share``: share of groups whose
    crawls found different numbers of gold papers; per crawl, its searches and gold hits. ``group/reward_std`` and
    ``group/kl_std``: the within-group spreads of R's two parts, Σ Eq. 1 rewards and β · Σ token KL to π_sft — when
    the second is the larger, the KL decides which crawl of a group is reinforced more than the reward does.
    ``forced_from``: crawls with this index or above were forced to search more (``ppo.forced_members``); their
    searches, gold hits and Eq. 1 reward are logged apart from the free crawls' (``group/free_*``, ``group/forced_*``):
    whether the second search pays, and whether π learns to write it unforced."""
    crawl_ret: dict[int, float] = {}
    crawl_rew: dict[int, float] = {}
    crawl_kl: dict[int, float] = {}
    crawl_gold: dict[int, int] = {}
    crawl_search: dict[int, int] = {}
    group: dict[int, str] = {}
    for s, t in zip(samples, targets):
        if s.crawl is None:
            return {}
        crawl_ret[s.crawl] = t.session_return
        crawl_rew[s.crawl] = crawl_rew.get(s.crawl, 0.0) + s.reward
        crawl_kl[s.crawl] = crawl_kl.get(s.crawl, 0.0) + beta * t.kl
        crawl_gold[s.crawl] = crawl_gold.get(s.crawl, 0) + sum(a.gold_hits for a in s.steps)
        crawl_search[s.crawl] = crawl_search.get(s.crawl, 0) + sum(a.kind == "search" for a in s.steps)
        group[s.crawl] = s.record.qid
    by_query: dict[str, list[int]] = {}
    for c, q in group.items():
        by_query.setdefault(q, []).append(c)
    if not by_query:
        return {}
    def spread(part: dict[int, float]) -> float:
        return float(np.mean([np.std([part[c] for c in cs]) for cs in by_query.values()]))

    stds = [float(np.std([crawl_ret[c] for c in cs])) for cs in by_query.values()]
    return {
        "group/return_std": float(np.mean(stds)),
        "group/reward_std": spread(crawl_rew),
        "group/kl_std": spread(crawl_kl),
        "group/flat_share": float(np.mean([sd < 1e-9 for sd in stds])),
        "group/gold_differs_share": float(np.mean([len({crawl_gold[c] for c in cs}) > 1 for cs in by_query.values()])),
        "group/searches_per_crawl": float(np.mean(list(crawl_search.values()))),
        "group/gold_hits_per_crawl": float(np.mean(list(crawl_gold.values()))),
        **(_forced_split(forced_from, crawl_search, crawl_gold, crawl_rew) if forced_from is not None else {}),
    }


def _forced_split(forced_from: int, searches: dict[int, int], gold: dict[int, int],
                  reward: dict[int, float]) -> dict[str, float]:
    out = {}
    for name, keep in (("free", lambda c: c < forced_from), ("forced", lambda c: c >= forced_from)):
        cs = [c for c in searches if keep(c)]
        if cs:
            out[f"group/{name}_searches_per_crawl"] = float(np.mean([searches[c] for c in cs]))
            out[f"group/{name}_gold_hits_per_crawl"] = float(np.mean([gold[c] for c in cs]))
            out[f"group/{name}_reward_per_crawl"] = float(np.mean([reward[c] for c in cs]))
    return out


def session_targets(sample: "SessionSample", logp_old: np.ndarray, logp_ref: np.ndarray, values_old: np.ndarray,
                    cfg: "PPOConfig") -> SessionTargets:
    """One session's targets under ``cfg.estimator`` (``paper_mc`` or ``gae``: a group estimator needs the batch)."""
    estimator = ESTIMATORS[cfg.estimator]
    if not isinstance(estimator, SessionEstimator):
        raise ValueError(f"ppo.estimator={cfg.estimator} scores whole batches of crawls: use Estimator.targets")
    return estimator.session(sample, logp_old, logp_ref, values_old, cfg)
