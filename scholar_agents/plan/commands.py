"""``scholar plan <the run's overrides>``: the per-GPU memory plan of ``train crawler_ppo`` on ``cluster=<name>``,
composed from the very config the run composes (root ``conf/plan.yaml`` = ``train_crawler_ppo.yaml``). Prints a
table, the GPU locks' CUDA and the NVIDIA driver each needs, and exits non-zero, naming the fix, when the plan does
not fit. ``train crawler_ppo`` runs the same check at start-up (:func:`startup_check`; ``cluster.memory_check=false``
turns it off). Below the table: the estimate of one step plus one checkpoint
(:mod:`scholar_agents.plan.preemption_window`) against ``cluster.shutdown_grace_s``; a training job under Slurm
compares it with its signal lead at start-up (:func:`startup_window_check`).

Every function here takes the run's config typed once, at the command's entry, by the dataclasses of the groups
it reads (:class:`PPORun`, :class:`SFTRun`; built by :mod:`scholar_agents.train.plan_runs`, the floor where
``PPOConfig`` and ``SFTRecipeConfig`` live): each default is the dataclass's own, never repeated here. A model
config or DeepSpeed JSON that cannot be read is one line (UsageError: exit 2), not a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from scholar_agents.llm.attention import resolve_attn_implementation
from scholar_agents.pasa.crawl_budget import CRITIC_FREE, critic_free_crawl_budget, sessions_per_crawl
from scholar_agents.plan.memory_plan import DTYPE_BYTES, Plan, PlanInputs, build_plan, suggest_fixes
from scholar_agents.plan.model_sizes import config_dir_for, lora_trainable_params, model_shape, shown_config_path
from scholar_agents.plan.preemption_window import (WindowEstimate, format_window, ppo_window, sft_window,
                                                   sized_save_every)
from scholar_agents.plan.sft_plan import SFTInputs, build_sft_plan, suggest_sft_fixes
from scholar_agents.runtime import preemption
from scholar_agents.runtime.cluster import ClusterConfig
from scholar_agents.runtime.cuda_check import lock_lines
from scholar_agents.validation import UsageError, optional_positive_int

if TYPE_CHECKING:
    from scholar_agents.llm.config import LLMConfig
    from scholar_agents.pasa.crawl_env import CrawlConfig
    from scholar_agents.pasa.crawler import CrawlerConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PPORun:
    """What the plan reads of a composed ``train crawler_ppo`` config, each group typed by its own dataclass."""

    ppo: Any  # train.ppo.config.PPOConfig (typed on the train floor, above this one)
    llm: LLMConfig  # the rollout engine
    cluster: ClusterConfig
    env: CrawlConfig  # crawler.env: the crawl budgets of critic-free runs
    policy: CrawlerConfig  # crawler.policy: sessions per generate call, response length
    selector_llm: Optional[LLMConfig]  # an in-process Selector engine (hf | vllm); None: none (absent, or served)


@dataclass(frozen=True)
class SFTRun:
    """What the plan reads of a composed ``train selector_sft`` / ``crawler_sft`` config, typed."""

    sft: Any  # train.sft.SFTRecipeConfig (typed on the train floor, above this one)
    cluster: ClusterConfig


def _deepspeed_settings(path: str | None, group: str = "ppo") -> tuple[int, bool, bool]:
    """(ZeRO stage, optimizer offloaded, parameters offloaded) from the DeepSpeed JSON; (0, False, False) without."""
    if not path:
        return 0, False, False
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{group}.deepspeed={path} does not exist: pass a DeepSpeed JSON, e.g. "
                         f"{group}.deepspeed=${{sa_pkg:}}/conf/deepspeed/zero3.json")
    zero = json.loads(p.read_text()).get("zero_optimization", {})
    offloaded = lambda key: str((zero.get(key) or {}).get("device", "none")).lower() in ("cpu", "nvme")  # noqa: E731
    return int(zero.get("stage", 0)), offloaded("offload_optimizer"), offloaded("offload_param")


def planned_model(setting: str, model: str, base: str | None = None, base_setting: str = "") -> str:
    """The model whose config.json the plan reads for ``setting=model``: the model itself, or — while a checkpoint
    does not exist yet (the PPO preset starts from the SFT run's output) — ``base``, the model it fine-tunes (same
    architecture, same sizes). Neither readable: one-line UsageError naming the setting and the fix."""
    try:
        config_dir_for(model)
        return model
    except FileNotFoundError as e:
        if not base:
            hint = f" (or set {base_setting}=<the model it fine-tunes>)" if base_setting else ""
            raise UsageError(f"{setting}: {e}{hint}") from None
    try:
        config_dir_for(base)
    except FileNotFoundError as e:
        raise UsageError(f"{setting}={model} does not exist yet and {base_setting}: {e}") from None
    return base  # the plan's header says so (_shape)


def _shape(setting: str, model: str, base: str | None = None, base_setting: str = ""):
    """``model``'s ModelShape, named as configured (and, when planned from its base, saying so)."""

    read = planned_model(setting, model, base, base_setting)
    shape = model_shape(read)
    if read == model:
        return shape
    return dataclasses.replace(shape, name=f"{model} (not there yet: sizes of {base_setting}={base})")


