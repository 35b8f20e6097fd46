"""The provenance Selector's held-out table (scripts/selector_provenance.sh): one row per negatives miner and phrasing,
from each ``scholar eval selector selector=provenance`` run's metrics.json, with each row's bar (zero-shot cosine
on BM25-mined negatives, BM25 on dense-mined ones); ``--ship DIR`` also writes the bundled lexical
Selector and its card (its held-out rows: the lexical miner's, where the provenance Selector IS the lexical head).

    python scripts/selector_provenance_table.py OUT [--miners bm25 dense hybrid] [--forms original ...] [--ship DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from selector_embedding_table import _ci, rows  # noqa: E402

HEAD_FILES = ("lexical_head.safetensors", "terms.json")


def verdict(r: dict) -> str:
    """Against the row's bar (cosine on BM25-mined negatives, BM25 on dense-mined ones; any other
    miner: the stronger of the two): above / tie / below by the paired difference's 95 % interval."""
    bar = {"bm25": "cosine", "dense": "bm25"}.get(r["miner"])
    if bar is None:
        bar = "cosine" if (r["cosine_auc"] or 0) >= (r["bm25_auc"] or 0) else "bm25"
    d = r["vs_cosine"] if bar == "cosine" else r["vs_bm25"]
    if not d or not d.get("ci"):
        return "n/a"
    return "above" if d["ci"][0] > 0 else ("below" if d["ci"][1] < 0 else "tie")


def table(found: list[dict], lexical_miner: str) -> str:
    lines = ["| negatives mined by | judged by | phrasing | pairs (positive) | AUC: provenance Selector "
             "| MiniLM cosine | BM25 | Δ vs cosine (95 % CI) | Δ vs BM25 (95 % CI) | vs the row's bar "
             "| P / R / F1 at the fitted threshold |", "|---|---|---|---:|---:|---:|---:|---|---|---|---|"]
    for r in found:
        head = "lexical" if r["miner"] == lexical_miner else "embedding"
        lines.append(f"| {r['miner']} | {head} | {r['phrasing']} | {r['pairs']} ({r['positives']}) "
                     f"| **{r['auc']:.3f}** | {r['cosine_auc']:.3f} | {r['bm25_auc']:.3f} "
                     f"| {_ci(r['vs_cosine'])} | {_ci(r['vs_bm25'])} "
                     f"| {verdict(r)} | {r['precision']:.3f} / {r['recall']:.3f} / {r['f1']:.3f} |")
    return "\n".join(lines)


def card(meta: dict, found: list[dict], lexical_miner: str) -> str:
    dev, tr, terms = meta.get("dev", {}), meta.get("train", {}), meta.get("terms", {})
    weights = ", ".join(f"{k} {v:+.2f}" for k, v in meta.get("weights", {}).items())
    return "\n".join([
        "# Lexical Selector (bundled)",
        "",
        "P(relevant) = a logistic regression over eight lexical features of a <query, paper> pair (BM25, IDF-weighted "
        "coverage and shared bigrams, each against title + abstract and against the title; the rarest shared term's "
        "IDF; the paper's length). `selector=provenance` judges the papers a dense search found with it "
        "(`scholar_agents/pasa/selectors/lexical.py`, `provenance.py`).",
        "",
        f"- fitted by: `scholar train selector_lexical` on `pairs_{lexical_miner}/pairs_train.jsonl` "
        f"({tr.get('pairs')} pairs with the request-form copies, {tr.get('positives')} positive, "
        f"{tr.get('queries')} AutoScholarQuery dev queries); C {meta.get('C')}; IDF over the training file's "
        f"{terms.get('documents')} papers ({terms.get('vocabulary')} terms, `terms.json`)",
        f"- weights (standardised features): {weights}",
        f"- decision threshold {meta.get('threshold'):.4f}, fitted on the dev split ({dev.get('queries')} train "
        f"queries never fitted on): dev precision {dev.get('precision', 0):.3f}, recall {dev.get('recall', 0):.3f}, "
        f"F1 {dev.get('f1', 0):.3f}, AUC {dev.get('auc', 0):.3f} (BM25 {dev.get('bm25_auc', 0):.3f}); inside "
        "`selector=provenance` it is mapped onto the embedding Selector's threshold",
        "- reproduce: `OUT=<dir> SHIP=1 bash scripts/selector_provenance.sh` (after `scripts/selector_embedding.sh`; "
        "needs ../shared/data)",
        "",
        f"## Held-out queries (never used for fitting), {lexical_miner}-mined negatives",
        "",
        table(found, lexical_miner),
        "",
        "Δ: the Selector's AUC minus the baseline's on the same pairs, 95 % interval with whole queries resampled.",
        "",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--miners", nargs="+", default=["bm25", "dense", "hybrid"])
    ap.add_argument("--forms", nargs="+", default=["original"])
    ap.add_argument("--lexical-miner", default="dense")
    ap.add_argument("--ship", type=Path, default=None, help="write the lexical head + card here")
    a = ap.parse_args()
    found = rows(a.out, a.miners, a.forms, eval_dir="eval_provenance")
    if not found:
        raise SystemExit(f"no eval runs under {a.out / 'eval_provenance'}")
    md = table(found, a.lexical_miner)
    (a.out / "selector_provenance.md").write_text(md + "\n")
    (a.out / "selector_provenance.json").write_text(json.dumps(found, indent=1))
    print(md)
    if a.ship:
        model = a.out / "lexical_model"
        meta = json.loads((model / "selector_meta.json").read_text())
        mine = [r for r in found if r["miner"] == a.lexical_miner]
        meta["heldout"] = mine
        a.ship.mkdir(parents=True, exist_ok=True)
        for f in HEAD_FILES:
            shutil.copy(model / f, a.ship / f)
        (a.ship / "selector_meta.json").write_text(json.dumps(meta, indent=2))
        (a.ship / "README.md").write_text(card(meta, mine, a.lexical_miner))
        print(f"shipped -> {a.ship}")


if __name__ == "__main__":
    main()
