#!/usr/bin/env bash
# Related expansion against the search it wraps (docs/pasa.md "Related expansion: following what a crawl found"):
# the default agent with and without crawler.env.related_expand, the gold-blind ceiling beside the hindsight teacher,
# and the agent's ranked top 10 beside "search the user's words, then Selector re-rank" at the same number of papers,
# on the shared corpus (needs ../shared), in both settings, on
#   - the 100 held-out AutoScholarQuery dev queries (97 with gold in the corpus), original and multi_sentence forms;
#   - the 33 requests rewritten by hand (scholar_agents/assets/researcher_requests/heldout_by_hand.jsonl).
#
#   nice -n 10 bash scripts/expand_vs_search.sh > outputs/expand_vs_search/run.log 2>&1
#
# Rows: search-only BM25 (and dense / hybrid where a dense index exists: date-filtered; whole corpus with
# DENSE_WHOLE=1); agent (pasa search's default: adapter, grammar, the user's words searched, the Selector ranks)
# with related expansion (agent_related) and without (agent); the gold-blind oracle (reads the gold, chooses only
# among searches a policy could write, at MAX_SEARCHES searches; and the same restricted to the request's own
# candidates, following nothing: their difference is what following found papers adds) and the verified teacher
# (hindsight); search +
# Selector re-rank at the related agent's number of papers per query (rerank_*). Budgets: crawler.env.max_actions
# $MAX_ACTIONS, max_sessions $MAX_SESSIONS. AGENT_ROWS adds agent rows (e.g. an RL adapter:
# "{name: agent_rl, method: agent, adapter: <dir>, fallback_search: true, search_user_query: true, related_expand: true}").
# RELATED_ADAPTER=<adapter dir>: the related row (agent_related_sft) uses that adapter, the re-rank rows
# (rerank_*_sft) its number of papers.
# ROWSET=page runs only the page's pipeline (the default agent row) beside the searches and their re-rank at the
# agent's number of papers, into <setting>_page (docs/pasa.md "The page against the search it wraps"; e.g.
# FORMS=imperative,papers_that,looking_for,show_me for the request forms the related study does not run).
# PAGE_DENSE_K (ROWSET=page, default 10: pasa search's crawler.env.dense_search_k): the page's agent row runs the
# Crawler's searches at that k on a dense or hybrid backend (date-filtered here), the user's words at 20;
# PAGE_DENSE_K=null = the page as first measured, the Crawler at 20 on every backend (docs/results/page_vs_search.md:
# its tables before "The rule by backend").
# SUPPLEMENT_K=<k> (ROWSET=page) adds the page's agent with the Crawler's own searches at k over the user's words at
# USER_QUERY_K (default 20, eval pasa's search_k; crawler.env.user_query_k; row agent_k<k>) and the re-rank rows at its
# number of papers (rerank_*_k<k>): docs/results/page_vs_search.md "A smaller supplement".
# BM25_ONLY=1: every setting searches with BM25 only (search=bm25, no dense or hybrid rows); the date-filtered runs
# go to <set>/date_filtered_bm25[_page] (the page's rule by backend measured where its BM25 side was not chosen).
# AGENTS=0 runs only the rows without an LLM (search, oracle, teacher, re-rank at RERANK_K papers): minutes, not hours.
# Every eval resumes (resume_dir): re-run the same command after an interruption.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/expand_vs_search}
PY=${PY:-.venv/bin/python}
DENSE_BEFORE=${DENSE_BEFORE:-2024-07-31}
DENSE_WHOLE=${DENSE_WHOLE:-0}
SETTINGS=${SETTINGS:-date_filtered whole_corpus}
SETS=${SETS:-heldout by_hand}
FORMS=${FORMS:-original,multi_sentence}
MAX_ACTIONS=${MAX_ACTIONS:-6}
MAX_SESSIONS=${MAX_SESSIONS:-4}
MAX_SEARCHES=${MAX_SEARCHES:-4}
AGENTS=${AGENTS:-1}
ROWSET=${ROWSET:-expand}
case "$ROWSET" in expand|page) ;; *) echo "ROWSET must be expand or page, got $ROWSET" >&2; exit 2;; esac
RERANK_K=${RERANK_K:-20}
HELD=${HELD:-scholar_agents/assets/crawler_adapter/heldout_qids.txt}
DEV=${DEV:-../shared/data/queries/autoscholarquery_dev.jsonl}
BY_HAND=scholar_agents/assets/researcher_requests/heldout_by_hand.jsonl
[ -f "$DEV" ] || { echo "needs $DEV (the shared data)" >&2; exit 2; }
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
"$PY" scripts/heldout_queries.py "$DEV" "$HELD" "$OUT/heldout_queries.jsonl"

