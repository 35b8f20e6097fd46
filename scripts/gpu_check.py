"""The one-GPU check: real training commands under ``torchrun --nproc_per_node 1``, measured per phase
beside ``scholar plan``'s estimate for the same overrides. Run it through ``scripts/gpu_check.sh OUT_DIR`` (which
puts the packed dependencies first on the path); ``python scripts/gpu_check.py OUT_DIR --plan-only`` prints the
plans without running anything (how the GPU sizes below were chosen, on a machine without a GPU).

Profiles (``GPU_CHECK_PROFILE``): ``gpu`` — NCCL, bf16 weights + autocast, gradient checkpointing, ZeRO-3, random
weights in Qwen2.5-7B's shape with fewer decoder layers; ``cpu`` — gloo, fp32, the tests' tiny Qwen2 shape (the CI
twin, so the script cannot rot); ``auto`` (default) — gpu where CUDA is available, else cpu. ``gpu`` without CUDA is
an error: the check never falls back silently.

Runs: ``scholar slurm probe``; per size ``train crawler_ppo`` (hf rollouts, BM25 on the bundled sample, no Selector,
2 steps); ``train selector_sft`` full and LoRA (2 steps); sdpa attention, and flash_attention_2 at the middle size
when ``flash_attn`` imports. Writes ``OUT_DIR/gpu_check.json`` and ``OUT_DIR/gpu_check.md``.

The tokenizer is the tests' tiny one (``tests/assets/tiny_tokenizer``: Qwen2's pre-tokenizer and ChatML, 55 KB, it
travels with the repo; the image has no Qwen or SmolLM2 tokenizer). The GPU shapes keep Qwen2.5's vocabulary of
152,064 — the embedding, the output head and the logits are a large share of the memory — so ids above the
tokenizer's 1,024 decode to nothing; PPO trains on the generated ids, and a random policy writes no valid action,
so every session is one response of ``max_new_tokens`` tokens: fixed lengths, which is what a memory check wants.

Budget: the check fits one device command (at most 600 s) by construction. Every run has a planned time,
an upper estimate of its whole ``torchrun`` (``PLAN_S``, one table per profile); the budget (``--budget-s`` or
``GPU_CHECK_BUDGET_S``, default 480 s) counts from the moment ``gpu_check.sh`` started, its unpacking included. A
run starts only if its plan fits what is left of the budget (``skip_reason``), and its plan is its timeout, so the
last run ends by the budget: the worst case is the budget plus writing the report (and, after a kill, the worker's
exit), 480 s + a few seconds at the default. A run whose plan does not fit is reported ``skipped (budget)``, never
failed; the check exits 0 when every run that ran passed. Sum of the plans: 1315 s for the GPU profile (880 s
without the flash-attn and the two vLLM runs, which the lent image cannot run), so the tail runs only where the
earlier ones come in under their plans; if every run took its whole plan, the probe, the torchrun flags, ppo_2L,
ppo_3L, ppo_2L_grpo and ppo_2L_rloo would run (460 s; ``worst_case``): what no GPU has run yet comes first.
CPU twin: 1100 s in all, 780 s without the vLLM runs.

Also (the cluster issue's list of what a single GPU should check first): ``torchrun_flags`` runs slurm/job_env.sh's
torchrun probe and one torchrun start with exactly the flags ``scholar_torchrun`` passes (torch 2.10 has no
``--shutdown-timeout``); ``ppo_2L_grpo`` / ``ppo_2L_rloo`` the critic-free estimators (no value model);
``colocated_vllm`` records what vLLM's own ``LLM.wake_up`` returns (0.19.1 appears to return None); and
``selector_server`` (``scripts/gpu_check_selector_server.py``) scores Selector pairs through a vLLM OpenAI server
and through transformers, and says whether the server took ``logprob_token_ids`` or the echo fallback ran.

The colocated-vLLM run (``tests/train/ppo/colocated_vllm_worker.py`` on one rank, the tiny model: sleep, wake,
in-memory weight push, greedy generations equal to transformers') runs only where ``vllm`` imports; the lent image
has none (``scripts/gpu_image_packages.txt``; vLLM's CUDA wheel is too large to travel), so there it is reported
``skipped (vllm not importable on this image)``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from scholar_agents.pasa.crawl_budget import CRITIC_FREE  # the estimators that build no value model

REPO = Path(__file__).resolve().parents[1]
TOKENIZER_DIR = REPO / "tests" / "assets" / "tiny_tokenizer"
QWEN_7B = REPO / "scholar_agents" / "assets" / "model_configs" / "qwen2.5-7b-instruct" / "config.json"
ZERO3 = REPO / "scholar_agents" / "conf" / "deepspeed" / "zero3.json"
VLLM_WORKER = REPO / "tests" / "train" / "ppo" / "colocated_vllm_worker.py"
SELECTOR_SERVER = REPO / "scripts" / "gpu_check_selector_server.py"
GIB = 2 ** 30

# Sizes on one H100: the 7B shape with 1, 2 and 3 decoder layers for PPO (1.3B, 1.6B, 1.8B parameters in the
# policy): it holds policy + value model with fp32 Adam states under ZeRO-3 at world size 1 (16 B per trained
# parameter) plus π_sft and the hf rollout engine in bf16, and plans at 46 / 55 / 64 GiB of the 79.6 (4 layers: 72,
# too close to the card for a first run; `--plan-only` prints them). SFT 2 and 6 layers (35 / 51 GiB full, 12 / 14 GiB
# LoRA). Lengths: 4 queries x 256-token responses (the paper's max_new_tokens) on the sample's search prompts; SFT 4 x
# ~1024 tokens (the paper's max_length). Each torchrun start costs ~20-30 s of imports, DeepSpeed set-up and model
# draws, so the run count is kept at 1 probe + 3 PPO + 4 SFT (+ 2 with flash-attn, + 1 where vLLM imports).
# Running order: what a GPU has not run yet comes first (the cluster issue's list): PPO at 2 and 3 layers (1 layer
# ran on 2026-11-27), the critic-free estimators grpo and rloo (``critic_free_layers``), the torchrun flags probe; the
# colocated-vLLM run records what vLLM's wake_up returns, and ``selector_server`` scores through a vLLM server.
PROFILES = {
    "gpu": {"layers": [2, 3, 1], "critic_free_layers": 2, "sft_layers": [2, 6], "flash_layers": 2, "steps": 2,
            "dtype": "bfloat16", "bf16": "true", "grad_ckpt": "true", "response": 256, "sft_len": 1024, "sft_batch": 4, "queries": 4,
            "use_cpu": "false"},  # sft.use_cpu: the schema's default is the CPU preset's true
    "cpu": {"layers": [2], "critic_free_layers": 2, "sft_layers": [2], "flash_layers": None, "steps": 2,
            "dtype": "float32", "bf16": "false", "grad_ckpt": "false", "response": 16, "sft_len": 256, "sft_batch": 2, "queries": 2, "use_cpu": "true"},
}
DEFAULT_BUDGET_S = 480  # a 600-s device command with 2 minutes to spare for unpacking, start-up and the report
# Planned seconds per run: an upper estimate of its whole torchrun (start-up, set-up, the 2 steps, exit), which is
# also its timeout. GPU: measured on one H100 on 2026-11-27 (docs/cluster.md "One-H100 check"): probe 18 s, SFT
# 41-46 s, a PPO start that failed 40 s, all within these, which were estimated as: a torchrun start <= 30 s (above), plus for PPO the sample's store and
# BM25 index, three models drawn and ZeRO-3 set up (<= 30 s), 2 steps of 256-token hf rollouts and the update
# (<= 30 s); for SFT TRL's and datasets' set-up and 2 steps of 4 x 1024 tokens (<= 45 s); the probe's timeout was
# 120 s and it took 13 s on CPU; vLLM's CUDA start-up <= 60 s. CPU: about 4x the twin's measured 13 / 35 / 32 s
# (probe / PPO / SFT, docs/cluster.md, on 2 cores shared with ~8 busy processes) and 35 s for the vLLM run.
# torchrun_flags: job_env.sh's probe (~2 s) and one torchrun start with its flags (~5-10 s; 12 s on CPU). The
# critic-free runs as ppo_2L (no value model: less to set up; 24-31 s on CPU). selector_server: vLLM's start-up
# (<= 60 s) plus the tiny model in transformers; 129 s on CPU under load.
PLAN_S = {
    "gpu": {"slurm_probe": 60, "torchrun_flags": 30, "ppo_2L": 90, "ppo_3L": 100, "ppo_2L_grpo": 90,
            "ppo_2L_rloo": 90, "ppo_1L": 90, "sft_full_2L": 75, "sft_lora_2L": 75, "sft_full_6L": 90,
            "sft_lora_6L": 90, "ppo_2L_flash": 90, "sft_full_2L_flash": 75, "colocated_vllm": 120,
            "selector_server": 150},
    "cpu": {"slurm_probe": 60, "torchrun_flags": 30, "ppo_2L": 150, "ppo_2L_grpo": 150, "ppo_2L_rloo": 150,
            "sft_full_2L": 120, "sft_lora_2L": 120, "colocated_vllm": 120, "selector_server": 200},
}
PHASES = ("rollout", "score", "update")
PPO_EPOCHS = 2  # PaSa Table 9


def profile_name(asked: str, plan_only: bool) -> str:
    import torch

    cuda = torch.cuda.is_available()
    if asked == "auto":
        return "gpu" if cuda else "cpu"
    if asked not in PROFILES:
        raise SystemExit(f"GPU_CHECK_PROFILE must be auto|gpu|cpu, got {asked!r}")
    if asked == "gpu" and not cuda and not plan_only:
        raise SystemExit("GPU_CHECK_PROFILE=gpu but CUDA is not available (torch.cuda.is_available() is False); "
                         "the check does not fall back to CPU: use GPU_CHECK_PROFILE=cpu for the CPU twin")
    return asked


def run_list(p: dict, flash: bool) -> list[dict]:
    """The check's runs in running order (``PLAN_S`` holds one plan per name): name, command, layers, attention,
    LoRA, and the module a run needs beyond the check's own (reported as skipped where it does not import)."""
    runs = [{"name": "slurm_probe", "command": "slurm_probe"}, {"name": "torchrun_flags", "command": "torchrun_flags"}]
    ppo = [{"name": f"ppo_{n}L", "command": "crawler_ppo", "layers": n, "attn": "sdpa"} for n in p["layers"]]
    n = p["critic_free_layers"]
    critic_free = [{"name": f"ppo_{n}L_{e}", "command": "crawler_ppo", "layers": n, "attn": "sdpa", "estimator": e}
                   for e in CRITIC_FREE]
    ran_before = [r for r in ppo if r["layers"] == 1]  # 1 layer: the only PPO size a GPU has run
    runs += [r for r in ppo if r not in ran_before] + critic_free + ran_before
    runs += [{"name": f"sft_{'lora' if lora else 'full'}_{n}L", "command": "selector_sft", "layers": n, "attn": "sdpa",
              "lora": lora} for n in p["sft_layers"] for lora in (False, True)]
    if p["flash_layers"] and flash:
        n = p["flash_layers"]
        runs += [{"name": f"ppo_{n}L_flash", "command": "crawler_ppo", "layers": n, "attn": "flash_attention_2"},
                 {"name": f"sft_full_{n}L_flash", "command": "selector_sft", "layers": n, "attn": "flash_attention_2",
                  "lora": False}]
    runs.append({"name": "colocated_vllm", "command": "colocated_vllm", "layers": 2, "needs": "vllm"})
    runs.append({"name": "selector_server", "command": "selector_server", "layers": 2, "needs": "vllm"})
    return runs


