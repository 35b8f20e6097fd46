#!/usr/bin/env bash
# Session-level PPO for the PaSa Crawler on CPU (does PPO improve the SFT Crawler?), after scripts/crawler_learning.sh
# (the crawler SFT policy) and scripts/selector_learning.sh (the fine-tuned Selector = the reward model of Eq. 2):
#
#   nice -n 10 bash scripts/ppo_learning.sh > outputs/ppo_learning/run.log 2>&1
#
# 1. the training run: ppo=cpu_smollm2 from the crawler-SFT policy, $STEPS steps on a fixed pool of
#    $TRAIN_QUERIES dev queries (disjoint from the crawler-SFT queries), all of them every step, so the mean session
#    return of step t and step t' are over the same queries; crawler recall on $EVAL_QUERIES held-out dev queries
#    (not used by crawler SFT) before and after (eval_start / eval_end in metrics.json);
# 2. PaSa Table 6's sweep ppo.alpha=0.5,1.0,1.5,2.0 (Hydra multirun), $SWEEP_STEPS steps of $SWEEP_QUERIES_PER_STEP
#    queries each (same pool), + `sweep report`;
# 3. (PARTS=heldout) the PPO policy exported and judged beside its start on all held-out queries, paired;
# 4. bench/ppo.py's time split of the training run's steps.
# CRAWLER=default: PPO from the embedded default Crawler (SmolLM2 + the shipped verified-teacher adapter, merged once
# into a plain checkpoint in the model cache): PPO trains on the adapter's own training queries and is
# judged on its heldout_qids.txt (below). Export
# the result with `scholar train export export.source=$OUT/main` and evaluate it beside the SFT policy with
# scripts/agent_vs_search.sh AGENT_ROWS="{name: agent_ppo, method: agent, crawler_model: <export dir>, ...}".
# Real data, long enough to tell (docs/ppo.md): SETTING=whole_corpus searches all papers
# (crawler.env.search_date_filter=false; expansion stays date-filtered), SEARCH= the backend, SEARCH_K= papers per
# [Search], QUERIES_PER_STEP= queries drawn per step from the pool, EVAL_EVERY= the held-out figure every N steps:
#   CRAWLER=default SETTING=whole_corpus STEPS=32 TRAIN_QUERIES=240 QUERIES_PER_STEP=4 EVAL_QUERIES=40 EVAL_EVERY=10 \
#     SEARCH_K=20 PARTS="main heldout" OUT=outputs/ppo_real bash scripts/ppo_learning.sh
# Re-running resumes: each PPO run continues from the newest checkpoint in its run dir; a finished sweep (its report
# exists) is not run again.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/ppo_learning}
CRAWLER=${CRAWLER:-outputs/crawler_learning/crawler_sft}
source scripts/_selector_model.sh   # $SELECTOR_MODEL, else the fine-tuned one, else the embedded SmolLM2
STEPS=${STEPS:-10}
SWEEP_STEPS=${SWEEP_STEPS:-2}
SWEEP_QUERIES_PER_STEP=${SWEEP_QUERIES_PER_STEP:-4}
TRAIN_QUERIES=${TRAIN_QUERIES:-8}
EVAL_QUERIES=${EVAL_QUERIES:-20}
QUERIES_PER_STEP=${QUERIES_PER_STEP:-$TRAIN_QUERIES}   # default: the whole pool every step
EVAL_EVERY=${EVAL_EVERY:-0}
TRAIN_OFFSET=${TRAIN_OFFSET:-300}   # CRAWLER=default: 0 with TRAIN_QUERIES=1000 = the adapter's 900 training queries
SETTING=${SETTING:-date_filtered}
SEARCH=${SEARCH:-bm25}
SEARCH_K=${SEARCH_K:-10}
PPO_EXTRA=${PPO_EXTRA:-}
PARTS=${PARTS:-"main sweep bench"}   # run a subset, e.g. PARTS=sweep (the parts are independent once main has a policy);
                                     # PARTS="main heldout": a long run and its held-out before/after
DEV=../shared/data/queries/autoscholarquery_dev.jsonl
PY=${PY:-python}
if [ "$CRAWLER" = default ]; then
  # ADAPTER: another LoRA adapter of SmolLM2 trained on the same split (e.g. scripts/train_related_crawler.sh's);
  # the split files stay the shipped adapter's
  SPLIT=scholar_agents/assets/crawler_adapter
  ADAPTER=${ADAPTER:-$SPLIT}
  POLICY=$("$PY" -c "import sys; from scholar_agents.llm.adapters import merged_checkpoint; \
from scholar_agents.llm.embedded import smollm2_path; print(merged_checkpoint(str(smollm2_path()), sys.argv[1]))" "$ADAPTER" | tail -n 1)  # last line: libraries log to stdout
  # PPO trains on the adapter's own training queries (SFT data, no leak) and is judged on the ones it never saw
  EXCLUDE_TRAIN=$SPLIT/heldout_qids.txt
  EXCLUDE_EVAL=$SPLIT/train_qids.txt
else
  POLICY=$CRAWLER/final
  EXCLUDE_TRAIN=$CRAWLER/split/train_qids.txt
  EXCLUDE_EVAL=$CRAWLER/split/train_qids.txt