def inputs_from_config(run: PPORun, cluster: ClusterConfig | None = None) -> PlanInputs:
    """The plan's inputs from a typed ``train crawler_ppo`` config (models built on the meta device). A model
    that does not exist yet (the SFT checkpoint the preset starts from) is planned from ``ppo.base_model``."""
    ppo, llm = run.ppo, run.llm
    cluster = cluster or run.cluster
    base = ppo.base_model
    policy_name = str(ppo.policy_model)
    policy = _shape("ppo.policy_model", policy_name, base, "ppo.base_model")
    lora = ppo.lora
    ref_name = ppo.ref_model
    ref = None
    if not (lora.enabled and not ref_name):
        ref = _shape("ppo.ref_model" if ref_name else "ppo.policy_model", str(ref_name or policy_name), base,
                     "ppo.base_model")
    value = None
    if ppo.value_head == "separate":
        value_name = ppo.value_model
        value = _shape("ppo.value_model" if value_name else "ppo.policy_model", str(value_name or policy_name),
                       base, "ppo.base_model")
    lora_trainable = None
    if lora.enabled:
        targets = lora.target_modules if isinstance(lora.target_modules, str) else tuple(lora.target_modules)
        lora_trainable = lora_trainable_params(planned_model("ppo.policy_model", policy_name, base, "ppo.base_model"),
                                               int(lora.r), int(lora.alpha), targets)
    stage, off_opt, off_par = _deepspeed_settings(ppo.deepspeed)
    # the longest session the plan assumes: ppo.plan_seq_len (its own input: a check that measures shorter
    # sessions plans for those), else the engine's bound llm.max_model_len
    plan_seq = optional_positive_int(ppo.plan_seq_len, "ppo.plan_seq_len", "tokens per session")
    seq_len, seq_source = (plan_seq, "ppo.plan_seq_len") if plan_seq else (int(llm.max_model_len), "llm.max_model_len")

    # sequences the engine generates at once: the widest rollout round (PaSa App. A.2: queries_per_step search
    # sessions, then expand_sessions[i] per round), at most crawler.policy.batch_sessions and llm.max_num_seqs
    rounds = [int(ppo.queries_per_step)] + [int(n) for n in ppo.expand_sessions]
    batch_sessions = int(run.policy.batch_sessions)
    estimator = str(ppo.estimator)
    per_call = batch_sessions
    if estimator in CRITIC_FREE:
        # whole crawls (rollout.collect_crawls): each call takes up to batch_sessions, and a round the group's
        # members share (round 0: their S_q sessions) is one call with group_size samples of each prompt; never
        # more than all the step's crawls can run (queries x group x sessions per crawl)
        group = int(ppo.group_size)
        per_call = batch_sessions * group
        bound = sessions_per_crawl(run.env.max_sessions, run.env.max_queue)
        rounds = [per_call if bound is None else min(per_call, rounds[0] * group * bound)]
    sequences = min(max(rounds), per_call, int(llm.max_num_seqs))
    # ppo.max_new_tokens: null = crawler.policy.max_new_tokens (PPOConfig)
    response = ppo.max_new_tokens or run.policy.max_new_tokens
    # ppo.rollout_sleep null (on where the platform has sleep mode) is planned as off: the larger footprint
    sleep = bool(ppo.rollout_sleep) or bool(llm.enable_sleep_mode)

    sel = run.selector_llm if ppo.use_selector else None

    return PlanInputs(
        cluster=cluster, policy=policy, value=value, critic=estimator not in CRITIC_FREE, estimator=estimator,
        ref=ref, zero_stage=stage, deepspeed=ppo.deepspeed,
        offload_optimizer=off_opt, offload_params=off_par,
        model_dtype_bytes=DTYPE_BYTES.get(str(ppo.model_dtype), 4),
        lora_trainable=lora_trainable, gradient_checkpointing=bool(ppo.gradient_checkpointing),
        attn_implementation=ppo.attn_implementation,
        forward_batch_size=int(ppo.forward_batch_size),
        score_batch_size=int(ppo.score_batch_size),
        seq_len=seq_len, seq_len_source=seq_source, response_len=int(response),
        engine_backend="vllm" if llm.backend == "vllm" else "hf",
        engine_dtype_bytes=DTYPE_BYTES.get(str(llm.dtype), 2),
        gpu_memory_utilization=float(llm.gpu_memory_utilization),
        engine_sequences=sequences, sleep=sleep,
        selector=_shape("selector_llm.model", str(sel.model)) if sel else None,
        selector_backend=str(sel.backend) if sel else "none",
        selector_dtype_bytes=DTYPE_BYTES.get(str(sel.dtype), 2) if sel else None,
        selector_gpu_memory_utilization=float(sel.gpu_memory_utilization) if sel else None,
        selector_batch_size=int(sel.batch_size) if sel else None,
        selector_seq_len=int(sel.max_model_len) if sel else None,
    )