def skip_reason(plan_s: float, left_s: float, missing: str | None = None) -> str | None:
    """The scheduling rule. None: start the run, with its plan as its timeout (so it ends within the budget); else
    the status it is reported with: a module the run needs that this image lacks, or a plan longer than what is
    left of the budget (such a run would be cut short and read as a failure, so it never starts)."""
    if missing:
        return f"skipped ({missing} not importable on this image)"
    if plan_s > left_s:
        return "skipped (budget)"
    return None


def worst_case(plans: list[tuple[str, float]], budget_s: float) -> tuple[list[str], float]:
    """The runs that start, and the seconds they take, when every run takes its whole plan: the sum bound, never
    above the budget (each run starts only if its plan fits what is left)."""
    ran, spent = [], 0.0
    for name, plan in plans:
        if skip_reason(plan, budget_s - spent) is None:
            ran.append(name)
            spent += plan
    return ran, spent


# ---------------------------------------------------------------------------------------------------------------
# model directories: a config.json + the tiny tokenizer (no weights: the commands draw them, *.init=random)


def model_dir(work: Path, profile: str, layers: int, name: str | None = None) -> Path:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    if profile == "gpu":
        config = json.loads(QWEN_7B.read_text())
        config.update(num_hidden_layers=layers, max_window_layers=layers, _name_or_path=f"qwen2.5-7b-{layers}L")
    else:  # the tests' tiny Qwen2 (tests/fixtures/llm.py): head size 32, vocabulary = the tokenizer's
        config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": len(tok),
                  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers,
                  "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 2048,
                  "tie_word_embeddings": True, "initializer_range": 0.2, "rms_norm_eps": 1e-6,
                  "hidden_act": "silu", "rope_theta": 10000.0}
    config.update(bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    out = work / "models" / (name or f"{profile}_{layers}L")
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    for f in TOKENIZER_DIR.iterdir():
        shutil.copy(f, out / f.name)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": tok.eos_token_id,
                                                            "pad_token_id": tok.pad_token_id}))
    return out


