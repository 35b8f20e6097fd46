"""The critic-free estimators (ppo.estimator=grpo|rloo) against hand-computed groups, and their wiring: crawl
returns (Eq. 1 rewards of every action of the crawl − β·KL of every token), grouping by query, the advantage on every
token, no value targets; the registry and the config agree on which estimators have a critic."""

import numpy as np
import pytest

from scholar_agents.pasa.trajectory import SessionRecord
from scholar_agents.train.ppo import config as ppo_config
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.estimators import (
    ESTIMATORS,
    SessionTargets,
    group_stats,
    grpo_advantages,
    rloo_advantages,
)
from scholar_agents.train.ppo.rollout import ActionStep, SessionSample


def test_rloo_is_the_leave_one_out_baseline():
    # group a: returns 1, 2, 6 -> baselines (2+6)/2=4, (1+6)/2=3.5, (1+2)/2=1.5; group b: 0, 4 -> baselines 4, 0
    adv = rloo_advantages([1.0, 2.0, 6.0, 0.0, 4.0], ["a", "a", "a", "b", "b"])
    np.testing.assert_allclose(adv, [1 - 4, 2 - 3.5, 6 - 1.5, -4, 4])
    # = G/(G-1)·(R − mean); a group of one has no baseline
    np.testing.assert_allclose(adv[:3], 1.5 * (np.array([1, 2, 6]) - 3))
    assert rloo_advantages([5.0], ["x"]).tolist() == [0.0]


def test_grpo_scales_by_the_group_std_and_dr_grpo_does_not():
    # group a: 1, 2, 6: mean 3, sample std sqrt(((−2)²+(−1)²+3²)/2) = sqrt(7); group b: 0, 4: mean 2, std sqrt(8)
    R, g = [1.0, 2.0, 6.0, 0.0, 4.0], ["a", "a", "a", "b", "b"]
    np.testing.assert_allclose(grpo_advantages(R, g, eps=0.0),
                               [-2 / 7 ** 0.5, -1 / 7 ** 0.5, 3 / 7 ** 0.5, -2 / 8 ** 0.5, 2 / 8 ** 0.5])
    np.testing.assert_allclose(grpo_advantages(R, g, scale=False), [-2, -1, 3, -2, 2])  # Dr. GRPO: R − mean
    # a group whose returns tie gets 0 (not 0/0), with or without scaling
    assert grpo_advantages([0.3, 0.3], ["a", "a"]).tolist() == [0.0, 0.0]
    assert grpo_advantages([7.0], ["a"]).tolist() == [0.0]


def _sample(qid: str, crawl: int, n_tokens: int, rewards: list[float]) -> SessionSample:
    rec = SessionRecord(session_id=f"{qid}#{crawl}/0", qid=qid, user_query=qid, before=None, start_state="S_q+p",
                        paper_id="p", depth=1, parent_session_id=None, parent_action_index=None, prompt=[],
                        prompt_token_ids=[1], response_text="", response_token_ids=list(range(n_tokens)),
                        response_logprobs=None, finish_reason="stop")
    cut = np.linspace(0, n_tokens, len(rewards) + 1).astype(int)
    steps = [ActionStep("expand", int(a), int(b), reward=r) for a, b, r in zip(cut[:-1], cut[1:], rewards)]
    return SessionSample(rec, steps, crawl)


