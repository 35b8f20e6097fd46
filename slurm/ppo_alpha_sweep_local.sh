#!/bin/bash
# PaSa Table 6's reward-coefficient sweep (ppo.alpha = 0.5, 1.0, 1.5, 2.0) end to end on the LOCAL Slurm cluster,
# sized to finish in ~10-20 min on 2 busy CPU cores: the CPU PPO preset (ppo=cpu_smollm2, crawler=cpu_smollm2) with
# the tiny random Qwen2 (tests/fixtures/llm.py, head size 32) in place of SmolLM2 — first taught the Crawler's
# action format by a short `train crawler_sft` on Crawler sessions — as policy, value model and Selector.
# It checks the machinery (one job array through hydra-submitit-launcher, four PPO runs, metrics.json per job,
# `sweep report`), NOT the paper's numbers: a 150k-parameter policy finds few papers, so the crawler recall is ~0.
#
#   slurm/ppo_alpha_sweep_local.sh                                 # outputs under outputs/ppo_alpha_sweep_local
#   OUT=/tmp/x CRAWLER_DATA=<crawler sessions JSONL> STEPS=4 slurm/ppo_alpha_sweep_local.sh [ppo overrides...]
#
# Inputs: CRAWLER_DATA (default: the first file found among the `data_gen crawler_sessions` outputs below),
# STEPS (PPO steps per run, default 4), EVAL_QUERIES (held-out queries for crawler recall, default 10).
# The same sweep on GPUs is one line (docs/cluster.md):
#   scholar train crawler_ppo -m hydra/launcher=slurm_h100 ppo=pasa_paper ppo.alpha=0.5,1.0,1.5,2.0
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"
OUT="$(realpath -m "${OUT:-outputs/ppo_alpha_sweep_local}")"
STEPS="${STEPS:-4}"
EVAL_QUERIES="${EVAL_QUERIES:-10}"
if [[ -z "${CRAWLER_DATA:-}" ]]; then
    for f in outputs/crawler_learning/crawler_sft/split/train.jsonl outputs/checkpoints/hB_crawler_sft/split/train.jsonl \
             tests/assets/pasa_release/sft_crawler/train.jsonl; do
        [[ -f "$f" ]] && { CRAWLER_DATA="$f"; break; }
    done
fi
CRAWLER_DATA="$(realpath "$CRAWLER_DATA")"
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled

# 1. the tiny model (random weights, committed tiny tokenizer with a chat template)
if [[ ! -f "$OUT/tiny_qwen2/config.json" ]]; then
    python -c "from pathlib import Path; from tests.fixtures.llm import make_tiny_qwen2; \
make_tiny_qwen2(Path('$OUT/tiny_qwen2'))"
fi

# 2. a tiny Crawler: imitation learning on Crawler sessions, so that rollouts contain parsable [Search] actions
nice -n 10 scholar train crawler_sft sft.model="$OUT/tiny_qwen2" sft.train_file="$CRAWLER_DATA" \
    sft.output_dir="$OUT/crawler_sft" sft.run_name=tiny_crawler_sft sft.max_length=1024 sft.max_steps=150 \
    sft.per_device_train_batch_size=8 sft.learning_rate=3e-3 sft.warmup_ratio=0.05 sft.bf16=false \
    sft.save_steps=50 sft.logging_steps=25 logging.wandb.enabled=false hydra.run.dir="$OUT/crawler_sft_run"

# 3. the sweep: one job array on the local cluster (`hydra/launcher=slurm`), waits for the four runs
eval "$(slurm/local_cluster.sh env)"
slurm/local_cluster.sh status >/dev/null || slurm/local_cluster.sh start
scholar train crawler_ppo -m hydra/launcher=slurm hydra.launcher.timeout_min=60 hydra.launcher.mem_gb=3 \
    hydra.sweep.dir="$OUT/sweep" ppo=cpu_smollm2 crawler=cpu_smollm2 search=bm25 \
    ppo.policy_model="$OUT/crawler_sft/final" selector_llm.model="$OUT/tiny_qwen2" \
    llm.dtype=float32 llm.device=cpu llm.max_model_len=1024 selector_llm.dtype=float32 selector_llm.device=cpu \
    selector_llm.max_model_len=1024 selector_llm.cache_path=null ppo.bf16=false ppo.total_steps="$STEPS" \
    ppo.policy_freeze_steps=1 queries.eval.limit="$EVAL_QUERIES" logging.wandb.mode=disabled \
    ppo.alpha=0.5,1.0,1.5,2.0 "$@"

# 4. one table + plot (PaSa Table 6 style); metrics.json averages the last third of the steps
K=$(( STEPS / 3 > 0 ? STEPS / 3 : 1 ))
scholar sweep report sweep_dir="$OUT/sweep" hydra.run.dir="$OUT/report" \
    "report.metrics=[eval.crawler_recall,eval.crawler_actions,train.session_return_last,train.session_reward_mean_last_${K},train.seconds_per_step]" \
    "report.labels={ppo.alpha: 'α', eval.crawler_recall: Crawler Recall, eval.crawler_actions: Crawler Actions}"
cat "$OUT/report/sweep_report.md"
