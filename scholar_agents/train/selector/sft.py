"""``scholar train selector_sft``: the Selector's imitation learning (PaSa §4.3, App. B) with the shared SFT
recipe (:mod:`scholar_agents.train.sft`). The data are Table 15 chats whose answer starts with the decision token,
so that the trained model's first generated token is the P("True") that :class:`~scholar_agents.pasa.selectors.llm.
Selector` reads."""

from __future__ import annotations

import logging

from omegaconf import DictConfig

from scholar_agents.plan.commands import startup_window_check
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.train.plan_runs import sft_run
from scholar_agents.train.sft import run_sft

log = logging.getLogger(__name__)


def selector_sft(cfg: DictConfig) -> dict:
    startup_window_check(sft_run(cfg))  # under Slurm: the signal lead against one step + checkpoint (one log line)
    summary = run_sft(cfg.sft, logging_cfg=cfg.get("logging"), report_dir=run_dir(cfg),
                      dist_timeout_minutes=(cfg.get("cluster") or {}).get("dist_timeout_minutes"))
    log.info("selector SFT: %d steps, loss %s, model in %s", summary["global_step"],
             "n/a" if summary["train_loss"] is None else f"{summary['train_loss']:.4f}",
             summary["final_dir"])
    return summary