@pytest.mark.parametrize("name", ["rloo", "grpo"])
def test_a_crawl_s_return_sums_all_its_sessions_and_its_advantage_goes_to_every_token(name):
    """Query q: crawl 0 = two sessions (rewards 1.4 − 0.1 and 3.0; token KL 0.5 on 2 tokens of the first), crawl 1 =
    one session (−0.1). Query r: crawls 2 and 3 (1.0 and 2.0). β = 0.1: R0 = 1.3 + 3.0 − 0.1·1.0 = 4.2, R1 = −0.1."""
    cfg = PPOConfig(estimator=name, beta=0.1, group_size=2, scale_rewards=False)
    samples = [_sample("q", 0, 4, [1.4, -0.1]), _sample("q", 1, 3, [-0.1]), _sample("q", 0, 2, [3.0]),
               _sample("r", 2, 2, [1.0]), _sample("r", 3, 2, [2.0])]
    logp_old = [np.array([0.0, -0.5, -0.5, 0.0]), np.zeros(3), np.zeros(2), np.zeros(2), np.zeros(2)]
    logp_ref = [np.array([0.0, -1.0, -1.0, 0.0]), np.zeros(3), np.zeros(2), np.zeros(2), np.zeros(2)]
    values = [np.full(len(lo), 9.0) for lo in logp_old]  # ignored: no critic
    est = ESTIMATORS[name]
    assert est.uses_value is False
    t = est.targets(samples, logp_old, logp_ref, values, cfg)
    R0, R1 = 4.2, -0.1
    # G = 2: RLOO's baseline is the other crawl; Dr. GRPO's is the mean — both give ±(R0 − R1)/2 · (2 for RLOO)
    a0 = (R0 - R1) if name == "rloo" else (R0 - R1) / 2
    a2 = (1.0 - 2.0) if name == "rloo" else -0.5
    for k, a in zip(range(5), [a0, -a0, a0, a2, -a2]):
        np.testing.assert_allclose(t[k].advantages, np.full(len(samples[k].response_ids), a))
        assert t[k].value_mask.sum() == 0 and not t[k].returns.any() and t[k].bootstrap == 0.0
    assert t[0].session_return == pytest.approx(R0) and t[2].session_return == pytest.approx(R0)
    assert t[0].kl == pytest.approx(1.0) and t[1].kl == 0.0


def test_group_estimators_refuse_sessions_without_a_crawl():
    s = _sample("q", 0, 2, [1.0])
    s.crawl = None
    with pytest.raises(ValueError, match="needs whole crawls"):
        ESTIMATORS["grpo"].targets([s], [np.zeros(2)], [np.zeros(2)], [np.zeros(2)], PPOConfig(estimator="grpo"))


def test_config_and_registry_agree_and_the_value_warm_up_is_forced_off():
    assert set(ESTIMATORS) == set(ppo_config.ESTIMATORS)
    assert {n for n, e in ESTIMATORS.items() if not e.uses_value} == set(ppo_config.CRITIC_FREE) == {"grpo", "rloo"}
    c = PPOConfig(estimator="rloo", policy_freeze_steps=50, init_value_to_mean_return=True)
    assert c.policy_freeze_steps == 0 and not c.init_value_to_mean_return and not c.uses_value
    assert PPOConfig().uses_value and PPOConfig().policy_freeze_steps == 50
    with pytest.raises(ValueError, match="group_size must be >= 2"):
        PPOConfig(estimator="grpo", group_size=1)
    with pytest.raises(ValueError, match="ppo.estimator must be one of"):
        PPOConfig(estimator="ppo")
    # forced exploration: groups only, at least one crawl left to the policy, at least two searches
    assert PPOConfig(estimator="rloo", group_size=4, forced_members=3).forced_members == 3
    for bad, match in (({"forced_members": 4}, "at least one crawl"), ({"forced_members": 1, "forced_searches": 1},
                                                                       "forced_searches must be >= 2")):
        with pytest.raises(ValueError, match=match):
            PPOConfig(estimator="rloo", group_size=4, **bad)
    with pytest.raises(ValueError, match="forced_members is for ppo.estimator=grpo"):
        PPOConfig(estimator="paper_mc", forced_members=1)


def test_forced_crawls_are_logged_apart_from_the_free_ones():
    """group_stats' free/forced split (ppo.forced_members): crawls from `forced_from` on are the forced ones."""
    samples = [_sample("q", c, 3, r) for c, r in enumerate([[0.0], [1.0], [1.0, 2.0], [1.0, 2.0, 2.0]])]
    for s in samples:
        for st in s.steps:
            st.kind = "search"
    zeros = [np.zeros(3)] * 4
    t = ESTIMATORS["rloo"].targets(samples, zeros, zeros, zeros, PPOConfig(estimator="rloo", group_size=4))
    m = group_stats(samples, t, forced_from=2)
    assert m["group/free_reward_per_crawl"] == pytest.approx(0.5) and m["group/forced_reward_per_crawl"] == 4.0
    assert m["group/free_searches_per_crawl"] == 1.0 and m["group/forced_searches_per_crawl"] == 2.5
    assert "group/free_reward_per_crawl" not in group_stats(samples, t)


