"""The DeepSpeed side of PPO (``ppo.deepspeed``): the JSON with every "auto" filled, the reference model's
inference-only config, and the scope in which ``from_pretrained`` builds ZeRO-3-partitioned models.

The same JSONs (``conf/deepspeed/zero{2,3}.json``) serve SFT, where HF Trainer fills "auto" from its arguments. PPO
has no Trainer and no dataloader, so :func:`fill_deepspeed_config` fills them from the PPO config, the policy's HF
config and the world size — with HF Trainer's own rules for the hidden-size-based buckets
(``transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig.trainer_config_finalize``).
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

AUTO = "auto"


def load_deepspeed_json(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"ppo.deepspeed={path}: no such file "
                         "(use ${sa_pkg:}/conf/deepspeed/zero3.json or ${sa_pkg:}/conf/deepspeed/zero2.json)")
    return json.loads(path.read_text())


def zero_stage(ds: dict) -> int:
    return int(ds.get("zero_optimization", {}).get("stage", 0))


def auto_keys(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every value still "auto"."""
    if isinstance(node, dict):
        return [k for key, v in node.items() for k in auto_keys(v, f"{prefix}{key}.")]
    return [prefix.rstrip(".")] if node == AUTO else []


def fill_deepspeed_config(ds: dict, pcfg, hidden_size: int, world_size: int) -> dict:
    """A copy of ``ds`` with every "auto" replaced. Values given as numbers are kept (the JSON wins), except the
    batch sizes and precision, which must describe what the trainer really does."""
    ds = copy.deepcopy(ds)
    # What the PPO loop does: one backward per forward batch of `forward_batch_size` sessions, an optimizer step every
    # `grad_accum` of them on every process (update() pads short minibatches with zero-weight passes).
    ds["train_micro_batch_size_per_gpu"] = pcfg.forward_batch_size
    ds["gradient_accumulation_steps"] = pcfg.grad_accum
    ds["train_batch_size"] = pcfg.forward_batch_size * pcfg.grad_accum * world_size
    if ds.get("gradient_clipping", AUTO) == AUTO:
        ds["gradient_clipping"] = pcfg.max_grad_norm
    # DeepSpeed's bf16/fp16 modes hold the module in that dtype with fp32 master weights in the optimizer: they follow
    # ppo.model_dtype (bf16 autocast of the forward passes is ppo.bf16, independent of DeepSpeed).
    ds["bf16"] = {**ds.get("bf16", {}), "enabled": pcfg.model_dtype == "bfloat16"}
    ds["fp16"] = {**ds.get("fp16", {}), "enabled": pcfg.model_dtype == "float16"}
    zero = ds.setdefault("zero_optimization", {})
    by_hidden = {"reduce_bucket_size": hidden_size * hidden_size,
                 "stage3_prefetch_bucket_size": int(0.9 * hidden_size * hidden_size),
                 "stage3_param_persistence_threshold": 10 * hidden_size}
    for key, value in by_hidden.items():
        if zero.get(key) == AUTO:
            zero[key] = value
    left = auto_keys(ds)
    if left:
        raise ValueError(f"ppo.deepspeed: no rule fills {left} for PPO; put numbers in the JSON for these keys")
    return ds


def reference_config(ds: dict, offload: bool) -> dict:
    """The frozen reference π_sft's engine under ZeRO-3: the training config without optimizer blocks (as TRL's
    ``prepare_deepspeed`` builds its ref model), optionally with its parameter shards in CPU memory
    (``ppo.ref_offload``: DeepSpeed's ``offload_param``, fetched layer by layer for each forward)."""
    ref = copy.deepcopy(ds)
    for key in ("optimizer", "scheduler"):
        ref.pop(key, None)
    zero = ref["zero_optimization"]
    zero.pop("offload_optimizer", None)
    if offload:
        zero["offload_param"] = {"device": "cpu", "pin_memory": False}
    else:
        zero.pop("offload_param", None)
    return ref


@contextlib.contextmanager
def zero3_init(ds: dict) -> Iterator[None]:
    """Inside this block ``from_pretrained`` builds models partitioned across the ranks (ZeRO-3 ``zero.Init``),
    through transformers' own hook: an ``HfDeepSpeedConfig`` alive while the models load (measured here: a hand-made
    ``deepspeed.zero.Init`` around transformers 5's loader crashes in ``_init_weights``). The global is unset on exit:
    models built later (the rollout engine, the Selector) must stay whole, and transformers' ``generate`` would
    otherwise sync every rank's generation loop (``synced_gpus``) although each rank samples alone."""
    from transformers.integrations import HfDeepSpeedConfig
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    keep_alive = HfDeepSpeedConfig(ds)  # transformers holds only a weak reference
    try:
        yield
    finally:
        unset_hf_deepspeed_config()
        del keep_alive
