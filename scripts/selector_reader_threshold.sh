#!/usr/bin/env bash
# The "selected" mark fitted for a reader on real crawls' hits (docs/results/selector_embedding.md, "The reader's mark"):
#   1. `eval pasa` crawls of FIT and HELD-OUT queries in both settings (date-filtered and whole corpus), the agent as
#      `pasa search` runs it (the user's words searched, fallback search), BM25, no Selector (the script re-scores);
#   2. scripts/selector_reader_threshold.py: the lowest threshold whose precision on the fit crawls' gold-labelled
#      papers reaches TARGET, reported on the held-out crawls per setting; SHIP=1 writes it into the bundled card.
#
#   OUT=outputs/selector_mark bash scripts/selector_reader_threshold.sh                        # the bundled sample
#   CORPUS=shared_corpus OUT=outputs/selector_mark_shared SHIP=1 bash scripts/selector_reader_threshold.sh
# CORPUS=sample: the sample's 100 queries, 0-69 fit, 70-99 held-out. CORPUS=shared_corpus (needs ../shared/data): the
# AutoScholarQuery dev queries the Selector was not fitted on, the first N_FIT fit, the next N_HELD held-out.
# Resumable (eval pasa's resume_dir). The script leaves out the queries the Selector was fitted on in both cases.
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=${CORPUS:-sample}
OUT=${OUT:-outputs/selector_mark}
PY=${PY:-python}
TARGET=${TARGET:-0.6}
N_FIT=${N_FIT:-100}
N_HELD=${N_HELD:-60}
MODEL=${MODEL:-scholar_agents/assets/selector_embedding}
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
if [ "$CORPUS" = sample ]; then
  QUERIES=scholar_agents/assets/sample/autoscholarquery_dev.jsonl
  FIT_Q=(queries.offset=0 queries.limit=70)
  HELD_Q=(queries.offset=70 queries.limit=30)
else
  QUERIES=../shared/data/queries/autoscholarquery_dev.jsonl
  [ -f "$QUERIES" ] || { echo "needs $QUERIES (the shared data)" >&2; exit 2; }
  "$PY" - "$QUERIES" "$MODEL" "$OUT" "$N_FIT" "$N_HELD" <<'PYEOF'
import json, sys
from pathlib import Path
queries, model, out, n_fit, n_held = sys.argv[1:6]
fitted = set(json.loads((Path(model) / "selector_meta.json").read_text())["train"]["qids"])
keep = [l for l in Path(queries).read_text().splitlines()
        if l.strip() and json.loads(l)["qid"] not in fitted and json.loads(l).get("answer_arxiv_id")]
n_fit, n_held = int(n_fit), int(n_held)
Path(out, "fit_queries.jsonl").write_text("".join(l + "\n" for l in keep[:n_fit]))
Path(out, "heldout_queries.jsonl").write_text("".join(l + "\n" for l in keep[n_fit:n_fit + n_held]))
print(f"fit {min(n_fit, len(keep))} queries, held-out {len(keep[n_fit:n_fit + n_held])} (the Selector fitted on {len(fitted)})")
PYEOF
  FIT_Q=(queries.path="$OUT/fit_queries.jsonl")
  HELD_Q=(queries.path="$OUT/heldout_queries.jsonl")
fi
ROW="{name: agent, method: agent, fallback_search: true, search_user_query: true, use_selector: false}"
for split in fit heldout; do
  mkdir -p "$OUT/$split"
  if [ "$split" = fit ]; then Q=("${FIT_Q[@]}"); else Q=("${HELD_Q[@]}"); fi
  "$PY" -m scholar_agents eval pasa papers="$CORPUS" search=bm25 setting=both "${Q[@]}" chunk_queries=10 \
    bootstrap.samples=0 resume_dir="$OUT/$split" "rows=[$ROW]" "$@"
done
"$PY" scripts/selector_reader_threshold.py --fit "$OUT/fit" --heldout "$OUT/heldout" --out "$OUT" \
  --papers "$CORPUS" --queries "$QUERIES" --target "$TARGET" --selector "model=$MODEL" \
  $([ "${SHIP:-0}" = 1 ] && echo --write-card "$MODEL")