def _ppo_header(x: PlanInputs) -> list[str]:
    return [
        f"# policy {x.policy.name}: {x.policy.params:,} parameters (meta-built from "
        f"{shown_config_path(x.policy.config_dir)}/config.json)"
        + (f"; no value model (ppo.estimator={x.estimator})" if not x.critic else
           f"; value backbone {x.value.backbone_params:,}" if x.value else "; value head on the policy")
        + (f"; LoRA trainable {x.lora_trainable:,}" if x.lora_trainable is not None else ""),
        f"# sequences of <= {x.seq_len} tokens ({x.seq_len_source}), responses <= {x.response_len}; forward batch "
        f"{x.forward_batch_size}, scoring batch {x.score_batch_size}; rollout engine {x.engine_backend}: "
        f"{x.engine_sequences} sequences at once, sleep mode {'on' if x.sleep else 'off'}",
    ]


def format_plan(plan: Plan) -> str:
    x = plan.inputs
    c = x.cluster
    stage = f"ZeRO-{x.zero_stage} ({Path(x.deepspeed).name})" if x.deepspeed else "no DeepSpeed"
    offload = ", ".join(k for k, on in (("optimizer offload", x.offload_optimizer), ("parameter offload",
                                                                                    x.offload_params)) if on)
    ppo = isinstance(x, PlanInputs)
    lines = [
        f"# Memory plan per GPU: cluster={c.name} ({c.nodes} node{'s' if c.nodes > 1 else ''} x "
        f"{c.gpus_per_node} GPUs = {x.world}, "
        f"{c.gpu_memory_gib:g} GiB each), {stage}{', ' + offload if offload else ''}",
        *(_ppo_header(x) if ppo else x.header_lines()),
        "",
        "| model | item | GiB per GPU | phases | source |",
        "|---|---|---:|---|---|",
    ]
    for r in plan.rows:
        phases = "all" if r.phases == plan.phases else ", ".join(r.phases)
        lines.append(f"| {r.model} | {r.item} | {r.gib:.2f} | {phases} | {r.source} |")
    if ppo and x.engine_backend == "vllm":
        w = x.policy.weights_bytes_16bit * x.engine_dtype_bytes // 2 / 2**30
        kv = x.engine_sequences * x.seq_len * x.policy.kv_bytes_per_token_16bit / 2**30
        lines.append(f"| (inside the engine budget) | weights {w:.2f} + KV cache {kv:.2f} "
                     f"({x.engine_sequences} x {x.seq_len} tokens x {x.policy.kv_bytes_per_token_16bit} B) | "
                     f"({w + kv:.2f}) | | accelerate calculate_maximum_sizes; hand: 2 x layers x kv_heads x "
                     f"head_dim x 2 B per token |")
    for r in plan.cpu_rows:
        lines.append(f"| {r.model} | {r.item} | ({r.gib:.1f} CPU) | | {r.source} |")
    lines.append("")
    totals = ", ".join(f"{p} {plan.phase_total(p):.1f}" for p in plan.phases)
    lines.append(f"Per-GPU totals (GiB): {totals}. Peak {plan.peak_gib:.1f} GiB ({plan.peak_phase}) vs "
                 f"{plan.card_gib:g} GiB card - {c.headroom_gib:g} GiB headroom = {plan.budget_gib:.1f} GiB.")
    if ppo and not x.critic:
        lines.append(critic_savings(plan))
    lines.append("Estimates from the config (not measured CUDA peaks).")
    return "\n".join(lines)


