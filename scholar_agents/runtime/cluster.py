"""The hardware a run is planned for: ``conf/cluster/*.yaml`` (schema ``base_cluster``), read by ``scholar plan``, by
the start-up memory check of ``train crawler_ppo``, by the CUDA check before every command (``require_cuda``), for the
process-group timeout by every multi-process command, and for the preemption window (``shutdown_grace_s``) by
``slurm/job_env.sh``'s torchrun and the submitit launchers.
Free of heavy imports: every root config composes it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from scholar_agents.typed_config import typed  # floor 0 too: imports nothing of ours


@dataclass
class ClusterConfig:
    name: str = "cpu"
    nodes: int = 1
    gpus_per_node: int = 0  # 0 = no GPUs (the laptop/CI machine): nothing to plan
    gpu_memory_gib: float = 0.0  # what the driver reports as total memory (torch.cuda.get_device_properties)
    cpu_memory_gib: float = 0.0  # RAM per node: bounds ZeRO CPU offload (DeepSpeed's estimators give it per node)
    # Kept free on every GPU: CUDA context (~0.5–1 GiB per process), NCCL buffers, allocator fragmentation.
    headroom_gib: float = 5.0
    # `train crawler_ppo` refuses to start a plan that does not fit these GPUs (false: start anyway).
    memory_check: bool = True
    # torch.distributed process-group timeout (minutes) for every multi-process command (PPO, SFT, the Slurm probe):
    # how long a rank may wait in a collective while another works alone — rank 0 building the paper index, a
    # ~30 GB ZeRO-3 checkpoint write. Our choice: 120, for the paper-scale PPO; torch's defaults (NCCL 10 min, gloo
    # 30) kill such jobs under TORCH_NCCL_ASYNC_ERROR_HANDLING=1 (slurm/job_env.sh). A hung job still dies, later.
    dist_timeout_minutes: float = 120.0
    # The network interface NCCL and gloo open their sockets on, e.g. ib0 or eth0 (`ip -br addr` on a node). Every
    # scholar process exports it as NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (hydra_app.task_environment), where
    # the user has not exported them already. Comma-separated names work for both. NCCL's ^/= prefixes (exclude,
    # exact) go to NCCL only, because gloo takes interface names only. null = the libraries pick one themselves,
    # which a node with docker0 or several NICs can get wrong, and the job then hangs at its first collective
    # (docs/cluster.md, "When a job hangs").
    socket_ifname: Optional[str] = None
    # Every command refuses to start, in one line, when its config asks for GPUs and torch sees no CUDA
    # (runtime/cuda_check.py): null = GPUs asked for by gpus_per_node > 0, sft.use_cpu=false or a model on
    # device=cuda; true = always; false = never (ours: a GPU preset run on the CPU on purpose, a CPU twin; the
    # `scholar plan` roots set it, a plan computes nothing).
    require_cuda: Optional[bool] = None
    # The preemption window (seconds): how long a warned job's processes may take to finish the step in flight, write
    # its checkpoint and exit. slurm/job_env.sh's `scholar_torchrun` passes it to torchrun as --shutdown-timeout (the
    # time between torchrun forwarding the warning to its workers and SIGKILLing them; torch's default is 30 s,
    # TORCH_ELASTIC_SHUTDOWN_TIMEOUT), and the submitit launchers ask Slurm for their warning signal this long before
    # the time limit (hydra.launcher.signal_delay_s). Keep it >= the sbatch templates' `--signal=B:USR1@<s>` lead and
    # >= `scholar plan`'s estimate of one step + one checkpoint; a training job warns at start-up where either is not
    # (runtime/preemption.check_preemption_window; docs/cluster.md "Preemption, time limits and requeue").
    shutdown_grace_s: int = 300
    # What `scholar plan` estimates one step + one checkpoint from (plan/preemption_window.py); the defaults are the
    # h100_80gb preset's, for the presets' 7B models (conf/cluster/*.yaml cite the public figures they come from).
    # Rollout engine: prompt + generated tokens per second and GPU (vLLM's `benchmark_throughput` "total tokens/s").
    generation_tokens_per_s_per_gpu: float = 8000.0
    # Training: tokens per second and GPU through one forward + backward pass (a forward alone counts a third).
    train_tokens_per_s_per_gpu: float = 3000.0
    # Write bandwidth (GB/s) one node gets to the shared filesystem holding the checkpoints.
    checkpoint_write_gb_per_s_per_node: float = 2.0

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"cluster.nodes must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 0:
            raise ValueError(f"cluster.gpus_per_node must be >= 0, got {self.gpus_per_node}")
        if self.gpus_per_node > 0 and self.gpu_memory_gib <= 0:
            raise ValueError(f"cluster {self.name!r} has {self.gpus_per_node} GPUs per node: set "
                             f"cluster.gpu_memory_gib (total memory of one card in GiB, e.g. 79.6 for an H100 80GB)")
        if self.headroom_gib < 0 or self.cpu_memory_gib < 0:
            raise ValueError("cluster.headroom_gib and cluster.cpu_memory_gib must be >= 0")
        if not self.dist_timeout_minutes > 0:
            raise ValueError(f"cluster.dist_timeout_minutes must be > 0 (minutes), got {self.dist_timeout_minutes}")
        if self.shutdown_grace_s < 0:
            raise ValueError(f"cluster.shutdown_grace_s must be >= 0 (seconds), got {self.shutdown_grace_s}")
        for name in ("generation_tokens_per_s_per_gpu", "train_tokens_per_s_per_gpu",
                     "checkpoint_write_gb_per_s_per_node"):
            if not getattr(self, name) > 0:
                raise ValueError(f"cluster.{name} must be > 0, got {getattr(self, name)}")

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def has_gpus(self) -> bool:
        return self.gpus_per_node > 0


def to_cluster_config(node) -> ClusterConfig:
    return typed(ClusterConfig, node, "cluster")
