"""``scholar slurm probe``: a tiny, real, resumable training job that checks a Slurm allocation end to end before a
big job is trusted to it — launching (sbatch / srun / torchrun / the Hydra submitit launcher), torch.distributed
rendezvous across the allocation, checkpoint + requeue on a preemption signal, resume, and a metrics file that
``scholar sweep report`` reads.

The "model" is a linear regression on synthetic data (y = X w* + noise), trained with SGD; its loss goes down
in a few steps on one CPU, so a sweep over ``probe.lr`` gives a real, readable table. Under torchrun it runs as
DDP — NCCL with model and batches on ``cuda:LOCAL_RANK`` when CUDA is there, else gloo on the CPU — with the process
group timeout ``cluster.dist_timeout_minutes``, and checks that an all-reduce over every rank adds up (through
:mod:`scholar_agents.runtime.collectives`, like the trainers). It uses the same
preemption glue (:mod:`scholar_agents.runtime.preemption`) the trainers use: SIGTERM/SIGUSR1/SIGUSR2 → checkpoint
at the next step boundary → ``scontrol requeue`` → exit 75 → the requeued job resumes from the checkpoint.

    scholar slurm probe probe.steps=50                                 # here
    sbatch slurm/probe.sbatch probe.steps=200 probe.step_seconds=1     # one job on the cluster
    scholar slurm probe -m hydra/launcher=slurm probe.lr=0.01,0.03,0.1,0.3   # one job array
"""

from __future__ import annotations

import json
import logging
import os
import platform
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig

from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.runtime.cluster import ClusterConfig
from scholar_agents.runtime import preemption
from scholar_agents.typed_config import typed

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "probe_checkpoint.pt"
METRICS_NAME = "metrics.json"


@dataclass
class SlurmProbeConfig:
    """The probe's tiny training run. Defaults finish in about a second on one CPU core."""

    steps: int = 40  # optimizer steps in total (across restarts)
    lr: float = 0.05  # SGD learning rate: what the example sweep varies
    batch_size: int = 64
    dim: int = 16  # features of the synthetic regression
    noise: float = 0.1  # label noise std: the floor of the achievable loss is noise**2
    seed: int = 0
    step_seconds: float = 0.0  # sleep per step, so that a test (or you) can signal a job in mid-run
    checkpoint_every: int = 5  # steps between routine checkpoints (a preemption checkpoint is always taken)
    # Where the checkpoint lives; null = this run's output dir (stable across requeues: the sbatch templates pin
    # hydra.run.dir to the job id, sweeps use <sweep dir>/<job num>).
    checkpoint_dir: Optional[str] = None


def _true_weights(dim: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return torch.randn(dim, 1, generator=g)


def _batch(step: int, cfg: SlurmProbeConfig, w_true, rank: int):
    """Data is a pure function of (seed, step, rank): a resumed run sees exactly the batches it would have seen."""
    import torch

    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step * 1_009 + rank)
    x = torch.randn(cfg.batch_size, cfg.dim, generator=g)
    y = x @ w_true + cfg.noise * torch.randn(cfg.batch_size, 1, generator=g)
    return x, y


def _save_checkpoint(path: Path, model, optimizer, step: int, losses: list[float], restarts: list[int],
                     preemptions: list[dict]) -> None:
    import torch

    tmp = path.with_suffix(".tmp")
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                "losses": losses, "restarts": restarts, "preemptions": preemptions}, tmp)
    os.replace(tmp, path)  # atomic: a kill during the save leaves the previous checkpoint intact


def _init_distributed(timeout_minutes: float) -> str | None:
    """torch.distributed from torchrun's environment (also a torchrun of one process: the GPU check runs the probe
    that way under NCCL); None, and no group, when launched as a single process without torchrun. Returns the
    backend: NCCL when CUDA is available, else gloo."""
    # lazy: imports torch (the probe command module imports without it)
    from scholar_agents.runtime import collectives

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not os.environ.get("TORCHELASTIC_RUN_ID"):
        return None
    return collectives.init_process_group(timeout_minutes)


def _placement(backend: str | None):
    """(device, DDP keyword arguments) for the model and its batches: this rank's GPU under NCCL (DDP's
    ``device_ids``: one device per process), the CPU under gloo or without a process group."""
    import torch

    # lazy: imports torch (the probe command module imports without it)
    from scholar_agents.runtime import collectives

    device = collectives.collective_device(backend) if backend else torch.device("cpu")
    return device, ({"device_ids": [device.index], "output_device": device.index} if device.type == "cuda" else {})


