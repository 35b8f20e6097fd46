"""The package's only calls to ``torch.distributed`` collectives (a test walks the package to keep it so).

Why one place: gloo (every CPU test) accepts tensors on any device, NCCL (every GPU job) only CUDA tensors — a
collective on a CPU tensor under NCCL fails at once with "No backend type associated with device type cpu"
(``torch.distributed.Backend.backend_capability``: ``nccl: ['cuda']``). Each function here moves its tensor to
:func:`collective_device` — ``cuda:LOCAL_RANK`` under NCCL, the CPU under gloo or a group with a ``cpu:`` backend —
and hands results back on the caller's device. At world size 1 (or with no process group) nothing is communicated
and every function returns what one process holds, so single-process semantics are the same with or without a group.

The process group's timeout (``cluster.dist_timeout_minutes``, :func:`timeout`) bounds how long a rank waits in any
of these while another works alone (rank 0 building the paper index, writing a checkpoint): NCCL's default is 10
minutes, and ``TORCH_NCCL_ASYNC_ERROR_HANDLING=1`` (slurm/job_env.sh) turns a longer wait into a killed job.
"""

from __future__ import annotations

import logging
import math
import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def is_distributed() -> bool:
    """A process group exists and holds more than this process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def timeout(minutes: float) -> timedelta:
    """``cluster.dist_timeout_minutes`` as the ``timeout=`` of ``init_process_group`` / accelerate's
    ``InitProcessGroupKwargs`` / transformers' ``ddp_timeout`` (seconds)."""
    if not minutes or minutes <= 0:
        raise ValueError(f"cluster.dist_timeout_minutes must be > 0, got {minutes!r}")
    return timedelta(minutes=float(minutes))


def backend_device_types(backend: str) -> list[str]:
    """The tensor device types a backend string serves: ``"nccl"`` -> ``["cuda"]``, ``"gloo"`` -> ``["cpu",
    "cuda"]``, ``"cpu:gloo,cuda:nccl"`` -> ``["cpu", "cuda"]`` (torch's own table for a single name)."""
    if ":" in backend:
        return [pair.split(":", 1)[0].strip() for pair in backend.split(",") if pair.strip()]
    return list(dist.Backend.backend_capability.get(backend.lower(), ["cpu"]))


def local_device_index(device_type: str = "cuda") -> int:
    """``LOCAL_RANK`` (torchrun, accelerate, ``preemption.export_torch_distributed_env``), modulo the devices this
    process sees: a Slurm task bound to one GPU (``--gpu-bind``) sees it as index 0 whatever its local rank."""
    local = int(os.environ.get("LOCAL_RANK", "0") or 0)
    count = torch.cuda.device_count() if device_type == "cuda" else getattr(torch, device_type).device_count()
    return local % count if count else local


def collective_device(backend: str | None = None) -> torch.device:
    """Where a collective's tensors must live under ``backend`` (default: the current group's): the CPU when the
    backend serves CPU tensors, else this rank's accelerator, ``cuda:LOCAL_RANK`` under NCCL."""
    if backend is None:
        if not (dist.is_available() and dist.is_initialized()):
            return torch.device("cpu")
        backend = str(dist.get_backend())
    types = backend_device_types(backend)
    if "cpu" in types or not types:
        return torch.device("cpu")
    kind = types[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"the process group's backend {backend!r} takes {kind} tensors only, and this process sees "
                           f"no CUDA device (CUDA_VISIBLE_DEVICES, the node's driver): start the group with gloo on CPU")
    return torch.device(kind, local_device_index(kind))


def describe(configured_minutes: float | None = None) -> str:
    """One line for the start-up log: backend, the group's actual timeout, the collectives' device."""
    if not (dist.is_available() and dist.is_initialized()):
        return "no process group (one process)"
    backend = str(dist.get_backend())
    device = collective_device(backend)
    applied = None
    try:  # private but stable since torch 2.0: the timeout the backend really got (a group started elsewhere first
        # — accelerate's state is a process-wide singleton — keeps its own)
        group = dist.distributed_c10d._get_default_group()
        applied = group._get_backend(device).options._timeout
    except (AttributeError, RuntimeError, TypeError) as e:  # only the log line depends on it: say "unknown"
        log.debug("process group timeout not readable (%s: %s)", type(e).__name__, e)
    t = f"{applied.total_seconds() / 60:g} min" if applied is not None else "unknown"
    if configured_minutes is not None and applied is not None and abs(applied.total_seconds() / 60
                                                                      - configured_minutes) > 1e-6:
        t += f" (cluster.dist_timeout_minutes={configured_minutes:g} did not apply: the group was started earlier)"
    return f"backend {backend}, world {dist.get_world_size()}, timeout {t}, collectives on {device}"


