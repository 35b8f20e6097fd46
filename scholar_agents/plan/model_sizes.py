"""Exact parameter counts of the configured models, from their ``config.json`` alone: the model is built on the meta
device (no weights, no memory), then counted. Hub names we plan for without a network ship their ``config.json``
under ``scholar_agents/assets/model_configs/``; local checkpoint dirs and ``embedded:*`` models are read in place."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from scholar_agents.llm.factory import resolve_model_path

MODEL_CONFIGS_DIR = Path(__file__).resolve().parents[1] / "assets" / "model_configs"
# hub name (lower case) -> shipped config dir: the public model card's config.json, a few KB
SHIPPED_CONFIGS = {
    "qwen/qwen2.5-7b-instruct": MODEL_CONFIGS_DIR / "qwen2.5-7b-instruct",
}


@dataclass(frozen=True)
class ModelShape:
    """What the memory plan needs from one model: exact counts from the meta-built module and its architecture."""

    name: str  # as configured
    config_dir: str  # where its config.json was read
    params: int  # AutoModelForCausalLM, tied weights once
    backbone_params: int  # AutoModel (no LM head): the value model's backbone
    largest_layer_params: int  # DeepSpeed's notion (largest module's own parameters): ZeRO-3 gathers it whole
    weights_bytes_16bit: int  # accelerate.utils.calculate_maximum_sizes on the bf16 meta model
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @property
    def kv_bytes_per_token_16bit(self) -> int:
        """K and V of every layer for one token in a 16-bit KV cache (vLLM's default kv_cache_dtype=auto)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2


def config_dir_for(model: str) -> Path:
    """The directory holding ``model``'s config.json, or one error that names the fix."""
    shipped = SHIPPED_CONFIGS.get(model.lower().rstrip("/"))
    if shipped is not None:
        return shipped
    if model.startswith("embedded:"):
        return Path(resolve_model_path(model))
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return path
    known = ", ".join(sorted(SHIPPED_CONFIGS))
    raise FileNotFoundError(
        f"no config.json for model {model!r}: plan with a local checkpoint dir holding a config.json, a hub name whose "
        f"config ships with scholar-agents ({known}; e.g. ppo.policy_model=Qwen/Qwen2.5-7B-Instruct for a crawler "
        f"fine-tuned from it), or add its config.json under {MODEL_CONFIGS_DIR}/<name>/ and to SHIPPED_CONFIGS")


def shown_config_path(path: str) -> str:
    """A shipped config's path relative to the repository (what tables in the docs show), others as given."""
    package = Path(__file__).resolve().parents[1]
    resolved = Path(path).resolve()
    return str(resolved.relative_to(package.parent)) if resolved.is_relative_to(package) else path


def _count(module) -> int:
    """Parameters counted once per tensor object (tied embeddings once). DeepSpeed's ``model_to_params`` dedupes by
    ``data_ptr()``, which is 0 for every meta tensor, so it cannot count a meta model's total."""
    return sum({id(p): p.numel() for p in module.parameters()}.values())


@functools.lru_cache(maxsize=16)
def _shape_of_dir(name: str, config_dir: str) -> ModelShape:
    import torch
    from accelerate.utils import calculate_maximum_sizes
    from deepspeed.runtime.zero.stage3 import model_to_params
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(config_dir)
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        backbone = AutoModel.from_config(cfg, dtype=torch.bfloat16)
    total_bytes, _ = calculate_maximum_sizes(lm)
    _, largest = model_to_params(lm)  # its largest-layer half is right on meta tensors
    text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    heads = int(text.num_attention_heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return ModelShape(name=name, config_dir=config_dir, params=_count(lm), backbone_params=_count(backbone),
                      largest_layer_params=int(largest), weights_bytes_16bit=int(total_bytes),
                      hidden=int(text.hidden_size), layers=int(text.num_hidden_layers), heads=heads,
                      kv_heads=int(getattr(text, "num_key_value_heads", None) or heads), head_dim=head_dim,
                      intermediate=int(text.intermediate_size), vocab=int(text.vocab_size))


def model_shape(model: str) -> ModelShape:
    return _shape_of_dir(model, str(config_dir_for(model)))


@functools.lru_cache(maxsize=16)
def lora_trainable_params(model: str, r: int, alpha: int, target_modules: str | tuple) -> int:
    """Trainable parameters of a PEFT LoRA on ``model`` (PEFT itself applies it to the meta-built model)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(config_dir_for(model)))
    with torch.device("meta"):
        lm = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
        peft_model = get_peft_model(lm, LoraConfig(r=r, lora_alpha=alpha, task_type="CAUSAL_LM",
                                                   target_modules=target_modules if isinstance(target_modules, str)
                                                   else list(target_modules)))
    return sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
