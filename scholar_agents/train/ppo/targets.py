"""A step's training targets: the sessions scored (:mod:`.scoring`), returns and advantages from ``ppo.estimator``
(:mod:`.estimators`, Eqs. 3–4), the optional value-bias start and advantage whitening, and the metrics that describe
them. Each is one function here; :func:`compute_targets` runs them in order.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from scholar_agents.runtime import collectives
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.engine import TrainEngine
from scholar_agents.train.ppo.estimators import ESTIMATORS, SessionTargets, group_stats
from scholar_agents.train.ppo.losses import explained_variance
from scholar_agents.train.ppo.rollout import SessionSample, first_forced_crawl
from scholar_agents.train.ppo.scoring import Scorer, Scores

log = logging.getLogger(__name__)


def estimate(scorer: Scorer, samples: list[SessionSample], frozen: bool,
             p: PPOConfig) -> tuple[list[SessionTargets], Scores, int]:
    """Score the sessions and their children's start states, then the estimator's targets. Returns (targets,
    scores, number of child start states valued)."""
    n_children = scorer.child_values(samples)
    scores = scorer.score(samples, frozen)
    targets = ESTIMATORS[p.estimator].targets(samples, scores.logp_old, scores.logp_ref, scores.values, p)
    return targets, scores, n_children


def shift_value_to_mean_return(engine: TrainEngine, targets: list[SessionTargets], values: list[np.ndarray]) -> None:
    """``ppo.init_value_to_mean_return``: add (mean R̂ − mean V̂) over all processes to the value head's bias."""
    vm = [t.value_mask.astype(bool) for t in targets]
    diff = np.concatenate([t.returns[m] - v[m] for t, v, m in zip(targets, values, vm)]) if targets else np.zeros(0)
    # sums and counts, not per-process means: processes hold different numbers of value tokens, and the shift
    # must be what one process holding the whole global batch would compute
    tot = collectives.mean_over_processes({"diff_sum": float(diff.sum()), "count": float(len(diff))})
    gap = tot["diff_sum"] / max(tot["count"], 1.0)
    engine.shift_value_bias(gap)
    log.info("value head bias shifted by %.3f to the first batch's mean return", gap)


def whiten_advantages(targets: list[SessionTargets]) -> None:
    """``ppo.normalize_advantages`` (CleanRL's; the paper does not say): zero mean, unit std over this process's
    tokens."""
    if not targets:
        return
    allv = np.concatenate([t.advantages for t in targets])
    mu, sd = allv.mean(), allv.std() + 1e-8
    for t in targets:
        t.advantages = (t.advantages - mu) / sd


def target_metrics(targets: list[SessionTargets], values: list[np.ndarray], beta: float) -> dict[str, float]:
    """Returns, values, advantages and the KL to π_sft of a step, for the logs."""
    vm = [t.value_mask.astype(bool) for t in targets]
    rets = np.concatenate([t.returns[m] for t, m in zip(targets, vm)]) if targets else np.zeros(0)
    vals = np.concatenate([v[m] for v, m in zip(values, vm)]) if targets else np.zeros(0)
    ntok = sum(len(t.advantages) for t in targets)
    return {
        "rollout/session_return": float(np.mean([t.session_return for t in targets])) if targets else 0.0,
        "reward/kl_penalty": -beta * float(np.mean([t.kl for t in targets])) if targets else 0.0,
        "reward/bootstrap": float(np.mean([t.bootstrap for t in targets])) if targets else 0.0,
        "actor/kl_to_sft": float(sum(t.kl for t in targets) / max(ntok, 1)),
        "critic/returns_mean": float(rets.mean()) if len(rets) else 0.0,
        "critic/values_mean": float(vals.mean()) if len(vals) else 0.0,
        "critic/advantages_mean": float(np.mean(np.concatenate([t.advantages for t in targets])))
        if targets else 0.0,
        "critic/vf_explained_var": explained_variance(torch.tensor(vals), torch.tensor(rets))
        if len(rets) > 1 else float("nan"),
    }


def crawl_group_metrics(samples: list[SessionSample], targets: list[SessionTargets],
                        p: PPOConfig) -> dict[str, float]:
    """The critic-free estimators' group statistics (:func:`.estimators.group_stats`), forced crawls apart; none
    for the estimators with a critic."""
    if ESTIMATORS[p.estimator].uses_value:
        return {}
    return group_stats(samples, targets, p.beta, first_forced_crawl(p.group_size, p.forced_members,
                                                                     p.queries_per_step))


def compute_targets(scorer: Scorer, engine: TrainEngine, p: PPOConfig, samples: list[SessionSample], frozen: bool,
                    init_value: bool = False) -> tuple[list[SessionTargets], dict, dict]:
    """(targets, the scores the update reads as ``logp_old`` / ``values_old`` / ``logp_ref``, metrics)."""
    t0 = time.perf_counter()
    targets, scores, n_children = estimate(scorer, samples, frozen, p)
    if init_value:  # every rank, sessions or not: the shift and the re-scoring are collectives
        shift_value_to_mean_return(engine, targets, scores.values)
        targets, scores, n_children = estimate(scorer, samples, frozen, p)
    if p.normalize_advantages:
        whiten_advantages(targets)
    metrics = {**target_metrics(targets, scores.values, p.beta), "rollout/child_states_valued": n_children,
               "timing_s/returns": time.perf_counter() - t0, **crawl_group_metrics(samples, targets, p)}
    batch = {"logp_old": scores.logp_old, "values_old": scores.values, "logp_ref": scores.logp_ref}
    return targets, batch, metrics
