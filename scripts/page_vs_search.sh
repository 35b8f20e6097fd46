#!/usr/bin/env bash
# The `pasa serve` page's top 10 against BM25's and hybrid's on four researcher requests, judged blind
# (scripts/page_vs_search.py): the three lists and the blind pool, then the table once the pool is judged.
#
#   nice -n 19 bash scripts/page_vs_search.sh            # run (if no key.json yet), then score if judged
#   JUDGED=<file> bash scripts/page_vs_search.sh         # another judge's file
#
# Judge OUT/pool.json (titles and abstracts, shuffled, no source) before opening OUT/key.json.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/page_vs_search}
PY=${PY:-.venv/bin/python}
JUDGED=${JUDGED:-tests/assets/page_requests_judged.json}
export TOKENIZERS_PARALLELISM=false
[ -f "$OUT/key.json" ] || "$PY" scripts/page_vs_search.py run --out "$OUT" "$@"
if [ -f "$JUDGED" ]; then
  "$PY" scripts/page_vs_search.py score --key "$OUT/key.json" --judgments "$JUDGED" --out "$OUT"
else
  echo "judge $OUT/pool.json into $JUDGED, then run this again"
fi