def tiny_model_with_weights(work: Path) -> Path:
    """The tests' tiny Qwen2 with seeded random weights saved (vLLM loads weights from disk; the colocated run)."""
    import torch

    from scholar_agents.llm.model_init import load_causal_lm

    out = model_dir(work, "cpu", 2, name="vllm_tiny")
    load_causal_lm(out, "random", seed=0, dtype=torch.float32).save_pretrained(str(out))
    return out


def params_of(path: Path) -> int:
    from scholar_agents.plan.model_sizes import model_shape

    return model_shape(str(path)).params


# ---------------------------------------------------------------------------------------------------------------
# the runs' overrides


def ppo_overrides(p: dict, model: Path, work: Path, seq_len: int, attn: str,
                  estimator: str | None = None) -> list[str]:
    ppo = {"policy_model": model, "policy_init": "random", "model_dtype": p["dtype"], "bf16": p["bf16"],
           "gradient_checkpointing": p["grad_ckpt"], "attn_implementation": attn, "deepspeed": ZERO3,
           "queries_per_step": p["queries"], "expand_sessions": "[]", "max_new_tokens": p["response"],
           "temperature": 1.0, "use_selector": "false", "policy_freeze_steps": 0, "total_steps": p["steps"],
           "ppo_epochs": PPO_EPOCHS, "forward_batch_size": 1, "grad_accum": p["queries"], "score_batch_size": p["queries"],
           "init_value_to_mean_return": "false", "rollout_sleep": "false", "eval_at_start": "false",
           "eval_at_end": "false", "save_final": "false", "save_every": 1000, "resume": "false", "seed": 0}
    if estimator:  # whole crawls, group_size of each query, no value model (docs/ppo.md)
        ppo.update(estimator=estimator, group_size=2)
    return ["papers=sample", f"papers.store={work / 'papers' / 'store.sqlite'}",
            f"papers.index_dir={work / 'papers' / 'index'}", "search=bm25",
            "embedder.model=unused-with-bm25",  # nothing may load an embedder: the image has none
            "llm.backend=hf", f"llm.dtype={p['dtype']}", f"llm.max_model_len={seq_len}", "llm.cache_path=null",
            f"llm.batch_size={p['queries']}", f"selector_llm.model={model}", "cluster.memory_check=false",
            "logging.wandb.mode=disabled", *[f"ppo.{k}={v}" for k, v in ppo.items()]]


