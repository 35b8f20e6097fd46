"""The update engine: how this process's models are built, stepped, saved and read, chosen once per run.

Two engines behind one interface (:class:`TrainEngine`); :func:`engine_class` picks one from ``ppo.deepspeed``:

- :class:`TorchEngine` (no ``ppo.deepspeed``): plain torch and AdamW. Gradients are summed over processes by hand
  (one all-reduce per minibatch) rather than by DDP: rollouts give each process a different number of sessions,
  and DDP needs the same number of backward passes everywhere.
- :class:`DeepSpeedEngine` (``ppo.deepspeed``): one DeepSpeed engine (ZeRO-2 or ZeRO-3) holds policy + value
  (one optimizer, Eq. 8's one loss) and reduces the gradients; every process pads its backward passes (and, under
  ZeRO-3, its forward passes: each one gathers parameters collectively) to the same count with zero-weight or dummy
  batches. DeepSpeed is an optional dependency (the ``deepspeed`` / ``gpu`` extras): it is imported only here, and
  only when this engine is chosen.

The trainer asks an engine for: the process group (:meth:`TrainEngine.start_processes`), the models
(:meth:`TrainEngine.build`), how many forward and backward passes a rank runs, a backward pass and an optimizer
step, the policy's weights for the rollout engine, the value-bias shift, and a checkpoint.
"""

from __future__ import annotations

import abc
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs

from scholar_agents.runtime import collectives
from scholar_agents.runtime.torch_extensions import check_no_stale_build_lock
from scholar_agents.train.ppo.checkpoint import load_optimizer_and_scheduler, save_checkpoint
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.deepspeed_config import zero3_init, zero_stage
from scholar_agents.train.ppo.models import build_optimizer, build_policy_and_value, build_reference
from scholar_agents.train.ppo.policy_weights import gathered_policy_weights, merged_policy_weights
from scholar_agents.train.ppo.value_model import PolicyAndValue, sub_state

log = logging.getLogger(__name__)

# (micro-batch of session indices, loss weight): the backward passes of one minibatch
BackwardPasses = list[tuple[list[int], float]]


def engine_class(ds_config: dict | None) -> type[TrainEngine]:
    """The engine for ``ppo.deepspeed``'s filled config (None: plain torch)."""
    return TorchEngine if ds_config is None else DeepSpeedEngine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accelerator(timeout_minutes: float) -> Accelerator:
    """The processes (torch.distributed; gloo on CPU, NCCL on GPUs). The group's timeout is how long a rank may wait
    in a collective while another works alone (a checkpoint write, the end-of-run evaluation's slowest share):
    cluster.dist_timeout_minutes, not NCCL's 10-minute default. (No backend= here: accelerate would take any
    backend as "distributed", one process too.)"""
    return Accelerator(cpu=not torch.cuda.is_available(),
                       kwargs_handlers=[InitProcessGroupKwargs(timeout=collectives.timeout(timeout_minutes))])