fi
case "$SETTING" in
  date_filtered) DATE_FILTER=true ;;
  whole_corpus) DATE_FILTER=false ;;
  *) echo "SETTING must be date_filtered or whole_corpus, got $SETTING" >&2; exit 2 ;;
esac
echo "[ppo_learning.sh] policy: $POLICY (kept out of training: $EXCLUDE_TRAIN; of evaluation: $EXCLUDE_EVAL)" >&2
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"

COMMON=(papers=shared_corpus search="$SEARCH" ppo=cpu_smollm2 ppo.policy_model="$POLICY"
  selector_llm.model="$SELECTOR_MODEL"
  queries.train.path=$DEV queries.train.offset="$TRAIN_OFFSET" queries.train.limit="$TRAIN_QUERIES"
  queries.train.exclude_qids_file="$EXCLUDE_TRAIN"
  queries.eval.path=$DEV queries.eval.offset=0 queries.eval.limit="$EVAL_QUERIES"
  queries.eval.exclude_qids_file="$EXCLUDE_EVAL"
  crawler.env.max_actions=5 crawler.env.max_sessions=4 crawler.env.search_date_filter="$DATE_FILTER"
  crawler.env.search_k="$SEARCH_K")

# 1. the training run
if [[ " $PARTS " == *" main "* || " $PARTS " == *" sweep "* ]] && [ ! -f "$POLICY/config.json" ]; then
  echo "no crawler-SFT policy in $POLICY: run scripts/crawler_learning.sh first (or set CRAWLER=)" >&2
  exit 2
fi
if [[ " $PARTS " == *" main "* ]]; then
  # shellcheck disable=SC2086
  scholar train crawler_ppo "${COMMON[@]}" ppo.queries_per_step="$QUERIES_PER_STEP" ppo.total_steps="$STEPS" \
    ppo.eval_every="$EVAL_EVERY" hydra.run.dir="$OUT/main" $PPO_EXTRA
fi

# 2. Table 6: one run per alpha (the policy trains from step 1 here: a short run)
if [[ " $PARTS " == *" sweep "* ]] && [ ! -f "$OUT/alpha_sweep_report/sweep_report.md" ]; then
  # shellcheck disable=SC2086
  scholar train crawler_ppo -m "${COMMON[@]}" 'ppo.alpha=0.5,1.0,1.5,2.0' ppo.total_steps="$SWEEP_STEPS" \
    ppo.queries_per_step="$SWEEP_QUERIES_PER_STEP" \
    ppo.policy_freeze_steps=0 ppo.eval_at_start=false hydra.sweep.dir="$OUT/alpha_sweep" $PPO_EXTRA
  scholar sweep report sweep_dir="$OUT/alpha_sweep" \
    'report.metrics=[eval.crawler_recall,eval.crawler_actions,train.session_return_last,train.seconds_per_step]' \
    'report.labels={ppo.alpha: alpha, eval.crawler_recall: Crawler Recall, eval.crawler_actions: Crawler Actions}' \
    hydra.run.dir="$OUT/alpha_sweep_report"
fi

# 3. held-out before/after (PARTS=heldout): the PPO policy exported, then `eval pasa` on the queries kept out of
#    training ($EXCLUDE_EVAL; all of them, not the $EVAL_QUERIES of the in-training figure) in $SETTING with the
#    start policy and the PPO policy as agent rows (grammar, fallback search, no Selector: crawler recall), beside
#    search-only; the report's crawler pairs give PPO − start paired, with bootstrap intervals. HELDOUT_SEARCH= the
#    search (default $SEARCH, e.g. auto = hybrid where a dense index exists).
if [[ " $PARTS " == *" heldout "* ]]; then
  HELDOUT_SEARCH=${HELDOUT_SEARCH:-$SEARCH}
  [ -f "$OUT/export/config.json" ] || scholar train export export.source="$OUT/main" export.output_dir="$OUT/export"
  if [ "$CRAWLER" = default ]; then
    START="{name: agent_start, method: agent, fallback_search: true, use_selector: false, label: 'Start: the shipped adapter'}"
  else
    START="{name: agent_start, method: agent, crawler_model: '$POLICY', constrained: true, fallback_search: true, use_selector: false, label: 'Start: crawler SFT'}"
  fi
  PPO_ROW="{name: agent_ppo, method: agent, crawler_model: '$OUT/export', constrained: true, fallback_search: true, use_selector: false, label: 'After PPO'}"
  mkdir -p "$OUT/heldout_$HELDOUT_SEARCH"
  scholar eval pasa papers=shared_corpus queries.path=$DEV queries.exclude_qids_file="$EXCLUDE_EVAL" \
    search="$HELDOUT_SEARCH" setting="$SETTING" crawler.env.max_actions=5 crawler.env.max_sessions=4 \
    crawler.env.search_k="$SEARCH_K" chunk_queries=10 resume_dir="$OUT/heldout_$HELDOUT_SEARCH" \
    "rows=[{name: search_only, method: search, label: 'Search-only ($HELDOUT_SEARCH)'},$START,$PPO_ROW]"
fi

# 4. where a step's time goes
if [[ " $PARTS " == *" bench "* ]]; then
  python bench/ppo.py --from-metrics "$OUT/main/metrics.jsonl" --json "$OUT/main/time_split.json"
fi