def sft_overrides(p: dict, model: Path, data: Path, out: Path, max_len: int, lora: bool, attn: str) -> list[str]:
    sft = {"model": model, "init": "random", "train_file": data, "output_dir": out, "resume": "false",
           "max_steps": p["steps"], "per_device_train_batch_size": p["sft_batch"], "gradient_accumulation_steps": 1,
           "max_length": max_len, "model_dtype": p["dtype"], "bf16": p["bf16"],
           "gradient_checkpointing": p["grad_ckpt"],
           "attn_implementation": attn, "deepspeed": ZERO3, "logging_steps": 1,
           "save_steps": 0,  # no checkpoint: under ZeRO-3 the end-of-run one writes 12 B/param of fp32 states (19 GB at 2L)
           "save_final": "false", "warmup_ratio": 0.0, "lora.enabled": str(lora).lower(), "use_cpu": p["use_cpu"]}
    return ["logging.wandb.enabled=false", *[f"sft.{k}={v}" for k, v in sft.items()]]


def chat_len(tok, messages: list[dict], generation_prompt: bool = False) -> int:
    """Tokens of a rendered chat, counted as the commands count them (``LLM.prompt_token_ids``)."""
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
    return len(tok.encode(text, add_special_tokens=False))


def crawl_prompt_len(model: Path) -> int:
    """The longest search-session prompt of the training queries, in tokens (the rollouts' prompt length)."""
    from transformers import AutoTokenizer

    from scholar_agents.pasa.queries import load_queries
    from scholar_agents.pasa.prompts import crawler_search_messages

    tok = AutoTokenizer.from_pretrained(str(model))
    from omegaconf import OmegaConf

    sample = REPO / "scholar_agents" / "assets" / "sample" / "autoscholarquery_dev.jsonl"
    queries = load_queries(OmegaConf.create({"path": str(sample), "offset": 0, "limit": 80,  # = queries.train
                                             "exclude_qids_file": None}))
    return max(chat_len(tok, crawler_search_messages(q.question), generation_prompt=True) for q in queries)


def sft_data(model: Path, work: Path, target: int, rows: int) -> tuple[Path, int]:
    """Selector chats (PaSa Table 15) of about ``target`` tokens each from the sample's abstracts; returns the file
    and the longest example's length (``sft.max_length`` and the planner's sequence length)."""
    import gzip

    from transformers import AutoTokenizer

    from scholar_agents.pasa.prompts import selector_messages, selector_target

    tok = AutoTokenizer.from_pretrained(str(model))
    with gzip.open(REPO / "scholar_agents/assets/sample/papers.jsonl.gz", "rt", encoding="utf-8") as f:
        papers = [json.loads(next(f)) for _ in range(64)]
    text = " ".join(p["abstract"] for p in papers)
    ids = tok.encode(text)
    out, longest = [], 0
    for i in range(rows):
        head = selector_messages("Which papers study retrieval-augmented agents?", papers[i]["title"], "")
        base = chat_len(tok, head + [{"role": "assistant", "content": selector_target(True, "x")}])
        abstract = tok.decode(ids[i * 37:i * 37 + max(target - base, 8)])
        msgs = selector_messages("Which papers study retrieval-augmented agents?", papers[i]["title"], abstract)
        msgs.append({"role": "assistant", "content": selector_target(i % 2 == 0, "x")})
        longest = max(longest, chat_len(tok, msgs))
        out.append({"messages": msgs})
    path = work / f"sft_{target}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path, longest


# ---------------------------------------------------------------------------------------------------------------
# the planner, on the same overrides, for one H100


def plan_for(command: str, overrides: list[str]) -> dict:
    from scholar_agents.hydra_app import compose
    from scholar_agents.plan.commands import inputs_from_config, sft_inputs_from_config, verdict
    from scholar_agents.plan.memory_plan import build_plan
    from scholar_agents.plan.sft_plan import build_sft_plan
    from scholar_agents.train.plan_runs import ppo_run, sft_run

    one_h100 = ["cluster=h100_80gb", "cluster.nodes=1", "cluster.gpus_per_node=1"]
    cfg = compose("train_crawler_ppo" if command == "crawler_ppo" else "train_selector_sft", [*overrides, *one_h100])
    plan = (build_plan(inputs_from_config(ppo_run(cfg))) if command == "crawler_ppo"
            else build_sft_plan(sft_inputs_from_config(sft_run(cfg))))
    phases = {ph: round(plan.phase_total(ph), 3) for ph in plan.phases}
    if command != "crawler_ppo":  # SFT plans one phase, "train": the update
        phases = {"update": phases["train"]}
    return {"phases_gib": phases, "peak_gib": round(plan.peak_gib, 3), "fits": verdict(plan)[0],
            "cluster": "h100_80gb x1"}