class TrainEngine(abc.ABC):
    """Policy + value (``module``), π_sft (``ref``; None: the policy with its LoRA adapter off), AdamW over two
    parameter groups and its §5.1 schedule. ``model`` is what the update's forward and backward passes go
    through: the module itself, or the DeepSpeed engine wrapping it."""

    def __init__(self, p: PPOConfig, module: PolicyAndValue, model, ref, optimizer, scheduler,
                 policy_params: list, value_params: list):
        self.p = p
        self.module = module
        self.model = model
        self.ref = ref
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.policy_params, self.value_params = policy_params, value_params
        self.world = collectives.world_size()

    # ---- set-up

    @staticmethod
    @abc.abstractmethod
    def start_processes(timeout_minutes: float) -> Accelerator:
        """Join (or start) the process group; before any model is built."""

    @classmethod
    @abc.abstractmethod
    def build(cls, p: PPOConfig, init_path: str, ref_path: str, ds_config: dict | None, resume_from: Path | None,
              device) -> TrainEngine:
        """The models, the optimizer and the schedule, from the starting checkpoint or ``resume_from``."""

    @staticmethod
    def _models(p: PPOConfig, init_path: str, ref_path: str, ds_config: dict | None, resume_from: Path | None,
                device, zero3: bool, init_context: AbstractContextManager):
        """(policy + value, π_sft, optimizer, schedule, policy parameters, value parameters)."""
        # Every rank must start from the same weights, LoRA's random A included: one seed for all ranks while the
        # models are built (ZeRO-3 would otherwise stitch a parameter together from different ranks' draws).
        with torch.random.fork_rng(devices=[]), init_context:
            torch.manual_seed(p.seed)
            module = build_policy_and_value(p, init_path, resume_from, device, zero3)
        ref = build_reference(p, ref_path, init_path, ds_config, zero3, device)
        return (module, ref, *build_optimizer(p, module))

    # ---- the passes

    def forward_rounds(self, n_local: int) -> int:
        """How many forward passes this rank runs for ``n_local`` of its own (the extra ones on a dummy batch,
        their outputs dropped)."""
        return n_local

    @abc.abstractmethod
    def backward_passes(self, micros: list[list[int]]) -> BackwardPasses:
        """The backward passes of one minibatch split into forward batches ``micros``, each with its loss weight
        (an empty micro-batch: a dummy batch, weight 0)."""

    @abc.abstractmethod
    def backward(self, loss: torch.Tensor) -> None:
        """One backward pass."""

    @abc.abstractmethod
    def step(self, frozen: bool) -> float:
        """After a minibatch's backward passes: the optimizer step (the policy's gradients dropped while
        ``frozen``, so AdamW keeps no state for it). Returns the gradient norm."""

    # ---- what the rest of the run reads

    @property
    def policy(self):
        return self.module.policy

    @abc.abstractmethod
    def policy_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(HF name, full tensor) pairs of the current policy for the rollout engine (LoRA merged)."""

    @abc.abstractmethod
    def shift_value_bias(self, gap: float) -> None:
        """Add ``gap`` to the value head's output bias (``ppo.init_value_to_mean_return``)."""

    def save(self, root: Path, step: int, tokenizer, trainer_state: dict, rng_extra: dict, rank: int) -> Path:
        """Checkpoint ``step`` under ``root`` (:func:`.checkpoint.save_checkpoint`; every rank calls it)."""
        full = self._full_state_dict()
        module = self.module

        def write_models(d: Path) -> None:
            module.policy.save_pretrained(str(d / "policy"), state_dict=sub_state(full, "policy."),
                                          safe_serialization=True)
            tokenizer.save_pretrained(str(d / "policy"))
            module.save_value(d / "value", state_dict=full)

        optimizer, collective_write = self._checkpoint_parts()
        return save_checkpoint(root, step, write_models, optimizer, self.scheduler, trainer_state, rng_extra,
                               rank=rank, barrier=collectives.barrier, keep_last=self.p.keep_last,
                               collective_write=collective_write)

    def _full_state_dict(self) -> dict | None:
        """The module's full weights when its own are shards; None: every rank holds them whole."""
        return None

    @abc.abstractmethod
    def _checkpoint_parts(self) -> tuple[torch.optim.Optimizer | None, Callable[[Path], None] | None]:
        """(the optimizer whose state goes to ``optimizer.pt``, what every rank writes into the checkpoint
        directory beside its RNG states); None where there is none."""


