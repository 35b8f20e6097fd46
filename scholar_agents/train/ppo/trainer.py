"""Session-level PPO for the PaSa Crawler (PaSa §4.2, App. A.2, Table 9): the loop that drives one PPO step after
another. Each stage is one call into the module that owns it:

1. **collect** (``timing_s/gen``, ``timing_s/reward``): 4 queries -> search sessions, then 6 + 6 expand sessions
   (App. A.2), sampled from the current policy on the ONE crawl environment by the rollout engine
   (:mod:`.rollout`, :mod:`.rollout_engine`); r = α·Σ I − c(a) per action (Eqs. 1–2, :mod:`.rewards`), new papers
   judged gold-or-Selector in one batched Selector call;
2. **compute targets** (``timing_s/returns``, :mod:`.targets`): log π_θ^old and log π_sft of every response token
   (the per-token KL), V̂^old at every action's state and at the S_{q+p_j} states of the papers each action added
   (:mod:`.scoring`); then R̂ (Eq. 3) and Â = R̂ − V̂ (Eq. 4) — or GAE (``gae``), or a group baseline over whole
   crawls without V̂ (``grpo``, ``rloo``) (:mod:`.estimators`);
3. **update** (``timing_s/update``, :mod:`.update`): ``ppo_epochs`` passes over the sessions in minibatches of
   ``forward_batch_size × grad_accum`` sessions; L = L_policy (Eq. 5) + η·L_value (Eqs. 6–7) (Eq. 8), each a mean
   over the minibatch's tokens (all forward batches, all processes). For the first ``policy_freeze_steps`` steps the
   policy is frozen (its learning rate is 0 and its forward pass is skipped) and only the value model learns (§5.1);
   the backward passes and optimizer steps are the update engine's (:mod:`.engine`: plain torch or DeepSpeed);
4. sync the rollout engine's weights, **log** (JSONL, wandb, ``training_curves.png``: :mod:`.run_log`),
   **checkpoint** (:mod:`.checkpoint`), poll for preemption.

What the loop is handed is built where the command starts (:mod:`.inputs`); the models by the engine
(:mod:`.models`).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from scholar_agents.llm.factory import resolve_model_path
from scholar_agents.llm.precision import cpu_supports_bf16
from scholar_agents.pasa.crawl_env import CrawlEnv
from scholar_agents.runtime import collectives, preemption
from scholar_agents.runtime.cuda_memory import peak_metrics, reset_peak
from scholar_agents.runtime.progress import progress_bar
from scholar_agents.train.ppo.checkpoint import (
    latest_checkpoint,
    load_rng,
    python_rng_from_json,
    python_rng_to_json,
    resume_point,
)
from scholar_agents.train.ppo.engine import engine_class
from scholar_agents.train.ppo.estimators import SessionTargets
from scholar_agents.train.ppo.heldout import evaluate_heldout
from scholar_agents.train.ppo.inputs import PPOInputs, build_ppo_inputs
from scholar_agents.train.ppo.models import deepspeed_config, load_tokenizer
from scholar_agents.train.ppo.rewards import gold_sets, reward_stats
from scholar_agents.train.ppo.rollout import QuerySampler, SessionSample, build_samples, collect
from scholar_agents.train.ppo.rollout_engine import RolloutEngine
from scholar_agents.train.ppo.run_log import RunLog, run_summary
from scholar_agents.train.ppo.scoring import Scorer
from scholar_agents.train.ppo.targets import compute_targets
from scholar_agents.train.ppo.tensors import Batcher
from scholar_agents.train.ppo.update import PPOUpdate

log = logging.getLogger(__name__)


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


class PPOTrainer:
    """The loop over one :class:`PPOInputs` (typed configs, store, search, Selector, queries: built once by
    :func:`build_ppo_inputs` where the command starts); :meth:`from_config` does both from the composed
    ``train crawler_ppo`` config. ``engine`` updates the models (:mod:`.engine`), ``rollout_engine`` samples from
    them (:mod:`.rollout_engine`)."""

    @classmethod
    def from_config(cls, cfg: DictConfig, run_dir: Path) -> "PPOTrainer":
        return cls(build_ppo_inputs(cfg), run_dir)

    def __init__(self, inputs: PPOInputs, run_dir: Path):
        self.inputs = inputs
        self.pcfg = p = inputs.ppo
        self.run_dir = Path(run_dir)
        self.ckpt_dir = Path(p.checkpoint_dir) if p.checkpoint_dir else self.run_dir / "checkpoints"
        init_path = resolve_model_path(p.policy_model)
        ref_path = resolve_model_path(p.ref_model) if p.ref_model else init_path
        ds_config = deepspeed_config(p, init_path)  # None without DeepSpeed
        Engine = engine_class(ds_config)  # chosen once: plain torch or DeepSpeed
        accelerator = Engine.start_processes(inputs.dist_timeout_minutes)
        self.rank, self.world = accelerator.process_index, accelerator.num_processes
        self.is_main, self.device = accelerator.is_main_process, accelerator.device
        log.info("process group: %s; models on %s", collectives.describe(inputs.dist_timeout_minutes), self.device)
        # bf16 autocast where the hardware computes it natively (AMX / AVX512-BF16 CPUs, Ampere+ GPUs)
        native_bf16 = torch.cuda.is_bf16_supported() if torch.cuda.is_available() else cpu_supports_bf16()
        bf16 = native_bf16 if p.bf16 is None else bool(p.bf16)
        self.step_callbacks: list[Callable[[int, dict], None]] = []

        self.resume_from, state = resume_point(self.ckpt_dir, p.resume, p.estimator)
        self.start_step = int(state.get("step", 0))
        set_seed(p.seed + 1000 * self.rank)

        # ---- data, environment, reward model
        self.train_queries, self.eval_queries = inputs.train_queries, inputs.eval_queries
        self.gold = gold_sets(self.train_queries)
        self.selector = inputs.build_selector() if inputs.build_selector is not None else None
        self.rollout_policy = inputs.rollout_policy()

        # ---- models: the update engine, then the rollout engine from the starting checkpoint, given the current
        # weights right away
        self.tokenizer = load_tokenizer(self.resume_from, init_path)
        self.engine = Engine.build(p, init_path, ref_path, ds_config, self.resume_from, self.device)
        llm_cfg = asdict(inputs.rollout_llm)
        llm_cfg["model"] = init_path
        llm_cfg["init"] = p.policy_init  # random: the engine's own draw is replaced by the policy's right below
        t_setup = time.perf_counter()  # the set-up's stages are timed: a slow start says which one
        self.rollout_engine = RolloutEngine(llm_cfg, self.run_dir, sync=p.rollout_sync, sleep=p.rollout_sleep)
        log.info("rollout engine built in %.1f s", time.perf_counter() - t_setup)
        if self.resume_from is not None or p.policy_init == "random":
            t_setup = time.perf_counter()
            self.rollout_engine.sync(self.engine.policy_weights(), self.tokenizer)
            log.info("rollout engine given the policy's weights in %.1f s", time.perf_counter() - t_setup)
        self.env = CrawlEnv(inputs.store, inputs.search, inputs.env, tokenizer=self.rollout_engine.tokenizer)
        self.sampler = QuerySampler(len(self.train_queries), p.seed)
        self.expand_rng = random.Random(p.seed * 7919 + self.rank)
        if self.resume_from is not None:
            self.sampler.load_state_dict(state["sampler"])
            python_rng_from_json(self.expand_rng, load_rng(self.resume_from, self.rank)["expand_rng"])
        self.history: dict[str, Any] = state.get("history", {})

        batcher = Batcher(self.tokenizer.pad_token_id, self.device, bf16)
        self.scorer = Scorer(self.engine, batcher, p, self._start_prompt)
        self.updater = PPOUpdate(self.engine, batcher, p, self.rank)
        self.logger = RunLog(self.run_dir, enabled=self.is_main, wandb_cfg=inputs.wandb, config=inputs.config,
                             resume_step=self.start_step, wandb_id=state.get("wandb_id"),
                             run_name=f"crawler_ppo_alpha{p.alpha}")
        log.info("PPO: rank %d/%d on %s, bf16 autocast %s, %d training / %d held-out queries, start at step %d%s",
                 self.rank, self.world, self.device, bf16, len(self.train_queries), len(self.eval_queries),
                 self.start_step, f" (resumed from {self.resume_from})" if self.resume_from else "")

    def _start_prompt(self, user_query: str, paper_id: str) -> list[int]:
        """The prompt token ids of the S_{q+p} session ``paper_id`` would start (read off the rollout engine's
        current LLM: ``ppo.rollout_sync=reload`` rebuilds it)."""
        return self.rollout_engine.llm.prompt_token_ids(self.env.state_messages(user_query, paper_id))

    # ---- one PPO step ----

    def rollout(self, step: int) -> tuple[list[SessionSample], dict]:
        """Collect: this rank's share of the step's queries crawled by the current policy, rewarded."""
        p = self.pcfg
        idx = self.sampler.next(p.queries_per_step * self.world)
        mine = idx[self.rank * p.queries_per_step:(self.rank + 1) * p.queries_per_step]
        queries = [self.train_queries[i] for i in mine]
        self.rollout_policy.seed = p.seed + 100_003 * step + 7 * self.rank
        crawler = self.rollout_engine.crawler(self.rollout_policy)
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
        if self.inputs.known_task is not None:
            m.update(self.inputs.known_task.metrics(records))
        return samples, m

    def compute_targets(self, samples: list[SessionSample], frozen: bool,
                        init_value: bool = False) -> tuple[list[SessionTargets], dict, dict]:
        return compute_targets(self.scorer, self.engine, self.pcfg, samples, frozen, init_value)

    def update(self, samples: list[SessionSample], targets: list[SessionTargets], batch: dict, step: int,
               frozen: bool) -> dict:
        return self.updater(samples, targets, batch, step, frozen)

    def train_step(self, step: int) -> dict:
        p = self.pcfg
        t0 = time.perf_counter()
        frozen = step < p.policy_freeze_steps
        reset_peak(self.device)  # per-phase CUDA peaks (perf/max_memory_*_gb/<phase>): what `scholar plan` estimates
        samples, rollout_metrics = self.rollout(step)
        memory = peak_metrics(self.device, "rollout")
        t_rollout = time.perf_counter() - t0
        self.rollout_engine.sleep()  # ppo.rollout_sleep: the engine's GPU memory goes to scoring and the update
        init_value = p.init_value_to_mean_return and step == 0
        reset_peak(self.device)
        targets, batch, target_metrics = self.compute_targets(samples, frozen, init_value=init_value)
        memory.update(peak_metrics(self.device, "score"))
        t1 = time.perf_counter()
        reset_peak(self.device)
        update_metrics = self.update(samples, targets, batch, step, frozen)
        memory.update(peak_metrics(self.device, "update"))
        t_update = time.perf_counter() - t1
        self.engine.scheduler.step()
        # weights awake, the push, then the KV cache (TRL's order; the engine's method)
        t_sync = self.rollout_engine.wake_up_and_sync(None if frozen else self.engine.policy_weights(), self.tokenizer)
        tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
        dt = time.perf_counter() - t0
        metrics = {**rollout_metrics, **target_metrics, **update_metrics, **memory, "timing_s/rollout": t_rollout,
                   "timing_s/update": t_update, "timing_s/sync": t_sync, "timing_s/step": dt,
                   "perf/throughput": tokens / max(dt, 1e-9)}
        return collectives.mean_over_processes(metrics)

    # ---- evaluation: crawler recall on held-out queries through the eval harness ----

    def evaluate(self, tag: str) -> dict:
        """Greedy crawls of the held-out queries with the current policy (:func:`.heldout.evaluate_heldout`)."""
        inputs = self.inputs
        return evaluate_heldout(self.eval_queries, inputs.store, inputs.search, inputs.env,
                                self.rollout_engine.crawler(inputs.eval_policy), self.rollout_engine.tokenizer,
                                self.rank, self.world, self.is_main, self.run_dir, tag)

    # ---- checkpoints ----

    def save(self, step: int) -> Path:
        state = {"step": step, "sampler": self.sampler.state_dict(), "wandb_id": self.logger.wandb_id,
                 "history": self.history, "config": asdict(self.pcfg)}
        return self.engine.save(self.ckpt_dir, step, self.tokenizer, state,
                                {"expand_rng": python_rng_to_json(self.expand_rng)}, self.rank)

    # ---- the loop ----

    def train(self) -> dict:
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
                       disable=not self.is_main, initial=self.start_step, total=p.total_steps)
            for step in bar:
                metrics = self.train_step(step)
                if p.eval_every > 0 and (step + 1) % p.eval_every == 0 and step + 1 < p.total_steps:
                    ev = self.evaluate(f"step{step + 1:06d}")
                    metrics.update({f"eval/{k}": v for k, v in ev.items()
                                    if k in ("crawler_recall", "crawler_actions")})
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
        if self.is_main:
            (self.run_dir / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
            self.logger.plot(self.run_dir / "training_curves.png", smoothing=self.pcfg.plot_smoothing)
        self.logger.close()
        return summary

    def close(self) -> None:
        self.rollout_engine.close()
        self.logger.close()
