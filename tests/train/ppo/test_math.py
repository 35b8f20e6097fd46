"""Session-level PPO math against hand-computed examples (PaSa Eqs. 1–8)."""

import math

import numpy as np
import pytest
import torch

from scholar_agents.train.ppo.losses import explained_variance, policy_loss, total_loss, value_loss
from scholar_agents.train.ppo.rewards import RewardConfig, action_reward, match_indicators
from scholar_agents.train.ppo.estimators import (
    action_kl,
    advantages,
    gae,
    gae_token_rewards,
    session_returns,
)


def test_reward_eq1_eq2_gold_or_selector():
    cfg = RewardConfig()  # alpha 1.5, c(search) 0.1
    # p1 gold, p2 selector-accepted, p3 neither
    r, hits = action_reward("search", ["p1", "p2", "p3"], {"p1"}, [False, True, False], cfg)
    assert hits == 2 and r == pytest.approx(1.5 * 2 - 0.1)
    # Table 5 ablation: without the Selector as reward model only gold counts
    r, hits = action_reward("search", ["p1", "p2", "p3"], {"p1"}, [False, True, False],
                            RewardConfig(use_selector=False))
    assert hits == 1 and r == pytest.approx(1.5 - 0.1)
    # [Stop] adds nothing and costs nothing
    assert action_reward("stop", [], {"p1"}, [], cfg) == (0.0, 0)
    assert action_reward("expand", [], set(), [], cfg)[0] == pytest.approx(-0.1)


def test_reward_errors_are_clear():
    with pytest.raises(ValueError, match="unknown action kind"):
        RewardConfig().cost("jump")
    with pytest.raises(ValueError, match="needs the Selector"):
        match_indicators(["p"], set(), None, use_selector=True)
    with pytest.raises(ValueError, match="2 Selector decisions for 1 papers"):
        match_indicators(["p"], set(), [True, False], use_selector=True)


def test_session_returns_single_session_hand_computed():
    # Two [Search] actions then [Stop]; gamma0 = 0.5 so the discount is visible; no children, no KL.
    R = session_returns(rewards=[2.9, -0.1, 0.0], child_values=[0, 0, 0], kl=[0, 0, 0], gamma0=0.5, gamma1=0.1,
                        beta=0.1)
    # R2 = 0; R1 = -0.1 + 0.5*0 = -0.1; R0 = 2.9 + 0.5*(-0.1) = 2.85
    np.testing.assert_allclose(R, [2.85, -0.1, 0.0])


def test_session_returns_cross_session_bootstrap_and_kl():
    # a0 = [Search] adds papers whose child sessions have V = 0.7 and 1.3 (sum 2.0); a1 = [Stop].
    # KL(a0) = 0.4, KL(a1) = -0.2; paper's gamma0 = 1, gamma1 = 0.1, beta = 0.1.
    R = session_returns(rewards=[1.4, 0.0], child_values=[2.0, 0.0], kl=[0.4, -0.2])
    g1 = 0.0 + 0.1 * 0.0 - 0.1 * (-0.2)  # 0.02
    g0 = 1.4 + 0.1 * 2.0 - 0.1 * 0.4  # 1.56
    np.testing.assert_allclose(R, [g0 + g1, g1])
    np.testing.assert_allclose(advantages(R, [1.0, 0.5]), [g0 + g1 - 1.0, g1 - 0.5])


def test_multi_session_bootstrap_matches_child_session_return():
    # Parent session: [Expand] adds 1 paper, then [Stop]. The child session (started from that paper) returns 3.0.
    # With a perfect critic V(child start) = 3.0 the parent's return includes gamma1 * 3.0.
    child = session_returns([3.1, -0.1, 0.0], [0, 0, 0], [0, 0, 0])
    assert child[0] == pytest.approx(3.0)
    parent = session_returns([1.4, 0.0], [child[0], 0.0], [0.0, 0.0], gamma1=0.1)
    assert parent[0] == pytest.approx(1.4 + 0.1 * 3.0)


