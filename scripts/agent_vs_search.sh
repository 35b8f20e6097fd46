#!/usr/bin/env bash
# Does the agent beat the search it wraps? The embedded default Crawler (or CRAWLER_MODEL / ADAPTER) against the search
# it wraps, on AutoScholarQuery dev queries it was never trained on (the shared corpus: 97k arXiv CS papers + the dev
# gold papers), in both settings, with bootstrap 95 % intervals and the equal-budget comparison:
#
#   nice -n 10 bash scripts/agent_vs_search.sh > outputs/agent_vs_search/run.log 2>&1
#
# - held-out: every dev query except the 70 the shipped adapter was trained on
#   (scholar_agents/assets/crawler_adapter/train_qids.txt; EXCLUDE=<file> for another crawler's training qids);
# - date_filtered (PaSa §5.1): search-only BM25 / dense / hybrid on $SEARCH_QUERIES queries, the verified teacher
#   (oracle ceiling), and the agent on the first $AGENT_QUERIES, searching with search=auto = hybrid (the backend
#   the adapter's data were verified on). The dense index covers the papers before $DENSE_BEFORE (the latest dev
#   query date): exact for these searches, ~9.5k papers to encode instead of 99k;
# - whole_corpus (ours): search over all 99k papers, expansion still date-filtered. A whole-corpus dense index
#   needs every paper encoded (measured 16-19 papers/s with MiniLM on 2 cores: 80-100 min, resumable), so this
#   setting searches with BM25 (report: $OUT/whole_corpus) unless DENSE_WHOLE=1: then dense + hybrid rows too, and
#   the teacher and the agent on hybrid (report: $OUT/whole_corpus_hybrid).
# Extra agent rows: AGENT_ROWS (e.g. a PPO policy: "{name: agent_ppo, method: agent, crawler_model: <dir>, ...}").
# Every step resumes (resume_dir): re-run the same command after an interruption.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/agent_vs_search}
PY=${PY:-.venv/bin/python}
SEARCH_QUERIES=${SEARCH_QUERIES:-200}
AGENT_QUERIES=${AGENT_QUERIES:-50}
DENSE_BEFORE=${DENSE_BEFORE:-2024-07-31}
DENSE_WHOLE=${DENSE_WHOLE:-0}
SETTINGS=${SETTINGS:-date_filtered whole_corpus}
EXCLUDE=${EXCLUDE:-scholar_agents/assets/crawler_adapter/train_qids.txt}
AGENT_ROWS=${AGENT_ROWS:-}
DEV=${DEV:-../shared/data/queries/autoscholarquery_dev.jsonl}
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"

COMMON=(papers=shared_corpus queries.path="$DEV" queries.exclude_qids_file="$EXCLUDE" queries.limit="$SEARCH_QUERIES"
        crawler.env.max_actions=5 crawler.env.max_sessions=4 chunk_queries=10)
AGENT="{name: agent_sft, method: agent, limit: $AGENT_QUERIES, label: 'Agent, SmolLM2 + shipped verified-teacher adapter (SFT)'}"
TEACHER="{name: verified_teacher, method: verified_teacher, label: 'Verified teacher (oracle: the ceiling of its data)'}"
for setting in $SETTINGS; do
  if [ "$setting" = date_filtered ]; then
    SEARCH=(search=auto search.dense_before="$DENSE_BEFORE")
    ROWS="{name: search_bm25, method: search, search: bm25, label: 'Search-only (BM25)'},"
    ROWS+="{name: search_dense, method: search, search: dense, label: 'Search-only (dense, MiniLM)'},"
    ROWS+="{name: search_hybrid, method: search, search: hybrid, label: 'Search-only (hybrid RRF)'}"
  elif [ "$DENSE_WHOLE" = 1 ]; then
    SEARCH=(search=auto search.dense_before=null)
    ROWS="{name: search_bm25, method: search, search: bm25, label: 'Search-only (BM25)'},"
    ROWS+="{name: search_dense, method: search, search: dense, label: 'Search-only (dense, MiniLM)'},"
    ROWS+="{name: search_hybrid, method: search, search: hybrid, label: 'Search-only (hybrid RRF)'}"
  else
    SEARCH=(search=bm25)
    ROWS="{name: search_bm25, method: search, search: bm25, label: 'Search-only (BM25)'}"
  fi
  ROWS+=",$TEACHER,$AGENT${AGENT_ROWS:+,$AGENT_ROWS}"
  # its own run dir per backend: a resumed row must keep the settings it ran with (eval pasa refuses otherwise)
  DIR="$OUT/$setting"; [ "$setting" = whole_corpus ] && [ "$DENSE_WHOLE" = 1 ] && DIR="$OUT/whole_corpus_hybrid"
  mkdir -p "$DIR"
  "$PY" -m scholar_agents eval pasa "${COMMON[@]}" "${SEARCH[@]}" setting="$setting" resume_dir="$DIR" \
    "rows=[$ROWS]" "$@"
  echo "report: $DIR/report.md"
done
