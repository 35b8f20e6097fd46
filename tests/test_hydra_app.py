"""The one place every entry point's process environment is set (hydra_app.task_environment): the distributed
variables DeepSpeed / torch.distributed read, the network interface NCCL / gloo use, and the wandb mode from the
composed config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scholar_agents.hydra_app import CONF_DIR, apply_wandb_mode, compose
from tests.fixtures.sft import sft_overrides, write_selector_pairs
from tests.paths import REPO

DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_STEP_ID",
             "SLURM_NTASKS", "SLURM_PROCID", "TORCHELASTIC_RUN_ID")


@pytest.mark.slow
@pytest.mark.skipif(__import__("importlib").util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_one_process_deepspeed_sft_runs_without_mpi(tiny_model_dir, tmp_path):
    """`train selector_sft sft.deepspeed=...` as ONE plain process (no torchrun, no srun) -- what `sft=pasa_7b` on one
    GPU does. Without RANK / WORLD_SIZE DeepSpeed looks for MPI and stops with `ModuleNotFoundError: mpi4py`."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    data = write_selector_pairs(tmp_path / "pairs.jsonl")
    args = ["train", "selector_sft", *sft_overrides(tiny_model_dir, data, tmp_path / "ckpt"),
            f"sft.deepspeed={CONF_DIR / 'deepspeed' / 'zero2.json'}", "logging.wandb.enabled=false",
            f"hydra.run.dir={tmp_path / 'run'}"]
    out = subprocess.run([sys.executable, "-m", "scholar_agents", *args], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    summary = json.loads((tmp_path / "run" / "sft_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["world_size"] == 1
    assert (tmp_path / "ckpt" / "final" / "model.safetensors").is_file()
    assert "distributed environment (single)" in out.stderr + out.stdout


def test_wandb_mode_from_the_config_reaches_the_sft_and_ppo_loggers(monkeypatch, tmp_path):
    """`logging.wandb.mode=online` must reach wandb even when the process inherited WANDB_MODE=offline (job_env.sh,
    conftest); nothing goes online here: we read what each logger hands to wandb."""
    from scholar_agents.train.ppo.run_log import wandb_init_kwargs
    from scholar_agents.train.sft import configure_wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR"):
        monkeypatch.delenv(var, raising=False)
    sft = compose("train_selector_sft", ["sft.train_file=x.jsonl", "logging.wandb.mode=online"])
    assert apply_wandb_mode(sft) == "online" and os.environ["WANDB_MODE"] == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")  # inherited again: the SFT logger itself must still say online
    assert configure_wandb(sft.logging, tmp_path / "run", tmp_path / "ckpt") == ["wandb"]
    assert os.environ["WANDB_MODE"] == "online"
    run_id = (tmp_path / "ckpt" / "wandb_run_id").read_text().strip()
    assert os.environ["WANDB_RUN_ID"] == run_id and os.environ["WANDB_RESUME"] == "allow"
    configure_wandb(sft.logging, tmp_path / "run", tmp_path / "ckpt")  # a requeued run: the same id
    assert os.environ["WANDB_RUN_ID"] == run_id

    ppo = compose("train_crawler_ppo", ["logging.wandb.mode=online"])
    assert wandb_init_kwargs(ppo.logging.wandb, tmp_path, "ppo", None, {})["mode"] == "online"
    # Without an override the shell's WANDB_MODE decides, then offline; enabled=false is disabled.
    monkeypatch.setenv("WANDB_MODE", "online")
    assert compose("train_crawler_ppo").logging.wandb.mode == "online"
    monkeypatch.delenv("WANDB_MODE")
    assert compose("train_crawler_ppo").logging.wandb.mode == "offline"
    assert apply_wandb_mode(compose("train_crawler_ppo", ["logging.wandb.enabled=false"])) == "disabled"


NETWORK_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG")


def test_cluster_socket_ifname_reaches_nccl_and_gloo_without_overriding_the_user(monkeypatch):
    """`cluster.socket_ifname` is exported as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME, NCCL_DEBUG=WARN by default;
    what the user exported wins; NCCL's ^/= syntax goes to NCCL only; everything is restored after the task."""
    from scholar_agents.hydra_app import task_environment

    for var in (*NETWORK_VARS, *DIST_VARS):
        monkeypatch.setenv(var, "")  # set-then-delete: monkeypatch restores their absence (task_environment sets RANK)
        monkeypatch.delenv(var)

    def inside(*overrides: str) -> dict:
        with task_environment(compose("slurm_probe", list(overrides))):
            return {k: os.environ.get(k) for k in NETWORK_VARS}

    assert inside() == {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None, "NCCL_DEBUG": "WARN"}
    assert inside("cluster=h100_80gb", "cluster.require_cuda=false", "cluster.socket_ifname=ib0") == {
        "NCCL_SOCKET_IFNAME": "ib0", "GLOO_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN"}
    assert not any(k in os.environ for k in (*NETWORK_VARS, "RANK"))  # restored
    assert inside("cluster.socket_ifname='^docker0,lo'") == {
        "NCCL_SOCKET_IFNAME": "^docker0,lo", "GLOO_SOCKET_IFNAME": None, "NCCL_DEBUG": "WARN"}
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth1")
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    assert inside("cluster.socket_ifname=ib0") == {
        "NCCL_SOCKET_IFNAME": "eth1", "GLOO_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "INFO"}
    assert (os.environ["NCCL_SOCKET_IFNAME"], os.environ["NCCL_DEBUG"]) == ("eth1", "INFO")
    assert "GLOO_SOCKET_IFNAME" not in os.environ


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, f"exited {proc.returncode} before {text!r}:\n{path.read_text()[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"no {text!r} after {timeout} s:\n{path.read_text()[-3000:]}")


@pytest.mark.slow
def test_sft_checkpoints_on_sigusr1_exits_75_and_resumes_into_the_same_wandb_run(tiny_model_dir, tmp_path):
    """The preemption path without Slurm: SIGUSR1 once the handler is installed -> the HF Trainer saves a checkpoint
    at the end of the step it is in and stops -> exit 75 (requeue me) with no final/ -> the same command resumes
    from that checkpoint to the last step, logging into the same (offline) wandb run."""
    steps = 4
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS and not k.startswith("WANDB_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "scholar_agents", "train", "selector_sft",
           *sft_overrides(tiny_model_dir, write_selector_pairs(tmp_path / "pairs.jsonl"), tmp_path / "ckpt", steps),
           "logging.wandb.mode=offline", f"hydra.run.dir={tmp_path / 'run'}"]
    log1 = tmp_path / "first.log"
    with open(log1, "w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            _wait_for(log1, "preemption handler on", proc, timeout=120)
            proc.send_signal(signal.SIGUSR1)  # lands while the model loads: the first step boundary checkpoints
            assert proc.wait(timeout=120) == 75, log1.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
    ckpts = sorted(p.name for p in (tmp_path / "ckpt").glob("checkpoint-*"))
    assert ckpts == ["checkpoint-1"], (ckpts, log1.read_text()[-2000:])
    assert not (tmp_path / "ckpt" / "final").exists()
    run_id = (tmp_path / "ckpt" / "wandb_run_id").read_text().strip()

    second = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "sft_summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-1") and summary["global_step"] == steps
    assert summary["wandb_run_id"] == run_id
    # wandb names offline runs offline-run-<time>-<id>: both attempts wrote into run `run_id`
    runs = sorted(p.name for p in (tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.endswith(f"-{run_id}") for r in runs), runs


@pytest.mark.slow
def test_sft_multirun_jobs_get_their_own_output_dirs(tiny_model_dir, tmp_path):
    """`-m` over two learning rates: each job trains into <sweep dir>/<job num>/checkpoints (the same dir for both
    would make the second job skip on the first one's SFT_DONE)."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", SCHOLAR_OUTPUTS=str(tmp_path / "outputs"))
    overrides = [o for o in sft_overrides(tiny_model_dir, write_selector_pairs(tmp_path / "pairs.jsonl"), "unused")
                 if not o.startswith(("sft.output_dir=", "sft.learning_rate="))]
    out = subprocess.run([sys.executable, "-m", "scholar_agents", "train", "selector_sft", "-m", *overrides,
                          "sft.learning_rate=1e-3,3e-3", "logging.wandb.enabled=false",
                          f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    finals = [tmp_path / "sweep" / str(i) / "checkpoints" / "final" for i in (0, 1)]
    done = [json.loads((f / "SFT_DONE.json").read_text()) for f in finals]
    assert [d["global_step"] for d in done] == [2, 2] and not any(d.get("skipped") for d in done)
    assert (finals[0] / "model.safetensors").read_bytes() != (finals[1] / "model.safetensors").read_bytes()
    assert not (tmp_path / "outputs" / "checkpoints").exists()  # the single-run default dir stays untouched