AGENT="{name: agent, method: agent, fallback_search: true, search_user_query: true, label: 'Agent (default, no related expansion)'}"
RELATED="{name: agent_related, method: agent, fallback_search: true, search_user_query: true, related_expand: true, label: 'Agent + related expansion'}"
RR=""   # suffix of the re-rank rows' names: they search as many papers as the related row's crawl held
if [ -n "${RELATED_ADAPTER:-}" ]; then
  # the related row with another adapter (scripts/train_related_crawler.sh's), in place of the shipped one (which
  # writes [Stop] in every related session: its related row equals the agent row)
  RELATED="{name: agent_related_sft, method: agent, adapter: '$RELATED_ADAPTER', fallback_search: true, search_user_query: true, related_expand: true, label: 'Agent + related expansion (adapter SFT on related sessions)'}"
  RR=_sft
fi
ORACLE="{name: oracle, method: gold_blind_oracle, max_searches: $MAX_SEARCHES, label: 'Gold-blind oracle (reachable ceiling)'}"
ORACLE1="{name: oracle_no_follow, method: gold_blind_oracle, max_searches: $MAX_SEARCHES, follow: 0, label: 'Gold-blind oracle, the request only (follows nothing)'}"
TEACHER="{name: teacher, method: verified_teacher, label: 'Verified teacher (hindsight, not reachable)'}"
# the re-rank rows search as many papers as the related agent's crawl held (query by query), or RERANK_K without agents
if [ "$AGENTS" = 1 ]; then BUDGET="budget_of: agent_related$RR"; else BUDGET="rerank_k: $RERANK_K"; fi
[ "$ROWSET" = page ] && { BUDGET="budget_of: agent"; RR=""; }
PAGE_DENSE_K=${PAGE_DENSE_K:-10}
if [ "$ROWSET" = page ] && [ "$PAGE_DENSE_K" != null ]; then
  AGENT="{name: agent, method: agent, fallback_search: true, search_user_query: true, dense_search_k: $PAGE_DENSE_K, label: 'Agent as the page runs it'}"
fi
for set in $SETS; do
  if [ "$set" = heldout ]; then QPATH="$OUT/heldout_queries.jsonl"; PHR=("phrasings=[$FORMS]"); else QPATH=$BY_HAND; PHR=(); fi
  for setting in $SETTINGS; do
    if [ "${BM25_ONLY:-0}" != 1 ] && { [ "$setting" = date_filtered ] || [ "$DENSE_WHOLE" = 1 ]; }; then
      BEFORE=$DENSE_BEFORE; [ "$setting" = whole_corpus ] && BEFORE=null
      SEARCH=(search=auto search.dense_before="$BEFORE")
      ROWS="{name: search_bm25, method: search, search: bm25},{name: search_hybrid, method: search, search: hybrid},"
      ROWS+="{name: rerank_hybrid$RR, method: search_rerank, search: hybrid, $BUDGET, label: 'hybrid + Selector re-rank'},"
    else
      SEARCH=(search=bm25)
      ROWS="{name: search_bm25, method: search, search: bm25},"
    fi
    ROWS+="{name: rerank_bm25$RR, method: search_rerank, search: bm25, $BUDGET, label: 'BM25 + Selector re-rank'}"
    DIR="$OUT/$set/$setting"
    [ "${BM25_ONLY:-0}" = 1 ] && [ "$setting" = date_filtered ] && DIR+=_bm25
    if [ "$ROWSET" = page ]; then
      ROWS="$AGENT,$ROWS"; DIR+=_page
      if [ -n "${SUPPLEMENT_K:-}" ]; then
        SK=$SUPPLEMENT_K UK=${USER_QUERY_K:-20}
        ROWS+=",{name: agent_k$SK, method: agent, fallback_search: true, search_user_query: true, search_k: $SK,"
        ROWS+=" user_query_k: $UK, label: 'Agent, the Crawler at k=$SK over the user words at k=$UK'}"
        for kind in hybrid bm25; do  # the re-rank of each search the run has, at this row's number of papers
          case "$ROWS" in *"name: search_$kind,"*)
            ROWS+=",{name: rerank_${kind}_k$SK, method: search_rerank, search: $kind, budget_of: agent_k$SK}";; esac
        done
      fi
    else
      ROWS+=",$ORACLE,$ORACLE1,$TEACHER"
      [ "$AGENTS" = 1 ] && ROWS="$AGENT,$RELATED,$ROWS"
      [ "$AGENTS" = 1 ] || DIR+=_searches
    fi
    [ -n "${AGENT_ROWS:-}" ] && ROWS+=",$AGENT_ROWS"
    mkdir -p "$DIR"
    "$PY" -m scholar_agents eval pasa papers=shared_corpus queries.path="$QPATH" "${SEARCH[@]}" setting="$setting" \
      crawler.env.max_actions="$MAX_ACTIONS" crawler.env.max_sessions="$MAX_SESSIONS" chunk_queries=10 \
      resume_dir="$DIR" "${PHR[@]}" "rows=[$ROWS]" "$@"
    echo "report: $DIR/report.md"
  done
done
