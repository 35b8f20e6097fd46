#!/usr/bin/env bash
# The estimator comparison: the four estimators from the shipped Crawler on real queries, at an equal rollout budget,
# one table (docs/ppo.md "Choosing an estimator", real data):
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
# PARTS="train heldout" (default: train): heldout judges BEST= (an estimator's run; default: the one whose last
# held-out figure is highest) beside its start, exported once (`train export`): scripts/crawler_phrasings.sh on the
# adapter's 100 held-out queries in the original phrasing and the five request forms, both settings, with BM25 /
# dense / hybrid search-only rows where a dense index exists (SHIP=0: the shipped adapter's card is not touched), and
# `eval pasa` on the 33 requests rewritten by hand (assets/researcher_requests), both settings; paired intervals in
# each report, under $OUT/heldout/$BEST/. Resumable like the rest (eval pasa's resume_dir).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/ppo_estimators}
STEPS=${STEPS:-30}
ESTIMATORS=${ESTIMATORS:-"grpo rloo paper_mc gae"}
GROUP=${GROUP:-4}
GROUP_QUERIES=${GROUP_QUERIES:-2}
EVAL_EVERY=${EVAL_EVERY:-10}
SEARCH=${SEARCH:-bm25}
PARTS=${PARTS:-train}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
to_train=$ESTIMATORS; [[ " $PARTS " == *" train "* ]] || to_train=""
for est in $to_train; do
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

if [[ " $PARTS " == *" heldout "* ]]; then
  BEST=${BEST:-$(python - "$OUT" $ESTIMATORS <<'PY'
import json, sys
from pathlib import Path
out, names = Path(sys.argv[1]), sys.argv[2:]
def last(name):
    m = out / name / "main" / "metrics.json"
    if not m.exists():
        return -1.0
    d = json.loads(m.read_text())
    return (d.get("eval") or {}).get("crawler_recall") or -1.0
print(max(names, key=last))
PY
)}
  RUN="$OUT/$BEST/main"
  [ -f "$OUT/$BEST/export/config.json" ] || scholar train export export.source="$RUN" export.output_dir="$OUT/$BEST/export"
  PPO_ROW="{name: agent_ppo, method: agent, crawler_model: '$OUT/$BEST/export', constrained: true, fallback_search: true, use_selector: false, label: 'After PPO ($BEST)'}"
  BY_HAND=scholar_agents/assets/researcher_requests/heldout_by_hand.jsonl
  START="{name: agent, method: agent, fallback_search: true, use_selector: false, label: 'Start: the shipped adapter'}"
  for setting in date_filtered whole_corpus; do
    mkdir -p "$OUT/heldout/$BEST/by_hand_$setting"   # eval pasa resumes into resume_dir, which must exist
    scholar eval pasa papers=shared_corpus queries.path="$BY_HAND" search="$SEARCH" setting="$setting" \
      crawler.env.max_actions=5 crawler.env.max_sessions=4 crawler.env.search_k=20 chunk_queries=10 \
      resume_dir="$OUT/heldout/$BEST/by_hand_$setting" \
      "rows=[{name: search_only, method: search, label: 'Search-only ($SEARCH)'},$START,$PPO_ROW]"
  done
  # then the 97 held-out queries in every phrasing (the requests by hand first: 33 crawls a row, and where the
  # 30-step policies lost)
  EXTRA_ROWS="$PPO_ROW" SHIP=0 OUT="$OUT/heldout/$BEST" bash scripts/crawler_phrasings.sh
fi
