"""A LoRA delta of the embedder (the embedding Selector with its encoder fine-tuned, ``train/selector/encoder_lora.py``):
per adapted linear layer its ``lora_A`` [r, in], ``lora_B`` [out, r] and scaling, saved as safetensors and merged
into a loaded embedder's weights (W += scaling · B·A, Hu et al. 2021 Eq. 3), so scoring needs no peft and runs at
the base encoder's speed."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

LORA_FILE = "encoder_lora.safetensors"


def encoder_module(embedder):
    """The HF encoder inside a sentence-transformers embedder (the module LoRA adapts)."""
    return embedder.sentence_transformer[0].auto_model


def lora_delta(peft_model) -> dict:
    """``{name.lora_A, name.lora_B, name.scaling}`` tensors of every LoRA layer, names as in the base encoder."""
    import torch

    out = {}
    for name, module in peft_model.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            base = name.removeprefix("base_model.model.")
            out[f"{base}.lora_A"] = module.lora_A["default"].weight.detach().clone().contiguous()
            out[f"{base}.lora_B"] = module.lora_B["default"].weight.detach().clone().contiguous()
            out[f"{base}.scaling"] = torch.tensor([float(module.scaling["default"])])
    return out


def merge_delta(encoder, delta: dict) -> int:
    """W += scaling · B·A into ``encoder``'s linear layers, in place; returns how many layers changed."""
    import torch

    modules = dict(encoder.named_modules())
    names = sorted(k.removesuffix(".lora_A") for k in delta if k.endswith(".lora_A"))
    for name in names:
        layer = modules.get(name)
        if layer is None or not hasattr(layer, "weight"):
            raise ValueError(f"{LORA_FILE}: the encoder has no linear layer {name!r}: it was fitted on another "
                             "embedder")
        A, B, s = delta[f"{name}.lora_A"], delta[f"{name}.lora_B"], float(delta[f"{name}.scaling"][0])
        if (B.shape[0], A.shape[1]) != tuple(layer.weight.shape):
            raise ValueError(f"{LORA_FILE}: {name} is {tuple(layer.weight.shape)} in the encoder, "
                             f"{(B.shape[0], A.shape[1])} in the delta: it was fitted on another embedder")
        with torch.no_grad():
            layer.weight += s * (B.to(layer.weight.dtype) @ A.to(layer.weight.dtype))
    return len(names)


def apply_encoder_lora(embedder, model_dir: str | Path) -> bool:
    """Merge ``model_dir/encoder_lora.safetensors`` into ``embedder`` (if there is one); its ``model_id`` then says
    so, so nothing keyed by the embedder's id (a dense index) mixes its vectors with the base encoder's."""
    from safetensors.torch import load_file

    path = Path(model_dir) / LORA_FILE
    if not path.is_file():
        return False
    n = merge_delta(encoder_module(embedder), load_file(str(path)))
    embedder.model_id = f"{embedder.model_id}+lora:{Path(model_dir).name}"
    log.info("merged the encoder LoRA of %s into %d layers", model_dir, n)
    return True
