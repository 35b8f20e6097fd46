#!/usr/bin/env bash
# What the CPU default Selector changes for a reader: three requests through `scholar pasa search` on the bundled
# corpus, the top 10 with the base SmolLM2 Selector (before: selector=cpu at PaSa's 0.5) and with the CPU default, the
# embedding Selector (after). The crawl is the same (the LLM response cache), so only the Selector differs.
# SEARCH=dense: the crawl searches with dense search instead, before = the CPU default (the embedding Selector),
# after = selector=provenance, which judges dense hits with the lexical Selector (docs/selector.md).
#
#   OUT=outputs/selector_before_after bash scripts/selector_before_after.sh     # -> $OUT/{before,after}_{1,2,3}.txt
#   SEARCH=dense OUT=outputs/selector_before_after_dense bash scripts/selector_before_after.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/selector_before_after}
SEARCH=${SEARCH:-auto}
BEFORE="selector=cpu selector.marks_selected=true"
AFTER="selector=embedding"
if [ "$SEARCH" = dense ]; then BEFORE="selector=embedding"; AFTER="selector=provenance"; fi
mkdir -p "$OUT"
i=0
for q in "Give me papers about contrastive learning for sentence embeddings" \
         "Which papers improve the sample efficiency of PPO?" \
         "graph neural networks for molecular property prediction"; do
  i=$((i+1))
  # shellcheck disable=SC2086
  scholar pasa search query="$q" search="$SEARCH" $BEFORE top=10 \
    paths.output_dir="$OUT/before_$i" > "$OUT/before_$i.txt"
  # shellcheck disable=SC2086
  scholar pasa search query="$q" search="$SEARCH" $AFTER top=10 paths.output_dir="$OUT/after_$i" > "$OUT/after_$i.txt"
done
grep -H "papers crawled" "$OUT"/*_?.txt
