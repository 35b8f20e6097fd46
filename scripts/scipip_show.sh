#!/usr/bin/env bash
# SciPIP "Show" on the literature DB built from ../shared/data with SmolLM2 (docs/scipip.md):
# SKC retrieval in the four Fig. 6 modes for 5 ACL 2024 backgrounds, the dual-path idea pipeline for 3 of them,
# and the LLM-judged table. Resumable pieces: the DB build and every LLM call are cached.
#   OMP_NUM_THREADS=1 bash scripts/scipip_show.sh > outputs/scipip_demo/show.log 2>&1
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/scipip_demo}
STORE=$PWD/$OUT/store.sqlite
BGS=$PWD/../shared/data/scipip/acl2024_backgrounds.jsonl
LLM=${LLM:-llm=smollm2_vllm}
for m in skc abstract background keyword; do
  scholar scipip retrieve scipip=cpu_demo scipip.store_path="$STORE" scipip.skc.mode=$m scipip.skc.query_keywords=given \
    scipip.num_backgrounds=5 scipip.backgrounds_path="$BGS" hydra.run.dir="$OUT/s2_retrieve_$m"
done
# shellcheck disable=SC2086
scholar scipip ideas scipip=cpu_demo scipip.store_path="$STORE" scipip.num_backgrounds=3 scipip.backgrounds_path="$BGS" \
  $LLM llm.cache_path="$PWD/$OUT/llm_cache.sqlite" hydra.run.dir="$OUT/s2_ideas"
# shellcheck disable=SC2086
scholar eval ideas scipip=cpu_demo ideas_path="$OUT/s2_ideas/ideas.json" $LLM llm.cache_path="$PWD/$OUT/llm_cache.sqlite" \
  hydra.run.dir="$OUT/s2_eval_ideas"