def init_process_group(timeout_minutes: float, backend: str | None = None) -> str:
    """Start the default group from torchrun's environment (``env://``) with the configured timeout: NCCL when CUDA
    is available (this rank's GPU made current first), else gloo. Returns the backend."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if "cuda" in backend_device_types(backend) and torch.cuda.is_available():
        torch.cuda.set_device(local_device_index("cuda"))
    dist.init_process_group(backend=backend, timeout=timeout(timeout_minutes))
    return backend


def start_group_for_trainer(timeout_minutes: float, cpu: bool = False) -> bool:
    """Start the default group with the configured timeout before an HF Trainer does, when a launcher started
    several processes and no group exists yet (accelerate and DeepSpeed adopt an existing group). Needed because
    transformers passes ``ddp_timeout`` on to accelerate only on GPUs: on CPU its group gets gloo's 30 minutes
    whatever is configured. ``cpu``: gloo even where CUDA is available (``sft.use_cpu``). True when it started one."""
    if int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1 or (dist.is_available() and dist.is_initialized()):
        return False
    init_process_group(timeout_minutes, backend="gloo" if cpu or not torch.cuda.is_available() else None)
    return True


def all_reduce(t: torch.Tensor, op: str = "sum") -> torch.Tensor:
    """``t`` reduced over every process (``op``: sum | max | min), on ``t``'s device. ``t`` itself is updated in
    place when it already lives on the collective device (and is returned)."""
    if op not in _OPS:
        raise ValueError(f"all_reduce op must be one of {sorted(_OPS)}, got {op!r}")
    if not is_distributed():
        return t
    dev = collective_device()
    work = t if t.device == dev else t.to(dev)
    dist.all_reduce(work, op=_OPS[op])
    if work is t:
        return t
    t.copy_(work.to(t.device))
    return t


def all_gather_int(x: int) -> list[int]:
    """Every process's ``x``, in rank order."""
    if not is_distributed():
        return [int(x)]
    dev = collective_device()
    out = [torch.zeros(1, dtype=torch.long, device=dev) for _ in range(dist.get_world_size())]
    dist.all_gather(out, torch.tensor([int(x)], dtype=torch.long, device=dev))
    return [int(t.item()) for t in out]


def mean_over_processes(metrics: dict[str, float]) -> dict[str, float]:
    """Each value averaged over the processes that have it. The ranks first agree on the union of their keys (one
    object gather of the names), then reduce one fixed-shape tensor of (sum, count) per key: a rank whose step had
    nothing to measure (no session left, every prompt too long) sends a key it lacks, or a NaN value, as count 0
    instead of a shorter tensor — which gloo refuses at once and NCCL waits on forever. A key some rank lacked also
    gets ``<key>/ranks``, the number of processes its mean is over; a key no rank measured is NaN."""
    if not is_distributed():
        return metrics
    keys = sorted(set().union(*all_gather_object(sorted(metrics))))
    local = []
    for k in keys:
        v = float(metrics.get(k, math.nan))
        local += [0.0, 0.0] if math.isnan(v) else [v, 1.0]
    t = torch.tensor(local, dtype=torch.float64, device=collective_device())
    dist.all_reduce(t)
    world = dist.get_world_size()
    out = {}
    for k, (total, n) in zip(keys, t.view(-1, 2).tolist()):
        out[k] = total / n if n else math.nan
        if n < world:
            out[f"{k}/ranks"] = n
    return out


def any_process(flag: bool) -> bool:
    """True when ``flag`` is true on at least one process (the ranks agree, e.g. to stop for a preemption)."""
    if not is_distributed():
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def all_gather_object(obj: Any) -> list[Any]:
    """Every process's picklable ``obj``, in rank order (torch pickles through the group's object-collective
    device: the CUDA device made current under NCCL, which accelerate and :func:`init_process_group` set)."""
    if not is_distributed():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def gather_object(obj: Any, dst: int = 0) -> list[Any] | None:
    """Every process's picklable ``obj`` in rank order on process ``dst``; None on the others (they send only, so a
    large object — a held-out evaluation's crawls — is held once, not on every GPU's host process)."""
    if not is_distributed():
        return [obj]
    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == dst else None
    dist.gather_object(obj, out, dst=dst)
    return out


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Process ``src``'s picklable ``obj`` on every process."""
    if not is_distributed():
        return obj
    box = [obj if dist.get_rank() == src else None]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def barrier() -> None:
    """Wait for every process. Under NCCL the barrier is an all-reduce on a device torch would otherwise guess from
    the global rank: name this rank's."""
    if not is_distributed():
        return
    dev = collective_device()
    if dev.type == "cpu":
        dist.barrier()
    else:
        dist.barrier(device_ids=[dev.index])


def shutdown() -> None:
    """Destroy the default group (the end of a job that started it with :func:`init_process_group`)."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def close_before_exit() -> None:
    """The process is about to exit after its job finished: wait for every rank, then destroy the default group.
    Left to the interpreter's teardown, the group's worker threads can be destroyed while still joinable and abort a
    rank that finished its work ("terminate called without an active exception", SIGABRT; seen in CI at the end of
    a ZeRO-2 `train selector_sft` under torchrun), and NCCL warns that ``destroy_process_group()`` was not called."""
    if is_distributed():
        barrier()
    shutdown()