def critic_savings(plan: Plan) -> str:
    """The line a critic-free plan (ppo.estimator=grpo|rloo) prints: per phase, what the value model of the same run
    under ppo.estimator=paper_mc would take (its states, activations and ZeRO-3 gathers)."""
    x = plan.inputs
    with_critic = build_plan(dataclasses.replace(x, critic=True, estimator="paper_mc"))
    saved = ", ".join(f"{with_critic.phase_total(p) - plan.phase_total(p):.1f} GiB in {p}" for p in plan.phases)
    return (f"no value model (ppo.estimator={x.estimator}): saves {saved} per GPU (the value model "
            f"ppo.estimator=paper_mc adds to this plan; peak {with_critic.peak_gib:.1f} -> {plan.peak_gib:.1f} GiB).")


def verdict(plan: Plan) -> tuple[bool, str]:
    """(fits, message). The message of a plan that does not fit names why and the fix."""
    if plan.fits:
        return True, f"FITS: peak {plan.peak_gib:.1f} of {plan.budget_gib:.1f} GiB usable per GPU."
    fixes, fixed = (suggest_fixes if isinstance(plan.inputs, PlanInputs) else suggest_sft_fixes)(plan.inputs)
    lines = ["DOES NOT FIT: " + "; ".join(plan.problems) + "."]
    if fixes:
        lines.append(f"Fix (the plan then peaks at {fixed.peak_gib:.1f} GiB per GPU):")
        lines += [f"  - {f}" for f in fixes]
    else:
        lines.append("Fix: no single config change found; use more or larger GPUs, LoRA (ppo.lora.enabled=true) or "
                     "ZeRO CPU offload (offload_optimizer in the DeepSpeed JSON).")
    return False, "\n".join(lines)


