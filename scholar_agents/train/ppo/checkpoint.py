"""Exact-resume checkpoints for PPO: everything that decides the next step, written atomically.

``<checkpoint_dir>/step_000012/``::

    policy/              HF directory (safetensors; a LoRA run: the adapter) — vLLM/transformers load it as is
    value/               the value model (HF backbone + value_head.safetensors) or the shared head
    optimizer.pt         AdamW state (both parameter groups)    } torch.save, read back with weights_only=True
    scheduler.pt         the learning-rate schedule's counters  }
    deepspeed/           instead of optimizer.pt under ``ppo.deepspeed``: the engine's own checkpoint (fp32 master
                         weights and optimizer state, sharded per rank), written and read by DeepSpeed (pickle)
    trainer_state.json   step, query sampler, wandb run id, metrics history
    rng/rank<R>.json     Python, NumPy and the rollout sampler's RNG states of rank R
    rng/rank<R>.safetensors   torch CPU (and CUDA) RNG states of rank R
    COMPLETE             written last, inside the temporary directory
``<checkpoint_dir>/latest``: the name of the newest complete checkpoint (replaced atomically).

A checkpoint is built in ``step_000012.tmp`` and renamed when complete, so a job killed mid-save leaves the previous
checkpoint intact (a leftover ``.tmp`` is deleted by the next save). Nothing is unpickled on load: weights come from
safetensors and the optimizer state through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

from scholar_agents.validation import UsageError

COMPLETE = "COMPLETE"
LATEST = "latest"


def step_dirname(step: int) -> str:
    return f"step_{step:06d}"


@contextlib.contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Write a directory under a temporary name and rename it into place when the block succeeds."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    yield tmp
    old = path.with_name(path.name + ".old")
    if path.exists():
        if old.exists():
            shutil.rmtree(old)
        os.replace(path, old)
    os.replace(tmp, path)
    if old.exists():
        shutil.rmtree(old)


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def latest_checkpoint(root: str | Path) -> Path | None:
    """The newest complete checkpoint under ``root`` (None when there is none)."""
    root = Path(root)
    pointer = root / LATEST
    if pointer.is_file():
        cand = root / pointer.read_text().strip()
        if (cand / COMPLETE).is_file():
            return cand
    done = sorted(d for d in root.glob("step_*") if d.is_dir() and (d / COMPLETE).is_file()
                  and not d.name.endswith((".tmp", ".old")))
    return done[-1] if done else None


# ---- RNG states ----


def rng_state(extra: dict | None = None) -> tuple[dict, dict[str, torch.Tensor]]:
    """(JSON-able Python/NumPy states, torch RNG tensors) of this process."""
    py = random.getstate()
    np_state = np.random.get_state()
    meta = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],
        **(extra or {}),
    }
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda{i}"] = s
    return meta, tensors


def set_rng_state(meta: dict, tensors: dict[str, torch.Tensor]) -> None:
    v, state, gauss = meta["python"]
    random.setstate((v, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = meta["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch_cpu"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("torch_cuda")]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def python_rng_to_json(rng: random.Random) -> list:
    v, state, gauss = rng.getstate()
    return [v, list(state), gauss]


def python_rng_from_json(rng: random.Random, state: list) -> None:
    rng.setstate((state[0], tuple(state[1]), state[2]))


# ---- save / load ----


def save_checkpoint(root: str | Path, step: int, write_models: Callable[[Path], None], optimizer, scheduler,
                    trainer_state: dict, rng_extra: dict, rank: int = 0, barrier: Callable[[], None] = lambda: None,
                    keep_last: int | None = 2, collective_write: Callable[[Path], None] | None = None) -> Path:
    """Save step ``step``. Every rank calls it (RNG states are per rank); rank 0 writes the models, optimizer,
    scheduler and state, and publishes the directory once every rank has written. ``collective_write`` runs on
    every rank (a DeepSpeed engine's sharded optimizer state). ``barrier`` is the trainer's
    (:func:`scholar_agents.runtime.collectives.barrier`): while rank 0 writes the models alone (~30 GB of 16-bit
    weights for the 7B policy and 7B value model, at disk speed) the other ranks wait in it, which the process
    group's timeout (``cluster.dist_timeout_minutes``, 120 min by default, not NCCL's 10) must cover."""
    from safetensors.torch import save_file

    root = Path(root)
    final = root / step_dirname(step)
    tmp = final.with_name(final.name + ".tmp")
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        (tmp / "rng").mkdir(parents=True)
    barrier()
    meta, tensors = rng_state(rng_extra)
    (tmp / "rng" / f"rank{rank}.json").write_text(json.dumps(meta))
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp / "rng" / f"rank{rank}.safetensors"))
    if collective_write is not None:
        collective_write(tmp)
    if rank == 0:
        write_models(tmp)
        if optimizer is not None:
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        if scheduler is not None:
            torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        (tmp / "trainer_state.json").write_text(json.dumps(trainer_state, indent=1))
    barrier()
    if rank == 0:
        (tmp / COMPLETE).write_text(str(step))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        write_text_atomic(root / LATEST, final.name)
        if keep_last:
            done = sorted(d for d in root.glob("step_*") if d.is_dir() and (d / COMPLETE).is_file())
            for old in done[:-keep_last]:
                shutil.rmtree(old, ignore_errors=True)
    barrier()
    return final


def load_trainer_state(ckpt: Path) -> dict:
    return json.loads((ckpt / "trainer_state.json").read_text())


def resume_point(root: Path, resume: bool, estimator: str) -> tuple[Path | None, dict]:
    """(the checkpoint to resume from, its trainer state): the newest under ``root`` with ``ppo.resume``, none
    otherwise — and then ``root`` must hold none (nothing is deleted for you)."""
    latest = latest_checkpoint(root)
    if not resume and latest is not None:
        raise ValueError(f"{root} holds checkpoints; pass ppo.resume=true to continue them or choose "
                         f"another ppo.checkpoint_dir (nothing is deleted for you)")
    resume_from = latest if resume else None
    state = load_trainer_state(resume_from) if resume_from else {}
    saved = state.get("config", {}).get("estimator")
    if saved is not None and saved != estimator:
        # the checkpoint holds another estimator's models (paper_mc/gae: a value model; grpo/rloo: none), which
        # DeepSpeed's strict load would refuse deep inside; say it before any model loads
        raise UsageError(f"ppo.estimator={estimator} but {resume_from} was trained with "
                         f"ppo.estimator={saved}: resume with ppo.estimator={saved}, or start a new run dir")
    return resume_from, state


def load_optimizer_and_scheduler(ckpt: Path, optimizer, scheduler) -> None:
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True))
    if scheduler is not None:
        scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", map_location="cpu", weights_only=True))


def load_rng(ckpt: Path, rank: int) -> dict:
    """Restore this rank's RNG states; returns the JSON part (with the caller's extras, e.g. the rollout RNG)."""
    from safetensors.torch import load_file

    meta_path = ckpt / "rng" / f"rank{rank}.json"
    if not meta_path.is_file():
        raise ValueError(f"{ckpt} has no RNG state for rank {rank}: it was written by a run with fewer processes")
    meta = json.loads(meta_path.read_text())
    set_rng_state(meta, load_file(str(ckpt / "rng" / f"rank{rank}.safetensors")))
    return meta