def probe(cfg: DictConfig) -> dict:
    import torch

    p = typed(SlurmProbeConfig, cfg.probe, "probe")
    if p.steps < 1 or p.batch_size < 1 or p.dim < 1:
        raise ValueError(f"probe.steps, probe.batch_size and probe.dim must be >= 1 (got {p})")
    # lazy: imports torch (the probe command module imports without it)
    from scholar_agents.runtime import collectives

    timeout_min = float((cfg.get("cluster") or {}).get("dist_timeout_minutes") or ClusterConfig.dist_timeout_minutes)
    handler = preemption.PreemptionHandler.install()
    # one step is the probe's step + checkpoint (a checkpoint of 16 floats takes no time)
    preemption.check_preemption_window(p.step_seconds, "one probe step (probe.step_seconds)")
    backend = _init_distributed(timeout_min)
    rank, world = collectives.rank(), collectives.world_size()
    device, ddp_kwargs = _placement(backend)
    log.info("probe: %s; model and batches on %s", collectives.describe(timeout_min), device)
    out_dir = run_dir(cfg)
    ckpt_dir = Path(p.checkpoint_dir) if p.checkpoint_dir else out_dir
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = ckpt_dir / CHECKPOINT_NAME

    torch.manual_seed(p.seed)
    model = torch.nn.Linear(p.dim, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=p.lr)
    w_true = _true_weights(p.dim, p.seed)  # CPU, like the batches' generators; batches move to `device`
    start_step, losses, restarts, preemptions = 0, [], [], []
    if ckpt_path.exists():
        # weights_only: a checkpoint is data, never code (torch.load's safe mode).
        state = torch.load(ckpt_path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_step, losses, restarts = int(state["step"]), list(state["losses"]), list(state["restarts"])
        preemptions = list(state.get("preemptions", []))
        log.info("resumed from %s at step %d (restart %d)", ckpt_path, start_step, preemption.restart_count())
    resumed_from = start_step
    restarts.append(preemption.restart_count())
    ddp = torch.nn.parallel.DistributedDataParallel(model, **ddp_kwargs) if backend else model

    allreduce_ok = None
    if backend:  # every rank contributes its rank + 1 (a CPU tensor: the module moves it): world * (world + 1) / 2
        t = collectives.all_reduce(torch.tensor([float(rank + 1)]))
        allreduce_ok = bool(abs(t.item() - world * (world + 1) / 2) < 1e-6)

    log.info("training from step %d to %d (rank %d of %d, restart %d)", start_step, p.steps, rank, world,
             preemption.restart_count())
    t0 = time.time()
    for step in range(start_step, p.steps):
        step_started = time.time()
        x, y = (t.to(device) for t in _batch(step, p, w_true, rank))
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
        if p.step_seconds > 0:
            time.sleep(p.step_seconds)
        done = step + 1
        stop = handler.should_stop()
        if stop:  # when the signal came (this rank's; None: another rank's) and the step it interrupted
            preemptions.append({"restart": preemption.restart_count(), "signals": list(handler.received),
                                "signal_at": handler.received_at, "step_started_at": step_started,
                                "checkpoint_step": done, "checkpoint_at": time.time()})
        if rank == 0 and (stop or done % p.checkpoint_every == 0 or done == p.steps):
            _save_checkpoint(ckpt_path, model, optimizer, done, losses, restarts, preemptions)
        if stop:
            log.warning("preemption requested (%s): checkpointed at step %d/%d", ",".join(handler.received),
                        done, p.steps)
            collectives.barrier()
            handler.exit_for_requeue()

    with torch.no_grad():
        weight_error = float((model.weight.detach().cpu().T - w_true).norm())
    metrics = {
        "final_loss": losses[-1] if losses else None,
        "initial_loss": losses[0] if losses else None,
        "weight_error": weight_error,
        "steps": p.steps,
        "lr": p.lr,
        "resumed_from_step": resumed_from,
        "restarts": restarts,
        "restart_count": preemption.restart_count(),
        "preemptions": preemptions,  # one record per preemption checkpoint (signal time, interrupted step)
        "world_size": world,
        "allreduce_ok": allreduce_ok,
        "backend": backend,
        "device": str(device),
        "dist_timeout_minutes": timeout_min,
        "cuda_devices": torch.cuda.device_count(),
        "seconds": round(time.time() - t0, 3),
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "slurm": preemption.slurm_info(),
    }
    if rank == 0:
        (out_dir / METRICS_NAME).write_text(json.dumps(metrics, indent=2))
        log.info("probe: loss %.4f -> %.4f in %d steps (resumed from %d), world %d, slurm %s",
                 metrics["initial_loss"], metrics["final_loss"], p.steps, resumed_from, world,
                 metrics["slurm"].get("job_id", "-"))
    if backend:
        collectives.barrier()
        collectives.shutdown()
    # The handler stays installed until the process exits: a preemption signal that arrives after the last step
    # must not kill a finished job (it would be recorded as FAILED).
    return metrics