class TorchEngine(TrainEngine):
    """Plain torch: the module is the model, gradients all-reduced by hand, clipped, AdamW steps."""

    @staticmethod
    def start_processes(timeout_minutes: float) -> Accelerator:
        return _accelerator(timeout_minutes)

    @classmethod
    def build(cls, p, init_path, ref_path, ds_config, resume_from, device) -> TorchEngine:
        module, ref, optimizer, scheduler, policy_params, value_params = cls._models(
            p, init_path, ref_path, None, resume_from, device, zero3=False, init_context=nullcontext())
        if resume_from is not None:
            load_optimizer_and_scheduler(resume_from, optimizer, scheduler)
        return cls(p, module, module, ref, optimizer, scheduler, policy_params, value_params)

    def backward_passes(self, micros: list[list[int]]) -> BackwardPasses:
        return [(m, 1.0) for m in micros]

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()  # summed over processes in step()

    def step(self, frozen: bool) -> float:
        """Sum the gradients over processes (each was already divided by the global count), clip, step."""
        if frozen:
            for q in self.policy_params:
                q.grad = None
        params = self.value_params if frozen else self.policy_params + self.value_params
        if self.world > 1:
            grads = [q.grad if q.grad is not None else torch.zeros_like(q) for q in params]
            flat = collectives.all_reduce(torch.cat([g.reshape(-1).float() for g in grads]))
            i = 0
            for q, gr in zip(params, grads):
                n = gr.numel()
                q.grad = flat[i:i + n].view_as(q).to(q.dtype)
                i += n
        norm = torch.nn.utils.clip_grad_norm_([q for q in params if q.grad is not None], self.p.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def policy_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        return merged_policy_weights(self.policy)

    def shift_value_bias(self, gap: float) -> None:
        with torch.no_grad():
            _value_bias(self.module).add_(gap)

    def _checkpoint_parts(self):
        return self.optimizer, None


class DeepSpeedEngine(TrainEngine):
    """DeepSpeed's own API (accelerate ignores a DeepSpeed plugin with cpu=True, so the engines are built the same
    way on CPU and GPU). Our LambdaLR stays outside the engine and steps once per PPO step on the optimizer's
    parameter groups, which ZeRO reads at every step."""

    def __init__(self, *args, zero3: bool):
        super().__init__(*args)
        self.zero3 = zero3

    @staticmethod
    def start_processes(timeout_minutes: float) -> Accelerator:
        import deepspeed  # optional: the deepspeed / gpu extras

        check_no_stale_build_lock()  # DeepSpeed JIT-builds its ops: a killed build's lock would hang it forever
        accelerator = _accelerator(timeout_minutes)
        if "RANK" not in os.environ:
            # one process started without torchrun: DeepSpeed still wants a (one-process) group and a launcher's
            # variables
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(_free_port()))
        # DeepSpeed's comm layer adopts the process group accelerate started (zero.Init and the engines use it)
        deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo",
                                   auto_mpi_discovery=False, timeout=collectives.timeout(timeout_minutes))
        return accelerator

    @classmethod
    def build(cls, p, init_path, ref_path, ds_config, resume_from, device) -> DeepSpeedEngine:
        import deepspeed  # optional: the deepspeed / gpu extras

        zero3 = zero_stage(ds_config) == 3
        module, ref, optimizer, scheduler, policy_params, value_params = cls._models(
            p, init_path, ref_path, ds_config, resume_from, device, zero3,
            zero3_init(ds_config) if zero3 else nullcontext())
        t0 = time.perf_counter()
        model, optimizer, _, _ = deepspeed.initialize(model=module, optimizer=optimizer, config=ds_config)
        if resume_from is not None:
            model.load_checkpoint(str(resume_from / "deepspeed"), load_module_strict=True)
        log.info("DeepSpeed engine (ZeRO-%d) ready in %.1f s", model.zero_optimization_stage(),
                 time.perf_counter() - t0)
        if resume_from is not None:  # the engine's checkpoint holds the optimizer; the schedule is ours
            load_optimizer_and_scheduler(resume_from, None, scheduler)
        return cls(p, module, model, ref, optimizer, scheduler, policy_params, value_params, zero3=zero3)

    def forward_rounds(self, n_local: int) -> int:
        """Under ZeRO-3 every forward all-gathers each layer's parameters, a collective, so every rank runs as many
        as the busiest rank."""
        return max(collectives.all_gather_int(n_local)) if self.zero3 else n_local

    def backward_passes(self, micros: list[list[int]]) -> BackwardPasses:
        """DeepSpeed counts backward passes to find its accumulation boundary: every process runs exactly
        grad_accum of them, padding with zero-weight repeats (a dummy batch on a process with no session in this
        minibatch); it divides by world × grad_accum, which the weight undoes (each loss is already divided by the
        minibatch's global token counts)."""
        scale = float(self.world * self.p.grad_accum)
        pad = micros[0] if micros else []
        return [(m, scale) for m in micros] + [(pad, 0.0)] * (self.p.grad_accum - len(micros))

    def backward(self, loss: torch.Tensor) -> None:
        # DeepSpeed's own API (accelerate's backward would mark every pass as a boundary): backward scales by
        # 1/grad_accum, step() steps the optimizer every grad_accum-th pass
        self.model.backward(loss)
        self.model.step()

    def step(self, frozen: bool) -> float:
        """The engine stepped at its accumulation boundary (:meth:`backward`); this reads its gradient norm."""
        if frozen:
            _drop_policy_optimizer_state(self.model.optimizer)
        norm = self.model.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def policy_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Under ZeRO-3 gathered module by module (a collective: every rank syncs its engine after every update)."""
        return gathered_policy_weights(self.policy) if self.zero3 else merged_policy_weights(self.policy)

    def shift_value_bias(self, gap: float) -> None:
        """DeepSpeed steps fp32 master copies of the weights (ZeRO-3: partitioned, like the module's): both are
        shifted, or the next optimizer step writes the old bias back."""
        import deepspeed  # optional: the deepspeed / gpu extras
        from deepspeed.utils import safe_set_full_fp32_param, safe_set_local_fp32_param

        bias = _value_bias(self.module)
        with deepspeed.zero.GatheredParameters([bias], modifier_rank=0), torch.no_grad():
            bias.add_(gap)  # every rank adds the same gap; rank 0's result is re-partitioned on exit
        if self.zero3:
            # this rank's (padded) partition as it now is; DeepSpeed's full-tensor setter cannot address a 1-element
            # parameter split over 2+ ranks
            safe_set_local_fp32_param(bias, bias.ds_tensor.detach().float())
        else:
            safe_set_full_fp32_param(bias, bias.detach().float())

    def _full_state_dict(self) -> dict | None:
        """ZeRO-3: full weights from the shards, gathered by DeepSpeed on every rank (a collective) into rank 0's
        memory — what HF Trainer and accelerate call to save ZeRO-3 models."""
        return self.model._zero3_consolidated_16bit_state_dict() if self.zero3 else None

    def _checkpoint_parts(self):
        """No ``optimizer.pt``: the engine's own checkpoint (fp32 master weights and optimizer state, sharded per
        rank), written by every rank."""
        return None, lambda d: self.model.save_checkpoint(str(d / "deepspeed"))


def _drop_policy_optimizer_state(zero_optimizer) -> None:
    """DeepSpeed steps the policy's parameter group with zero gradients while it is frozen (learning rate 0, so the
    weights stay put), but AdamW counts those steps and its bias correction would then shrink the first real
    updates. Dropping the group's state makes the first co-trained step start AdamW afresh, as without DeepSpeed.
    The fp32 master partitions of parameter group 0 (the policy) are found in DeepSpeed's ZeRO optimizer:
    ``fp32_partitioned_groups_flat`` per sub-group (ZeRO-3), ``single_partition_of_fp32_groups`` (ZeRO-1/2)."""
    zero = zero_optimizer
    if hasattr(zero, "fp32_partitioned_groups_flat"):
        masters = [t for t, g in zip(zero.fp32_partitioned_groups_flat, zero.sub_group_to_group_id) if g == 0]
    else:
        masters = [zero.single_partition_of_fp32_groups[0]]
    for t in masters:
        zero.optimizer.state.pop(t, None)


def _value_bias(module: PolicyAndValue) -> torch.nn.Parameter:
    """The value head's output bias (a head on the policy, or the separate value model's)."""
    return (module.value_head if module.shared else module.value.head).bias
