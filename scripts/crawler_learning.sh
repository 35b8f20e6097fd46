#!/usr/bin/env bash
# PaSa Crawler on AutoScholarQuery dev, closed corpus = the shared corpus + the dev gold papers (does crawler SFT
# make the agent find more gold papers?):
#
#   nice -n 10 bash scripts/crawler_learning.sh > outputs/crawler_learning/run.log 2>&1
#
# 1. `data_gen crawler_sessions` on the first $SESSION_QUERIES dev queries: TEACHER=verified (default, the CPU
#    preset's: queries verified against the gold papers with BM25, no LLM) or TEACHER=llm (SmolLM2 as the
#    Table 7 teacher, vLLM);
# 2. `train crawler_sft` on them, 15 % of the user queries held out for the loss (split + train_qids.txt);
# 3. `eval pasa` on dev queries NOT used by crawler SFT: search-only (BM25, dense MiniLM, hybrid RRF) on the first
#    $SEARCH_QUERIES, then paraphrase + search and the agent before / after crawler SFT on the first $AGENT_QUERIES.
# Every step resumes: data_gen reads its finished shards back, SFT continues from its last checkpoint, eval pasa
# skips finished queries (resume_dir). Needs ../shared/data. The Selector of the agent rows: $SELECTOR_MODEL
# (default: the fine-tuned one from scripts/selector_learning.sh when present, else the embedded SmolLM2).
#
# SETTING: date_filtered = PaSa §5.1 (search before the query date); whole_corpus = search over the whole
# corpus, expansion still date-filtered; both (default) = every row in both settings, side by side
# (<row>@whole_corpus), each with the number of papers its queries searched over. The imitation data (step 1) is
# date-filtered (crawler.env.search_date_filter=true, PaSa §5.1) in every setting.
#
# The dense index covers only the papers before $DENSE_BEFORE (search.dense_before): exact for date-filtered searches
# of these queries (dated 2007 to 2024-07-31; the arXiv dump is 2024-26), and it encodes ~9.5k papers instead of 99k
# on a CPU. A whole-corpus dense search needs the full index: DENSE_BEFORE is null unless SETTING=date_filtered.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/crawler_learning}
SESSION_QUERIES=${SESSION_QUERIES:-300}
SEARCH_QUERIES=${SEARCH_QUERIES:-100}
AGENT_QUERIES=${AGENT_QUERIES:-20}
SETTING=${SETTING:-both}
if [ "$SETTING" = date_filtered ]; then
  DENSE_BEFORE=${DENSE_BEFORE:-2024-07-31}  # the latest before-date of the dev queries (20240731)
else
  DENSE_BEFORE=${DENSE_BEFORE:-null}        # whole-corpus searches: the dense index over every paper
fi
SFT_EXTRA=${SFT_EXTRA:-}
TEACHER=${TEACHER:-verified}
DEV=../shared/data/queries/autoscholarquery_dev.jsonl
source scripts/_selector_model.sh
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"

# 1. imitation data (Appendix A.1)
scholar data_gen crawler_sessions papers=shared_corpus search=bm25 llm=smollm2_vllm data_gen.queries=$DEV \
  data_gen.teacher="$TEACHER" limit="$SESSION_QUERIES" out_dir="$OUT/sessions"

# 2. imitation learning (a plain HF dir in $OUT/crawler_sft/final)
# shellcheck disable=SC2086
scholar train crawler_sft sft.train_file="$OUT/sessions/train.jsonl" sft.run_name=crawler_sft_dev \
  sft.output_dir="$OUT/crawler_sft" heldout.fraction=0.15 sft.max_length=768 sft.num_train_epochs=1 \
  sft.learning_rate=1e-4 sft.eval_steps=10 sft.save_steps=10 hydra.run.dir="$OUT/crawler_sft_run" $SFT_EXTRA

# 3. Table 2's rows through one harness, same queries, same corpus and date filter (Hydra overrides are one line:
#    the rows are joined below)
ROWS=(
  "{name: search_bm25, method: search, search: bm25, label: 'Search-only (BM25)'}"
  "{name: search_dense, method: search, search: dense, label: 'Search-only (dense, MiniLM)'}"
  "{name: search_hybrid, method: search, search: hybrid, label: 'Search-only (hybrid RRF)'}"
  "{name: verified_teacher, method: verified_teacher, search: bm25, label: 'Verified teacher, BM25 (oracle: the ceiling of its imitation data)'}"
  "{name: paraphrase_bm25, method: paraphrase, search: bm25, limit: $AGENT_QUERIES, label: 'LLM paraphrase (SmolLM2, Table 13) + BM25'}"
  "{name: agent_smollm2, method: agent, limit: $AGENT_QUERIES, label: 'Agent, SmolLM2 before crawler SFT'}"
  "{name: agent_smollm2_instructed, method: agent, instructed_prompts: true, limit: $AGENT_QUERIES, label: 'Agent, SmolLM2 before SFT + format instructions (prompted agent)'}"
  "{name: agent_sft, method: agent, crawler_model: '$OUT/crawler_sft/final', limit: $AGENT_QUERIES, label: 'Agent, SmolLM2 after crawler SFT'}"
  "{name: agent_sft_no_expand, method: agent, crawler_model: '$OUT/crawler_sft/final', expand: false, limit: $AGENT_QUERIES, label: 'Agent after SFT, w/o [Expand] (Table 5)'}"
)
source scripts/_eval_rows.sh   # RUN_ROWS=<comma-separated row names> picks a subset
scholar eval pasa papers=shared_corpus search=bm25 search.dense_before="$DENSE_BEFORE" queries.path=$DEV \
  queries.exclude_qids_file="$OUT/crawler_sft/split/train_qids.txt" queries.limit="$SEARCH_QUERIES" \
  selector_llm.model="$SELECTOR_MODEL" crawler.env.max_actions=5 crawler.env.max_sessions=4 chunk_queries=10 \
  setting="$SETTING" resume_dir="$OUT/eval_dev" "$ROWS_ARG"
echo "report: $OUT/eval_dev/report.md"
