"""The models session-level PPO trains and reads, built from :class:`PPOConfig`: the policy π_θ (full or LoRA) with
its value model V̂_φ (separate, or a head on the policy: ``ppo.value_head``), the frozen reference π_sft (the policy
with its adapter off, a copy, or a ZeRO-3 inference engine), the DeepSpeed config with every "auto" filled, the
tokenizer, and AdamW with the §5.1 schedule (policy frozen while the value model warms up)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import torch

from scholar_agents.llm import model_init
from scholar_agents.llm.attention import resolve_attn_implementation
from scholar_agents.llm.factory import resolve_model_path
from scholar_agents.llm.precision import named_torch_dtype
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.deepspeed_config import (
    fill_deepspeed_config,
    load_deepspeed_json,
    reference_config,
    zero3_init,
    zero_stage,
)
from scholar_agents.train.ppo.value_model import PolicyAndValue, build_value

log = logging.getLogger(__name__)


def model_dtype(name: str) -> torch.dtype:
    return named_torch_dtype(name, "ppo.model_dtype")


def deepspeed_config(p: PPOConfig, init_path: str) -> dict | None:
    """``ppo.deepspeed``'s JSON with every "auto" filled (see :mod:`.deepspeed_config`); None without DeepSpeed."""
    if p.ref_offload and not p.deepspeed:
        raise ValueError("ppo.ref_offload=true offloads the reference's ZeRO-3 shards: set "
                         "ppo.deepspeed=${sa_pkg:}/conf/deepspeed/zero3.json, or ppo.ref_offload=false")
    if not p.deepspeed:
        return None
    try:
        import deepspeed  # noqa: F401
    except ImportError as e:
        raise ImportError("ppo.deepspeed needs DeepSpeed: pip install 'scholar-agents[deepspeed]' (CPU) or "
                          "'scholar-agents[gpu]'") from e
    from transformers import AutoConfig

    ds = load_deepspeed_json(p.deepspeed)
    if p.ref_offload and zero_stage(ds) != 3:
        raise ValueError(f"ppo.ref_offload=true needs ZeRO-3; {p.deepspeed} is stage {zero_stage(ds)}")
    hidden = AutoConfig.from_pretrained(str(init_path)).hidden_size
    return fill_deepspeed_config(ds, p, hidden, world_size=int(os.environ.get("WORLD_SIZE", "1")))


def load_tokenizer(resume_from: Path | None, init_path: str):
    """The checkpoint's tokenizer when resuming (it may have gained a pad token), else the starting model's."""
    from transformers import AutoTokenizer

    saved = resume_from / "policy" if resume_from else None
    path = saved if saved is not None and (saved / "tokenizer_config.json").exists() else init_path
    tok = AutoTokenizer.from_pretrained(str(path))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def attn_implementation(p: PPOConfig) -> str | None:
    """ppo.attn_implementation resolved (``auto``: flash attention where it imports, else sdpa; logged once)."""
    return resolve_attn_implementation(p.attn_implementation, "ppo.attn_implementation")


def load_causal_lm(p: PPOConfig, path, init: str = "pretrained"):
    kwargs = {"dtype": model_dtype(p.model_dtype)}
    if attn_implementation(p):
        kwargs["attn_implementation"] = attn_implementation(p)
    return model_init.load_causal_lm(path, init, seed=p.seed, **kwargs)  # init: ppo.policy_init


