"""Session-level PPO for the PaSa Crawler (PaSa §4.2, App. A.2, Table 9): the loop, in one file.

One PPO step, per process (``torchrun`` runs one per device; every process rolls out its own queries):

1. **rollout** (``timing_s/gen``): 4 queries -> search sessions, then 6 + 6 expand sessions (App. A.2), sampled from
   the current policy on the ONE crawl environment (:mod:`.rollout`);
2. **reward** (``timing_s/reward``): r = α·Σ I − c(a) per action (Eqs. 1–2), new papers judged gold-or-Selector in one
   batched Selector call;
3. **returns** (``timing_s/returns``): log π_θ^old and log π_sft of every response token (the per-token KL), V̂^old at
   every action's state and at the S_{q+p_j} states of the papers each action added; then R̂ (Eq. 3) and
   Â = R̂ − V̂ (Eq. 4) — or GAE (``gae``), or a group baseline over whole crawls without V̂ (``grpo``, ``rloo``);
4. **update** (``timing_s/update``): ``ppo_epochs`` passes over the sessions in minibatches of
   ``forward_batch_size × grad_accum`` sessions; L = L_policy (Eq. 5) + η·L_value (Eqs. 6–7) (Eq. 8), each a mean
   over the minibatch's tokens (all forward batches, all processes: a token weighs the same however the minibatch
   is split). For the first
   ``policy_freeze_steps`` steps the policy is frozen (its learning rate is 0 and its forward pass is skipped) and
   only the value model learns (§5.1);
5. sync the rollout engine's weights, log (JSONL, wandb, ``training_curves.png``), checkpoint, poll for preemption.

Gradients are averaged over processes by hand (an all-reduce per minibatch) rather than by DDP: rollouts give each
process a different number of sessions, and DDP needs the same number of backward passes everywhere. Under
``ppo.deepspeed`` one DeepSpeed engine (ZeRO-2 or ZeRO-3) holds policy + value and reduces the gradients; every
process then pads its backward passes (and, under ZeRO-3, its forward passes: each one gathers parameters
collectively) to the same count with zero-weight or dummy batches.

The file is ~680 lines on purpose: it is the loop of one PPO step, read top to bottom (CleanRL's one-file style),
with the DeepSpeed padding beside the passes it pads. What the loop is handed is built elsewhere (``inputs.py``,
``models.py``), and the math it calls is in ``estimators.py``, ``losses.py`` and ``rewards.py``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from scholar_agents.runtime import collectives
from scholar_agents.validation import UsageError
from scholar_agents.train.ppo.checkpoint import (
    latest_checkpoint,
    load_optimizer_and_scheduler,
    load_rng,
    load_trainer_state,
    python_rng_from_json,
    python_rng_to_json,
    save_checkpoint,
)
from scholar_agents.train.ppo.deepspeed_config import zero3_init, zero_stage
from scholar_agents.train.ppo.estimators import ESTIMATORS, SessionTargets, group_stats
from scholar_agents.train.ppo.heldout import evaluate_heldout
from scholar_agents.train.ppo.inputs import PPOInputs, build_ppo_inputs
from scholar_agents.train.ppo.losses import explained_variance, masked_mean, policy_loss, total_loss, value_loss
from scholar_agents.train.ppo.models import (
    build_optimizer,
    build_policy_and_value,
    build_reference,
    deepspeed_config,
    drop_policy_optimizer_state,
    load_tokenizer,
    shift_value_bias,
)
from scholar_agents.train.ppo.run_log import RunLog, run_summary
from scholar_agents.train.ppo.rewards import gold_sets, reward_stats
from scholar_agents.train.ppo.rollout import QuerySampler, SessionSample, build_samples, collect, first_forced_crawl
from scholar_agents.train.ppo.rollout_engine import RolloutEngine
from scholar_agents.train.ppo.tensors import (
    Packed,
    chunks,
    from_grid,
    pack,
    response_entropy,
    response_logprobs,
    response_values,
    split_even,
    to_grid,
)
from scholar_agents.train.ppo.value_model import sub_state

log = logging.getLogger(__name__)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------------------------
# the trainer


class PPOTrainer:
    """The loop over one :class:`PPOInputs` (typed configs, store, search, Selector, queries: built once by
    :func:`build_ppo_inputs` where the command starts); :meth:`from_config` does both from the composed
    ``train crawler_ppo`` config. The models come from :mod:`.models`, returns and advantages from
    :mod:`.estimators`, batches from :mod:`.tensors`."""

    @classmethod
    def from_config(cls, cfg: DictConfig, run_dir: Path) -> "PPOTrainer":
        return cls(build_ppo_inputs(cfg), run_dir)

    def __init__(self, inputs: PPOInputs, run_dir: Path):
        from accelerate import Accelerator
        from accelerate.utils import InitProcessGroupKwargs

        from scholar_agents.llm.factory import resolve_model_path
        from scholar_agents.llm.precision import cpu_supports_bf16
        from scholar_agents.pasa.crawl_env import CrawlEnv

        self.inputs = inputs
        self.pcfg = p = inputs.ppo
        self.estimator = ESTIMATORS[p.estimator]
        self.run_dir = Path(run_dir)
        self.ckpt_dir = Path(p.checkpoint_dir) if p.checkpoint_dir else self.run_dir / "checkpoints"
        use_cpu = not torch.cuda.is_available()
        self.init_path = resolve_model_path(p.policy_model)
        self.ref_path = resolve_model_path(p.ref_model) if p.ref_model else self.init_path
        self.ds_config = deepspeed_config(p, self.init_path)  # None without DeepSpeed
        self.deepspeed = self.ds_config is not None
        self.zero3 = self.deepspeed and zero_stage(self.ds_config) == 3
        # accelerate gives us the processes (torch.distributed, gloo on CPU); DeepSpeed engines are built with
        # DeepSpeed's own API below, the same on CPU and GPU (accelerate ignores a DeepSpeed plugin with cpu=True).
        # The group's timeout is how long a rank may wait in a collective while another works alone (a checkpoint
        # write, the end-of-run evaluation's slowest share): cluster.dist_timeout_minutes, not NCCL's 10-minute default.
        timeout_min = inputs.dist_timeout_minutes
        # (no backend= here: accelerate would take any backend as "distributed", one process too; it picks gloo on CPU,
        # NCCL on GPUs)
        backend = "gloo" if use_cpu else "nccl"
        self.store, self.search = inputs.store, inputs.search  # built before the process group (inputs.py)
        self.accelerator = Accelerator(cpu=use_cpu, kwargs_handlers=[
            InitProcessGroupKwargs(timeout=collectives.timeout(timeout_min))])
        if self.deepspeed:
            import deepspeed

            if "RANK" not in os.environ:
                # one process started without torchrun: DeepSpeed still wants a (one-process) group and a launcher's
                # variables
                os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                                  MASTER_PORT=str(_free_port()))
            # DeepSpeed's comm layer adopts the process group accelerate started (zero.Init and the engines use it)
            deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False,
                                       timeout=collectives.timeout(timeout_min))
        acc = self.accelerator
        self.rank, self.world = acc.process_index, acc.num_processes
        self.device = acc.device
        log.info("process group: %s; models on %s", collectives.describe(timeout_min), self.device)
        # bf16 autocast where the hardware computes it natively (AMX / AVX512-BF16 CPUs, Ampere+ GPUs)
        native_bf16 = cpu_supports_bf16() if use_cpu else torch.cuda.is_bf16_supported()
        self.bf16 = native_bf16 if p.bf16 is None else bool(p.bf16)
        self.step_callbacks: list[Callable[[int, dict], None]] = []

        # ---- resume point
        self.resume_from = latest_checkpoint(self.ckpt_dir) if p.resume else None
        if not p.resume and latest_checkpoint(self.ckpt_dir) is not None:
            raise ValueError(f"{self.ckpt_dir} holds checkpoints; pass ppo.resume=true to continue them or choose "
                             f"another ppo.checkpoint_dir (nothing is deleted for you)")
        state = load_trainer_state(self.resume_from) if self.resume_from else {}
        saved = state.get("config", {}).get("estimator")
        if saved is not None and saved != p.estimator:
            # the checkpoint holds another estimator's models (paper_mc/gae: a value model; grpo/rloo: none), which
            # DeepSpeed's strict load would refuse deep inside; say it before any model loads
            raise UsageError(f"ppo.estimator={p.estimator} but {self.resume_from} was trained with "
                             f"ppo.estimator={saved}: resume with ppo.estimator={saved}, or start a new run dir")
        self.start_step = int(state.get("step", 0))
        set_seed(p.seed + 1000 * self.rank)

        # ---- data, environment, reward model
        self.train_queries, self.eval_queries = inputs.train_queries, inputs.eval_queries
        self.gold = gold_sets(self.train_queries)
        self.known_task = inputs.known_task
        self.selector = inputs.build_selector() if inputs.build_selector is not None else None
        self.env_cfg = inputs.env
        self.eval_policy = inputs.eval_policy
        self.rollout_policy = inputs.rollout_policy()

        # ---- models
        self.tokenizer = load_tokenizer(self.resume_from, self.init_path)
        # Every rank must start from the same weights, LoRA's random A included: one seed for all ranks while the
        # models are built (ZeRO-3 would otherwise stitch a parameter together from different ranks' draws).
        with torch.random.fork_rng(devices=[]), zero3_init(self.ds_config) if self.zero3 else nullcontext():
            torch.manual_seed(p.seed)
            self.model = build_policy_and_value(p, self.init_path, self.resume_from, self.device, self.zero3)
        self.ref = build_reference(p, self.ref_path, self.init_path, self.ds_config, self.zero3, self.device)
        self.optimizer, self.scheduler, self.policy_params, self.value_params = build_optimizer(p, self.model)
        t_setup = time.perf_counter()  # the set-up's stages are timed: a slow start says which one
        if self.deepspeed:
            import deepspeed

            # One engine for policy + value (one optimizer, Eq. 8's one loss). Our LambdaLR stays outside the engine
            # and steps once per PPO step on the optimizer's parameter groups, which ZeRO reads at every step.
            self.model, self.optimizer, _, _ = deepspeed.initialize(model=self.model, optimizer=self.optimizer,
                                                                    config=self.ds_config)
            if self.resume_from is not None:
                self.model.load_checkpoint(str(self.resume_from / "deepspeed"), load_module_strict=True)
            log.info("DeepSpeed engine (ZeRO-%d) ready in %.1f s", self.model.zero_optimization_stage(),
                     time.perf_counter() - t_setup)
        if self.resume_from is not None:
            load_optimizer_and_scheduler(self.resume_from, None if self.deepspeed else self.optimizer,
                                         self.scheduler)

        # ---- rollouts: the engine starts from the starting checkpoint and gets the current weights right away
        llm_cfg = asdict(inputs.rollout_llm)
        llm_cfg["model"] = self.init_path
        llm_cfg["init"] = p.policy_init  # random: the engine's own draw is replaced by the policy's right below
        t_setup = time.perf_counter()
        self.engine = RolloutEngine(llm_cfg, self.run_dir, sync=p.rollout_sync, sleep=p.rollout_sleep)
        log.info("rollout engine built in %.1f s", time.perf_counter() - t_setup)
        if self.resume_from is not None or p.policy_init == "random":
            t_setup = time.perf_counter()
            self.engine.sync(self._policy_weights(), self.tokenizer)
            log.info("rollout engine given the policy's weights in %.1f s", time.perf_counter() - t_setup)
        self.env = CrawlEnv(self.store, self.search, self.env_cfg, tokenizer=self.engine.tokenizer)
        self.sampler = QuerySampler(len(self.train_queries), p.seed)
        self.expand_rng = random.Random(p.seed * 7919 + self.rank)
        if self.resume_from is not None:
            self.sampler.load_state_dict(state["sampler"])
            extra = load_rng(self.resume_from, self.rank)
            python_rng_from_json(self.expand_rng, extra["expand_rng"])
        self.history: dict[str, Any] = state.get("history", {})

        self.logger = RunLog(self.run_dir, enabled=acc.is_main_process, wandb_cfg=inputs.wandb, config=inputs.config,
                             resume_step=self.start_step, wandb_id=state.get("wandb_id"),
                             run_name=f"crawler_ppo_alpha{p.alpha}")
        log.info("PPO: rank %d/%d on %s, bf16 autocast %s, %d training / %d held-out queries, start at step %d%s",
                 self.rank, self.world, self.device, self.bf16, len(self.train_queries), len(self.eval_queries),
                 self.start_step, f" (resumed from {self.resume_from})" if self.resume_from else "")

    # ---- set-up ----

    def _policy(self):
        return self.accelerator.unwrap_model(self.model).policy

    def _policy_weights(self):
        """(HF name, full tensor) pairs of the current policy for the rollout engine (LoRA merged). Under ZeRO-3
        they are gathered module by module (a collective: every rank syncs its engine after every update)."""
        if self.zero3:
            from scholar_agents.train.ppo.policy_weights import gathered_policy_weights

            return gathered_policy_weights(self._policy())
        from scholar_agents.train.ppo.policy_weights import merged_policy_weights

        return merged_policy_weights(self._policy())

    def _forward_rounds(self, n_local: int) -> int:
        """How many forward passes this rank runs for ``n_local`` of its own: under ZeRO-3 every forward all-gathers
        each layer's parameters, a collective, so every rank runs as many as the busiest rank (the extra ones on
        :meth:`_dummy_batch`, their outputs dropped)."""
        return max(collectives.all_gather_int(n_local)) if self.zero3 else n_local

    def _dummy_batch(self) -> Packed:
        pad = self.tokenizer.pad_token_id
        return pack([([pad], [pad])], pad, self.device)

    def _autocast(self):
        if not self.bf16:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    # ---- scoring (no grad): π_old, π_sft, V̂_old ----

    @torch.no_grad()
    def _score(self, samples: list[SessionSample], frozen: bool) -> tuple[list, list, list]:
        """Per session: log π_old and log π_sft of each response token and V̂_old before each token. While the
        policy is frozen it IS π_sft: the KL is exactly 0 and neither log-prob is needed."""
        p = self.pcfg
        model = self.accelerator.unwrap_model(self.model)
        model.eval()
        order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))
        logp_old: list = [None] * len(samples)
        logp_ref: list = [None] * len(samples)
        values: list = [None] * len(samples)
        batches = chunks(order, p.score_batch_size)
        for r in range(self._forward_rounds(len(batches))):
            idx = batches[r] if r < len(batches) else []
            b = pack([(samples[i].prompt_ids, samples[i].response_ids) for i in idx], self.tokenizer.pad_token_id,
                     self.device) if idx else self._dummy_batch()
            with self._autocast():
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
        return logp_old, logp_ref, values

    def _ref_logits(self, b: Packed) -> torch.Tensor:
        if self.ref is not None:
            return self.ref(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids,
                            use_cache=False, logits_to_keep=b.width + 1).logits
        policy = self._policy()
        with policy.disable_adapter():
            return policy(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids,
                          use_cache=False, logits_to_keep=b.width + 1).logits

    @torch.no_grad()
    def _child_values(self, samples: list[SessionSample]) -> int:
        """Σ_j V̂^old(S_{q+p_j}) for every action (Eq. 3's bootstrap), one value forward per distinct start state."""
        if not self.pcfg.uses_value:
            return 0  # grpo / rloo: no V̂, no bootstrap
        model = self.accelerator.unwrap_model(self.model)
        keys = sorted({(s.record.user_query, pid) for s in samples for st in s.steps for pid in st.children})
        prompts = {k: self.engine.llm.prompt_token_ids(self.env.state_messages(k[0], k[1])) for k in keys}
        value_of: dict = {}
        order = sorted(keys, key=lambda k: len(prompts[k]))
        batches = chunks(order, self.pcfg.score_batch_size)
        for r in range(self._forward_rounds(len(batches))):
            chunk = batches[r] if r < len(batches) else []
            b = pack([(prompts[k], []) for k in chunk], self.tokenizer.pad_token_id, self.device) if chunk \
                else self._dummy_batch()
            with self._autocast():
                _, v = model(b.input_ids, b.attention_mask, b.position_ids, n_logits=1, with_policy=False,
                             with_value=True)
            for k, val in zip(chunk, v[:, -1].float().cpu().tolist()):
                value_of[k] = val
        for s in samples:
            for st in s.steps:
                st.child_values = float(sum(value_of[(s.record.user_query, pid)] for pid in st.children))
        return len(keys)

    # ---- one PPO step ----

    def rollout(self, step: int) -> tuple[list[SessionSample], dict]:
        p = self.pcfg
        idx = self.sampler.next(p.queries_per_step * self.world)
        mine = idx[self.rank * p.queries_per_step:(self.rank + 1) * p.queries_per_step]
        queries = [self.train_queries[i] for i in mine]
        self.rollout_policy.seed = p.seed + 100_003 * step + 7 * self.rank
        crawler = self.engine.crawler(self.rollout_policy)
        env_t0 = sum(self.env.timing.values())
        records, crawls, counts = collect(self.env, crawler, queries, p, self.expand_rng)  # sessions or crawls
        t1 = time.perf_counter()
        samples = build_samples(records, self.env, self.gold, self.selector, p.reward_config(), p.bootstrap_all_papers,
                                crawls)
        t_reward = time.perf_counter() - t1
        gen_tokens = sum(len(r.response_token_ids) for r in records)
        m = {
            "rollout/sessions": len(records),
            "rollout/search_sessions": counts.get("sessions_round0", 0),
            "rollout/expand_sessions": len(records) - counts.get("sessions_round0", 0),
            "rollout/response_tokens": gen_tokens / max(len(records), 1),
            "rollout/grammar_errors_per_session": sum(len(r.grammar_errors) for r in records) / max(len(records), 1),
            "rollout/truncated": sum(r.finish_reason == "length" for r in records) / max(len(records), 1),
            "timing_s/gen": crawler.timing["gen"],
            "timing_s/env": sum(self.env.timing.values()) - env_t0,
            "timing_s/reward": t_reward,
            "perf/gen_tokens_per_s": gen_tokens / max(crawler.timing["gen"], 1e-9),
            **reward_stats(samples, p.reward_config().cost),
        }
        if self.known_task is not None:
            m.update(self.known_task.metrics(records))
        return samples, m

    def compute_targets(self, samples: list[SessionSample], frozen: bool,
                        init_value: bool = False) -> tuple[list[SessionTargets], dict, dict]:
        t0 = time.perf_counter()
        n_children = self._child_values(samples)
        logp_old, logp_ref, values = self._score(samples, frozen)
        targets = self.estimator.targets(samples, logp_old, logp_ref, values, self.pcfg)
        if init_value:  # every rank, sessions or not: the shift and the re-scoring are collectives
            self._shift_value_bias(targets, values)
            n_children = self._child_values(samples)
            logp_old, logp_ref, values = self._score(samples, frozen)
            targets = self.estimator.targets(samples, logp_old, logp_ref, values, self.pcfg)
        if self.pcfg.normalize_advantages and targets:
            allv = np.concatenate([t.advantages for t in targets])
            mu, sd = allv.mean(), allv.std() + 1e-8
            for t in targets:
                t.advantages = (t.advantages - mu) / sd
        p = self.pcfg  # the crawls' R and their spread; forced crawls apart
        forced_from = first_forced_crawl(p.group_size, p.forced_members, p.queries_per_step)
        group = {} if self.estimator.uses_value else group_stats(samples, targets, p.beta, forced_from)
        vm = [t.value_mask.astype(bool) for t in targets]
        rets = np.concatenate([t.returns[m] for t, m in zip(targets, vm)]) if targets else np.zeros(0)
        vals = np.concatenate([v[m] for v, m in zip(values, vm)]) if targets else np.zeros(0)
        ntok = sum(len(t.advantages) for t in targets)
        m = {
            "rollout/session_return": float(np.mean([t.session_return for t in targets])) if targets else 0.0,
            "reward/kl_penalty": -self.pcfg.beta * float(np.mean([t.kl for t in targets])) if targets else 0.0,
            "reward/bootstrap": float(np.mean([t.bootstrap for t in targets])) if targets else 0.0,
            "actor/kl_to_sft": float(sum(t.kl for t in targets) / max(ntok, 1)),
            "critic/returns_mean": float(rets.mean()) if len(rets) else 0.0,
            "critic/values_mean": float(vals.mean()) if len(vals) else 0.0,
            "critic/advantages_mean": float(np.mean(np.concatenate([t.advantages for t in targets])))
            if targets else 0.0,
            "critic/vf_explained_var": explained_variance(torch.tensor(vals), torch.tensor(rets))
            if len(rets) > 1 else float("nan"),
            "rollout/child_states_valued": n_children,
            "timing_s/returns": time.perf_counter() - t0,
            **group,
        }
        batch = {"logp_old": logp_old, "values_old": values, "logp_ref": logp_ref}
        return targets, batch, m

    def _shift_value_bias(self, targets: list[SessionTargets], values: list[np.ndarray]) -> None:
        """``ppo.init_value_to_mean_return``: add (mean R̂ − mean V̂) over all processes to the value head's bias."""
        vm = [t.value_mask.astype(bool) for t in targets]
        diff = np.concatenate([t.returns[m] - v[m] for t, v, m in zip(targets, values, vm)]) if targets else np.zeros(0)
        # sums and counts, not per-process means: processes hold different numbers of value tokens, and the shift
        # must be what one process holding the whole global batch would compute
        tot = collectives.mean_over_processes({"diff_sum": float(diff.sum()), "count": float(len(diff))})
        gap = tot["diff_sum"] / max(tot["count"], 1.0)
        shift_value_bias(self.accelerator.unwrap_model(self.model), gap, self.deepspeed, self.zero3)
        log.info("value head bias shifted by %.3f to the first batch's mean return", gap)

    def update(self, samples: list[SessionSample], targets: list[SessionTargets], batch: dict, step: int,
               frozen: bool) -> dict:
        """``ppo_epochs`` passes of clipped PPO over the sessions (Eqs. 5–8), in minibatches of at most
        ``forward_batch_size × grad_accum`` sessions. Every process runs the same number of minibatches (the largest
        any process needs). Each minibatch's loss is a mean over ALL its tokens, wherever they ran: the policy loss
        over its response tokens, the value loss over its value-target tokens, both counted over every forward batch
        and every process (one all-reduce per epoch) — so a token weighs the same whatever ``forward_batch_size``,
        ``grad_accum`` and the number of processes, and the gradient is what one process holding the whole global
        batch in one forward batch would compute."""
        p = self.pcfg
        self.model.train()
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
            tokens = self._minibatch_tokens(minibatches, samples, targets)
            for k, mb in enumerate(minibatches):
                n_tokens, n_value_tokens = tokens[k]
                micros = [(m, 1.0) for m in chunks(mb, p.forward_batch_size)]
                if self.deepspeed:
                    # DeepSpeed counts backward passes to find its accumulation boundary: every process runs exactly
                    # grad_accum of them, padding with zero-weight repeats (a dummy batch on a process with no
                    # session in this minibatch); it divides by world × grad_accum, which the weight undoes (each
                    # loss is already divided by the minibatch's global token counts).
                    scale = float(self.world * p.grad_accum)
                    pad = micros[0][0] if micros else []
                    micros = [(m, scale) for m, _ in micros] + [(pad, 0.0)] * (p.grad_accum - len(micros))
                for micro, weight in micros:
                    if not micro:
                        loss, d = self._dummy_loss(frozen), {}
                    else:
                        loss, d = self._micro_loss([samples[i] for i in micro], [targets[i] for i in micro],
                                                   [batch["logp_old"][i] for i in micro],
                                                   [batch["values_old"][i] for i in micro], frozen,
                                                   n_tokens=n_tokens, n_value_tokens=n_value_tokens,
                                                   logp_ref=[batch["logp_ref"][i] for i in micro])
                    if self.deepspeed:
                        # DeepSpeed's own API (accelerate's backward would mark every pass as a boundary): backward
                        # scales by 1/grad_accum, step() steps the optimizer every grad_accum-th pass
                        self.model.backward(loss * weight)
                        self.model.step()
                    else:
                        loss.backward()  # summed over processes in _sync_and_step
                    if weight:
                        for key, val in d.items():
                            sums[key] = sums.get(key, 0.0) + val
                        n_terms += 1
                grad_norms.append(self._sync_and_step(frozen))
        stats = {k: v / max(n_terms, 1) for k, v in sums.items()}
        stats["actor/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        stats["actor/frozen"] = float(frozen)
        stats["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        stats["critic/lr"] = self.optimizer.param_groups[1]["lr"] if self.pcfg.uses_value else 0.0  # grpo/rloo: none
        stats["update/minibatches"] = n_mb * p.ppo_epochs
        return stats

    def _minibatch_tokens(self, minibatches: list[list[int]], samples: list[SessionSample],
                          targets: list[SessionTargets]) -> list[tuple[float, float]]:
        """(response tokens, value-target tokens) of each minibatch, summed over every process: the divisors of
        its policy and value losses. One all-reduce for all of an epoch's minibatches."""
        local = [[float(sum(len(samples[i].response_ids) for i in mb)),
                  float(sum(targets[i].value_mask.sum() for i in mb))] for mb in minibatches]
        t = torch.tensor(local, dtype=torch.float64, device=self.device).reshape(len(minibatches), 2)
        collectives.all_reduce(t)
        return [(float(a), float(b)) for a, b in t.tolist()]

    def _micro_loss(self, samples, targets, logp_old, values_old, frozen: bool, n_tokens: float | None = None,
                    n_value_tokens: float | None = None, logp_ref=None) -> tuple[torch.Tensor, dict]:
        """Eq. 8 on one forward batch. ``n_tokens`` / ``n_value_tokens``: the minibatch's response / value-target
        tokens over all processes (the losses are sums over this batch's tokens divided by them); ``None`` = this
        batch's own means. The logged losses are this batch's means either way."""
        p = self.pcfg
        b = pack([(s.prompt_ids, s.response_ids) for s in samples], self.tokenizer.pad_token_id, self.device)
        W = b.width
        adv = to_grid([t.advantages for t in targets], W, self.device)
        ret = to_grid([t.returns for t in targets], W, self.device)
        vmask = to_grid([t.value_mask for t in targets], W, self.device)
        v_old = to_grid(values_old, W, self.device)
        mask = b.response_mask.float()
        with self._autocast():
            logits, v = self.model(b.input_ids, b.attention_mask, b.position_ids, n_logits=W + 1,
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
        kl_ref = None if p.kl_in_return else (to_grid(logp_ref, W, self.device), p.beta)  # grpo/rloo: KL as a loss
        l_policy, pd = policy_loss(logp, to_grid(logp_old, W, self.device), adv, mask, p.clip_eps, n_tokens, kl_ref)
        ent = masked_mean(response_entropy(logits.detach() if p.entropy_coef == 0 else logits), mask, n_tokens)
        loss = total_loss(l_policy, l_value, p.eta) - p.entropy_coef * ent  # Eq. 8
        pg, ent_mean = l_policy.item() / max(share, 1e-12), ent.item() / max(share, 1e-12)
        d.update({"actor/pg_loss": pg, "actor/approx_kl": pd["approx_kl"].item(), "actor/clipfrac": pd["clipfrac"].item(),
                  "actor/entropy": ent_mean, "loss/total": pg + p.eta * d["critic/vf_loss"] - p.entropy_coef * ent_mean})
        return loss, d

    def _dummy_loss(self, frozen: bool) -> torch.Tensor:
        """A zero loss through the same modules as :meth:`_micro_loss`: the backward pass a process without a session
        in this minibatch runs so that DeepSpeed's collectives (ZeRO-3 gathers, gradient reduction) line up."""
        b = self._dummy_batch()
        with self._autocast():
            logits, v = self.model(b.input_ids, b.attention_mask, b.position_ids, n_logits=b.width + 1,
                                   with_policy=not frozen, with_value=True, freeze_shared_backbone=frozen)
        return 0.0 * sum(t.float().sum() for t in (v, logits) if t is not None)

    def _sync_and_step(self, frozen: bool) -> float:
        """Sum the gradients over processes (each was already divided by the global count), clip, step. While
        frozen the policy's gradients are dropped, so AdamW keeps no state for it (its learning rate is 0 too)."""
        if self.deepspeed:
            if frozen:
                drop_policy_optimizer_state(self.model.optimizer)
            norm = self.model.get_global_grad_norm()
            return float(norm) if norm is not None else 0.0
        if frozen:
            for q in self.policy_params:
                q.grad = None
        params = self.value_params if frozen else self.policy_params + self.value_params
        if self.world > 1:
            grads = [q.grad if q.grad is not None else torch.zeros_like(q) for q in params]
            flat = collectives.all_reduce(torch.cat([g.reshape(-1).float() for g in grads]))
            i = 0
            for q, gr in zip(params, grads):
                n = gr.numel()
                q.grad = flat[i:i + n].view_as(q).to(q.dtype)
                i += n
        norm = torch.nn.utils.clip_grad_norm_([q for q in params if q.grad is not None], self.pcfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def train_step(self, step: int) -> dict:
        from scholar_agents.runtime.cuda_memory import peak_metrics, reset_peak

        p = self.pcfg
        t0 = time.perf_counter()
        frozen = step < p.policy_freeze_steps
        reset_peak(self.device)  # per-phase CUDA peaks (perf/max_memory_*_gb/<phase>): what `scholar plan` estimates
        samples, m = self.rollout(step)
        mem = peak_metrics(self.device, "rollout")
        t_rollout = time.perf_counter() - t0
        self.engine.sleep()  # ppo.rollout_sleep: the engine's GPU memory goes to scoring and the update
        init_value = p.init_value_to_mean_return and step == 0
        reset_peak(self.device)
        targets, batch, m2 = self.compute_targets(samples, frozen, init_value=init_value)
        mem.update(peak_metrics(self.device, "score"))
        t1 = time.perf_counter()
        reset_peak(self.device)
        m3 = self.update(samples, targets, batch, step, frozen)
        mem.update(peak_metrics(self.device, "update"))
        t_update = time.perf_counter() - t1
        self.scheduler.step()
        # weights awake, the push, then the KV cache (TRL's order; the engine's method)
        t_sync = self.engine.wake_up_and_sync(None if frozen else self._policy_weights(), self.tokenizer)
        tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
        dt = time.perf_counter() - t0
        metrics = {**m, **m2, **m3, **mem, "timing_s/rollout": t_rollout, "timing_s/update": t_update,
                   "timing_s/sync": t_sync, "timing_s/step": dt, "perf/throughput": tokens / max(dt, 1e-9)}
        return collectives.mean_over_processes(metrics)

    # ---- evaluation: crawler recall on held-out queries through the eval harness ----

    def evaluate(self, tag: str) -> dict:
        """Greedy crawls of the held-out queries with the current policy (:func:`.heldout.evaluate_heldout`)."""
        return evaluate_heldout(self.eval_queries, self.store, self.search, self.env_cfg,
                                self.engine.crawler(self.eval_policy), self.engine.tokenizer, self.rank, self.world,
                                self.accelerator.is_main_process, self.run_dir, tag)

    # ---- checkpoints ----

    def save(self, step: int) -> Path:
        p = self.pcfg
        model = self.accelerator.unwrap_model(self.model)
        # ZeRO-3: full weights from the shards, gathered by DeepSpeed on every rank (a collective) into rank 0's
        # memory — what HF Trainer and accelerate call to save ZeRO-3 models; otherwise every rank holds them whole.
        full = self.model._zero3_consolidated_16bit_state_dict() if self.zero3 else None

        def write_models(d: Path) -> None:
            policy_state = sub_state(full, "policy.")
            model.policy.save_pretrained(str(d / "policy"), state_dict=policy_state, safe_serialization=True)
            self.tokenizer.save_pretrained(str(d / "policy"))
            model.save_value(d / "value", state_dict=full)

        state = {"step": step, "sampler": self.sampler.state_dict(), "wandb_id": self.logger.wandb_id,
                 "history": self.history, "config": asdict(p)}
        engine_write = (lambda d: self.model.save_checkpoint(str(d / "deepspeed"))) if self.deepspeed else None
        return save_checkpoint(self.ckpt_dir, step, write_models, None if self.deepspeed else self.optimizer,
                               self.scheduler, state, {"expand_rng": python_rng_to_json(self.expand_rng)},
                               rank=self.rank, barrier=collectives.barrier, keep_last=p.keep_last,
                               collective_write=engine_write)

    # ---- the loop ----

    def train(self) -> dict:
        from scholar_agents.runtime.progress import progress_bar

        from scholar_agents.runtime import preemption

        p = self.pcfg
        # the command's entry installed it before any model was built (a warning during set-up is pending there)
        own = preemption.active() is None
        handler = preemption.PreemptionHandler.install() if own else preemption.active()
        try:
            # a warning during set-up (or the batch shell's, before the step started): leave before the start-of-run
            # evaluation; the newest checkpoint (or none) is exactly this state, so there is nothing to save
            if handler.should_stop():
                log.warning("preemption signal (%s) before the first step: nothing new to save (resuming at step %d), "
                            "leaving for requeue", ",".join(handler.received), self.start_step)
                self.logger.close()
                handler.exit_for_requeue()
            if p.eval_at_start and "eval_start" not in self.history:
                self.history["eval_start"] = self.evaluate("start")
                if handler.should_stop():  # keep what the evaluation of every held-out query found
                    path = self.save(self.start_step)
                    log.warning("preemption signal (%s) during the start-of-run evaluation: checkpointed it as step "
                                "%d (%s), leaving for requeue", ",".join(handler.received), self.start_step, path)
                    self.logger.close()
                    handler.exit_for_requeue()
            bar = progress_bar(range(self.start_step, p.total_steps), desc="ppo", unit="step",
                       disable=not self.accelerator.is_main_process, initial=self.start_step, total=p.total_steps)
            for step in bar:
                metrics = self.train_step(step)
                if p.eval_every > 0 and (step + 1) % p.eval_every == 0 and step + 1 < p.total_steps:
                    ev = self.evaluate(f"step{step + 1:06d}")
                    metrics.update({f"eval/{k}": v for k, v in ev.items() if k in ("crawler_recall", "crawler_actions")})
                self.logger.log(step + 1, metrics)
                # a step whose prompts were all rejected has no losses: show what there is
                bar.set_postfix(ret=f"{metrics.get('rollout/session_return', float('nan')):.3f}",
                                vf=f"{metrics.get('critic/vf_loss', float('nan')):.3f}")
                for cb in self.step_callbacks:
                    cb(step + 1, metrics)
                stop = handler.should_stop()
                last = step + 1 == p.total_steps  # ppo.save_final=false: no checkpoint after the last step
                if stop or (last and p.save_final) or (not last and (step + 1) % p.save_every == 0):
                    t0 = time.perf_counter()
                    path = self.save(step + 1)
                    log.info("checkpoint %s (%.1f s)", path, time.perf_counter() - t0)
                if stop:
                    log.warning("preemption signal (%s): checkpointed step %d, leaving for requeue",
                                ",".join(handler.received), step + 1)
                    self.logger.close()
                    handler.exit_for_requeue()
            if p.eval_at_end:
                self.history["eval_end"] = self.evaluate("end")
            return self.finish()
        finally:
            if own:
                handler.uninstall()

    def finish(self) -> dict:
        """metrics.json (what ``scholar sweep report`` reads) and the training curves."""
        summary = run_summary(self.logger.rows(), self.history, self.pcfg,
                              str(latest_checkpoint(self.ckpt_dir) or ""))
        if self.accelerator.is_main_process:
            (self.run_dir / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
            self.logger.plot(self.run_dir / "training_curves.png", smoothing=self.pcfg.plot_smoothing)
        self.logger.close()
        return summary

    def close(self) -> None:
        self.engine.close()
        self.logger.close()
