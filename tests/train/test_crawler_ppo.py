"""``scholar train crawler_ppo`` as a real process warned while it builds: the preemption handler is installed at
the command's entry, so SIGUSR1 / SIGTERM during set-up (store, index, models) leave through the requeue path
(``scontrol requeue <job>``, exit 75) instead of killing the process, with no traceback and nothing trained."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.fixtures.ppo import tiny_overrides
from tests.paths import REPO

DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_STEP_ID",
             "SLURM_NTASKS", "SLURM_PROCID", "TORCHELASTIC_RUN_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
             "SCHOLAR_PREEMPTION_PENDING", "SCHOLAR_SIGNAL_LEAD_S")


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_a_warning_during_set_up_requeues_and_exits_75(tiny_model_dir, ppo_papers, tmp_path, sig):
    bin_dir = tmp_path / "bin"  # Slurm's scontrol (the outside world): records what it was asked
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/scontrol.log\n')
    (bin_dir / "scontrol").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", SLURM_JOB_ID="4242",
               PATH=f"{bin_dir}:{env['PATH']}", WANDB_MODE="disabled")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "scholar_agents", "train", "crawler_ppo",
           *tiny_overrides(tiny_model_dir, ppo_papers, run, eval_at_start="true", total_steps=2)]
    log = tmp_path / "out.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 120
            while "preemption handler on" not in log.read_text(errors="replace"):
                assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            proc.send_signal(sig)  # the command has just started building: store, index, models, engine
            code = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    out = log.read_text(errors="replace")
    assert code == 75, out[-3000:]
    assert "Traceback" not in out and f"caught {sig.name}" in out and "exiting for requeue" in out, out[-3000:]
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
    assert not (run / "checkpoints").exists() and not (run / "metrics.jsonl").exists()  # nothing trained
    assert not (run / "trajectories_eval_start.jsonl").exists()  # left before the start-of-run evaluation
