"""The one place every entry point's process environment is set (hydra_app.task_environment): the distributed
variables DeepSpeed / torch.distributed read, and the wandb mode from the composed config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scholar_agents.hydra_app import CONF_DIR, apply_wandb_mode, compose
from scholar_agents.pasa.prompts import selector_messages, selector_target

REPO = Path(__file__).resolve().parents[1]
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_STEP_ID",
             "SLURM_NTASKS", "SLURM_PROCID", "TORCHELASTIC_RUN_ID")


def _pairs(path: Path, n: int = 4) -> Path:
    rows = []
    for i in range(n):
        msgs = selector_messages(f"Question {i}?", f"A paper title {i}", f"An abstract about topic {i}.")
        rows.append({"messages": msgs + [{"role": "assistant", "content": selector_target(i % 2 == 0, "why")}]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sft_overrides(model_dir, data, out, steps: int = 2) -> list[str]:
    return [f"sft.model={model_dir}", f"sft.train_file={data}", f"sft.output_dir={out}",
            "sft.per_device_train_batch_size=2", f"sft.max_steps={steps}", "sft.learning_rate=1e-3",
            "sft.logging_steps=1", "sft.save_steps=100", "sft.bf16=false", "sft.model_dtype=float32"]


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_one_process_deepspeed_sft_runs_without_mpi(tiny_model_dir, tmp_path):
    """`train selector_sft sft.deepspeed=...` as ONE plain process (no torchrun, no srun) -- what `sft=pasa_7b` on one
    GPU does. Without RANK / WORLD_SIZE DeepSpeed looks for MPI and stops with `ModuleNotFoundError: mpi4py`."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    args = ["train", "selector_sft", *sft_overrides(tiny_model_dir, _pairs(tmp_path / "pairs.jsonl"), tmp_path / "ckpt"),
            f"sft.deepspeed={CONF_DIR / 'deepspeed' / 'zero2.json'}", "logging.wandb.enabled=false",
            f"hydra.run.dir={tmp_path / 'run'}"]
    out = subprocess.run([sys.executable, "-m", "scholar_agents", *args], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    summary = json.loads((tmp_path / "run" / "sft_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["world_size"] == 1
    assert (tmp_path / "ckpt" / "final" / "model.safetensors").is_file()
    assert "distributed environment (single)" in out.stderr + out.stdout