def test_kl_in_return_false_leaves_the_kl_out_of_the_crawl_return():
    """ppo.kl_in_return=false (TRL's GRPO): R is Eq. 1's rewards alone; the KL goes to the loss (losses.kl_to_ref)."""
    cfg = PPOConfig(estimator="rloo", beta=0.1, group_size=2, kl_in_return=False)
    samples = [_sample("q", 0, 2, [1.0]), _sample("q", 1, 2, [0.0])]
    lo, lr = [np.array([0.0, -0.5]), np.zeros(2)], [np.array([0.0, -3.0]), np.zeros(2)]  # crawl 0: KL 2.5
    t = ESTIMATORS["rloo"].targets(samples, lo, lr, [np.zeros(2)] * 2, cfg)
    assert t[0].session_return == 1.0 and t[0].advantages[0] == 1.0 and t[0].kl == pytest.approx(2.5)
    t_in = ESTIMATORS["rloo"].targets(samples, lo, lr, [np.zeros(2)] * 2, PPOConfig(estimator="rloo", group_size=2))
    assert t_in[0].session_return == pytest.approx(1.0 - 0.25)
    with pytest.raises(ValueError, match="kl_in_return=false .* is for ppo.estimator=grpo"):
        PPOConfig(kl_in_return=False)


def test_kl_to_ref_is_k3_and_adds_beta_times_its_token_mean_to_the_policy_loss():
    import torch

    from scholar_agents.train.ppo.losses import kl_to_ref, policy_loss

    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    ref = torch.tensor([[-1.0, -1.0]])
    k3 = kl_to_ref(logp, ref)  # d = ref − logp = (0, 1): e^d − d − 1 = (0, e − 2)
    torch.testing.assert_close(k3, torch.tensor([[0.0, np.e - 2.0]]))
    mask, adv = torch.ones(1, 2), torch.zeros(1, 2)
    base, _ = policy_loss(logp, logp.detach(), adv, mask)
    with_kl, _ = policy_loss(logp, logp.detach(), adv, mask, kl_ref=(ref, 0.1))
    assert (with_kl - base).item() == pytest.approx(0.1 * (np.e - 2.0) / 2)
    with_kl.backward()  # d/dlogp of β·mean(e^d − d − 1) = β·(1 − e^d)/2: pulls logp toward the reference
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.1 * (1 - np.e) / 2]]))


def test_group_stats_measure_the_spread_a_group_baseline_learns_from():
    """Query q: crawl 0 (two sessions: a search hitting 1 gold, then an expand hitting 2) vs crawl 1 (one search,
    no gold): returns differ. Query r: crawls 2 and 3 return the same: a flat group, advantage 0 everywhere."""
    from scholar_agents.train.ppo.estimators import group_stats

    def sample(qid, crawl, kinds_gold, ret):
        s = _sample(qid, crawl, 2 * len(kinds_gold), [0.0] * len(kinds_gold))
        for step, (kind, gold) in zip(s.steps, kinds_gold):
            step.kind, step.gold_hits = kind, gold
        return s, ret

    pairs = [sample("q", 0, [("search", 1)], 3.0), sample("q", 0, [("expand", 2)], 3.0),
             sample("q", 1, [("search", 0), ("stop", 0)], -0.1), sample("r", 2, [("search", 0)], 0.5),
             sample("r", 3, [("search", 0)], 0.5)]
    samples = [s for s, _ in pairs]
    for s, r in zip(samples, [1.0, 2.0, -0.1, 0.5, 0.5]):
        s.steps[0].reward = r  # Σ Eq. 1 per crawl: q 3.0 vs -0.1, r 0.5 vs 0.5
    kls = [1.0, 1.0, 0.0, 3.0, 1.0]  # Σ token KL per crawl: q 2 vs 0, r 3 vs 1
    targets = [SessionTargets(np.zeros(1), np.zeros(1), np.zeros(1), r, k, 0.0) for (_, r), k in zip(pairs, kls)]
    m = group_stats(samples, targets, beta=0.5)
    assert m["group/reward_std"] == pytest.approx((1.55 + 0.0) / 2)
    assert m["group/kl_std"] == pytest.approx((0.5 + 0.5) / 2)  # β·KL: q 1.0 vs 0, r 1.5 vs 0.5
    assert m["group/return_std"] == pytest.approx((np.std([3.0, -0.1]) + 0.0) / 2)
    assert m["group/flat_share"] == 0.5 and m["group/gold_differs_share"] == 0.5
    assert m["group/searches_per_crawl"] == pytest.approx(1.0)  # 1 + 1 + 1 + 1 over 4 crawls
    assert m["group/gold_hits_per_crawl"] == pytest.approx(3 / 4)
    samples[0].crawl = None  # sessions without crawls (paper_mc's sampling): nothing to report
    assert group_stats(samples, targets) == {}