def sft_inputs_from_config(run: SFTRun, cluster: ClusterConfig | None = None) -> SFTInputs:
    """The plan's inputs from a typed ``train selector_sft`` / ``train crawler_sft`` config."""
    sft = run.sft
    cluster = cluster or run.cluster
    lora = sft.lora
    lora_trainable = None
    if lora.enabled:
        targets = lora.target_modules if isinstance(lora.target_modules, str) else tuple(lora.target_modules)
        lora_trainable = lora_trainable_params(planned_model("sft.model", str(sft.model)), int(lora.r),
                                               int(lora.alpha), targets)
    stage, off_opt, off_par = _deepspeed_settings(sft.deepspeed, "sft")
    return SFTInputs(cluster=cluster, model=_shape("sft.model", str(sft.model)), zero_stage=stage,
                     deepspeed=sft.deepspeed, offload_optimizer=off_opt, offload_params=off_par,
                     model_dtype_bytes=DTYPE_BYTES.get(str(sft.model_dtype), 2),
                     lora_trainable=lora_trainable, gradient_checkpointing=bool(sft.gradient_checkpointing),
                     attn_implementation=sft.attn_implementation,
                     batch=int(sft.per_device_train_batch_size), seq_len=int(sft.max_length))


def install_lines() -> str:
    """The GPU locks' torch, its CUDA and the NVIDIA driver each needs on the nodes (read from the lock files)."""
    return "\n".join(["GPU install (docs/cluster.md \"Environment\"): the lock whose CUDA the nodes' driver runs",
                      *[f"  {line}" for line in lock_lines()]])


def step_sessions(run: PPORun) -> tuple[int, str]:
    """(sessions per GPU in one step, how they are counted) for ``ppo.estimator``: App. A.2's fixed counts
    (``queries_per_step`` S_q + ``expand_sessions``), or under grpo / rloo ``queries_per_step x group_size`` whole
    crawls of at most the budgets' sessions each (an unbounded crawl: one-line UsageError)."""
    ppo = run.ppo
    queries = int(ppo.queries_per_step)
    bound = critic_free_crawl_budget(str(ppo.estimator), run.env)
    if bound is None:
        return queries + sum(int(n) for n in ppo.expand_sessions), ""
    group = int(ppo.group_size)
    return queries * group * bound, (f"{queries} quer{'y' if queries == 1 else 'ies'} x {group} crawls "
                                     f"(ppo.group_size) x {bound} sessions (crawler.env budget)")


def ppo_window_from_config(run: PPORun, x: PlanInputs) -> WindowEstimate:
    """One PPO step + one checkpoint on ``x.cluster`` (:mod:`scholar_agents.plan.preemption_window`): the value
    model is trained, scored and saved only under an estimator with a critic."""
    sessions, counted = step_sessions(run)
    critic = x.critic and x.value is not None
    value = x.value.backbone_params + x.value.hidden if critic else 0  # backbone + scalar head
    policy_trained = x.lora_trainable if x.lora_trainable is not None else x.policy.params
    return ppo_window(x.cluster, sessions=sessions, sessions_counted=counted, seq_len=x.seq_len,
                      seq_len_source=x.seq_len_source, ppo_epochs=int(run.ppo.ppo_epochs),
                      trained_models=2 if critic else 1,
                      # log pi_old and log pi_sft (the reference, or the LoRA policy with its adapter off), V_old
                      scoring_forwards=3 if critic else 2,
                      saved_params=policy_trained + value, trainable_params=policy_trained + value,
                      zero_stage=x.zero_stage, model_dtype_bytes=x.model_dtype_bytes)


def sft_window_from_config(run: SFTRun, x: SFTInputs) -> WindowEstimate:
    """One SFT optimizer step + one checkpoint on ``x.cluster``."""
    trained = x.lora_trainable if x.lora_trainable is not None else x.model.params  # LoRA: the adapter is saved
    return sft_window(x.cluster, batch=x.batch, grad_accum=int(run.sft.gradient_accumulation_steps),
                      seq_len=x.seq_len, saved_params=trained, trainable_params=trained, zero_stage=x.zero_stage,
                      model_dtype_bytes=x.model_dtype_bytes)


