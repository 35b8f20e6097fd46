"""The policy's weights for the rollout engine: (HF name, full tensor) pairs of the causal LM the engine loads, LoRA
merged out of place (the trained adapter stays untouched). :func:`merged_policy_weights` reads an unsharded policy;
:func:`gathered_policy_weights` gathers a ZeRO-3 partitioned one module by module — the same pairs, names and order,
without ever holding the whole model on one rank.

Gathering a partitioned parameter is a collective (``deepspeed.zero.GatheredParameters`` all-gathers it): every rank
must walk the modules in the same order and consume the generator to the end, which the trainer does by calling
``engine.sync`` on every rank after every update. Each tensor is a copy made while its module is gathered, so the
gathered buffers are released before the next module is fetched (one module's weights live at a time).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from peft.tuners.lora import LoraLayer
from torch import nn


def merged_policy_weights(policy) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) of every policy weight, LoRA merged: what the rollout engine loads, from an unsharded
    policy (:func:`gathered_policy_weights` yields the same pairs from a ZeRO-3 partitioned one)."""
    if not hasattr(policy, "peft_config"):
        for k, v in policy.state_dict().items():
            yield k, v.detach()
        return
    base = policy.get_base_model()
    deltas = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLayer):
            for adapter in module.active_adapters:
                deltas[f"{name}.weight"] = module.get_delta_weight(adapter)
    for k, v in base.state_dict().items():
        if "lora_" in k:
            continue
        key = k.replace(".base_layer", "")
        v = v.detach()
        yield key, (v + deltas[key].to(v.dtype)) if key in deltas else v


def gathered_policy_weights(policy: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) of every entry of the policy's causal-LM state dict (tied weights under both names,
    persistent buffers included), LoRA deltas added out of place so the trained adapter stays untouched."""
    base = policy.get_base_model() if hasattr(policy, "peft_config") else policy
    yield from _walk(base, "")


def _walk(module: nn.Module, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(module, LoraLayer):
        yield from _merged_lora(module, prefix)
        return
    # state_dict's order: this module's parameters, its persistent buffers, then its children
    own = [(n, p) for n, p in module._parameters.items() if p is not None]
    if own:
        with _gathered([p for _, p in own]):
            for name, p in own:
                yield prefix + name, p.detach().clone()
    for name, b in module._buffers.items():
        if b is not None and name not in module._non_persistent_buffers_set:
            yield prefix + name, b.detach().clone()
    for name, child in module._modules.items():
        if child is not None:
            yield from _walk(child, f"{prefix}{name}.")


def _merged_lora(module, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """A PEFT LoRA layer as the plain layer it stands for: base weight + Σ_adapters B·A·scale under the base
    layer's own names (``q_proj.weight``, not ``q_proj.base_layer.weight``)."""
    base = module.get_base_layer()
    with _gathered(list(module.parameters())):
        for name, p in base._parameters.items():
            if p is None:
                continue
            t = p.detach().clone()
            if name == "weight":
                for adapter in module.active_adapters:
                    t += module.get_delta_weight(adapter).to(t.dtype)
            yield prefix + name, t


def _gathered(params: list[nn.Parameter]):
    """All-gather partitioned parameters for reading (a no-op context for ordinary ones)."""
    import deepspeed  # optional (the deepspeed / gpu extras): only ZeRO-3 runs come here

    return deepspeed.zero.GatheredParameters(params, modifier_rank=None)
