"""Per-GPU memory of session-level PPO (PaSa §4.2, Table 9): what each rank holds in the three phases of a step.

- **rollout**: the rollout engine generates sessions (vLLM: its whole ``gpu_memory_utilization`` budget);
- **score**: no-grad forwards for log π_old, log π_sft and V̂_old (``ppo.score_batch_size`` sessions at a time);
- **update**: forward + backward of policy and value (``ppo.forward_batch_size`` sessions), then the optimizer step.

Training state (weights, gradients, optimizer states of the one DeepSpeed engine holding policy + value, the frozen
reference, an in-process Selector) is resident in every phase. With vLLM sleep mode (``ppo.rollout_sleep``) the
engine's memory is released outside the rollout phase, so the peak is the largest of the three phase totals.

Where a library has an estimator it is used and named in each row's ``source``: model states come from DeepSpeed's
``estimate_zero2_model_states_mem_needs`` / ``estimate_zero3_model_states_mem_needs`` (the functions behind its
``*_all_cold`` printers), weight sizes from accelerate's ``calculate_maximum_sizes`` on the meta-built model. Nothing
in either library estimates activations or a vLLM engine: those rows are our formulas, written out below.
Estimates only: not yet checked against measured CUDA peaks.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

from scholar_agents.runtime.cluster import ClusterConfig
from scholar_agents.plan.model_sizes import ModelShape

GIB = 2**30
PHASES = ("rollout", "score", "update")
DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "auto": 2}
# vLLM's memory besides weights and KV cache: the activation peak of its profiling run at the default
# max_num_batched_tokens, sampler buffers and CUDA graphs (~1–2 GiB for a 7B model). Our allowance, not measured.
VLLM_OVERHEAD_GIB = 2.0
# What a sleeping vLLM engine (level 1: weights offloaded to CPU, KV cache discarded) keeps on the GPU: CUDA graphs
# and the allocator's pool bookkeeping. Our allowance, not measured.
VLLM_ASLEEP_GIB = 0.5
DEEPSPEED_ZERO2 = "DeepSpeed estimate_zero2_model_states_mem_needs"
DEEPSPEED_ZERO3 = "DeepSpeed estimate_zero3_model_states_mem_needs"
ACCELERATE_SIZES = "accelerate calculate_maximum_sizes"


@dataclass(frozen=True)
class PlanInputs:
    """Everything the plan depends on, read from the run's typed config (:func:`~scholar_agents.plan.commands.
    inputs_from_config`). No defaults: each value is the config's (its dataclass holds the default)."""

    cluster: ClusterConfig
    policy: ModelShape
    value: ModelShape | None  # a separate value model; None = a value head on the policy (ppo.value_head=shared)
    ref: ModelShape | None  # None = the LoRA policy with its adapter disabled (no second copy)
    # False = a critic-free estimator (ppo.estimator=grpo|rloo): no value model or head at all (``value`` is then
    # only what paper_mc would build, for the comparison `scholar plan` prints)
    critic: bool
    estimator: str
    zero_stage: int  # 0 = no DeepSpeed
    deepspeed: str | None
    offload_optimizer: bool
    offload_params: bool
    model_dtype_bytes: int
    lora_trainable: int | None  # trainable LoRA parameters of the policy; None = full fine-tuning
    gradient_checkpointing: bool
    attn_implementation: str | None  # None = transformers' default (sdpa: no score matrix kept, as auto)
    forward_batch_size: int
    score_batch_size: int
    seq_len: int  # a session's prompt + response: ppo.plan_seq_len, else llm.max_model_len
    seq_len_source: str  # which of the two
    response_len: int  # max_new_tokens: the logits kept per session (logits_to_keep = R + 1)
    engine_backend: str  # vllm | hf
    engine_dtype_bytes: int
    gpu_memory_utilization: float
    engine_sequences: int  # sequences generated at once per rank
    sleep: bool
    selector: ModelShape | None  # in this process (selector_backend hf | vllm); None = none planned here
    selector_backend: str  # none (not used / served elsewhere) | hf | vllm (in process)
    # the in-process Selector's engine (None without one)
    selector_dtype_bytes: int | None
    selector_gpu_memory_utilization: float | None
    selector_batch_size: int | None
    selector_seq_len: int | None

    @property
    def world(self) -> int:
        return max(1, self.cluster.world_size)


@dataclass(frozen=True)
class Row:
    model: str
    item: str
    gib: float
    phases: tuple[str, ...]
    source: str
    engine_budget: bool = False  # the rollout engine's gpu_memory_utilization reservation


@dataclass
class Plan:
    inputs: PlanInputs  # or sft_plan.SFTInputs: anything with a .cluster
    rows: list[Row]
    cpu_rows: list[Row]
    problems: list[str] = field(default_factory=list)  # why it does not fit (empty = fits)
    phases: tuple[str, ...] = PHASES

    @property
    def card_gib(self) -> float:
        return self.inputs.cluster.gpu_memory_gib

    @property
    def budget_gib(self) -> float:
        return self.card_gib - self.inputs.cluster.headroom_gib

    def phase_total(self, phase: str) -> float:
        return sum(r.gib for r in self.rows if phase in r.phases)

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_total)

    @property
    def peak_gib(self) -> float:
        return self.phase_total(self.peak_phase)

    @property
    def fits(self) -> bool:
        return not self.problems


# --------------------------------------------------------------------------------------------------------------
# model states under ZeRO (DeepSpeed's estimators)


def zero_model_states(trainable: int, largest_layer: int, stage: int, cluster: ClusterConfig, offload_optimizer: bool,
                      offload_params: bool, dtype_bytes: int) -> tuple[int, int, str]:
    """(GPU bytes, CPU bytes per node, source) of the weights, gradients and optimizer states of ``trainable``
    parameters trained with AdamW, per GPU. Stages 2 and 3 are DeepSpeed's own estimators."""
    n = max(1, cluster.world_size)
    if stage == 2:
        from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

        cpu, gpu = estimate_zero2_model_states_mem_needs(trainable, num_gpus_per_node=cluster.gpus_per_node,
                                                         num_nodes=cluster.nodes, cpu_offload=offload_optimizer)
        return gpu, cpu, DEEPSPEED_ZERO2
    if stage == 3:
        from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

        # zero_init: transformers' HfDeepSpeedConfig partitions at load time (zero.Init)
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(trainable, largest_layer,
                                                            num_gpus_per_node=cluster.gpus_per_node,
                                                            num_nodes=cluster.nodes, cpu_offload=offload_optimizer,
                                                            cpu_offload_params=offload_params, zero_init=True)
        return gpu, cpu, DEEPSPEED_ZERO3
    if stage == 1:
        # DeepSpeed has no stage-1 estimator: 16-bit weights and gradients replicated, fp32 master weights and
        # Adam moments (4 + 8 B) partitioned.
        return 2 * trainable + 2 * trainable + 12 * trainable // n, 0, "hand: ZeRO-1 (2 + 2 + 12/N B/param)"
    # no DeepSpeed: torch AdamW keeps its two moments in the parameters' dtype, everything replicated
    return 4 * dtype_bytes * trainable, 0, f"hand: torch AdamW, no ZeRO ({4 * dtype_bytes} B/param)"


def _state_split(params: int, stage: int, n: int, offload_optimizer: bool, offload_params: bool,
                 dtype_bytes: int) -> tuple[int, int, int]:
    """(weights, gradients, optimizer states) bytes per GPU of ``params`` trainable parameters: the per-item split of
    the estimator's total. DeepSpeed counts 2 B of 16-bit weights (replicated below stage 3) + 18 B/N = 2 (16-bit
    gradients) + 4 (fp32 gradients) + 4 (fp32 master weights) + 8 (Adam moments) for stage 2; for stage 3 the 18 B/N
    include the 16-bit weights (2 + 4 gradients + 12 optimizer). Offloaded items live in CPU RAM."""
    if stage == 2:
        return 2 * params, 0 if offload_optimizer else 6 * params // n, 0 if offload_optimizer else 12 * params // n
    if stage == 3:
        w = 0 if offload_params else 2 * params // n
        return w, 0 if offload_optimizer else 4 * params // n, 0 if offload_optimizer else 12 * params // n
    if stage == 1:
        return 2 * params, 2 * params, 12 * params // n
    return dtype_bytes * params, dtype_bytes * params, 2 * dtype_bytes * params


# --------------------------------------------------------------------------------------------------------------
# activations (our formula; no library estimates them)


def layer_activation_bytes(shape: ModelShape, batch: int, seq: int, attn_implementation: str | None) -> int:
    """Bytes one decoder layer saves for backward: Korthikanti et al. 2022, "Reducing Activation Recomputation in
    Large Transformer Models", §4.1 Eq. 1 (s·b·h·(34 + 5·a·s/h) for GPT with 16-bit tensors), redone for a
    Llama/Qwen2 block without dropout: attention = QKV-projection input 2sbh + Q, K, V 2sb(h + 2h_kv) + attention
    output 2sbh; SwiGLU MLP = input 2sbh + gate, SiLU(gate), up, product 4 × 2sbI; two RMSNorms, each saving its
    fp32 input and its 16-bit output (4 + 2)sbh -> s·b·(20h + 4h_kv + 8I). Attention scores: flash/SDPA kernels
    keep only the fp32 log-sum-exp (4·b·a·s); eager attention keeps the fp32 softmax and its 16-bit copy (6·b·a·s²,
    Korthikanti's 5as/h term) and K, V repeated to all heads (4sb(h − h_kv)). tests/plan/test_plan.py checks this
    against the tensors autograd saves for a tiny Qwen2 on CPU (within 1%)."""
    h, kv, inter, a = shape.hidden, shape.kv_heads * shape.head_dim, shape.intermediate, shape.heads
    per = seq * batch * (20 * h + 4 * kv + 8 * inter)
    if attn_implementation == "eager":
        return per + 6 * batch * a * seq * seq + 4 * seq * batch * (h - kv)
    return per + 4 * batch * a * seq


def inference_layer_bytes(shape: ModelShape, batch: int, seq: int) -> int:
    """The live set of one decoder layer in a no-grad forward (nothing is kept across layers): the residual stream and
    the RMSNorm's fp32 copy (2 + 4)sbh, the attention/MLP input 2sbh, and the MLP's gate, up and SiLU(gate)·up
    outputs 3 × 2sbI -> s·b·(8h + 6I). (The attention tensors are smaller than the MLP's and not live with them.)"""
    return seq * batch * (8 * shape.hidden + 6 * shape.intermediate)


def backbone_activation_bytes(shape: ModelShape, batch: int, seq: int, attn_implementation: str | None,
                              checkpointing: bool) -> int:
    """A forward pass kept for backward. With gradient checkpointing (HF checkpoints every decoder layer) only each
    layer's 16-bit input stays (2sbh per layer) plus one layer recomputed at a time during backward."""
    layer = layer_activation_bytes(shape, batch, seq, attn_implementation)
    if checkpointing:
        return shape.layers * 2 * seq * batch * shape.hidden + layer
    return shape.layers * layer


def logits_bytes(shape: ModelShape, batch: int, response_len: int, with_grad: bool) -> int:
    """The last R+1 positions' logits (trainer: ``logits_to_keep``): 16-bit logits 2 B + the fp32 copy 4 B + its
    log_softmax 4 B per logit, kept for backward; the entropy's detached log_softmax adds 12 B transiently. No-grad
    scoring keeps the 16-bit logits and one fp32 log_softmax at a time (2 + 8 B)."""
    n = batch * (response_len + 1) * shape.vocab
    return n * (10 + 12) if with_grad else n * (2 + 8)


# --------------------------------------------------------------------------------------------------------------
# the plan


def _gib(nbytes: float) -> float:
    return nbytes / GIB


def lora_and_offload_rows(x, base_model, model: str, trained: str, cpu: int, source: str, phases: tuple,
                          rows: list, cpu_rows: list, problems: list) -> None:
    """Rows shared by the PPO and SFT plans: the frozen base under a LoRA adapter (16-bit, partitioned by ZeRO-3
    only) and the ZeRO states offloaded to CPU RAM (a problem when they exceed ``cluster.cpu_memory_gib``)."""
    n, stage = x.world, x.zero_stage
    if x.lora_trainable is not None:
        base = base_model.weights_bytes_16bit * x.model_dtype_bytes // 2
        rows.append(Row(model, "frozen base weights", _gib(base // n if stage == 3 else base), phases,
                        ACCELERATE_SIZES + (" / N (ZeRO-3)" if stage == 3 else "")))
    if (x.offload_optimizer or x.offload_params) and stage in (2, 3):
        cpu_rows.append(Row(trained, "offloaded states, CPU RAM per node", _gib(cpu), phases, source))
        if x.cluster.cpu_memory_gib and _gib(cpu) > x.cluster.cpu_memory_gib:
            problems.append(f"CPU offload needs {_gib(cpu):.0f} GiB RAM per node, the nodes have "
                            f"{x.cluster.cpu_memory_gib:.0f} GiB (cluster.cpu_memory_gib)")


def build_plan(x: PlanInputs) -> Plan:
    rows: list[Row] = []
    cpu_rows: list[Row] = []
    problems: list[str] = []
    n, stage = x.world, x.zero_stage
    all_phases = PHASES
    engine_phases = ("rollout",) if x.sleep else PHASES

    # ---- policy + value: one DeepSpeed engine (one optimizer, Eq. 8's one loss)
    pol_trainable = x.lora_trainable if x.lora_trainable is not None else x.policy.params
    value = x.value if x.critic else None  # grpo / rloo: no value model
    val_trainable = 0 if not x.critic else (value.backbone_params + value.hidden + 1) if value is not None \
        else x.policy.hidden + 1
    trainable = pol_trainable + val_trainable
    largest = max(x.policy.largest_layer_params, value.largest_layer_params if value else 0)
    gpu, cpu, source = zero_model_states(trainable, largest, stage, x.cluster, x.offload_optimizer, x.offload_params,
                                         x.model_dtype_bytes)
    parts = []
    for model, p in (("policy", pol_trainable), ("value", val_trainable))[:2 if x.critic else 1]:
        w, g, o = _state_split(p, stage, n, x.offload_optimizer, x.offload_params, x.model_dtype_bytes)
        label = "LoRA adapter " if (model == "policy" and x.lora_trainable is not None) else ""
        parts += [(model, f"{label}weights", w), (model, f"{label}gradients", g),
                  (model, f"{label}optimizer states", o)]
    if stage == 3:
        parts.append(("policy + value" if x.critic else "policy", "ZeRO-3 gathered layer (4 B x largest layer)",
                      4 * largest))
    # the split is exact for the estimators' formulas; integer division may leave a few bytes: give them to the last
    parts[-1] = (parts[-1][0], parts[-1][1], parts[-1][2] + gpu - sum(b for _, _, b in parts))
    for model, item, b in parts:
        rows.append(Row(model, item, _gib(b), all_phases, source))
    if stage == 3 and value is not None:
        # DeepSpeed's estimator counts one gathered layer (16-bit weights + gradient) for the engine; with a separate
        # value model both backbones' embeddings (each the largest layer) come last in the one backward, gathered
        # with their dense gradients side by side. Verified on one H100 (docs/cluster.md): gpu_check ppo_1L's update
        # peak was 46.19 GiB against 43.16 planned without this row.
        rows.append(Row("value", "ZeRO-3 second gathered layer in backward (4 B x its largest layer)",
                        _gib(4 * value.largest_layer_params), ("update",), "measured on one H100: gpu_check ppo_1L"))
    lora_and_offload_rows(x, x.policy, "policy", "policy + value", cpu, source, all_phases, rows, cpu_rows, problems)

    # ---- the frozen reference π_sft. Under ZeRO-3 we assume it is partitioned like the trained models (a ZeRO-3
    # inference engine gathering one layer at a time for the scoring forward); replicated otherwise.
    if x.ref is not None:
        full = x.ref.weights_bytes_16bit * x.model_dtype_bytes // 2
        if stage == 3:
            rows.append(Row("reference", "weights (ZeRO-3 partitioned, frozen)", _gib(full // n), all_phases,
                            ACCELERATE_SIZES + " / N"))
            rows.append(Row("reference", "gathered layer (16-bit)", _gib(2 * x.ref.largest_layer_params), ("score",),
                            "hand: 2 B x largest layer"))
        else:
            rows.append(Row("reference", "weights (replicated, frozen)", _gib(full), all_phases, ACCELERATE_SIZES))
    else:
        rows.append(Row("reference", "none: the LoRA policy with its adapter disabled", 0.0, all_phases, "-"))

    # ---- the Selector reward model (Eq. 2)
    if x.selector is not None and x.selector_backend == "hf":
        rows.append(Row("selector (in process, hf)", "weights", _gib(x.selector.weights_bytes_16bit *
                                                                     x.selector_dtype_bytes // 2), all_phases,
                        ACCELERATE_SIZES))
        layer = inference_layer_bytes(x.selector, x.selector_batch_size, x.selector_seq_len)
        rows.append(Row("selector (in process, hf)", f"no-grad forward ({x.selector_batch_size} x "
                        f"{x.selector_seq_len} tokens, one layer at a time)", _gib(layer), ("rollout",),
                        "hand: s·b·(8h + 6I)"))
    elif x.selector is not None and x.selector_backend == "vllm":
        rows.append(Row("selector (in process, vllm)", f"engine budget (gpu_memory_utilization "
                        f"{x.selector_gpu_memory_utilization:g} x card)",
                        x.selector_gpu_memory_utilization * x.cluster.gpu_memory_gib, all_phases,
                        "vLLM reserves gpu_memory_utilization x total memory"))
    else:
        rows.append(Row("selector", "served elsewhere or unused", 0.0, all_phases, "-"))

    # ---- the rollout engine (its model = the policy)
    kv = x.engine_sequences * x.seq_len * x.policy.kv_bytes_per_token_16bit
    engine_w = x.policy.weights_bytes_16bit * x.engine_dtype_bytes // 2
    if x.engine_backend == "vllm":
        budget = x.gpu_memory_utilization * x.cluster.gpu_memory_gib
        rows.append(Row("rollout engine (vLLM)", f"budget: gpu_memory_utilization {x.gpu_memory_utilization:g} x card",
                        budget, engine_phases, "vLLM reserves gpu_memory_utilization x total memory at start-up",
                        engine_budget=True))
        if x.sleep:
            rows.append(Row("rollout engine (vLLM)", "asleep (weights on CPU, KV cache freed)", VLLM_ASLEEP_GIB,
                            ("score", "update"), "our allowance (CUDA graphs stay)"))
        need = _gib(engine_w + kv) + VLLM_OVERHEAD_GIB
        if need > budget:
            problems.append(f"the rollout engine needs {need:.1f} GiB (weights {_gib(engine_w):.1f} + KV cache "
                            f"{_gib(kv):.1f} + {VLLM_OVERHEAD_GIB:g} overhead) inside its budget of {budget:.1f} GiB")
    else:
        rows.append(Row("rollout engine (HF generate)", "weights (a second copy of the policy)", _gib(engine_w),
                        all_phases, ACCELERATE_SIZES))
        rows.append(Row("rollout engine (HF generate)", "KV cache", _gib(kv), ("rollout",),
                        "hand: sequences x length x 2 x layers x kv_heads x head_dim x 2 B"))

    # ---- activations
    train = backbone_activation_bytes(x.policy, x.forward_batch_size, x.seq_len, x.attn_implementation,
                                      x.gradient_checkpointing)
    ckpt = "with" if x.gradient_checkpointing else "without"
    act_src = "hand: Korthikanti et al. 2022 Eq. 1 for a Qwen2 block"
    rows.append(Row("policy", f"activations, {ckpt} gradient checkpointing ({x.forward_batch_size} x {x.seq_len} "
                    f"tokens)", _gib(train), ("update",), act_src))
    rows.append(Row("policy", f"logits ({x.forward_batch_size} x {x.response_len + 1} x {x.policy.vocab})",
                    _gib(logits_bytes(x.policy, x.forward_batch_size, x.response_len, True)), ("update",),
                    "hand: 22 B per kept logit"))
    if value is not None:
        v = backbone_activation_bytes(value, x.forward_batch_size, x.seq_len, x.attn_implementation,
                                      x.gradient_checkpointing)
        rows.append(Row("value", f"activations, {ckpt} gradient checkpointing", _gib(v), ("update",), act_src))
    score_layer = inference_layer_bytes(x.policy, x.score_batch_size, x.seq_len)
    # the policy's and π_sft's logits (a separate reference, or the LoRA policy with its adapter off) side by side
    score_logits = 2 * logits_bytes(x.policy, x.score_batch_size, x.response_len, False)
    scored = "policy + reference" + (" + value" if x.critic else "")
    rows.append(Row(scored, f"no-grad scoring ({x.score_batch_size} x {x.seq_len} tokens: one "
                    f"layer at a time + policy and reference logits)", _gib(score_layer + score_logits), ("score",),
                    "hand: s·b·(8h + 6I) + 10 B per kept logit"))

    plan = Plan(x, rows, cpu_rows)
    over = [f"the {phase} phase needs {plan.phase_total(phase):.1f} GiB per GPU, more than the card's "
            f"{plan.card_gib:g} GiB minus {x.cluster.headroom_gib:g} GiB headroom"
            for phase in PHASES if plan.phase_total(phase) > plan.budget_gib]
    plan.problems = over + problems
    return plan


# --------------------------------------------------------------------------------------------------------------
# fixes: the smallest set of candidate changes after which the plan fits (the engine's utilization re-tuned each
# time), more nodes only when no set suffices


ZERO3_JSON = "${sa_pkg:}/conf/deepspeed/zero3.json"


def _engine_awake_others(plan: Plan) -> float:
    """The largest phase total without the rollout engine's budget, in the phases where the engine is awake."""
    phases = ("rollout",) if plan.inputs.sleep else PHASES
    return max(sum(r.gib for r in plan.rows if p in r.phases and not r.engine_budget) for p in phases)


def _best_utilization(x: PlanInputs) -> float | None:
    """The largest gpu_memory_utilization (2 decimals) that leaves the rest of the step room, if the engine still fits
    in it; None if no value works."""
    plan = build_plan(x)
    card = x.cluster.gpu_memory_gib
    u_max = math.floor((plan.budget_gib - _engine_awake_others(plan)) / card * 100) / 100
    engine_need = (_gib(x.policy.weights_bytes_16bit * x.engine_dtype_bytes // 2 +
                        x.engine_sequences * x.seq_len * x.policy.kv_bytes_per_token_16bit) + VLLM_OVERHEAD_GIB)
    u_min = math.ceil(engine_need / card * 100) / 100
    return min(u_max, 0.9) if u_min <= u_max else None


def training_fix_steps(x, group: str) -> list:
    """The fixes every training plan shares (``group``: the config group of the run, ppo | sft), each a function
    inputs -> (changed inputs, the override that makes the change): ZeRO-3, gradient checkpointing, flash attention."""
    steps = []
    if x.zero_stage < 3:
        steps.append(lambda c: (dataclasses.replace(c, zero_stage=3, deepspeed="zero3.json"),
                                f"use conf/deepspeed/zero3.json ({group}.deepspeed={ZERO3_JSON}): shard weights, "
                                f"gradients and optimizer states over all {c.world} GPUs"))
    if not x.gradient_checkpointing:
        steps.append(lambda c: (dataclasses.replace(c, gradient_checkpointing=True),
                                f"enable gradient checkpointing ({group}.gradient_checkpointing=true)"))
    if x.attn_implementation == "eager":
        # auto: flash attention where it imports, else sdpa — the same activation memory here, and never a crash
        steps.append(lambda c: (dataclasses.replace(c, attn_implementation="auto"),
                                f"use memory-efficient attention ({group}.attn_implementation=auto: flash attention "
                                f"where flash-attn imports, else sdpa)"))
    return steps


def _fix_steps(x: PlanInputs) -> list:
    """Candidate changes, each a function inputs -> (changed inputs, the override that makes the change)."""
    steps = training_fix_steps(x, "ppo")
    if x.selector_backend in ("hf", "vllm"):
        steps.append(lambda c: (dataclasses.replace(c, selector_backend="none"),
                                "serve the Selector on its own GPUs (llm@selector_llm=openai_server "
                                "selector_llm.base_url=<its server>)"))
    if x.engine_backend == "vllm" and not x.sleep:
        steps.append(lambda c: (dataclasses.replace(c, sleep=True),
                                "release the rollout engine during scoring and updates (ppo.rollout_sleep=true: vLLM "
                                "sleep mode, GPU only)"))
    if x.score_batch_size > 1:
        def smaller_scoring(c: PlanInputs):
            k = c.score_batch_size
            while k > 1 and build_plan(dataclasses.replace(c, score_batch_size=k)).phase_total("score") > \
                    build_plan(c).budget_gib:
                k //= 2
            return dataclasses.replace(c, score_batch_size=k), f"lower ppo.score_batch_size to {k}"
        steps.append(smaller_scoring)
    return steps


def _with_best_utilization(x: PlanInputs) -> tuple[PlanInputs, list[str]]:
    if x.engine_backend != "vllm" or build_plan(x).fits:
        return x, []
    u = _best_utilization(x)
    if u is None or abs(u - x.gpu_memory_utilization) < 1e-9:
        return x, []
    direction = "lower" if u < x.gpu_memory_utilization else "raise"
    return dataclasses.replace(x, gpu_memory_utilization=u), [f"{direction} llm.gpu_memory_utilization to {u:g}"]


def _apply(x: PlanInputs, steps) -> tuple[PlanInputs, list[str]]:
    texts = []
    for step in steps:
        x, text = step(x)
        texts.append(text)
    x, more = _with_best_utilization(x)
    return x, texts + more


def suggest_fixes(x: PlanInputs, max_nodes: int = 16) -> tuple[list[str], Plan | None]:
    """The smallest set of config changes after which the plan fits (engine utilization re-tuned after each set; more
    nodes only when no set of changes suffices), with the plan it gives; ([], None) if nothing found."""
    if build_plan(x).fits:
        return [], build_plan(x)
    steps = _fix_steps(x)
    for k in range(len(steps) + 1):
        for subset in itertools.combinations(steps, k):
            fixed, texts = _apply(x, subset)
            if build_plan(fixed).fits:
                return texts, build_plan(fixed)
    for nodes in range(x.cluster.nodes + 1, max_nodes + 1):
        more = dataclasses.replace(x, cluster=dataclasses.replace(x.cluster, nodes=nodes))
        for k in range(len(steps) + 1):
            for subset in itertools.combinations(steps, k):
                fixed, texts = _apply(more, subset)
                if build_plan(fixed).fits:
                    return ([f"add nodes: cluster.nodes={nodes} ({nodes * x.cluster.gpus_per_node} GPUs)"] + texts,
                            build_plan(fixed))
    return [], None