# Where the Slurm signal lead comes from, for the line under the estimate.
LEAD_HINT = ("the sbatch templates' `#SBATCH --signal=B:USR1@<s>` (override: SBATCH_SIGNAL=B:USR1@<s> sbatch ...), "
             "the submitit launchers' hydra.launcher.signal_delay_s")


def _print_and_judge(cluster: ClusterConfig, build, window, save_every=None) -> dict:
    if not cluster.has_gpus:
        print(f"cluster={cluster.name} has no GPUs: nothing to plan. Plan for GPUs with e.g. cluster=h100_80gb "
              f"(conf/cluster/).")
        return {"fits": True, "cluster": cluster.name}
    p = build(cluster)
    print(format_plan(p))
    print(install_lines())
    est = window(p.inputs)
    print()
    print(format_window(est, cluster, LEAD_HINT))
    sized = None
    if save_every is not None:  # the templates' lead = cluster.shutdown_grace_s (docs/cluster.md)
        sized, why = sized_save_every(est, float(cluster.shutdown_grace_s), save_every)
        print(f"Periodic checkpoints with a {cluster.shutdown_grace_s}-s lead (cluster.shutdown_grace_s): {why}.")
    print()
    ok, message = verdict(p)
    if not ok:
        raise SystemExit(message)
    print(message)
    return {"fits": True, "cluster": cluster.name, "peak_gib": p.peak_gib,
            "phases": {ph: p.phase_total(ph) for ph in p.phases},
            "preemption_window_s": {"step": est.step_s, "checkpoint": est.checkpoint_s, "total": est.total_s,
                                    "shutdown_grace_s": cluster.shutdown_grace_s},
            **({"save_every": sized} if sized is not None else {})}


def plan(run: PPORun) -> dict:
    """``scholar plan [crawler_ppo]`` (entry: :func:`scholar_agents.train.plan_runs.plan`): print the PPO plan; exit
    1 with the fix when it does not fit."""
    step_sessions(run)  # an unbounded critic-free crawl: one line before any model is read
    return _print_and_judge(run.cluster, lambda cluster: build_plan(inputs_from_config(run, cluster)),
                            lambda x: ppo_window_from_config(run, x), int(run.ppo.save_every))


def plan_sft(run: SFTRun) -> dict:
    """``scholar plan selector_sft`` / ``crawler_sft`` (entry: :func:`scholar_agents.train.plan_runs.plan_sft`): the
    same for supervised fine-tuning."""
    return _print_and_judge(run.cluster, lambda cluster: build_sft_plan(sft_inputs_from_config(run, cluster)),
                            lambda x: sft_window_from_config(run, x))


def startup_window_check(run: PPORun | SFTRun) -> list[str]:
    """At the start of ``train crawler_ppo`` (a :class:`PPORun`) / ``selector_sft`` / ``crawler_sft`` (an
    :class:`SFTRun`) under a launcher that exported the Slurm signal lead (``SCHOLAR_SIGNAL_LEAD_S``:
    ``slurm/job_env.sh``, the submitit launchers): one warning line each where the lead is shorter than the estimated step + checkpoint on the
    configured GPUs, or torchrun's shutdown window shorter than the lead (:func:`runtime.preemption.
    check_preemption_window`). Returns the warnings; never stops the run."""
    if preemption.signal_lead_s() is None:
        return []
    needed, what = None, ""
    cluster = run.cluster
    if cluster.has_gpus:
        try:
            if isinstance(run, PPORun):
                est = ppo_window_from_config(run, inputs_from_config(run, cluster))
            else:
                est = sft_window_from_config(run, sft_inputs_from_config(run, cluster))
        except (UsageError, FileNotFoundError, ValueError) as e:
            log.info("preemption window: no estimate (%s)", e)
        else:
            needed = est.total_s
            what = (f"one step + one checkpoint on cluster={cluster.name} (~{est.step_s:.0f} s + "
                    f"~{est.checkpoint_s:.0f} s by `scholar plan`)")
    return preemption.check_preemption_window(needed, what)


