"""One PPO update (PaSa Eqs. 5–8): ``ppo_epochs`` passes of the clipped surrogate and the value loss over a step's
sessions, in minibatches of at most ``forward_batch_size × grad_accum`` sessions, each one optimizer step of the
engine (:mod:`.engine`).

Every process runs the same number of minibatches (the largest any process needs). Each minibatch's loss is a mean
over ALL its tokens, wherever they ran: the policy loss over its response tokens, the value loss over its
value-target tokens, both counted over every forward batch and every process (one all-reduce per epoch) — so a
token weighs the same whatever ``forward_batch_size``, ``grad_accum`` and the number of processes, and the gradient
is what one process holding the whole global batch in one forward batch would compute.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from scholar_agents.runtime import collectives
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.engine import TrainEngine
from scholar_agents.train.ppo.estimators import SessionTargets
from scholar_agents.train.ppo.losses import masked_mean, policy_loss, total_loss, value_loss
from scholar_agents.train.ppo.rollout import SessionSample
from scholar_agents.train.ppo.tensors import Batcher, chunks, response_entropy, response_logprobs, response_values
from scholar_agents.train.ppo.tensors import split_even


class PPOUpdate:
    """The update of one PPO step on ``engine``'s models; ``rank`` seeds this process's minibatch order."""

    def __init__(self, engine: TrainEngine, batcher: Batcher, p: PPOConfig, rank: int):
        self.engine, self.batcher, self.p, self.rank = engine, batcher, p, rank

    def __call__(self, samples: list[SessionSample], targets: list[SessionTargets], batch: dict, step: int,
                 frozen: bool) -> dict:
        """``batch``: the scores of :func:`.targets.compute_targets` (``logp_old``, ``values_old``, ``logp_ref``).
        While ``frozen`` (the first ``policy_freeze_steps`` steps, §5.1) only the value model learns."""
        p, engine = self.p, self.engine
        engine.model.train()
        n_local = len(samples)
        counts = collectives.all_gather_int(n_local)
        n_mb = max(1, max(math.ceil(c / (p.forward_batch_size * p.grad_accum)) for c in counts))
        sums: dict[str, float] = {}
        n_terms = 0
        grad_norms = []
        for epoch in range(p.ppo_epochs):
            g = torch.Generator().manual_seed(p.seed * 1_000_003 + step * 101 + epoch * 7 + self.rank)
            perm = torch.randperm(n_local, generator=g).tolist()
            minibatches = split_even(perm, n_mb)
            tokens = self.minibatch_tokens(minibatches, samples, targets)
            for k, mb in enumerate(minibatches):
                n_tokens, n_value_tokens = tokens[k]
                for micro, weight in engine.backward_passes(chunks(mb, p.forward_batch_size)):
                    if not micro:
                        loss, d = self.dummy_loss(frozen), {}
                    else:
                        loss, d = self.micro_loss([samples[i] for i in micro], [targets[i] for i in micro],
                                                  [batch["logp_old"][i] for i in micro],
                                                  [batch["values_old"][i] for i in micro], frozen,
                                                  n_tokens=n_tokens, n_value_tokens=n_value_tokens,
                                                  logp_ref=[batch["logp_ref"][i] for i in micro])
                    engine.backward(loss * weight)
                    if weight:
                        for key, val in d.items():
                            sums[key] = sums.get(key, 0.0) + val
                        n_terms += 1
                grad_norms.append(engine.step(frozen))
        stats = {k: v / max(n_terms, 1) for k, v in sums.items()}
        stats["actor/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        stats["actor/frozen"] = float(frozen)
        stats["actor/lr"] = engine.optimizer.param_groups[0]["lr"]
        stats["critic/lr"] = engine.optimizer.param_groups[1]["lr"] if p.uses_value else 0.0  # grpo/rloo: none
        stats["update/minibatches"] = n_mb * p.ppo_epochs
        return stats

    def minibatch_tokens(self, minibatches: list[list[int]], samples: list[SessionSample],
                         targets: list[SessionTargets]) -> list[tuple[float, float]]:
        """(response tokens, value-target tokens) of each minibatch, summed over every process: the divisors of
        its policy and value losses. One all-reduce for all of an epoch's minibatches."""
        local = [[float(sum(len(samples[i].response_ids) for i in mb)),
                  float(sum(targets[i].value_mask.sum() for i in mb))] for mb in minibatches]
        t = torch.tensor(local, dtype=torch.float64, device=self.batcher.device).reshape(len(minibatches), 2)
        collectives.all_reduce(t)
        return [(float(a), float(b)) for a, b in t.tolist()]

    def micro_loss(self, samples, targets, logp_old, values_old, frozen: bool, n_tokens: float | None = None,
                   n_value_tokens: float | None = None, logp_ref=None) -> tuple[torch.Tensor, dict]:
        """Eq. 8 on one forward batch. ``n_tokens`` / ``n_value_tokens``: the minibatch's response / value-target
        tokens over all processes (the losses are sums over this batch's tokens divided by them); ``None`` = this
        batch's own means. The logged losses are this batch's means either way."""
        p, bt = self.p, self.batcher
        b = bt.pack([(s.prompt_ids, s.response_ids) for s in samples])
        W = b.width
        adv = bt.grid([t.advantages for t in targets], W)
        ret = bt.grid([t.returns for t in targets], W)
        vmask = bt.grid([t.value_mask for t in targets], W)
        v_old = bt.grid(values_old, W)
        mask = b.response_mask.float()
        with bt.autocast():
            logits, v = self.engine.model(b.input_ids, b.attention_mask, b.position_ids, n_logits=W + 1,
                                          with_policy=not frozen, with_value=True, freeze_shared_backbone=frozen)
        values = response_values(v, W) if v is not None else v_old  # grpo / rloo: no V̂, the value loss is 0
        # the share of the minibatch's tokens this batch holds: turns the normalised losses back into batch means
        v_share = 1.0 if n_value_tokens is None else float(vmask.sum()) / max(n_value_tokens, 1.0)
        share = 1.0 if n_tokens is None else float(mask.sum()) / max(n_tokens, 1.0)
        l_value, vd = value_loss(values, v_old, ret, vmask, p.value_clip_eps, n_tokens=n_value_tokens)
        d = {"critic/vf_loss": l_value.item() / max(v_share, 1e-12), "critic/vf_clipfrac": vd["vf_clipfrac"].item()}
        if frozen:
            return p.eta * l_value, d
        logp = response_logprobs(logits, b.response_ids)
        kl_ref = None if p.kl_in_return else (bt.grid(logp_ref, W), p.beta)  # grpo/rloo: KL as a loss
        l_policy, pd = policy_loss(logp, bt.grid(logp_old, W), adv, mask, p.clip_eps, n_tokens, kl_ref)
        ent = masked_mean(response_entropy(logits.detach() if p.entropy_coef == 0 else logits), mask, n_tokens)
        loss = total_loss(l_policy, l_value, p.eta) - p.entropy_coef * ent  # Eq. 8
        pg, ent_mean = l_policy.item() / max(share, 1e-12), ent.item() / max(share, 1e-12)
        d.update({"actor/pg_loss": pg, "actor/approx_kl": pd["approx_kl"].item(),
                  "actor/clipfrac": pd["clipfrac"].item(), "actor/entropy": ent_mean,
                  "loss/total": pg + p.eta * d["critic/vf_loss"] - p.entropy_coef * ent_mean})
        return loss, d

    def dummy_loss(self, frozen: bool) -> torch.Tensor:
        """A zero loss through the same modules as :meth:`micro_loss`: the backward pass a process without a session
        in this minibatch runs so that DeepSpeed's collectives (ZeRO-3 gathers, gradient reduction) line up."""
        b = self.batcher.dummy()
        with self.batcher.autocast():
            logits, v = self.engine.model(b.input_ids, b.attention_mask, b.position_ids, n_logits=b.width + 1,
                                          with_policy=not frozen, with_value=True, freeze_shared_backbone=frozen)
        return 0.0 * sum(t.float().sum() for t in (v, logits) if t is not None)
