#!/usr/bin/env bash
# Issue 36 item 5: the four estimators from the shipped Crawler on real queries, at an equal rollout budget, one
# table (docs/ppo.md "Choosing an estimator", real data):
#
#   OUT=/work/runs/ppo_estimators bash scripts/ppo_estimators.sh      # resumable: re-run it after an interruption
#
# Each estimator is one `scripts/ppo_learning.sh PARTS=main` run into $OUT/<estimator>/main: CRAWLER=default (SmolLM2
# + the shipped adapter), the date-filtered setting (gold is reachable), BM25 with 20 papers a [Search], gold-only
# reward (ppo=cpu_smollm2: use_selector=false), trained on the adapter's 900 training dev queries
# (TRAIN_OFFSET=0 TRAIN_QUERIES=1000 minus its heldout_qids.txt), the held-out figure (greedy crawler recall on the
# adapter's 100 held-out dev queries) at the start and every $EVAL_EVERY steps. Equal rollout budget: the critic-free
# estimators sample GROUP crawls of each of $GROUP_QUERIES queries (8 crawls a step by default); paper_mc and gae
# sample GROUP*GROUP_QUERIES search sessions a step plus App. A.2's expand sessions ([2, 2]); generated tokens,
# sessions and crawls per step are measured and put in the table, so the budgets are compared, not assumed.
# A run that exists resumes from its newest checkpoint (ppo.resume=true); a finished one is left as it is. Then
# scripts/ppo_estimator_table.py writes $OUT/estimators.md and $OUT/estimators.png from the runs' metrics.
# ESTIMATORS= a subset / another order (default: grpo rloo paper_mc gae); STEPS= policy steps (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/ppo_estimators}
STEPS=${STEPS:-30}
ESTIMATORS=${ESTIMATORS:-"grpo rloo paper_mc gae"}
GROUP=${GROUP:-4}
GROUP_QUERIES=${GROUP_QUERIES:-2}
EVAL_EVERY=${EVAL_EVERY:-10}
SEARCH=${SEARCH:-bm25}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
for est in $ESTIMATORS; do
  case "$est" in
    grpo|rloo) extra="ppo.estimator=$est ppo.group_size=$GROUP"; per_step=$GROUP_QUERIES ;;
    paper_mc|gae) extra="ppo.estimator=$est ppo.expand_sessions=[2,2]"; per_step=$((GROUP * GROUP_QUERIES)) ;;
    *) echo "ppo_estimators.sh: unknown estimator $est (grpo rloo paper_mc gae)" >&2; exit 2 ;;
  esac
  if [ -f "$OUT/$est/main/metrics.json" ] && python - "$OUT/$est/main/metrics.json" "$STEPS" <<'PY'
import json, sys
sys.exit(0 if json.load(open(sys.argv[1]))["train"]["steps"] >= int(sys.argv[2]) else 1)
PY
  then
    echo "[ppo_estimators] $est: $STEPS steps done" >&2
    continue
  fi
  echo "[ppo_estimators] $est: $per_step queries a step ($extra)" >&2
  CRAWLER=default SETTING=date_filtered STEPS="$STEPS" TRAIN_OFFSET=0 TRAIN_QUERIES=1000 \
    QUERIES_PER_STEP="$per_step" EVAL_QUERIES=1000 EVAL_EVERY="$EVAL_EVERY" SEARCH="$SEARCH" SEARCH_K=20 \
    PARTS=main OUT="$OUT/$est" PPO_EXTRA="$extra ppo.resume=true ${PPO_EXTRA:-}" \
    bash scripts/ppo_learning.sh
done
python scripts/ppo_estimator_table.py "$OUT" --estimators $ESTIMATORS
