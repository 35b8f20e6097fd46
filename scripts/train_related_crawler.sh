#!/usr/bin/env bash
# Teach the shipped Crawler which found papers to follow (crawler.env.related_expand; docs/results/related_expansion.md,
# docs/results/ppo_related_follow.md), on the shared corpus (needs ../shared):
#
#   nice -n 5 bash scripts/train_related_crawler.sh > outputs/related_crawler/run.log 2>&1
#
# 1. `data_gen crawler_sessions` with related expansion on the shipped adapter's training queries (the dev queries
#    minus its held-out ones): gold-blind related sessions (data_gen.related_found=user_query: the papers followed
#    are the sectionless hits of the user's own words, searched as serving does with k=SEARCH_K; a related search is
#    the positive when it adds gold to them), hybrid search, date-filtered;
# 2. the SFT mix (scripts/related_sft_mix.py): every positive, NEG_PER_POS negatives per positive, REPLAY of the
#    adapter's own search sessions (so its searches are not unlearned);
# 3. `train crawler_sft` continuing the shipped adapter (sft.lora.init_adapter), LR, EPOCHS;
# 4. the held-out comparison (scripts/expand_vs_search.sh, SETS/SETTINGS/FORMS as there) with the new adapter as
#    the agent_related_sft row beside the shipped adapter's rows (EVAL=0 skips it).
# Every step resumes (data_gen's shards, SFT checkpoints, eval pasa's resume_dir).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/related_crawler}
PY=${PY:-.venv/bin/python}
SEED=${SEED:-0}
SEARCH_K=${SEARCH_K:-20}
NEG_PER_POS=${NEG_PER_POS:-2}
REPLAY=${REPLAY:-150}
LR=${LR:-2e-4}
EPOCHS=${EPOCHS:-1}
EVAL=${EVAL:-1}
DENSE_BEFORE=${DENSE_BEFORE:-2024-07-31}
ASSET=scholar_agents/assets/crawler_adapter
DEV=${DEV:-../shared/data/queries/autoscholarquery_dev.jsonl}
[ -f "$DEV" ] || { echo "needs $DEV (the shared data)" >&2; exit 2; }
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"

# 1. gold-blind related sessions on the adapter's training queries (never its held-out ones)
"$PY" scripts/heldout_queries.py "$DEV" "$ASSET/train_qids.txt" "$OUT/train_queries.jsonl"
"$PY" -m scholar_agents data_gen crawler_sessions papers=shared_corpus search=auto search.dense_before="$DENSE_BEFORE" \
  data_gen.teacher=verified data_gen.topic_candidate=true data_gen.queries="$OUT/train_queries.jsonl" \
  crawler.env.related_expand=true crawler.env.search_k="$SEARCH_K" data_gen.related_found=user_query \
  "data_gen.request_forms=[original,imperative,papers_that,looking_for,show_me,multi_sentence]" \
  data_gen.request_forms_per_query=1 seed="$SEED" out_dir="$OUT/sessions"
# 2. the mix
"$PY" scripts/related_sft_mix.py "$OUT/sessions/train.jsonl" "$OUT/sft_mix.jsonl" \
  --negatives-per-positive "$NEG_PER_POS" --search-sessions "$REPLAY" --seed "$SEED" | tee "$OUT/sft_mix_counts.json"
# 3. continue the shipped adapter
"$PY" -m scholar_agents train crawler_sft sft.train_file="$OUT/sft_mix.jsonl" sft.run_name=related_crawler \
  sft.output_dir="$OUT/crawler_sft" sft.max_length=768 sft.num_train_epochs="$EPOCHS" sft.learning_rate="$LR" \
  sft.lora.enabled=true sft.lora.init_adapter="$ASSET" sft.save_steps=50 sft.seed="$SEED" \
  logging.wandb.enabled=false hydra.run.dir="$OUT/crawler_sft_run"
# 4. held out: the new adapter beside the shipped one, with related expansion
if [ "$EVAL" = 1 ]; then
  ROW="{name: agent_related_sft, method: agent, adapter: '$OUT/crawler_sft/final/adapter', fallback_search: true, search_user_query: true, related_expand: true, label: 'Agent + related expansion, SFT on related sessions'}"
  AGENT_ROWS="$ROW" OUT="$OUT/heldout" bash scripts/expand_vs_search.sh "$@"
fi
