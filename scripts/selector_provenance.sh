#!/usr/bin/env bash
# The provenance Selector (scholar_agents/pasa/selectors/provenance.py) — papers a dense search found
# judged by the lexical Selector, every other paper by the embedding Selector — against zero-shot MiniLM cosine and
# BM25 on held-out queries, negatives mined by BM25, dense and hybrid search, in the original phrasing and the five
# request forms; one table (docs/selector.md, "The provenance Selector").
#
#   OUT=/work/runs/selector bash scripts/selector_provenance.sh     # SHIP=1: also write the bundled lexical Selector
#
# Reads the pair sets scripts/selector_embedding.sh builds in the same OUT (pairs_<miner>/; run it first) and scores
# with the embedding Selector MODEL (default: the bundled one, fitted on the BM25-mined training queries).
# 1. `scholar train selector_lexical` on the dense-mined pairs' train part, also asked in the five request forms (its
#    dev split chooses C and the threshold);
# 2. `scholar eval selector selector=provenance data.found_by=<miner>` on each held-out part in each phrasing: every
#    paper of a set as found by the set's miner, so dense-mined pairs go to the lexical head and the others to the
#    embedding Selector;
# 3. scripts/selector_provenance_table.py writes $OUT/selector_provenance.md.
# Resumable: the fitted head and finished evals are kept. SHIP=1 copies the head and its card to
# scholar_agents/assets/selector_lexical/ (what selector=provenance loads by default).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/selector_embedding}
MINERS=${MINERS:-"bm25 dense hybrid"}
FORMS=${FORMS:-"original imperative papers_that looking_for show_me multi_sentence"}
MODEL=${MODEL:-bundled}
LEXICAL_MINER=${LEXICAL_MINER:-dense}
TRAIN_EXTRA=${TRAIN_EXTRA:-"train.augment_forms=[imperative,papers_that,looking_for,show_me,multi_sentence]"}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
for miner in $MINERS $LEXICAL_MINER; do
  [ -f "$OUT/pairs_$miner/pairs_test.jsonl" ] || {
    echo "no $OUT/pairs_$miner: build the pair sets first (OUT=$OUT bash scripts/selector_embedding.sh)" >&2; exit 2; }
done
if [ ! -f "$OUT/lexical_model/lexical_head.safetensors" ]; then
  # shellcheck disable=SC2086
  scholar train selector_lexical train.train_file="$OUT/pairs_$LEXICAL_MINER/pairs_train.jsonl" \
    train.output_dir="$OUT/lexical_model" hydra.run.dir="$OUT/lexical_train" $TRAIN_EXTRA
fi
for miner in $MINERS; do
  for form in $FORMS; do
    dir="$OUT/eval_provenance/${miner}_$form"
    [ -f "$dir/metrics.json" ] && continue
    scholar eval selector selector=provenance selector.model="$MODEL" selector.lexical_model="$OUT/lexical_model" \
      data.path="$OUT/pairs_$miner/pairs_test.jsonl" data.found_by="$miner" data.phrasing="$form" \
      name="provenance Selector" hydra.run.dir="$dir"
  done
done
ship=""; [ "${SHIP:-0}" = 1 ] && ship="--ship scholar_agents/assets/selector_lexical"
# shellcheck disable=SC2086
python scripts/selector_provenance_table.py "$OUT" --miners $MINERS --forms $FORMS --lexical-miner "$LEXICAL_MINER" $ship
