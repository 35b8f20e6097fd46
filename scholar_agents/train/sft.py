"""The one supervised fine-tuning recipe: TRL ``SFTTrainer`` on chat ``messages`` with loss on the assistant's
answer only. ``train selector_sft`` and ``train crawler_sft`` are thin entries over :func:`run_sft`.

Data: JSONL, one example a line, either ``{"messages": [...]}`` (PaSa's released SFT format, what
``data_gen selector_pairs`` / ``crawler_sessions`` write) or ``{"prompt": [...], "completion": [...]}``.

Loss masking (``loss_on``), which must hold for any chat template:
- ``completion`` (default): each chat is split into prompt = every message before the last assistant turn and
  completion = that turn. TRL tokenizes prompt (with the generation prompt) and prompt + completion and masks the
  common prefix, so prompt tokens get label -100 with ANY chat template. SmolLM2's and Qwen2.5's templates carry no
  ``{% generation %}`` markers, which ``assistant_only_loss`` needs.
- ``assistant``: TRL's ``assistant_only_loss=True`` (every assistant turn of a multi-turn chat; needs a template
  with generation markers or one TRL knows how to patch).
- ``all``: the whole sequence (plain language modelling), the official fork's behaviour.
- ``decision`` (ours, for a decision-token Selector): the cross-entropy of the answer's first token over the two
  decision words only (``train/decision_loss.py``) — exactly the normalized score the Selector reads,
  P(True) / (P(True) + P(False)); nothing else is supervised.

Checkpoints go to a STABLE directory (``output_dir``: ``checkpoint-N/`` then ``final/``), so a re-run with
``resume=true`` (default) continues from the newest COMPLETE checkpoint — the official code wiped its output
directory. A checkpoint is complete once ``checkpoint-N/COMPLETE`` is written after the Trainer's save; a partial one
(a job killed while saving) is skipped with a log line and moved to ``output_dir/partial/``
(``train/sft_checkpoints.py``). The root configs default ``output_dir`` to ``checkpoints/<run_name>`` for a single
run and to the job's own sweep subdir in a multirun (``hydra_app.job_dir``). A preemption signal (SIGTERM / SIGUSR1 /
SIGUSR2) makes the Trainer checkpoint at the end of its step and the job exit 75 for requeue; the requeued run
resumes in the same wandb run.
``final/`` is a plain HF directory (weights + tokenizer + chat template + generation config; LoRA merged) that the
Selector, the Crawler and ``vllm serve`` load directly.

Hardware: one CPU process (``use_cpu=true``), ``torchrun --nproc_per_node N`` / ``accelerate launch`` on GPUs, with
DeepSpeed ZeRO-2/3 via ``deepspeed=<json>`` (``conf/deepspeed/``).

One file (~580 lines) on purpose: one TRL build with its resume and adapter paths, which read the same recipe
fields; the data (``sft_data.py``) and the checkpoints (``sft_checkpoints.py``) already live apart.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import MISSING, DictConfig, OmegaConf

from scholar_agents.llm.attention import resolve_attn_implementation
from scholar_agents.llm.factory import resolve_model_path  # embedded:smollm2 -> its converted HF dir
from scholar_agents.llm.precision import DTYPE_NAMES, cpu_supports_bf16, named_torch_dtype
from scholar_agents.runtime.preemption import PreemptionHandler, restart_count, trainer_callback
from scholar_agents.runtime.torch_extensions import check_no_stale_build_lock
from scholar_agents.train.sft_checkpoints import checkpoint_dirs, checkpoint_to_resume, marker_callback
from scholar_agents.train.sft_data import LOSS_ON, drop_overlong, prepare_examples, read_chat_jsonl
from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

FINAL_DIRNAME = "final"
DONE_MARKER = "SFT_DONE.json"  # written last in final/: its presence means the run finished
TRAINABLE = ("all", "head")
HEAD_INIT = ("base", "probe")


@dataclass
class LoraSettings:
    """PEFT LoRA. Off = full fine-tuning (the paper's setting)."""

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: Any = "all-linear"  # "all-linear" or a list of module names
    # Adapt only these decoder layers (PEFT's layers_to_transform), e.g. the top 8 of SmolLM2's 30: the backward
    # pass then stops at the lowest adapted layer, which is what makes a CPU run affordable. null = every layer.
    layers_to_transform: Optional[list[int]] = None
    # Merge the adapter into the base weights when saving final/, so vLLM loads one plain HF directory.
    merge_on_save: bool = True
    # Continue training this saved LoRA adapter (a PEFT directory: adapter_config.json + weights, e.g. the shipped
    # Crawler's assets/crawler_adapter) instead of a fresh one: its own r / targets / layers apply, the settings
    # above that shape a new adapter are not read. null = a fresh adapter (the paper trains from the base model).
    init_adapter: Optional[str] = None


@dataclass
class SFTRecipeConfig:
    """One SFT run. Presets: ``conf/sft/*.yaml``; the command's root config fills data and output paths.
    Defaults are PaSa's (§5.1 / App. B: Qwen2.5-7B-Instruct, lr 1e-5, 1 epoch, batch 4 per device)."""

    model: str = "Qwen/Qwen2.5-7B-Instruct"  # HF dir, hub name (networked clusters) or embedded:smollm2
    # pretrained (the weights in `model`) | random (ours: seeded random weights from `model`'s config.json,
    # its tokenizer from the same dir; memory/speed checks of a model shape without a checkpoint, gpu_check.sh)
    init: str = "pretrained"
    train_file: str = MISSING  # JSONL of chat messages (or prompt/completion)
    eval_file: Optional[str] = None
    output_dir: str = MISSING  # stable: checkpoint-N/ and final/ live here across restarts
    run_name: str = "sft"
    resume: bool = True  # continue from the last checkpoint in output_dir (a finished run is not retrained)
    loss_on: str = "completion"  # completion | assistant | all | decision (see the module docstring)
    decision_words: tuple = ("True", "False")  # loss_on=decision: the answer's first token is one of these
    # Examples longer than max_length: "drop" (counted and logged; the answer sits at the end, so truncating
    # would cut exactly the supervised tokens) or "truncate" (TRL's right truncation).
    overlong: str = "drop"
    max_length: int = 1024  # official code: --max_seq_length 1024
    max_train_samples: Optional[int] = None  # first N examples (smoke runs)
    # Optimisation (official command: lr 1e-5, 1 epoch, batch 4, accumulation 1, wd 0.01, warm-up 1%)
    learning_rate: float = 1e-5
    num_train_epochs: float = 1.0
    max_steps: int = -1  # > 0 overrides epochs
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    weight_decay: float = 0.01
    warmup_ratio: float = 0.01  # fraction of the total steps, in [0, 1)
    lr_scheduler_type: str = "linear"
    max_grad_norm: float = 1.0
    # Precision. model_dtype = the weights' dtype (auto: bf16 on GPU, fp32 on CPU — fp32 master weights, because
    # pure-bf16 weights round away updates of lr ~1e-5). bf16 = autocast / DeepSpeed bf16 (null: where supported).
    model_dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    bf16: Optional[bool] = None
    use_cpu: bool = False
    gradient_checkpointing: bool = False
    # auto (flash_attention_2 where flash-attn imports and CUDA is there, else sdpa: llm/attention.py) | sdpa |
    # flash_attention_2 (the official command's; refused in one line without flash-attn) | eager; null = transformers'
    attn_implementation: Optional[str] = None
    deepspeed: Optional[str] = None  # path to a DeepSpeed JSON (conf/deepspeed/zero3.json)
    # The world size the preset's hyperparameters assume (PaSa: 8 GPUs x 4 = 32 per step); a different world size
    # is logged with the effective batch so nobody compares runs blind. null = no expectation.
    expected_world_size: Optional[int] = None
    logging_steps: int = 10
    save_steps: int = 500  # 0: no checkpoint-N at all (save_strategy "no"; memory checks: nothing resumes)
    save_total_limit: Optional[int] = 2
    save_final: bool = True  # false (ours): no final/ (smoke and memory checks); the summary is still written
    eval_steps: Optional[int] = None
    seed: int = 0
    dataloader_num_workers: int = 0
    lora: LoraSettings = field(default_factory=LoraSettings)
    # Depth pruning (ours, off = the paper): keep only the first N decoder layers (the final norm and the head
    # then read layer N). A linear probe on SmolLM2-135M's per-layer decision-position states separates gold from
    # retrieved non-gold papers best at layer 15 and worst at the top (scripts/probe_selector_layers.py,
    # docs/selector.md). The result is a plain N-layer checkpoint of the same architecture (transformers and vLLM
    # load it) that runs N of the layers per token; it judges, it does not write rationales.
    keep_layers: Optional[int] = None
    # What trains: "all" (full fine-tuning or LoRA, the paper) or "head" (ours: the output projection only,
    # untied from the input embeddings, so the prompt is read exactly as before; every other weight frozen).
    trainable: str = "all"
    # How the decision rows of the output head start (loss_on=decision): "base" (as the model has them) or "probe"
    # (ours: fitted by L-BFGS logistic regression on the training set's decision states first — linear probing,
    # the LP of LP-FT; train/decision_loss.py says why Adam alone stalls). num_train_epochs=0 then saves the
    # probed model without any gradient step (LP only).
    head_init: str = "base"
    head_init_l2: float = 1e-3
    # head_init=probe: lift both decision rows (a common shift: the two-way score is unchanged) until they beat the
    # rest of the vocabulary by this many nats on every training state; null = leave their mass as it was.
    head_init_mass_margin: Optional[float] = 5.0


# ---------------------------------------------------------------------------------------------------------------
# environment


def bf16_available(use_cpu: bool) -> bool:
    """bf16 where the hardware computes it natively: Ampere+ GPUs, CPUs with AVX512-BF16/AMX (emulated bf16 on
    other CPUs is slower than fp32)."""
    import torch

    if not use_cpu and torch.cuda.is_available():
        return bool(torch.cuda.is_bf16_supported())
    return cpu_supports_bf16()


def torch_dtype(name: str, use_cpu: bool):
    import torch

    if name == "auto":
        return torch.bfloat16 if (not use_cpu and torch.cuda.is_available() and bf16_available(False)) \
            else torch.float32
    return named_torch_dtype(name, "model_dtype", ("auto", *DTYPE_NAMES))


WANDB_ID_FILE = "wandb_run_id"  # in output_dir: a requeued or re-run job continues the same wandb run


def configure_wandb(logging_cfg: DictConfig | None, run_dir: Path, output_dir: Path | None = None) -> list[str]:
    """Point HF's wandb callback at ``logging.wandb`` (returns TRL's ``report_to``). The composed mode wins over
    whatever ``WANDB_MODE`` the process inherited (hydra_app.apply_wandb_mode states the precedence). With an
    ``output_dir``, the run id is kept in ``<output_dir>/wandb_run_id`` (written by global rank 0 on the first
    run) and handed to wandb with ``WANDB_RESUME=allow``: a preempted-and-requeued job logs into the same run."""
    wandb_cfg = (logging_cfg or {}).get("wandb") if logging_cfg is not None else None
    if not wandb_cfg or not wandb_cfg.get("enabled", False) or wandb_cfg.get("mode") == "disabled":
        return ["none"]
    os.environ["WANDB_MODE"] = str(wandb_cfg.get("mode") or "offline")
    os.environ.setdefault("WANDB_PROJECT", str(wandb_cfg.get("project", "scholar-agents")))
    if wandb_cfg.get("entity"):
        os.environ.setdefault("WANDB_ENTITY", str(wandb_cfg.entity))
    os.environ.setdefault("WANDB_DIR", str(run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    if output_dir is not None:
        run_id = wandb_run_id(output_dir)
        if run_id:
            os.environ["WANDB_RUN_ID"] = run_id
            os.environ["WANDB_RESUME"] = "allow"
    return ["wandb"]


def wandb_run_id(output_dir: Path) -> Optional[str]:
    """This training run's wandb id: read from ``output_dir``, or created there by global rank 0 (only rank 0
    logs to wandb; other ranks get None when the file is not there yet)."""
    path = Path(output_dir) / WANDB_ID_FILE
    if path.is_file():
        return path.read_text().strip() or None
    if int(os.environ.get("RANK", "0") or 0) != 0:
        return None
    import uuid

    run_id = uuid.uuid4().hex[:12]  # wandb ids: [a-z0-9], as wandb.util.generate_id makes them
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n")
    return run_id


# ---------------------------------------------------------------------------------------------------------------
# the recipe


def _as_config(cfg: SFTRecipeConfig | DictConfig) -> DictConfig:
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.structured(cfg)
    if cfg.loss_on not in LOSS_ON:
        raise ValueError(f"sft.loss_on must be one of {LOSS_ON}, got {cfg.loss_on!r}")
    if cfg.overlong not in ("drop", "truncate"):
        raise ValueError(f"sft.overlong must be drop|truncate, got {cfg.overlong!r}")
    # lazy: imports torch (importing this module, as `scholar plan` does, stays light)
    from scholar_agents.llm.model_init import check_init

    check_init(cfg.init, "sft.init")
    return cfg


def build_trainer(cfg: SFTRecipeConfig | DictConfig, logging_cfg: DictConfig | None = None,
                  report_dir: str | Path | None = None, fit_head: bool = True,
                  dist_timeout_minutes: float | None = None):
    """The configured TRL ``SFTTrainer`` (data read, converted, length-filtered and tokenized with labels) and a
    dict describing the run. ``trainer.train_dataset[i]["labels"]`` is -100 wherever no loss is taken.
    ``dist_timeout_minutes`` (``cluster.dist_timeout_minutes``) is the process group's timeout, which the HF
    Trainer passes to accelerate (``ddp_timeout``); None keeps transformers' 30 minutes."""
    import torch  # noqa: F401  (fail early with a clear ImportError)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    cfg = _as_config(cfg)
    _check_head_init(cfg)

    attn = resolve_attn_implementation(cfg.attn_implementation, "sft.attn_implementation")  # before any loading
    output_dir = Path(cfg.output_dir)
    report_dir = Path(report_dir) if report_dir is not None else output_dir

    model_path = resolve_model_path(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if not tokenizer.chat_template:
        raise ValueError(f"{model_path} has no chat template; the SFT data is chat messages")

    train_rows = prepare_examples(read_chat_jsonl(cfg.train_file, cfg.max_train_samples), cfg.loss_on)
    eval_rows = prepare_examples(read_chat_jsonl(cfg.eval_file), cfg.loss_on) if cfg.eval_file else None
    n_train_raw = len(train_rows)
    if cfg.overlong == "drop":
        train_rows = drop_overlong(tokenizer, train_rows, cfg.max_length, str(cfg.train_file))
        if eval_rows is not None:
            eval_rows = drop_overlong(tokenizer, eval_rows, cfg.max_length, str(cfg.eval_file))
    train_ds = Dataset.from_list(train_rows)
    eval_ds = Dataset.from_list(eval_rows) if eval_rows is not None else None

    bf16 = bf16_available(cfg.use_cpu) if cfg.bf16 is None else bool(cfg.bf16)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    effective_batch = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * world_size
    if cfg.expected_world_size and world_size != cfg.expected_world_size:
        log.warning("the preset assumes %d processes, running with %d: effective batch %d instead of %d",
                    cfg.expected_world_size, world_size, effective_batch,
                    cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * cfg.expected_world_size)
    report_to = configure_wandb(logging_cfg, report_dir, output_dir)
    model_init_kwargs: dict[str, Any] = {"dtype": torch_dtype(cfg.model_dtype, cfg.use_cpu)}
    if attn:
        model_init_kwargs["attn_implementation"] = attn

    if cfg.deepspeed:  # DeepSpeed JIT-builds its ops: a killed build's lock would hang the Trainer's start forever
        check_no_stale_build_lock()
    args = SFTConfig(
        output_dir=str(output_dir),
        run_name=cfg.run_name,
        seed=cfg.seed,
        learning_rate=cfg.learning_rate,
        num_train_epochs=cfg.num_train_epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.per_device_train_batch_size,
        per_device_eval_batch_size=cfg.per_device_train_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        weight_decay=cfg.weight_decay,
        warmup_steps=float(cfg.warmup_ratio),  # transformers 5: a float in [0, 1) is a ratio of total steps
        lr_scheduler_type=cfg.lr_scheduler_type,
        max_grad_norm=cfg.max_grad_norm,
        bf16=bf16,
        use_cpu=cfg.use_cpu,
        gradient_checkpointing=cfg.gradient_checkpointing,
        deepspeed=cfg.deepspeed,
        logging_steps=cfg.logging_steps,
        save_strategy="steps" if cfg.save_steps > 0 else "no",
        save_steps=max(cfg.save_steps, 1),
        save_total_limit=cfg.save_total_limit,
        eval_strategy="steps" if (eval_ds is not None and cfg.eval_steps) else "no",
        eval_steps=cfg.eval_steps,
        report_to=report_to,
        dataloader_num_workers=cfg.dataloader_num_workers,
        # With overlong=drop every kept example fits; never let TRL cut the answer off the end.
        max_length=None if cfg.overlong == "drop" else cfg.max_length,
        completion_only_loss=cfg.loss_on in ("completion", "decision"),
        assistant_only_loss=cfg.loss_on == "assistant",
        packing=False,
        model_init_kwargs=model_init_kwargs,
        include_num_input_tokens_seen="non_padding",  # tokens/s in the logs (train/cuda_memory.py)
        **({"ddp_timeout": int(round(dist_timeout_minutes * 60))} if dist_timeout_minutes else {}),
    )
    peft_config = None
    if cfg.lora.enabled:
        target = cfg.lora.target_modules
        if cfg.lora.layers_to_transform and isinstance(target, str):
            raise ValueError("sft.lora.layers_to_transform needs sft.lora.target_modules as a list of module names "
                             "(PEFT), e.g. [q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj] for Llama/Qwen")
        peft_config = LoraConfig(
            r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout, task_type="CAUSAL_LM",
            target_modules=target if isinstance(target, str) else list(target),
            layers_to_transform=list(cfg.lora.layers_to_transform) if cfg.lora.layers_to_transform else None,
        )
    model: Any = model_path
    if cfg.keep_layers or cfg.trainable != "all" or cfg.head_init != "base" or cfg.init == "random":
        # (after SFTConfig: under ZeRO-3 its DeepSpeed config is alive, so the model is built partitioned)
        model = _load_adapted_model(model_path, model_init_kwargs, cfg)
        args.model_init_kwargs = None  # TRL refuses init kwargs with an instantiated model
    if cfg.lora.enabled and cfg.lora.init_adapter:
        model = _continue_adapter(model, model_path, model_init_kwargs, str(cfg.lora.init_adapter))
        args.model_init_kwargs = None
        peft_config = None  # the adapter brings its own LoraConfig
    trainer_cls = SFTTrainer
    extra: dict[str, Any] = {}
    if cfg.loss_on == "decision":
        # lazy: imports torch, transformers, trl, datasets, peft (only loss_on=decision needs it)
        from scholar_agents.train.decision_loss import DecisionLossTrainer

        trainer_cls = DecisionLossTrainer
        extra["decision_words"] = tuple(cfg.decision_words)
    try:
        trainer = trainer_cls(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                             processing_class=tokenizer, peft_config=peft_config, **extra)
    except ValueError as e:
        if cfg.loss_on == "assistant" and "chat template" in str(e):
            raise ValueError(f"sft.loss_on=assistant needs a chat template with {{% generation %}} markers (or one "
                             f"TRL can patch); {model_path}'s has none. Use sft.loss_on=completion, which masks the "
                             f"prompt with any template. TRL said: {e}") from e
        raise
    head_fit = None
    if cfg.head_init == "probe" and fit_head:  # (a resumed run reloads its fitted head from the checkpoint)
        head_fit = trainer.fit_decision_head(cfg.head_init_l2, mass_margin=cfg.head_init_mass_margin)
        log.info("decision head fitted by L-BFGS on %d examples: train accuracy %.3f, loss %.4f; rows lifted by "
                 "%.2f, min decision mass %.4f", head_fit["examples"], head_fit["train_accuracy"],
                 head_fit["train_loss"], head_fit["lift"], head_fit["train_decision_mass_min"])
    info = {
        "model": cfg.model,
        "model_path": model_path,
        "train_file": str(cfg.train_file),
        "train_examples": len(train_rows),
        "train_examples_dropped_overlong": n_train_raw - len(train_rows),
        "loss_on": cfg.loss_on,
        "lora": bool(cfg.lora.enabled),
        "keep_layers": cfg.keep_layers,
        "trainable": cfg.trainable,
        "head_init": cfg.head_init,
        "head_fit": head_fit,
        "bf16": bf16,
        "model_dtype": str(model_init_kwargs["dtype"]).removeprefix("torch."),
        "world_size": world_size,
        "effective_batch": effective_batch,
    }
    return trainer, info


def _load_adapted_model(model_path: str, init_kwargs: dict, cfg: DictConfig):
    """The base model with ``keep_layers`` / ``trainable=head`` applied (see SFTRecipeConfig)."""
    import torch

    # lazy: imports torch (importing this module stays light)
    from scholar_agents.llm.model_init import load_causal_lm

    if cfg.trainable not in TRAINABLE:
        raise ValueError(f"sft.trainable must be one of {TRAINABLE}, got {cfg.trainable!r}")
    if cfg.trainable == "head" and cfg.lora.enabled:
        raise ValueError("sft.trainable=head trains the output head only; it does not combine with sft.lora")
    model = load_causal_lm(model_path, cfg.init, seed=cfg.seed, **init_kwargs)  # sft.init
    if cfg.keep_layers:
        layers = model.get_decoder().layers
        if not 0 < cfg.keep_layers <= len(layers):
            raise ValueError(f"sft.keep_layers={cfg.keep_layers}: {model_path} has {len(layers)} decoder layers")
        model.get_decoder().layers = torch.nn.ModuleList(list(layers)[:cfg.keep_layers])
        model.config.num_hidden_layers = cfg.keep_layers
        if getattr(model.config, "layer_types", None):
            model.config.layer_types = model.config.layer_types[:cfg.keep_layers]
        log.info("kept the first %d of %d decoder layers", cfg.keep_layers, len(layers))
    head = model.get_output_embeddings()
    if head.weight is model.get_input_embeddings().weight and (cfg.trainable == "head" or cfg.head_init != "base"):
        # tied: give the head its own copy, so the prompt's own "True"/"False" tokens are read as before
        head.weight = torch.nn.Parameter(head.weight.detach().clone())
        model.config.tie_word_embeddings = False
        if getattr(model.config, "text_config", None) is not None:
            model.config.text_config.tie_word_embeddings = False
    if cfg.trainable == "head":
        for param in model.parameters():
            param.requires_grad_(False)
        head.weight.requires_grad_(True)
        log.info("training the output head only (%.1fM parameters)", head.weight.numel() / 1e6)
    return model


def run_sft(cfg: SFTRecipeConfig | DictConfig, logging_cfg: DictConfig | None = None,
            report_dir: str | Path | None = None, dist_timeout_minutes: float | None = None) -> dict:
    """Fine-tune, checkpoint, resume, and save ``<output_dir>/final`` as a loadable HF directory.
    Returns a summary (also written to ``final/SFT_DONE.json`` and ``report_dir/sft_summary.json``).

    Preemption (``runtime/preemption.py``): SIGTERM / SIGUSR1 / SIGUSR2 make the HF Trainer save a checkpoint at the
    end of the current step and stop; then the job asks Slurm to requeue it and exits 75. The requeued run finds
    that checkpoint in the same ``output_dir`` and resumes (``resume_from_checkpoint``), logging into the same
    wandb run (``<output_dir>/wandb_run_id``)."""
    cfg = _as_config(cfg)
    output_dir = Path(cfg.output_dir)
    final_dir = output_dir / FINAL_DIRNAME
    report_dir = Path(report_dir) if report_dir is not None else output_dir
    report_dir.mkdir(parents=True, exist_ok=True)

    if cfg.resume and (final_dir / DONE_MARKER).is_file():
        summary = json.loads((final_dir / DONE_MARKER).read_text())
        log.info("%s already finished (%s); nothing to do (resume=true)", final_dir, DONE_MARKER)
        return {**summary, "skipped": True}

    resume_from = checkpoint_to_resume(output_dir) if cfg.resume else None  # the newest COMPLETE checkpoint-N
    if not cfg.resume and checkpoint_dirs(output_dir):
        raise ValueError(f"{output_dir} already holds checkpoints; pass sft.resume=true to continue them or choose "
                         f"another sft.output_dir / sft.run_name (nothing is deleted for you)")

    saved_env = {k: os.environ.get(k) for k in ("WANDB_RUN_ID", "WANDB_RESUME", "WANDB_MODE")}
    handler = PreemptionHandler.install()
    try:
        # lazy: imports torch (importing this module stays light)
        from scholar_agents.runtime import collectives

        if dist_timeout_minutes:  # our group, with our timeout: the HF Trainer adopts it
            collectives.start_group_for_trainer(dist_timeout_minutes, cpu=bool(cfg.use_cpu))
        trainer, info = build_trainer(cfg, logging_cfg=logging_cfg, report_dir=report_dir,
                                      fit_head=resume_from is None, dist_timeout_minutes=dist_timeout_minutes)
        log.info("process group: %s; model on %s", collectives.describe(dist_timeout_minutes), trainer.args.device)
        preempted = trainer_callback(handler)
        trainer.add_callback(preempted)
        trainer.callback_handler.callbacks.insert(0, marker_callback())  # checkpoint-N/COMPLETE right after a save
        # lazy: imports torch (importing this module stays light)
        from scholar_agents.runtime.cuda_memory import peak_memory_callback

        trainer.callback_handler.callbacks.insert(0, peak_memory_callback())  # first: the reporters see its keys
        if resume_from:
            log.info("resuming from %s", resume_from)
        t0 = time.time()
        if cfg.num_train_epochs == 0 and cfg.max_steps <= 0:  # nothing to run: e.g. head_init=probe alone (LP)
            log.info("sft.num_train_epochs=0: no gradient step, saving the model as built")
            train_loss = None
        else:
            train_loss = float(trainer.train(resume_from_checkpoint=resume_from).training_loss)
        if preempted.stopped_at is not None and trainer.state.global_step < trainer.state.max_steps:
            # The callback made the Trainer save checkpoint-<step> and stop early; final/ is not written.
            log.warning("preemption (%s): checkpointed at step %d in %s; leaving for requeue",
                        ",".join(handler.received) or "another rank", trainer.state.global_step, output_dir)
            if "wandb" in trainer.args.report_to:
                # Close the run before the requeue: the requeued job resumes the same run id, and wandb refuses an
                # id whose previous stream is still being written ("run ID ... is in use"; seen under load).
                import wandb

                if wandb.run is not None:
                    wandb.run.mark_preempting()
                wandb.finish()
            handler.exit_for_requeue()
        summary = {
            **info,
            "global_step": int(trainer.state.global_step),
            "train_loss": train_loss,
            "train_seconds": round(time.time() - t0, 1),
            "resumed_from": resume_from,
            "restart_count": restart_count(),
            "wandb_run_id": os.environ.get("WANDB_RUN_ID") if "wandb" in trainer.args.report_to else None,
            "log_history": trainer.state.log_history,
            "final_dir": str(final_dir) if cfg.save_final else None,
        }
        if cfg.save_final:
            save_final(trainer, trainer.processing_class, final_dir, cfg, summary)
        else:
            log.info("sft.save_final=false: no %s written", final_dir)
        if trainer.is_world_process_zero():
            (report_dir / "sft_summary.json").write_text(json.dumps(summary, indent=2))
        return summary
    finally:
        handler.uninstall()  # (in-process callers: tests, notebooks) the process's own handlers come back
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _continue_adapter(model: Any, model_path: str, model_init_kwargs: dict, adapter_dir: str):
    """The base model with a saved LoRA adapter loaded trainable (``sft.lora.init_adapter``): SFT continues from
    it. Its weights may be stored in bf16 (the shipped adapter); they are loaded into the base model's dtype."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path = Path(adapter_dir)
    if not (path / "adapter_config.json").is_file():
        raise UsageError(f"sft.lora.init_adapter={adapter_dir}: no adapter_config.json there (a PEFT LoRA "
                         "directory, e.g. scholar_agents/assets/crawler_adapter)")
    if isinstance(model, str):
        model = AutoModelForCausalLM.from_pretrained(model, **model_init_kwargs)
    model = PeftModel.from_pretrained(model, str(path), is_trainable=True)
    n = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info("LoRA continued from %s (its own r=%s, %d trainable parameters)", path,
             model.peft_config["default"].r, n)
    return model


def _check_head_init(cfg: DictConfig) -> None:
    """sft.head_init: refuse the combinations it cannot serve before anything is loaded."""
    if cfg.head_init not in HEAD_INIT:
        raise ValueError(f"sft.head_init must be one of {HEAD_INIT}, got {cfg.head_init!r}")
    if cfg.head_init != "probe":
        return
    if cfg.loss_on != "decision":
        raise ValueError("sft.head_init=probe fits the decision rows: it needs sft.loss_on=decision")
    if cfg.lora.enabled:
        raise ValueError("sft.head_init=probe writes the output head; LoRA would not save it (use full "
                         "fine-tuning or sft.trainable=head)")
    if _zero_stage(cfg.deepspeed) == 3:
        raise ValueError("sft.head_init=probe writes the head rows in place; under ZeRO-3 they are sharded — "
                         "use ZeRO-2 (conf/deepspeed/zero2.json) or one process")


def _zero_stage(deepspeed: str | None) -> int | None:
    """The ZeRO stage of a DeepSpeed JSON config (``sft.deepspeed``), None without DeepSpeed."""
    if not deepspeed:
        return None
    stage = json.loads(Path(deepspeed).read_text()).get("zero_optimization", {}).get("stage", 0)
    return int(stage) if str(stage) != "auto" else None


def save_final(trainer, tokenizer, final_dir: Path, cfg: DictConfig, summary: dict) -> None:
    """``final/``: one HF directory vLLM and transformers load as is (LoRA merged when asked)."""
    final_dir.mkdir(parents=True, exist_ok=True)
    model = trainer.model
    is_peft = hasattr(model, "peft_config")
    deepspeed_zero3 = trainer.is_deepspeed_enabled and _zero_stage(cfg.deepspeed) == 3
    if is_peft and cfg.lora.merge_on_save and not deepspeed_zero3:
        if trainer.is_world_process_zero():
            import torch

            model.save_pretrained(str(final_dir / "adapter"))
            # Merge in fp32: adding a small low-rank delta to bf16 weights would round much of it away.
            merged = model.to(torch.float32).merge_and_unload()
            merged.save_pretrained(str(final_dir), safe_serialization=True)
    else:
        # Handles ZeRO-3 (gathers 16-bit weights per the DeepSpeed config); a LoRA model under ZeRO-3 is saved as
        # an adapter to be merged by `train export`.
        trainer.save_model(str(final_dir))
        if is_peft:
            log.warning("saved a LoRA adapter in %s (not merged under ZeRO-3): merge it before serving", final_dir)
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(final_dir))  # tokenizer + chat template: scoring renders exactly as trained
        gen = getattr(trainer.model, "generation_config", None)
        if gen is not None:
            gen.save_pretrained(str(final_dir))
        (final_dir / DONE_MARKER).write_text(json.dumps({k: v for k, v in summary.items() if k != "log_history"},
                                                        indent=2))
