#!/usr/bin/env bash
# Issue 37 "Show": three requests through `scholar pasa search` on the bundled corpus, the top 10 with the base
# SmolLM2 Selector (before: selector=cpu at PaSa's 0.5) and with the CPU default, the embedding Selector (after).
# The crawl is the same (the LLM response cache), so only the Selector differs.
#
#   OUT=outputs/selector_before_after bash scripts/selector_before_after.sh     # -> $OUT/{before,after}_{1,2,3}.txt
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/selector_before_after}
mkdir -p "$OUT"
i=0
for q in "Give me papers about contrastive learning for sentence embeddings" \
         "Which papers improve the sample efficiency of PPO?" \
         "graph neural networks for molecular property prediction"; do
  i=$((i+1))
  scholar pasa search query="$q" selector=cpu selector.marks_selected=true top=10 \
    paths.output_dir="$OUT/before_$i" > "$OUT/before_$i.txt"
  scholar pasa search query="$q" top=10 paths.output_dir="$OUT/after_$i" > "$OUT/after_$i.txt"
done
grep -H "papers crawled" "$OUT"/*_?.txt