def build_policy_and_value(p: PPOConfig, init_path: str, resume_from: Path | None, device,
                           zero3: bool) -> PolicyAndValue:
    """π_θ (LoRA on the starting model, or all of it) and V̂_φ, from the starting checkpoint or ``resume_from``."""
    saved = resume_from
    if p.lora.enabled:
        from peft import LoraConfig, PeftModel, get_peft_model

        base = load_causal_lm(p, init_path, p.policy_init)
        if saved is not None:
            policy = PeftModel.from_pretrained(base, str(saved / "policy"), is_trainable=True)
        else:
            t = p.lora.target_modules
            policy = get_peft_model(base, LoraConfig(r=p.lora.r, lora_alpha=p.lora.alpha, lora_dropout=p.lora.dropout,
                                                     target_modules=t if isinstance(t, str) else list(t),
                                                     task_type="CAUSAL_LM"))
    else:
        policy = (load_causal_lm(p, saved / "policy") if saved is not None
                  else load_causal_lm(p, init_path, p.policy_init))
    value_init = resolve_model_path(p.value_model) if p.value_model else init_path
    # grpo / rloo: no value model, neither built nor loaded (PolicyAndValue with critic=False)
    model = PolicyAndValue(policy, critic=False) if not p.uses_value else build_value(
        p.value_head, policy, value_init, model_dtype(p.model_dtype), seed=p.seed,
        saved_dir=saved / "value" if saved is not None else None, attn_implementation=attn_implementation(p),
        init=p.policy_init)
    if p.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
        if model.value is not None:  # none under grpo / rloo
            model.value.backbone.gradient_checkpointing_enable()
    # ZeRO-3: the parameters are already partitioned on their device by zero.Init
    return model if zero3 else model.to(device)


def build_reference(p: PPOConfig, ref_path: str, init_path: str, ds_config: dict | None, zero3: bool, device):
    """π_sft, frozen. With LoRA it is the policy with its adapter disabled (None here; the trainer reads it that
    way). Under ZeRO-3 it is sharded too, in an inference-only DeepSpeed engine (no optimizer; TRL's
    ``prepare_deepspeed``), its shards in CPU memory with ``ppo.ref_offload``; otherwise a whole copy on every
    device."""
    if p.lora.enabled and ref_path == init_path:
        return None
    if not zero3:
        ref = load_causal_lm(p, ref_path, p.policy_init).to(device)
        ref.eval()
        ref.requires_grad_(False)
        return ref
    import deepspeed

    ref_cfg = reference_config(ds_config, offload=p.ref_offload)
    with zero3_init(ref_cfg):  # zero.Init reads offload_param: the shards are created in CPU memory
        ref = load_causal_lm(p, ref_path, p.policy_init)
    ref.requires_grad_(False)
    engine = deepspeed.initialize(model=ref, config=ref_cfg)[0]
    engine.eval()
    offload = engine.zero_offload_param()  # the engine's own reading of the config
    log.info("reference π_sft: ZeRO-%d inference engine, parameter shards %s", engine.zero_optimization_stage(),
             f"offloaded to {offload.device} memory" if offload else f"on {device}")
    return engine


def build_optimizer(p: PPOConfig, model: PolicyAndValue):
    """AdamW over two parameter groups (policy, value) and a LambdaLR per group: the policy's learning rate is 0
    for the first ``policy_freeze_steps`` steps (§5.1: only the value model learns), then a linear warm-up.
    Returns (optimizer, scheduler, policy parameters, value parameters)."""
    policy_params = [q for q in model.policy.parameters() if q.requires_grad]
    # grpo / rloo: no value group at all (DeepSpeed drops an empty group, which would desynchronise the schedule)
    value_params = ([] if not model.critic else
                    list(model.value.parameters() if model.value is not None else model.value_head.parameters()))
    groups = [{"params": policy_params, "lr": p.lr, "name": "policy"}]
    if model.critic:
        groups.append({"params": value_params, "lr": p.value_lr or p.lr, "name": "value"})
    opt = torch.optim.AdamW(groups, lr=p.lr, weight_decay=p.weight_decay)
    freeze, warm = p.policy_freeze_steps, p.warmup_steps

    def policy_lr(step: int) -> float:  # §5.1: the policy is frozen while the value model warms up
        if step < freeze:
            return 0.0
        return min(1.0, (step - freeze + 1) / warm) if warm else 1.0

    def value_lr(step: int) -> float:
        return min(1.0, (step + 1) / warm) if warm else 1.0

    sched = torch.optim.lr_scheduler.LambdaLR(opt, [policy_lr, value_lr][:len(groups)])
    return opt, sched, policy_params, value_params
