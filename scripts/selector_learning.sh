#!/usr/bin/env bash
# Does Selector SFT learn? Base SmolLM2 vs SmolLM2 fine-tuned on CPU, P/R/F1 on held-out AutoScholarQuery queries.
#
#   nice -n 10 bash scripts/selector_learning.sh > outputs/selector_learning/run.log 2>&1
#
# 1. labelled pairs from AutoScholarQuery dev against the shared corpus (gold = positive, BM25-retrieved non-gold =
#    negative), split BY QUERY (scripts/build_selector_eval_pairs.py; needs ../shared/data);
# 2. `scholar train selector_sft` (sft=cpu_smollm2) on the train part — resumable: re-run the script after a kill;
# 3. `scholar eval selector` for the base and the fine-tuned model on the held-out part;
# 4. one comparison table + a joint reliability diagram (scripts/compare_selector_evals.py).
# Every step's output lands in $OUT; the numbers are quoted in docs/selector.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/selector_learning}
# Training size, sized from the measured cost on 2 heavily shared cores (docs/selector.md): LoRA on SmolLM2's
# top 8 of 30 decoder layers (the backward pass stops there) over frozen bf16 base weights, the whole balanced
# SFT file (632 pairs), 1 epoch = 158 steps of 4. OMP_NUM_THREADS=1 when the cores are oversubscribed (measured
# 5x faster than 2 threads at load ~20).
TRAIN_PAIRS=${TRAIN_PAIRS:-null}
EPOCHS=${EPOCHS:-1}
LORA=${LORA:-"sft.lora.enabled=true sft.lora.r=16 sft.lora.alpha=32 sft.learning_rate=3e-4 sft.model_dtype=bfloat16 \
sft.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj] \
sft.lora.layers_to_transform=[22,23,24,25,26,27,28,29]"}
SFT_EXTRA=${SFT_EXTRA:-}
SAVE_STEPS=${SAVE_STEPS:-10}     # checkpoint interval (a full-FT checkpoint with optimizer state is ~1.6 GB)
EVAL_LIMIT=${EVAL_LIMIT:-null}   # held-out pairs scored per model (null = all); pairs are grouped by query
mkdir -p "$OUT"

if [ ! -f "$OUT/pairs/stats.json" ]; then
  python scripts/build_selector_eval_pairs.py --out-dir "$OUT/pairs" --max-queries 400 --pos-per-query 2 \
    --neg-per-query 3 --negatives before --test-fraction 0.3 --max-abstract-chars 600 --seed 0 --rebuild-index
fi

# shellcheck disable=SC2086
scholar train selector_sft sft=cpu_smollm2 sft.train_file="$OUT/pairs/sft_train.jsonl" \
  sft.max_train_samples="$TRAIN_PAIRS" sft.num_train_epochs="$EPOCHS" \
  sft.output_dir="$OUT/checkpoints" sft.run_name=selector_learning_smollm2 \
  sft.save_steps="$SAVE_STEPS" hydra.run.dir="$OUT/train" $LORA $SFT_EXTRA

if [ ! -f "$OUT/eval_base/metrics.json" ]; then
  scholar eval selector data.path="$OUT/pairs/pairs_test.jsonl" data.limit="$EVAL_LIMIT" selector=cpu name=base \
    hydra.run.dir="$OUT/eval_base"
fi
scholar eval selector data.path="$OUT/pairs/pairs_test.jsonl" data.limit="$EVAL_LIMIT" selector=cpu name=fine-tuned \
  llm.model="$OUT/checkpoints/final" hydra.run.dir="$OUT/eval_tuned"

python scripts/compare_selector_evals.py "$OUT/eval_base" "$OUT/eval_tuned" --out "$OUT/comparison"
