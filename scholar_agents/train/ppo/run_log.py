"""Where PPO's per-step diagnostics go: a JSONL file (the source of truth, resumable), wandb (offline by default)
and a PNG of the training curves. Only the main process writes."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

log = logging.getLogger(__name__)

# The curves PaSa's Figure 3 shows (return, value loss) and the ones that say whether PPO is healthy.
PLOT_KEYS = (
    ("rollout/session_return", "session return R̂ (Eq. 3)"),
    ("reward/session_reward", "session reward Σ r (Eq. 1)"),
    ("critic/vf_loss", "value loss (Eq. 6)"),
    ("actor/pg_loss", "policy loss (Eq. 5)"),
    ("actor/kl_to_sft", "KL to the SFT policy / token"),
    ("critic/vf_explained_var", "explained variance"),
)


def ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing (PaSa Fig. 3 uses weight 0.95), debiased so short runs are not pulled to 0."""
    out, last, num = [], 0.0, 0
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(float("nan"))
            continue
        last = last * weight + (1 - weight) * v
        num += 1
        out.append(last / (1 - weight ** num))
    return out


def wandb_init_kwargs(wandb_cfg, run_dir: Path, run_name: str, wandb_id: str | None, config: dict | None) -> dict:
    """What ``wandb.init`` gets: the composed ``logging.wandb.mode`` is passed explicitly, so it wins over a
    ``WANDB_MODE`` the process inherited (precedence: hydra_app.apply_wandb_mode); ``id`` + ``resume="allow"``
    continue the run a checkpoint names after a requeue."""
    return dict(project=wandb_cfg.get("project", "scholar-agents"), entity=wandb_cfg.get("entity"),
                dir=str(run_dir), name=run_name, id=wandb_id, resume="allow", config=config or {},
                tags=list(wandb_cfg.get("tags") or []), mode=str(wandb_cfg.get("mode") or "offline"))


class RunLog:
    def __init__(self, run_dir: Path, enabled: bool, wandb_cfg=None, config: dict | None = None,
                 resume_step: int = 0, wandb_id: str | None = None, run_name: str = "crawler_ppo"):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.enabled = enabled
        self.wandb = None
        self.wandb_id = wandb_id
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # A restart resumes from its checkpoint: drop the lines of steps that were logged but never checkpointed.
        if self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        if wandb_cfg is not None and wandb_cfg.get("enabled", False) and wandb_cfg.get("mode") != "disabled":
            try:
                import wandb

                self.wandb = wandb.init(**wandb_init_kwargs(wandb_cfg, run_dir, run_name, wandb_id, config))
                self.wandb_id = self.wandb.id
            except Exception as e:  # noqa: BLE001  (tracking must never kill a training run)
                log.warning("wandb disabled: %s", e)
                self.wandb = None

    def log(self, step: int, metrics: dict) -> None:
        if not self.enabled:
            return
        row = {"step": step, **{k: (float(v) if isinstance(v, (int, float)) else v) for k, v in metrics.items()}}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)

    def rows(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def plot(self, out: Path, smoothing: float = 0.6) -> Path | None:
        rows = self.rows()
        if not self.enabled or not rows:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
        steps = [r["step"] for r in rows]
        for ax, (key, title) in zip(axes.flat, PLOT_KEYS):
            ys = [r.get(key, float("nan")) for r in rows]
            ax.plot(steps, ys, "o-", alpha=0.35, label="per step")
            ax.plot(steps, ema(ys, smoothing), "-", lw=2, label=f"EMA {smoothing}")
            ax.set_title(title, fontsize=10)
            ax.set_xlabel("PPO step")
            ax.grid(alpha=0.3)
        frozen = [r["step"] for r in rows if r.get("actor/frozen")]
        if frozen:
            for ax in axes.flat:
                ax.axvspan(min(frozen) - 0.5, max(frozen) + 0.5, color="grey", alpha=0.12, lw=0)
        axes.flat[0].legend(fontsize=8)
        fig.suptitle("Session-level PPO for the PaSa Crawler (grey: policy frozen, value model training)")
        fig.tight_layout()
        fig.savefig(out, dpi=110)
        plt.close(fig)
        return out

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None


def run_summary(rows: list[dict], history: dict, p, checkpoint: str) -> dict:
    """What a finished run reports in ``metrics.json`` (what ``scholar sweep report`` reads): the held-out figures
    at the start, along the run (``ppo.eval_every``) and at the end, and the training returns' first and last third."""
    import numpy as np

    returns = [r.get("rollout/session_return") for r in rows]
    rewards = [r.get("reward/session_reward") for r in rows]
    k = max(1, len(rows) // 3)
    return {
        "eval": history.get("eval_end", {}),
        "eval_start": history.get("eval_start", {}),
        "eval_curve": [{"step": r["step"], "crawler_recall": r["eval/crawler_recall"],
                        "crawler_actions": r.get("eval/crawler_actions")}
                       for r in rows if r.get("eval/crawler_recall") is not None],
        "train": {
            "steps": len(rows),
            "session_return_first": returns[0] if returns else None,
            "session_return_last": returns[-1] if returns else None,
            f"session_return_mean_first_{k}": float(np.mean(returns[:k])) if returns else None,
            f"session_return_mean_last_{k}": float(np.mean(returns[-k:])) if returns else None,
            f"session_reward_mean_first_{k}": float(np.mean(rewards[:k])) if rewards else None,
            f"session_reward_mean_last_{k}": float(np.mean(rewards[-k:])) if rewards else None,
            "seconds_per_step": float(np.mean([r["timing_s/step"] for r in rows])) if rows else None,
        },
        "ppo": {"alpha": p.alpha, "beta": p.beta, "estimator": p.estimator, "policy_freeze_steps":
                p.policy_freeze_steps, "total_steps": p.total_steps},
        "checkpoint": checkpoint,
    }