# ---------------------------------------------------------------------------------------------------------------
# running and reading


def torchrun_flags(log: Path, timeout: float) -> tuple[int, float, dict]:
    """slurm/job_env.sh's torchrun probe on this image (which of --shutdown-timeout / --signals-to-handle the
    installed torchrun lacks: torch 2.10, the CUDA 12 lock, has no --shutdown-timeout), then one real torchrun start
    with exactly the flags ``scholar_torchrun`` would pass (its dry-run line; rendezvous made standalone), running
    ``true``: an unknown flag ends torchrun at start ("unrecognized arguments")."""
    env = {**os.environ, "SCHOLAR_REPO": str(REPO), "SCHOLAR_DRY_RUN": "1", "SCHOLAR_SHUTDOWN_GRACE_S": "300",
           "SCHOLAR_VENV": str(REPO / "no-venv"),  # this interpreter's torchrun, first on PATH below
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    for k in [k for k in env if k.startswith("SLURM_")]:
        env.pop(k)
    script = ('source "$SCHOLAR_REPO/slurm/job_env.sh"; scholar_torchrun train crawler_ppo; '
              'echo "version=$SCHOLAR_TORCHRUN_VERSION"; echo "lacks=$SCHOLAR_TORCHRUN_LACKS"')
    t0 = time.perf_counter()
    probe = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=timeout)
    found = dict(line.split("=", 1) for line in probe.stdout.splitlines() if line.startswith(("version=", "lacks=")))
    line = next((x for x in probe.stdout.splitlines() if x.startswith("[dry-run] srun ")), "")
    with open(log, "w") as f:
        f.write(probe.stdout + probe.stderr)
    if probe.returncode != 0 or not line:
        return probe.returncode or 1, time.perf_counter() - t0, found
    import shlex

    words = shlex.split(line)
    words = words[words.index("torchrun") + 1:words.index("-m")]
    passed = [w for w in words if w.startswith(("--max-restarts", "--shutdown-timeout", "--signals-to-handle"))]
    found["flags"] = " ".join(passed)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", *passed,
           "--no-python", "true"]
    left = max(1.0, timeout - (time.perf_counter() - t0))
    with open(log, "a") as f:
        f.write("\n" + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, cwd=REPO, env=os.environ, stdout=f, stderr=subprocess.STDOUT,
                                timeout=left).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.perf_counter() - t0, found


def torchrun(target: list[str], log: Path, timeout: float) -> tuple[int, float]:
    """``torchrun --nproc_per_node 1 <target>`` (a module run with ``-m`` or a script), killed at ``timeout``."""
    return plain_run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", *target], log, timeout)


