"""A PPO minibatch's loss is a mean over its tokens, not over its forward batches: splitting the same sessions
into forward batches of 1 (grad_accum 4) or one forward batch of 4 (grad_accum 1) gives the same gradient and the
same weights after the update, although the sessions have different numbers of response and value-target tokens.
(The 2-process == 1-process check of the same normalisation across processes is tests/train/test_distributed_cpu.py.)
Tiny random Qwen2 and the bundled sample store, through the real `train crawler_ppo` config."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from scholar_agents.train.ppo.rollout import ActionStep, SessionSample
from tests.fixtures.ppo import make_trainer

# (response length, action boundaries) per session: different numbers of response tokens AND of value-target tokens
# (paper_mc trains V̂ at each action's first token)
SHAPES = [(24, [0]), (5, [0]), (17, [0, 6, 11]), (9, [0, 4])]

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _update(tr, samples, targets, batch, forward_batch_size: int, grad_accum: int):
    """One update with this split; returns the gradient the optimizer stepped with (by parameter name) and the
    weights after it (by state-dict name: the same names here)."""
    tr.pcfg.forward_batch_size, tr.pcfg.grad_accum = forward_batch_size, grad_accum
    grads: list[dict[str, torch.Tensor]] = []
    names = {id(q): n for n, q in tr.engine.model.named_parameters()}

    def record(optimizer, args, kwargs):  # observes the step: the gradient after the reduction, before clipping's use
        grads.append({names[id(q)]: q.grad.detach().clone() for grp in optimizer.param_groups for q in grp["params"]
                      if q.grad is not None})

    handle = tr.engine.optimizer.register_step_pre_hook(record)
    try:
        stats = tr.update(samples, targets, batch, step=0, frozen=False)
    finally:
        handle.remove()
    assert stats["update/minibatches"] == 1 and len(grads) == 1
    return grads[0], {k: v.detach().clone() for k, v in tr.engine.model.state_dict().items()}


def test_forward_batch_split_does_not_change_the_update(tiny_model_dir, ppo_papers, tmp_path):
    tr = make_trainer(tiny_model_dir, ppo_papers, tmp_path, policy_freeze_steps=0, ppo_epochs=1, max_new_tokens=24,
                      queries_per_step=4, expand_sessions="[0,0]", forward_batch_size=1, grad_accum=4,
                      max_grad_norm=1e9)
    try:
        rolled, _ = tr.rollout(0)
        assert len(rolled) == 4 and all(len(s.response_ids) == 24 for s in rolled)  # the random model never stops
        # the case that matters: sessions of different lengths, cut from the real rollouts (rewards kept per action)
        samples = []
        for s, (n, starts) in zip(rolled, SHAPES):
            record = dataclasses.replace(s.record, response_token_ids=s.response_ids[:n])
            ends = starts[1:] + [n]
            steps = [ActionStep("invalid", a, b, reward=-0.1 * (j + 1)) for j, (a, b) in enumerate(zip(starts, ends))]
            samples.append(SessionSample(record, steps))
        targets, batch, _ = tr.compute_targets(samples, frozen=False)
        model0 = copy.deepcopy(tr.engine.model.state_dict())
        opt0 = copy.deepcopy(tr.engine.optimizer.state_dict())
        g_split, w_split = _update(tr, samples, targets, batch, forward_batch_size=1, grad_accum=4)
        tr.engine.model.load_state_dict(model0)
        tr.engine.optimizer.load_state_dict(opt0)
        g_one, w_one = _update(tr, samples, targets, batch, forward_batch_size=4, grad_accum=1)
        assert g_split.keys() == g_one.keys() and len(g_one) > 0
        for k in g_one:
            torch.testing.assert_close(g_split[k], g_one[k], rtol=1e-4, atol=1e-6)
        # the weights after the step: AdamW's first step moves each weight by about lr·sign(g), so it is compared
        # where the gradient is above float noise (elsewhere the sign of a ~1e-9 gradient decides)
        for k, g in g_one.items():
            clear = g.abs() > 1e-6
            torch.testing.assert_close(w_split[k][clear], w_one[k][clear], rtol=1e-5, atol=1e-6)
    finally:
        tr.close()
