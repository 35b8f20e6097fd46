"""``scholar train crawler_ppo``: session-level PPO for the PaSa Crawler (PaSa §4.2, App. A.2, Tables 6, 9), with the
Selector as auxiliary reward. The loop is :class:`scholar_agents.train.ppo.trainer.PPOTrainer`; this entry builds it
from the composed config, trains (resuming from the newest checkpoint), and returns the summary it also writes to
``<run dir>/metrics.json`` (crawler recall and crawler actions on the held-out queries, for ``sweep report``).

Multi-process: ``torchrun --nproc_per_node N -m scholar_agents train crawler_ppo ...`` (gloo on CPU, NCCL on GPUs);
under srun without torchrun, ``hydra_app.task_environment`` exports rank / world size from Slurm first.
"""

from __future__ import annotations

import logging
import os

from omegaconf import DictConfig

from scholar_agents.pasa.crawl_budget import critic_free_crawl_budget
from scholar_agents.pasa.kinds import check_kinds
from scholar_agents.plan.commands import startup_check, startup_save_every, startup_window_check
from scholar_agents.runtime.preemption import PreemptionHandler
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.train.plan_runs import ppo_run
from scholar_agents.train.ppo.inputs import build_ppo_inputs

log = logging.getLogger(__name__)


def crawler_ppo(cfg: DictConfig) -> dict:
    # first: a warning while the store, the models, DeepSpeed or vLLM are built sets a flag instead of killing the
    # process; the trainer acts on it before its start-of-run evaluation (trainer.train)
    handler = PreemptionHandler.install()
    try:
        return _crawler_ppo(cfg, handler)
    finally:
        handler.uninstall()


def _crawler_ppo(cfg: DictConfig, handler) -> dict:
    # lazy: loads torch and transformers (this command module imports without them)
    from scholar_agents.train.ppo.rollout_engine import check_colocated_tensor_parallel
    # lazy: loads torch, transformers, peft, accelerate (this command module imports without them)
    from scholar_agents.train.ppo.trainer import PPOTrainer

    # refused before anything is loaded: an unknown kind, backend or ranking, grpo / rloo crawls without a budget,
    # TP > 1 colocated engines (one line each), then `scholar plan`: a plan that does not fit the GPUs stops here,
    # naming the fix (skipped on CPU; cluster.memory_check=false starts anyway)
    check_kinds(cfg)
    critic_free_crawl_budget(str(cfg.ppo.estimator), cfg.crawler.env)
    check_colocated_tensor_parallel(str(cfg.llm.backend), int(cfg.llm.get("tensor_parallel_size") or 1),
                                    int(os.environ.get("WORLD_SIZE", "1")))
    run = ppo_run(cfg)  # what `scholar plan` reads, typed
    startup_check(run)
    # under Slurm: one warning line if the signal lead is shorter than `scholar plan`'s step + checkpoint estimate,
    # or torchrun's shutdown window shorter than the lead (docs/cluster.md "Preemption, time limits and requeue");
    # then every step is checkpointed, so that a preemption loses at most the step in flight
    startup_window_check(run)
    cfg.ppo.save_every = startup_save_every(run)
    inputs = build_ppo_inputs(cfg)  # the config, typed once, and what it names (store, indexes, queries), built
    if handler.requested:  # warned while the store and indexes were built: leave before the models load
        log.warning("preemption signal (%s) during set-up: nothing to save, leaving for requeue",
                    ",".join(handler.received))
        handler.exit_for_requeue()
    trainer = PPOTrainer(inputs, run_dir(cfg))
    try:
        summary = trainer.train()
    finally:
        trainer.close()
    at_end, at_start = summary.get("eval") or {}, summary.get("eval_start") or {}
    if at_end:
        log.info("crawler recall %s -> %s, crawler actions %s -> %s (held-out queries)", at_start.get("crawler_recall"),
                 at_end.get("crawler_recall"), at_start.get("crawler_actions"), at_end.get("crawler_actions"))
    return summary