def plain_run(target: list[str], log: Path, timeout: float) -> tuple[int, float]:
    """``python <target>`` with its process tree, logged to ``log``, killed at ``timeout``."""
    cmd = [sys.executable, *target]
    env = {**os.environ, "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        f.write(" ".join(map(str, cmd)) + "\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            f.write(f"\ngpu_check: at its plan of {timeout:.0f} s; the workers' stacks (SIGQUIT):\n")
            f.flush()
            dump_stacks(proc)
            kill_tree(proc)
            rc = 124
            f.write(f"\ngpu_check: killed at its plan of {timeout:.0f} s\n")
    return rc, time.perf_counter() - t0


def dump_stacks(proc: subprocess.Popen, wait_s: float = 3.0) -> None:
    """SIGQUIT to torchrun's workers: ``scholar`` registers faulthandler on it (scholar_agents/runtime/stack_dump.py),
    so each worker writes every thread's stack into the log before the kill: where a run killed at its plan was.
    (Not SIGUSR1: under training that asks for a checkpoint and a requeue.)"""
    import psutil

    try:
        workers = [c for c in psutil.Process(proc.pid).children(recursive=True) if "scholar_agents" in " ".join(
            c.cmdline())]
    except psutil.NoSuchProcess:
        return
    for w in workers:
        with contextlib.suppress(psutil.NoSuchProcess):
            w.send_signal(signal.SIGQUIT)
    time.sleep(wait_s if workers else 0)


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and every process under it. torchrun starts each worker in a session of its own
    (torch.distributed.elastic's subprocess handler: ``start_new_session=True``), so killing torchrun's process group
    leaves the workers running, and on a GPU holding its memory into the next run: the tree is read first (psutil,
    which accelerate requires), then killed, workers first."""
    import psutil

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    for child in reversed(tree):
        with contextlib.suppress(psutil.NoSuchProcess):  # already gone
            child.kill()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    psutil.wait_procs(tree, timeout=30)


def _mem(row: dict, phase: str | None) -> tuple[float | None, float | None]:
    sfx = f"/{phase}" if phase else ""
    return row.get(f"perf/max_memory_allocated_gb{sfx}"), row.get(f"perf/max_memory_reserved_gb{sfx}")


def ppo_measured(run_dir: Path, epochs: int) -> list[dict]:
    """Per phase of the LAST step (warm; the first pays one-off allocations): peaks, seconds, tokens/s."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    last = rows[-1]
    seconds = {"rollout": last.get("timing_s/rollout"), "score": last.get("timing_s/returns"),
               "update": last.get("timing_s/update")}
    # tokens/s: generated tokens while rolling out; the step's sequence tokens (prompt + response) per second of
    # scoring, and per second of the update x its ppo_epochs passes
    seq_tokens = (last.get("perf/throughput") or 0.0) * (last.get("timing_s/step") or 0.0)
    per_s = lambda n, t: n / t if n and t else None  # noqa: E731
    tokens = {"rollout": last.get("perf/gen_tokens_per_s"), "score": per_s(seq_tokens, seconds["score"]),
              "update": per_s(seq_tokens * epochs, seconds["update"])}
    out = []
    for ph in PHASES:
        alloc, reserved = _mem(last, ph)
        out.append({"phase": ph, "allocated_gib": alloc, "reserved_gib": reserved, "seconds": seconds[ph],
                    "tokens_per_s": tokens[ph], "step_seconds": last.get("timing_s/step"),
                    "step_tokens_per_s": last.get("perf/throughput"), "steps": len(rows)})
    return out


def sft_measured(run_dir: Path) -> list[dict]:
    summary = json.loads((run_dir / "sft_summary.json").read_text())
    steps = [h for h in summary["log_history"] if "loss" in h]
    last = steps[-1]
    alloc, reserved = _mem(last, None)
    return [{"phase": "update", "allocated_gib": alloc, "reserved_gib": reserved, "seconds": last.get("timing_s/step"),
             "tokens_per_s": last.get("perf/tokens_per_s"), "step_seconds": last.get("timing_s/step"),
             "step_tokens_per_s": last.get("perf/tokens_per_s"), "steps": summary["global_step"]}]


def vllm_measured(run_dir: Path) -> list[dict]:
    """The colocated run's last weight push (the engine woken first where it sleeps): seconds, per step."""
    report = json.loads((run_dir / "out" / "rank0.json").read_text())
    return [{"phase": "push", "seconds": report["steps"][-1]["sync_s"], "steps": len(report["steps"]),
             "sleep_mode": report.get("sleeps"),
             # vLLM's own LLM.wake_up answer (only where the engine sleeps: GPUs) and whether the engine was awake
             "wake_up_returned": report.get("wake_up_returned"), "awake": report.get("awake_after_wake_up")}]


def selector_server_measured(run_dir: Path) -> list[dict]:
    """The Selector's scores over the server against transformers', and which scoring path the server allowed."""
    report = json.loads((run_dir / "selector_server.json").read_text())
    return [{"phase": "score", "seconds": report.get("score_s"), "max_abs_diff": report.get("max_abs_diff"),
             "logprob_token_ids": report.get("logprob_token_ids"), "vllm": report.get("vllm")}]


MEASURED = {"crawler_ppo": lambda d: ppo_measured(d, PPO_EPOCHS), "selector_sft": sft_measured,
            "colocated_vllm": vllm_measured, "selector_server": selector_server_measured}
ROW_PHASES = {"crawler_ppo": PHASES, "selector_sft": ("update",), "colocated_vllm": ("push",),
              "selector_server": ("score",)}


def tail(log: Path, n: int = 25, traceback_lines: int = 80) -> str:
    """The log's last ``n`` lines, preceded by the worker's own traceback where there is one: torchrun's summary
    (its own traceback through ``torch/distributed/run.py``) fills the tail and hides why the worker failed."""
    if not log.exists():
        return ""
    lines = log.read_text(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
    worker = [i for i in starts
              if not any("torch/distributed/run.py" in x for x in lines[i:i + 6])]  # not torchrun's own
    head = lines[worker[0]:worker[0] + traceback_lines] + ["[...]"] if worker and worker[0] < len(lines) - n else []
    return "\n".join(head + lines[-n:])


# ---------------------------------------------------------------------------------------------------------------
# the report


def _f(x, nd=2) -> str:
    return "—" if x is None else f"{x:.{nd}f}" if isinstance(x, float) else str(x)


def findings(report: dict) -> list[str]:
    """One line per answer the runs gave beyond their table rows: the torchrun flags, vLLM's wake_up, the Selector
    over a server."""
    out = []
    for r in report["runs"]:
        if r["command"] == "torchrun_flags" and r.get("torchrun"):
            t = r["torchrun"]
            lacks = t.get("lacks") or "nothing scholar_torchrun passes"
            out.append(f"- torchrun ({t.get('version', '?')}): lacks {lacks}; started with `{t.get('flags', '?')}`: "
                       f"{_status(r)}")
        for m in r.get("phases") or []:
            if m.get("wake_up_returned") is not None:
                out.append(f"- vLLM LLM.wake_up returned {m['wake_up_returned']}; engine awake after it: {m['awake']}")
            if "logprob_token_ids" in m:
                out.append(f"- Selector over a vLLM {m.get('vllm')} server: `logprob_token_ids` "
                           f"{'taken' if m['logprob_token_ids'] else 'ignored (echo fallback)'}; max |server - "
                           f"transformers| P(True) {_f(m.get('max_abs_diff'), 6)}: {_status(r)}")
    return out


def _status(r: dict) -> str:
    if r["status"].startswith("skipped"):
        return f"{r['status']}: {r['skip_detail']}" if r.get("skip_detail") else r["status"]
    return f"{r['status']} ({r['seconds']:.0f} s)"


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# One-GPU check ({report['profile']} profile)", "",
             f"{env['device']}; torch {env['torch']}, transformers {env['transformers']}, deepspeed "
             f"{env['deepspeed']}; backend {env['backend']}; total {report['total_seconds']:.0f} s "
             f"(budget {report['budget_seconds']:.0f} s: a run starts only if its plan fits what is left, and is "
             f"killed at its plan). Memory: torch.cuda max_memory_allocated / reserved per phase of the last step "
             f"(GiB; — = not on CUDA); plan = `scholar plan` for the same overrides on one H100 80GB (GiB per "
             f"phase); plan s = the run's planned seconds (its timeout).", "",
             "| run | size | attn | phase | plan GiB | allocated GiB | reserved GiB | alloc/plan | phase s | "
             "tokens/s | step s | step tokens/s | plan s | status |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["runs"]:
        if r["command"] in ("slurm_probe", "torchrun_flags"):
            what = r["command"].replace("_", " ")
            lines.append(f"| {what} | — | — | — | — | — | — | — | — | — | — | — | {r['plan_s']} | {_status(r)} |")
            continue
        n = r["params"]
        size = "—" if n is None else f"{r['layers']}L {n / 1e9:.2f}B" if n >= 1e8 else f"{r['layers']}L {n / 1e6:.1f}M"
        for m in r.get("phases") or [{"phase": ph} for ph in ROW_PHASES[r["command"]]]:
            planned = (r.get("plan") or {}).get("phases_gib", {}).get(m["phase"])
            alloc = m.get("allocated_gib")
            ratio = f"{alloc / planned:.2f}" if alloc and planned else "—"
            lines.append(f"| {r['name']} | {size} | {r.get('attn') or '—'} | {m['phase']} | {_f(planned)} | "
                         f"{_f(alloc)} | {_f(m.get('reserved_gib'))} | {ratio} | {_f(m.get('seconds'))} | "
                         f"{_f(m.get('tokens_per_s'), 0)} | {_f(m.get('step_seconds'))} | "
                         f"{_f(m.get('step_tokens_per_s'), 0)} | {r['plan_s']} | {_status(r)} |")
    notes = findings(report)
    if notes:
        lines += ["", "Findings:", *notes]
    return "\n".join(lines) + "\n"


def environment(profile: str) -> dict:
    import torch
    import transformers

    try:
        import deepspeed
        ds = deepspeed.__version__
    except ImportError:
        ds = "missing"
    device = f"CPU ({os.cpu_count()} cores)"
    if profile == "gpu":  # nvidia-smi, not torch.cuda: this process must not hold a CUDA context beside the runs
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader", "-i", "0"],
                           capture_output=True, text=True)
        device = q.stdout.strip() or "CUDA device (nvidia-smi unavailable)"
    return {"device": device, "torch": torch.__version__, "transformers": transformers.__version__, "deepspeed": ds,
            "backend": "nccl" if profile == "gpu" else "gloo", "python": sys.version.split()[0]}


def importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


# ---------------------------------------------------------------------------------------------------------------
# the runs, each with what it needs prepared and its command


def prepare(run: dict, p: dict, profile: str, work: Path, out: Path) -> tuple[list[str], dict | None, Path | None]:
    """(torchrun target, `scholar plan`'s estimate or None, model dir or None) of one run."""
    run_dir = out / "runs" / run["name"]
    if run["command"] == "slurm_probe":
        return ["-m", "scholar_agents", "slurm", "probe", "probe.steps=4", f"probe.checkpoint_dir={run_dir}",
                f"hydra.run.dir={run_dir}"], None, None
    if run["command"] == "torchrun_flags":
        return [], None, None
    if run["command"] == "colocated_vllm":  # sleep, wake, push, generate: the worker of the vLLM CPU twin test
        model = tiny_model_with_weights(work)
        return [str(VLLM_WORKER), "--model", str(model), "--run-dir", str(run_dir / "engine"), "--sync", "inmemory",
                "--out", str(run_dir / "out")], None, model
    if run["command"] == "selector_server":
        model = tiny_model_with_weights(work)
        return [str(SELECTOR_SERVER), "--model", str(model), "--out", str(run_dir)], None, model
    model = model_dir(work, profile, run["layers"])
    if run["command"] == "crawler_ppo":
        overrides = ppo_overrides(p, model, work, crawl_prompt_len(model) + p["response"], run["attn"],
                                  run.get("estimator"))
    else:
        data, longest = sft_data(model, work, p["sft_len"], rows=4 * p["sft_batch"])
        overrides = sft_overrides(p, model, data, run_dir / "ckpt", longest, run["lora"], run["attn"])
    overrides = [str(x) for x in overrides]
    return (["-m", "scholar_agents", "train", run["command"], *overrides, f"hydra.run.dir={run_dir}"],
            plan_for(run["command"], overrides), model)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--plan-only", action="store_true", help="print the planner's numbers; run nothing")
    ap.add_argument("--budget-s", type=float, default=float(os.environ.get("GPU_CHECK_BUDGET_S") or DEFAULT_BUDGET_S),
                    help=f"seconds for the whole check, from the start of gpu_check.sh (GPU_CHECK_BUDGET_S; default "
                         f"{DEFAULT_BUDGET_S}): a run starts only if its planned seconds fit what is left")
    ap.add_argument("--only", type=lambda v: [x for x in v.split(",") if x], default=None,
                    help="comma-separated run names (e.g. ppo_1L,sft_full_2L): run only these")
    ap.add_argument("--plan-scale", type=float, default=1.0,
                    help="multiply every run's planned seconds (its timeout) by this: a diagnostic rerun of a run "
                         "killed at its plan, to see whether and when it finishes")
    a = ap.parse_args()
    # the budget counts from gpu_check.sh's start (its unpacking included); run directly, from here
    started = float(os.environ.get("GPU_CHECK_STARTED") or time.time())
    profile = profile_name(os.environ.get("GPU_CHECK_PROFILE", "auto"), a.plan_only)
    p = PROFILES[profile]
    plans = {k: round(v * a.plan_scale) for k, v in PLAN_S[profile].items()}
    out = a.out_dir.resolve()
    work = out / "work"
    if not a.plan_only:
        for stale in ("runs", "logs"):  # a rerun into the same folder starts fresh (nothing resumes)
            shutil.rmtree(out / stale, ignore_errors=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    order = run_list(p, importable("flash_attn"))
    if a.only:  # a rerun of named runs (e.g. the ones that failed), in the check's order
        unknown = set(a.only) - {r["name"] for r in order}
        if unknown:
            raise SystemExit(f"--only: no run named {', '.join(sorted(unknown))} in the {profile} profile "
                             f"(runs: {', '.join(r['name'] for r in order)})")
        order = [r for r in order if r["name"] in a.only]
    ran, spent = worst_case([(r["name"], plans[r["name"]]) for r in order], a.budget_s)
    print(f"gpu_check: budget {a.budget_s:.0f} s; plans {sum(plans[r['name']] for r in order)} s in all; if every "
          f"run took its whole plan, {len(ran)} of {len(order)} would run ({spent:.0f} s)", flush=True)

    runs: list[dict] = []
    for run in order:
        name, command = run["name"], run["command"]
        rec = {"name": name, "command": command, "layers": run.get("layers"), "attn": run.get("attn"),
               "params": None, "plan": None, "plan_s": plans[name], "seconds": 0.0, "phases": None}
        if a.plan_only:
            plan = prepare(run, p, profile, work, out)[1] if command in ("crawler_ppo", "selector_sft") else None
            print(name, f"plan_s={plans[name]}", json.dumps(plan))
            continue
        missing = run.get("needs") if run.get("needs") and not importable(run["needs"]) else None
        if skip_reason(plans[name], a.budget_s - (time.time() - started), missing) is None:
            target, rec["plan"], model = prepare(run, p, profile, work, out)  # only for a run that may start
            rec.update(params=params_of(model) if model else None, args=target)
        left = a.budget_s - (time.time() - started)  # again: preparing took time
        reason = skip_reason(plans[name], left, missing)
        if reason is not None:  # the check ends within its budget; what did not fit is named, not failed
            rec["status"] = reason
            if reason == "skipped (budget)":
                rec["skip_detail"] = f"plan {plans[name]} s > {max(left, 0):.0f} s left of {a.budget_s:.0f} s"
            runs.append(rec)
            print(f"{name}: {_status(rec)}", flush=True)
            continue
        log = out / "logs" / f"{name}.log"
        if command == "torchrun_flags":
            rc, secs, rec["torchrun"] = torchrun_flags(log, plans[name])
        elif command == "selector_server":  # a server and a client: not a torchrun job
            rc, secs = plain_run(target, log, plans[name])
        else:
            rc, secs = torchrun(target, log, plans[name])
        rec.update(seconds=round(secs, 1), log=str(log),
                   status="ok" if rc == 0 else f"failed: killed at its plan of {plans[name]} s" if rc == 124
                   else f"failed rc={rc}")
        if command in MEASURED:
            try:
                rec["phases"] = MEASURED[command](out / "runs" / name)
            except (OSError, KeyError, IndexError, json.JSONDecodeError) as e:
                rec["status"] += f" (no metrics: {type(e).__name__})"
        if rc != 0:
            rec["log_tail"] = tail(log)
        runs.append(rec)
        print(f"{name}: {_status(rec)}", flush=True)
    if a.plan_only:
        return 0
    report = {"profile": profile, "environment": environment(profile), "runs": runs,
              "total_seconds": round(time.time() - started, 1), "budget_seconds": a.budget_s,
              "worst_case": {"runs": ran, "seconds": spent}, "phases": list(PHASES)}
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpu_check.md").write_text(markdown(report))
    print(markdown(report))
    skipped = [r["name"] for r in runs if r["status"].startswith("skipped")]
    if skipped:
        print(f"skipped: {', '.join(skipped)}")
    failed = [r["name"] for r in runs if r["status"] != "ok" and r["name"] not in skipped]
    if failed:
        print(f"FAILED: {', '.join(failed)} (logs under {out / 'logs'})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
