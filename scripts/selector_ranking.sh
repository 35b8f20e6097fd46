#!/usr/bin/env bash
# Is the agent's final list better ordered by the Selector, by the crawl, or by their fusion?
# The embedding Selector scores the agent's crawl (SmolLM2 + the shipped Crawler adapter, date-filtered, BM25) on
#   dev:      100 of the Crawler's training queries   -> the default ranking is chosen here (best mean nDCG@10)
#   held-out: the Crawler's 100 held-out queries       -> reported, paired against the crawl order
# minus every query whose pairs fitted the Selector. `eval pasa` measures all three orders of the same crawl
# (report section "Ranking the final list").
#
#   OUT=/work/runs/selector_ranking bash scripts/selector_ranking.sh      # resumable (eval pasa's resume_dir)
#   SEARCH=dense SELECTOR=provenance OUT=/work/runs/selector_ranking_dense bash scripts/selector_ranking.sh
# SEARCH= the crawl's search backend (bm25), SELECTOR= the Selector preset (embedding; provenance also leaves out
# the queries its lexical head was fitted on).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/selector_ranking}
PY=${PY:-python}
MODEL=${MODEL:-scholar_agents/assets/selector_embedding}
SEARCH=${SEARCH:-bm25}
SELECTOR=${SELECTOR:-embedding}
LEXICAL_MODEL=${LEXICAL_MODEL:-scholar_agents/assets/selector_lexical}
FIT_PAIRS=${FIT_PAIRS:-}   # the Selector's training pairs (their queries are excluded); default: the model card's
N_DEV=${N_DEV:-100}
DEV=${DEV:-../shared/data/queries/autoscholarquery_dev.jsonl}
ADAPTER=scholar_agents/assets/crawler_adapter
[ -f "$DEV" ] || { echo "needs $DEV (the shared data)" >&2; exit 2; }
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
"$PY" - "$DEV" "$ADAPTER" "$MODEL" "$OUT" "$N_DEV" "$FIT_PAIRS" "$([ "$SELECTOR" = provenance ] && echo "$LEXICAL_MODEL")" <<'PYEOF'
import json, sys
from pathlib import Path
dev, adapter, model, out, n_dev, fit_pairs, lexical = sys.argv[1:8]
meta = json.loads((Path(model) / "selector_meta.json").read_text())
fitted = set(meta.get("train", {}).get("qids", []))
if lexical:  # selector=provenance: the lexical head's fitting queries too
    fitted |= set(json.loads((Path(lexical) / "selector_meta.json").read_text()).get("train", {}).get("qids", []))
if fit_pairs:
    fitted |= {json.loads(l).get("qid") for l in Path(fit_pairs).read_text().splitlines() if l.strip()}
if not fitted:
    sys.exit(f"{model}/selector_meta.json lists no fitting queries (train.qids) and FIT_PAIRS is unset")
lines = [l for l in Path(dev).read_text().splitlines() if l.strip()]
by_qid = {str(json.loads(l)["qid"]): l for l in lines}
train = [q for q in Path(adapter, "train_qids.txt").read_text().split() if q not in fitted and q in by_qid]
held = [q for q in Path(adapter, "heldout_qids.txt").read_text().split() if q not in fitted and q in by_qid]
Path(out, "dev_queries.jsonl").write_text("".join(by_qid[q] + "\n" for q in train[:int(n_dev)]))
Path(out, "heldout_queries.jsonl").write_text("".join(by_qid[q] + "\n" for q in held))
print(f"dev {min(len(train), int(n_dev))} queries, held-out {len(held)} (the Selector fitted on {len(fitted)} queries)")
PYEOF
ROW="{name: agent, method: agent, fallback_search: true, label: 'Agent + $SELECTOR Selector'}"
SEL_ARGS=(selector="$SELECTOR" selector.model="$MODEL")
[ "$SELECTOR" = provenance ] && SEL_ARGS+=(selector.lexical_model="$LEXICAL_MODEL")
for split in dev heldout; do
  mkdir -p "$OUT/$split"
  "$PY" -m scholar_agents eval pasa papers=shared_corpus queries.path="$OUT/${split}_queries.jsonl" search="$SEARCH" \
    setting=date_filtered "${SEL_ARGS[@]}" crawler.env.max_actions=5 \
    crawler.env.max_sessions=4 chunk_queries=10 resume_dir="$OUT/$split" "rows=[$ROW]" "$@"
done
"$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def means(split):
    s = json.loads((out / split / "summary.json").read_text())
    rows = [json.loads(l) for l in (out / split / "per_query" / "agent.jsonl").read_text().splitlines() if l.strip()]
    return {h: {m: sum(r[f"{h}_{m}"] for r in rows if f"{h}_{m}" in r) / max(1, sum(f"{h}_{m}" in r for r in rows))
                for m in ("recall_at_10", "ndcg_at_10")} for h in ("selector", "crawl", "fusion")}, s["ranking_pairs"]
dev, _ = means("dev")
held, pairs = means("heldout")
choice = max(dev, key=lambda h: (dev[h]["ndcg_at_10"], h == "crawl"))
(out / "choice.json").write_text(json.dumps({"chosen_on_dev": choice, "dev": dev, "heldout": held,
                                             "heldout_pairs": pairs}, indent=1))
print(f"chosen on dev (best nDCG@10): {choice}")
for split, m in (("dev", dev), ("held-out", held)):
    print(split, {h: {k: round(v, 4) for k, v in x.items()} for h, x in m.items()})
PYEOF
