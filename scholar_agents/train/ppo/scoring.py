"""Scoring a step's sessions before the update (no gradients): log π_θ^old and log π_sft of every response token
(the per-token KL of Eq. 3), V̂^old before every token, and V̂^old at the S_{q+p_j} start states of the papers each
action added (Eq. 3's cross-session bootstrap). What the estimators turn into returns and advantages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.engine import TrainEngine
from scholar_agents.train.ppo.rollout import SessionSample
from scholar_agents.train.ppo.tensors import Batcher, Packed, chunks, from_grid, response_logprobs, response_values


@dataclass
class Scores:
    """Per session, per response token: log π_old, log π_sft and V̂_old (before the token)."""

    logp_old: list[np.ndarray]
    logp_ref: list[np.ndarray]
    values: list[np.ndarray]


class Scorer:
    """Forward passes of the engine's models in batches of ``ppo.score_batch_size`` sessions, shortest first.
    ``start_prompt(user_query, paper_id)``: the prompt token ids of the S_{q+p} session that paper would start."""

    def __init__(self, engine: TrainEngine, batcher: Batcher, p: PPOConfig,
                 start_prompt: Callable[[str, str], list[int]]):
        self.engine, self.batcher, self.p = engine, batcher, p
        self.start_prompt = start_prompt

    def _batches(self, order: list) -> list[list]:
        """``order`` in batches, then empty ones up to the engine's forward rounds (dummy passes)."""
        batches = chunks(order, self.p.score_batch_size)
        return batches + [[]] * (self.engine.forward_rounds(len(batches)) - len(batches))

    @torch.no_grad()
    def score(self, samples: list[SessionSample], frozen: bool) -> Scores:
        """While the policy is frozen it IS π_sft: the KL is exactly 0 and neither log-prob is needed."""
        model = self.engine.module
        model.eval()
        order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))
        logp_old: list = [None] * len(samples)
        logp_ref: list = [None] * len(samples)
        values: list = [None] * len(samples)
        for idx in self._batches(order):
            b = self.batcher.pack([(samples[i].prompt_ids, samples[i].response_ids) for i in idx]) if idx \
                else self.batcher.dummy()
            with self.batcher.autocast():
                logits, v = model(b.input_ids, b.attention_mask, b.position_ids, n_logits=b.width + 1,
                                  with_policy=not frozen, with_value=True)
                ref_logits = self._ref_logits(b) if not frozen else None
            if not idx:
                continue
            vs = [np.zeros(n) for n in b.lengths] if v is None else from_grid(response_values(v, b.width), b.lengths)
            lo = from_grid(response_logprobs(logits, b.response_ids), b.lengths) if not frozen else None
            lr = from_grid(response_logprobs(ref_logits, b.response_ids), b.lengths) if not frozen else None
            for k, i in enumerate(idx):
                values[i] = vs[k]
                logp_old[i] = lo[k] if lo is not None else np.zeros(b.lengths[k])
                logp_ref[i] = lr[k] if lr is not None else logp_old[i]
        return Scores(logp_old, logp_ref, values)

    def _ref_logits(self, b: Packed) -> torch.Tensor:
        """π_sft's logits: its own model, or (LoRA) the policy with its adapter disabled."""
        ref = self.engine.ref
        if ref is not None:
            return ref(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids,
                       use_cache=False, logits_to_keep=b.width + 1).logits
        policy = self.engine.policy
        with policy.disable_adapter():
            return policy(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids,
                          use_cache=False, logits_to_keep=b.width + 1).logits

    @torch.no_grad()
    def child_values(self, samples: list[SessionSample]) -> int:
        """Σ_j V̂^old(S_{q+p_j}) for every action (Eq. 3's bootstrap), one value forward per distinct start state;
        returns how many start states were valued."""
        if not self.p.uses_value:
            return 0  # grpo / rloo: no V̂, no bootstrap
        model = self.engine.module
        keys = sorted({(s.record.user_query, pid) for s in samples for st in s.steps for pid in st.children})
        prompts = {k: self.start_prompt(k[0], k[1]) for k in keys}
        value_of: dict = {}
        for chunk in self._batches(sorted(keys, key=lambda k: len(prompts[k]))):
            b = self.batcher.pack([(prompts[k], []) for k in chunk]) if chunk else self.batcher.dummy()
            with self.batcher.autocast():
                _, v = model(b.input_ids, b.attention_mask, b.position_ids, n_logits=1, with_policy=False,
                             with_value=True)
            for k, val in zip(chunk, v[:, -1].float().cpu().tolist()):
                value_of[k] = val
        for s in samples:
            for st in s.steps:
                st.child_values = float(sum(value_of[(s.record.user_query, pid)] for pid in st.children))
        return len(keys)
