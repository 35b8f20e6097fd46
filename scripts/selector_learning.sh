#!/usr/bin/env bash
# Does Selector training learn? Base SmolLM2 vs the trained Selector, P/R/F1 on held-out AutoScholarQuery queries.
#
#   bash scripts/selector_learning.sh > outputs/selector_learning.log 2>&1       # ~22 min on 2 idle cores
#
# 1. labelled pairs from AutoScholarQuery dev against the shared corpus (gold = positive, BM25-retrieved non-gold =
#    negative), split BY QUERY, train labels filtered by the offline MiniLM teacher as in PaSa App. B
#    (scripts/build_selector_eval_pairs.py; needs ../shared/data);
# 2. `scholar train selector_sft` (sft=cpu_smollm2) on the train part — resumable: re-run the script after a kill;
# 3. `scholar eval selector` for the base and the trained model on the held-out part;
# 4. one comparison table + a joint reliability diagram (scripts/compare_selector_evals.py).
# Every step's output lands in $OUT; the numbers are quoted in docs/selector.md ("Learning").
#
# The default recipe is the one that beats the base on this machine, LP-FT (docs/selector.md, (e)): SmolLM2's
# first 15 decoder layers (chosen by train-only cross-validation, scripts/probe_selector_layers.py), the two
# decision rows of the output head fitted by L-BFGS first (linear probing), then one epoch of full fine-tuning on
# the decision loss at the paper's lr 1e-5. LP alone: EPOCHS=0. The paper's recipe (LM loss on the answer, all
# layers, lr 5e-5 on CPU): RECIPE="" — rows (a)-(d) of docs/selector.md.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/selector_learning}
PAIRS_ARGS=${PAIRS_ARGS:-"--max-queries 1000 --pos-per-query 3 --neg-per-query 4 --negatives before \
--test-fraction 0.3 --max-abstract-chars 600 --seed 0 --teacher minilm --teacher-threshold 0.2"}
TRAIN_PAIRS=${TRAIN_PAIRS:-null}
EPOCHS=${EPOCHS:-1}
RECIPE=${RECIPE-"sft.keep_layers=15 sft.loss_on=decision sft.head_init=probe sft.learning_rate=1e-5"}
SFT_EXTRA=${SFT_EXTRA:-}
SAVE_STEPS=${SAVE_STEPS:-50}     # checkpoint interval (a full-FT checkpoint with optimizer state is ~1.6 GB)
EVAL_LIMIT=${EVAL_LIMIT:-null}   # held-out pairs scored per model (null = all); pairs are grouped by query
mkdir -p "$OUT"

if [ ! -f "$OUT/pairs/stats.json" ]; then
  # shellcheck disable=SC2086
  python scripts/build_selector_eval_pairs.py --out-dir "$OUT/pairs" $PAIRS_ARGS
fi

# shellcheck disable=SC2086
scholar train selector_sft sft=cpu_smollm2 sft.train_file="$OUT/pairs/sft_train.jsonl" \
  sft.max_train_samples="$TRAIN_PAIRS" sft.num_train_epochs="$EPOCHS" \
  sft.output_dir="$OUT/checkpoints" sft.run_name=selector_learning_smollm2 \
  sft.save_steps="$SAVE_STEPS" hydra.run.dir="$OUT/train" $RECIPE $SFT_EXTRA

if [ ! -f "$OUT/eval_base/metrics.json" ]; then
  scholar eval selector data.path="$OUT/pairs/pairs_test.jsonl" data.limit="$EVAL_LIMIT" selector=cpu name=base \
    hydra.run.dir="$OUT/eval_base"
fi
scholar eval selector data.path="$OUT/pairs/pairs_test.jsonl" data.limit="$EVAL_LIMIT" selector=cpu name=fine-tuned \
  llm.model="$OUT/checkpoints/final" hydra.run.dir="$OUT/eval_tuned"

python scripts/compare_selector_evals.py "$OUT/eval_base" "$OUT/eval_tuned" --out "$OUT/comparison"