def test_action_kl_sums_token_log_ratios():
    assert action_kl([-1.0, -2.0], [-1.5, -1.0]) == pytest.approx(0.5 - 1.0)
    with pytest.raises(ValueError):
        action_kl([-1.0], [-1.0, -2.0])


def test_gae_hand_computed_and_reward_placement():
    tok_r = gae_token_rewards([2, 1], rewards=[1.0, 0.0], child_values=[2.0, 0.0], token_kl=[0.1, 0.2, 0.3],
                              gamma1=0.1, beta=0.5)
    np.testing.assert_allclose(tok_r, [-0.05, -0.1 + 1.0 + 0.2, -0.15])
    adv, ret = gae([1.0, 0.0, 2.0], [0.5, 0.5, 0.5], gamma=1.0, lam=0.5)
    # deltas: d2 = 2 - .5 = 1.5 ; d1 = 0 + .5 - .5 = 0 ; d0 = 1 + .5 - .5 = 1
    # A2 = 1.5 ; A1 = 0 + .5*1.5 = .75 ; A0 = 1 + .5*.75 = 1.375
    np.testing.assert_allclose(adv, [1.375, 0.75, 1.5])
    np.testing.assert_allclose(ret, adv + 0.5)
    with pytest.raises(ValueError, match="sum to"):
        gae_token_rewards([2], [1.0], [0.0], [0.1])


def test_policy_loss_clipping_and_diagnostics():
    logp_old = torch.log(torch.tensor([0.5, 0.5, 0.5]))
    logp = torch.log(torch.tensor([0.75, 0.5, 0.25]))  # ratios 1.5, 1.0, 0.5
    adv = torch.tensor([1.0, 1.0, -1.0])
    mask = torch.tensor([1, 1, 1])
    loss, d = policy_loss(logp, logp_old, adv, mask, clip_eps=0.2)
    # token0: min(1.5, 1.2) = 1.2 ; token1: 1.0 ; token2: min(-0.5, -0.8) = -0.8  -> mean of negatives
    assert loss.item() == pytest.approx(-(1.2 + 1.0 - 0.8) / 3, abs=1e-6)
    assert d["clipfrac"].item() == pytest.approx(2 / 3)
    expected_kl = np.mean([(r - 1) - math.log(r) for r in (1.5, 1.0, 0.5)])
    assert d["approx_kl"].item() == pytest.approx(expected_kl, abs=1e-6)
    # masked tokens do not count
    loss_m, _ = policy_loss(logp, logp_old, adv, torch.tensor([1, 1, 0]))
    assert loss_m.item() == pytest.approx(-(1.2 + 1.0) / 2, abs=1e-6)


def test_value_loss_clipped_eq6_eq7_and_total_eq8():
    v_old = torch.tensor([1.0, 1.0])
    v = torch.tensor([2.0, 1.1])
    R = torch.tensor([3.0, 0.0])
    loss, d = value_loss(v, v_old, R, torch.tensor([1, 1]), clip_eps=0.2)
    # token0: max((3-2)^2, (3-1.2)^2) = 3.24 ; token1: max((0-1.1)^2, (0-1.1)^2) = 1.21
    assert loss.item() == pytest.approx((3.24 + 1.21) / 2, abs=1e-6)
    assert d["vf_clipfrac"].item() == pytest.approx(0.5)
    assert total_loss(torch.tensor(1.0), loss, eta=10.0).item() == pytest.approx(1.0 + 10 * (3.24 + 1.21) / 2,
                                                                                 abs=1e-5)


def test_explained_variance():
    R = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(R, R) == pytest.approx(1.0)
    assert explained_variance(torch.full((3,), 2.0), R) == pytest.approx(0.0)
    assert math.isnan(explained_variance(R, torch.ones(3)))