def startup_save_every(run: PPORun) -> int:
    """``ppo.save_every`` sized at the start of ``train crawler_ppo`` under a launcher that exported the Slurm signal
    lead (:func:`sized_save_every`: 1 where the lead, or torchrun's shorter shutdown window, does not cover
    ``scholar plan``'s step + checkpoint), logged in one line on global rank 0; as configured otherwise."""
    configured = int(run.ppo.save_every)
    lead = preemption.signal_lead_s()
    cluster = run.cluster
    if lead is None or not cluster.has_gpus:
        return configured
    shutdown = preemption.torchrun_shutdown_s()
    lead = min(lead, shutdown) if shutdown is not None else lead
    try:
        est = ppo_window_from_config(run, inputs_from_config(run, cluster))
    except (FileNotFoundError, ValueError) as e:  # no model config to size from: as configured
        log.info("ppo.save_every: no estimate (%s)", e)
        return configured
    sized, why = sized_save_every(est, lead, configured)
    if preemption.global_rank() == 0:
        (log.warning if sized != configured else log.info)("%s", why)
    return sized


def _cluster_for_startup(cluster: ClusterConfig) -> ClusterConfig | None:
    """The hardware this run checks against: the configured cluster with the world size the launcher actually
    started (WORLD_SIZE / LOCAL_WORLD_SIZE, when they disagree with it), or on a CUDA machine with cluster=cpu this
    card; None where there is nothing to check (no GPUs anywhere)."""
    world = int(os.environ.get("WORLD_SIZE", "0"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    if cluster.has_gpus:
        if world and local and world != cluster.world_size:
            log.warning("cluster=%s says %d GPUs, the launcher started %d processes: checking memory for %d",
                        cluster.name, cluster.world_size, world, world)
            return dataclasses.replace(cluster, nodes=max(1, world // local), gpus_per_node=local)
        return cluster
    import torch

    if not torch.cuda.is_available():
        return None
    world = world or 1
    local = local or min(world, torch.cuda.device_count())
    return ClusterConfig(name=f"this machine ({torch.cuda.get_device_name(0)})", nodes=max(1, world // max(local, 1)),
                         gpus_per_node=max(local, 1),
                         gpu_memory_gib=torch.cuda.get_device_properties(0).total_memory / 2**30,
                         headroom_gib=cluster.headroom_gib, memory_check=cluster.memory_check)


def startup_check(run: PPORun) -> Plan | None:
    """``train crawler_ppo`` calls this before building anything: name the attention kernel the models load with
    (``ppo.attn_implementation``; refused in one line if it cannot load), then refuse (SystemExit naming the fix) a
    plan that does not fit the GPUs. The plan is skipped, with one log line, without GPUs or with
    ``cluster.memory_check=false``."""
    # the kernel the models will load with, named once here (and refused here, in one line, if it cannot load)
    attn = resolve_attn_implementation(run.ppo.attn_implementation, "ppo.attn_implementation")
    cluster = run.cluster
    if not cluster.memory_check:
        log.info("memory check skipped (cluster.memory_check=false)")
        return None
    target = _cluster_for_startup(cluster)
    if target is None:
        log.info("memory check skipped: cluster=%s has no GPUs and CUDA is not available", cluster.name)
        return None
    p = build_plan(inputs_from_config(run, target))
    ok, message = verdict(p)
    if not ok:
        raise SystemExit(f"{format_plan(p)}\n\n{message}\n(`scholar plan <the same overrides>` prints this plan; "
                         f"cluster.memory_check=false starts anyway.)")
    log.info("memory check: %s (attention: %s)", message, attn or "transformers' default")
    return p

