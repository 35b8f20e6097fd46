"""Credit-assignment granularity of session-level PPO, hand-computed (tests/train/ppo/test_math.py style).

The default (`ppo.estimator=paper_mc`) steps per ACTION: Â(s_t, a_t) of Eq. 4 is copied to every token of the
action and V̂ is trained at action starts only. §4.2's MDP is token-level; its Monte-Carlo form is
`ppo.estimator=gae ppo.gae_lambda=1.0`: per-token rewards (−β·KL on every token, r + γ1·ΣV̂ on an action's last
token), the return of every token is its reward-to-go, Â_t = R̂_t − V̂(token t), V̂ trained at every token."""

from __future__ import annotations

import numpy as np
import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.pasa.trajectory import SessionRecord
from scholar_agents.train.ppo.config import to_ppo_config
from scholar_agents.train.ppo.rollout import ActionStep, SessionSample
from scholar_agents.train.ppo.estimators import session_targets

# one session, 5 response tokens: a [Search] on tokens 0-2 (reward 2.9, the papers it added have Σ V̂ = 1.0),
# then [Stop] on tokens 3-4 (reward 0)
TOKEN_KL = np.array([0.1, 0.2, -0.1, 0.3, 0.0])  # log π_old − log π_sft per token
VALUES = np.array([1.0, 0.5, 0.2, 0.4, 0.1])  # V̂ at every response token


def _session() -> tuple[SessionSample, np.ndarray, np.ndarray]:
    record = SessionRecord(session_id="q#0/0", qid="q", user_query="q", before=None, start_state="S_q",
                           paper_id=None, depth=0, parent_session_id=None, parent_action_index=None, prompt=[],
                           prompt_token_ids=[1, 2], response_text="", response_token_ids=[5, 6, 7, 8, 9],
                           response_logprobs=None, finish_reason="stop")
    steps = [ActionStep("search", 0, 3, reward=2.9, child_values=1.0), ActionStep("stop", 3, 5, reward=0.0)]
    logp_ref = np.full(5, -1.0)
    return SessionSample(record, steps), logp_ref + TOKEN_KL, logp_ref


def _targets(*overrides):
    cfg = to_ppo_config(compose("train_crawler_ppo", list(overrides)).ppo)
    sample, logp_old, logp_ref = _session()
    return cfg, session_targets(sample, logp_old, logp_ref, VALUES, cfg)


def test_token_level_variant_is_gae_with_lambda_one():
    cfg, t = _targets("ppo.estimator=gae", "ppo.gae_lambda=1.0")
    assert (cfg.estimator, cfg.gae_lambda, cfg.gamma0, cfg.gamma1, cfg.beta) == ("gae", 1.0, 1.0, 0.1, 0.1)
    # token rewards: −0.1·KL, plus 2.9 + 0.1·1.0 on the [Search]'s last token (2) and 0 on the [Stop]'s (4)
    #   [-0.01, -0.02, 0.01 + 3.0, -0.03, 0.0]; with γ0 = λ = 1 the return is the reward-to-go:
    returns = [2.95, 2.96, 2.98, -0.03, 0.0]
    np.testing.assert_allclose(t.returns, returns, atol=1e-12)
    np.testing.assert_allclose(t.advantages, np.array(returns) - VALUES, atol=1e-12)  # a different Â per token
    np.testing.assert_array_equal(t.value_mask, np.ones(5))  # V̂ trained at every token
    assert t.session_return == pytest.approx(2.95)


def test_action_level_default_copies_the_action_advantage_to_its_tokens():
    cfg, t = _targets()
    assert cfg.estimator == "paper_mc"
    # Eq. 3 per action: [Search] 2.9 + 0.1·1.0 − 0.1·(0.1 + 0.2 − 0.1) = 2.98, [Stop] −0.1·0.3 = −0.03
    # R̂ = [2.95, −0.03]; Â = R̂ − V̂(action start) = [2.95 − 1.0, −0.03 − 0.4]
    np.testing.assert_allclose(t.advantages, [1.95, 1.95, 1.95, -0.43, -0.43], atol=1e-12)
    np.testing.assert_array_equal(t.value_mask, [1, 0, 0, 1, 0])  # V̂ trained at action starts
    np.testing.assert_allclose(t.returns[[0, 3]], [2.95, -0.03], atol=1e-12)
    # the two granularities agree where they meet: at an action's first token (γ0 = λ = 1)
    _, tok = _targets("ppo.estimator=gae", "ppo.gae_lambda=1.0")
    np.testing.assert_allclose(tok.returns[[0, 3]], t.returns[[0, 3]], atol=1e-12)
    np.testing.assert_allclose(tok.advantages[[0, 3]], t.advantages[[0, 3]], atol=1e-12)
