"""Per-GPU memory of supervised fine-tuning (``train selector_sft`` / ``train crawler_sft``, TRL SFT on the HF
Trainer): one model, one phase. Model states from DeepSpeed's estimators, activations from the same formula as PPO
(:mod:`scholar_agents.plan.memory_plan`), plus the full-sequence logits the causal-LM loss keeps."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from scholar_agents.runtime.cluster import ClusterConfig
from scholar_agents.plan.memory_plan import (Plan, Row, _gib, _state_split, backbone_activation_bytes,
                                             lora_and_offload_rows, training_fix_steps, zero_model_states)
from scholar_agents.plan.model_sizes import ModelShape, shown_config_path

SFT_PHASES = ("train",)


@dataclass(frozen=True)
class SFTInputs:
    """What the SFT plan depends on, read from the run's typed config (:func:`~scholar_agents.plan.commands.
    sft_inputs_from_config`). No defaults: each value is the config's (its dataclass holds the default)."""

    cluster: ClusterConfig
    model: ModelShape
    zero_stage: int  # 0 = no DeepSpeed
    deepspeed: str | None
    offload_optimizer: bool
    offload_params: bool
    model_dtype_bytes: int
    lora_trainable: int | None  # trainable LoRA parameters; None = full fine-tuning
    gradient_checkpointing: bool
    attn_implementation: str | None  # None = transformers' default (sdpa: no score matrix kept, as auto)
    batch: int  # sft.per_device_train_batch_size
    seq_len: int  # sft.max_length

    @property
    def world(self) -> int:
        return max(1, self.cluster.world_size)

    def header_lines(self) -> list[str]:
        return [f"# model {self.model.name}: {self.model.params:,} parameters (meta-built from "
                f"{shown_config_path(self.model.config_dir)}/config.json)"
                + (f"; LoRA trainable {self.lora_trainable:,}" if self.lora_trainable is not None else ""),
                f"# micro-batch {self.batch} x {self.seq_len} tokens (sft.per_device_train_batch_size x "
                f"sft.max_length)"]


def causal_lm_logits_bytes(shape: ModelShape, batch: int, seq: int) -> int:
    """Logits of every position (the SFT loss reads them all): 16-bit logits 2 B + the fp32 upcast of
    transformers' ForCausalLMLoss 4 B + cross-entropy's saved log_softmax 4 B per logit."""
    return batch * seq * shape.vocab * 10


def build_sft_plan(x: SFTInputs) -> Plan:
    rows: list[Row] = []
    cpu_rows: list[Row] = []
    problems: list[str] = []
    n, stage = x.world, x.zero_stage
    trainable = x.lora_trainable if x.lora_trainable is not None else x.model.params
    gpu, cpu, source = zero_model_states(trainable, x.model.largest_layer_params, stage, x.cluster,
                                         x.offload_optimizer, x.offload_params, x.model_dtype_bytes)
    w, g, o = _state_split(trainable, stage, n, x.offload_optimizer, x.offload_params, x.model_dtype_bytes)
    label = "LoRA adapter " if x.lora_trainable is not None else ""
    parts = [(f"{label}weights", w), (f"{label}gradients", g), (f"{label}optimizer states", o)]
    if stage == 3:
        parts.append(("ZeRO-3 gathered layer (4 B x largest layer)", 4 * x.model.largest_layer_params))
    parts[-1] = (parts[-1][0], parts[-1][1] + gpu - sum(b for _, b in parts))
    rows += [Row("model", item, _gib(b), SFT_PHASES, source) for item, b in parts]
    lora_and_offload_rows(x, x.model, "model", "model", cpu, source, SFT_PHASES, rows, cpu_rows, problems)
    ckpt = "with" if x.gradient_checkpointing else "without"
    rows.append(Row("model", f"activations, {ckpt} gradient checkpointing ({x.batch} x {x.seq_len} tokens)",
                    _gib(backbone_activation_bytes(x.model, x.batch, x.seq_len, x.attn_implementation,
                                                   x.gradient_checkpointing)), SFT_PHASES,
                    "hand: Korthikanti et al. 2022 Eq. 1 for a Qwen2 block"))
    rows.append(Row("model", f"logits ({x.batch} x {x.seq_len} x {x.model.vocab})",
                    _gib(causal_lm_logits_bytes(x.model, x.batch, x.seq_len)), SFT_PHASES, "hand: 10 B per logit"))
    plan = Plan(x, rows, cpu_rows, phases=SFT_PHASES)
    if plan.peak_gib > plan.budget_gib:
        problems.insert(0, f"training needs {plan.peak_gib:.1f} GiB per GPU, more than the card's "
                           f"{plan.card_gib:g} GiB minus {x.cluster.headroom_gib:g} GiB headroom")
    plan.problems = problems
    return plan


def suggest_sft_fixes(x: SFTInputs, max_nodes: int = 16) -> tuple[list[str], Plan | None]:
    """The smallest set of changes after which the SFT plan fits (more nodes only if no set suffices)."""
    steps = training_fix_steps(x, "sft")
    if x.batch > 1:
        steps.append(lambda c: (dataclasses.replace(c, batch=1),
                                f"sft.per_device_train_batch_size=1 sft.gradient_accumulation_steps=<x{c.batch}> "
                                f"(the same effective batch)"))
    for nodes in range(x.cluster.nodes, max_nodes + 1):
        base = dataclasses.replace(x, cluster=dataclasses.replace(x.cluster, nodes=nodes))
        for k in range(len(steps) + 1):
            for subset in itertools.combinations(steps, k):
                cur, texts = base, []
                for step in subset:
                    cur, text = step(cur)
                    texts.append(text)
                if build_sft_plan(cur).fits:
                    more = [f"add nodes: cluster.nodes={nodes}"] if nodes > x.cluster.nodes else []
                    return more + texts, build_sft_plan(cur)
    return [], None
