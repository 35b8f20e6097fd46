#!/usr/bin/env bash
# Phrasing robustness: the default Crawler (SmolLM2 + the shipped adapter, grammar-constrained) against the search it
# wraps, on the AutoScholarQuery dev queries the adapter never saw (scholar_agents/assets/crawler_adapter/
# heldout_qids.txt: 100 of the 1,000), in their original phrasing and rewritten into researchers' request forms
# (data_gen/request_forms.py), over the shared corpus (needs ../shared), in both settings:
#
#   nice -n 10 bash scripts/crawler_phrasings.sh > outputs/crawler_phrasings/run.log 2>&1
#
# - date_filtered (PaSa §5.1): search=auto = hybrid (the dense index over the papers before $DENSE_BEFORE);
# - whole_corpus: search over all 99k papers with BM25 (a whole-corpus dense index is 65 min of encoding on 2
#   cores: DENSE_WHOLE=1 searches hybrid there too, after `scholar papers build papers=shared_corpus search=hybrid
#   search.dense_before=null`).
# Rows: search-only (bm25, dense, hybrid in date_filtered; the setting's backend in whole_corpus) on all held-out
# queries; the agent as `pasa search` runs it (`fallback_search: true`) on the first $AGENT_QUERIES; with POLICY_ROW=1
# also the learned policy alone (no fallback). The S_q session and its expansions up to crawler.env.max_sessions; no
# Selector (use_selector: false: the crawl's own order ranks; the Selector is not what this issue trains). Each
# form's table: valid-search rate, fallbacks, actions/query, crawler recall, recall@20 and the paired difference to
# search-only on the same rewritten queries, equal budget included, with 95 % bootstrap intervals.
# FORMS picks the forms (default all six); EXTRA_ROWS adds rows (e.g. the adapter before retraining: "{name:
# agent_before, method: agent, adapter: <dir>, fallback_search: true, use_selector: false, limit: 50}"); every step
# resumes (resume_dir): re-run the same command.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/crawler_phrasings}
PY=${PY:-.venv/bin/python}
AGENT_QUERIES=${AGENT_QUERIES:-100}
POLICY_ROW=${POLICY_ROW:-0}
DENSE_BEFORE=${DENSE_BEFORE:-2024-07-31}
DENSE_WHOLE=${DENSE_WHOLE:-0}
SETTINGS=${SETTINGS:-date_filtered whole_corpus}
FORMS=${FORMS:-original,imperative,papers_that,looking_for,show_me,multi_sentence}
HELD=${HELD:-scholar_agents/assets/crawler_adapter/heldout_qids.txt}
DEV=${DEV:-../shared/data/queries/autoscholarquery_dev.jsonl}
[ -f "$DEV" ] || { echo "needs $DEV (the shared data)" >&2; exit 2; }
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
"$PY" scripts/heldout_queries.py "$DEV" "$HELD" "$OUT/heldout_queries.jsonl"

AGENT="{name: agent, method: agent, fallback_search: true, use_selector: false, limit: $AGENT_QUERIES, label: 'Agent (default: adapter, grammar, fallback search)'}"
POLICY="{name: agent_policy, method: agent, use_selector: false, limit: $AGENT_QUERIES, label: 'Agent, learned policy alone (no fallback)'}"
for setting in $SETTINGS; do
  if [ "$setting" = date_filtered ] || [ "$DENSE_WHOLE" = 1 ]; then
    BEFORE=$DENSE_BEFORE; [ "$setting" = whole_corpus ] && BEFORE=null
    SEARCH=(search=auto search.dense_before="$BEFORE")
    ROWS="{name: search_bm25, method: search, search: bm25},{name: search_dense, method: search, search: dense},"
    ROWS+="{name: search_hybrid, method: search, search: hybrid}"
  else
    SEARCH=(search=bm25)
    ROWS="{name: search_bm25, method: search, search: bm25}"
  fi
  ROWS+=",$AGENT"; [ "$POLICY_ROW" = 1 ] && ROWS+=",$POLICY"; [ -n "${EXTRA_ROWS:-}" ] && ROWS+=",$EXTRA_ROWS"
  DIR="$OUT/$setting"; [ "$setting" = whole_corpus ] && [ "$DENSE_WHOLE" = 1 ] && DIR="$OUT/whole_corpus_hybrid"
  mkdir -p "$DIR"
  "$PY" -m scholar_agents eval pasa papers=shared_corpus queries.path="$OUT/heldout_queries.jsonl" "${SEARCH[@]}" \
    setting="$setting" crawler.env.max_actions=5 crawler.env.max_sessions=4 chunk_queries=10 resume_dir="$DIR" \
    "phrasings=[$FORMS]" "rows=[$ROWS]" "$@"
  echo "report: $DIR/report.md"
done

# the per-form tables of every setting, for the adapter's model card and the demo report (SHIP=0 skips the copy)
"$PY" - "$OUT" "${SHIP:-1}" $SETTINGS <<'PYEOF'
import datetime, sys
from pathlib import Path
from scholar_agents.eval.pasa.report import phrasing_report
out, ship, settings = Path(sys.argv[1]), sys.argv[2] == "1", sys.argv[3:]
text = phrasing_report(
    [d for s in settings for d in sorted(out.glob(f"{s}*")) if d.is_dir()],
    f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d} by `bash scripts/crawler_phrasings.sh` (2 CPU "
    "cores): dev queries this adapter never saw, over the shared corpus (99,344 papers), no Selector (the crawl's "
    "order ranks), means with 95 % bootstrap intervals, differences paired on the same queries.")
(out / "evaluation.md").write_text(text)
if ship:
    Path("scholar_agents/assets/crawler_adapter/evaluation.md").write_text(text)
print(text)
PYEOF
