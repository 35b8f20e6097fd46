"""The embedding Selector's held-out table (scripts/selector_embedding.sh): one row per negatives miner and phrasing,
from each ``scholar eval selector`` run's metrics.json; ``--ship DIR`` also writes the bundled model and its card.

    python scripts/selector_embedding_table.py OUT [--miners bm25 dense] [--forms original ...] [--ship DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path


def _ci(d: dict) -> str:
    if not d or not d.get("ci"):
        return "n/a"
    return f"{d['diff']:+.3f} ({d['ci'][0]:+.3f} to {d['ci'][1]:+.3f})"


def rows(out: Path, miners: list[str], forms: list[str], eval_dir: str = "eval") -> list[dict]:
    found = []
    for miner in miners:
        for form in forms:
            path = out / eval_dir / f"{miner}_{form}" / "metrics.json"
            if not path.is_file():
                continue
            r = json.loads(path.read_text())
            m, b = r["metrics"], r["baselines"]
            found.append({"miner": miner, "phrasing": form, "pairs": m["n"], "positives": m["positives"],
                          "auc": m["auc"], "precision": m["precision"], "recall": m["recall"], "f1": m["f1"],
                          "always_true_f1": m["always_true_f1"], "threshold": m["threshold"],
                          "cosine_auc": b.get("minilm_cosine", {}).get("auc"), "bm25_auc": b.get("bm25", {}).get("auc"),
                          "vs_cosine": b.get("minilm_cosine", {}).get("auc_diff"),
                          "vs_bm25": b.get("bm25", {}).get("auc_diff")})
    return found


def table(found: list[dict]) -> str:
    head = ("| negatives mined by | phrasing | pairs (positive) | AUC: embedding Selector | MiniLM cosine | BM25 | "
            "Δ vs cosine (95 % CI) | Δ vs BM25 (95 % CI) | P / R / F1 at the fitted threshold | always-True F1 |\n"
            "|---|---|---:|---:|---:|---:|---|---|---|---:|")
    lines = [head]
    for r in found:
        lines.append(f"| {r['miner']} | {r['phrasing']} | {r['pairs']} ({r['positives']}) | **{r['auc']:.3f}** | "
                     f"{r['cosine_auc']:.3f} | {r['bm25_auc']:.3f} | {_ci(r['vs_cosine'])} | {_ci(r['vs_bm25'])} | "
                     f"{r['precision']:.3f} / {r['recall']:.3f} / {r['f1']:.3f} | {r['always_true_f1']:.3f} |")
    return "\n".join(lines)


def card(meta: dict, found: list[dict], source: str) -> str:
    dev = meta.get("dev", {})
    tr = meta.get("train", {})
    return "\n".join([
        "# Embedding Selector (bundled)",
        "",
        "P(relevant) = sigmoid(a · cos(W · e(query), e(title. abstract)) + b): the embedded all-MiniLM-L6-v2 vectors "
        "`e`, a linear query adapter `W` and a calibration (a, b). Loaded by `selector=embedding` "
        "(`scholar_agents/pasa/selectors/embedding.py`).",
        "",
        f"- fitted by: `scholar train selector_embedding` on `{source}` ({tr.get('pairs')} pairs, "
        f"{tr.get('positives')} positive, {tr.get('queries')} AutoScholarQuery dev queries); "
        f"{meta.get('adapter')}",
        f"- decision threshold {meta.get('threshold'):.4f}, fitted on the dev split ({dev.get('queries')} train "
        f"queries never in the gradient): dev precision {dev.get('precision', 0):.3f}, recall "
        f"{dev.get('recall', 0):.3f}, F1 {dev.get('f1', 0):.3f}, AUC {dev.get('auc', 0):.3f} (zero-shot cosine "
        f"{dev.get('zero_shot_auc', 0):.3f})",
        "- reproduce: `OUT=<dir> SHIP=1 bash scripts/selector_embedding.sh` (needs ../shared/data)",
        "",
        "## Held-out queries (never used for fitting)",
        "",
        table(found),
        "",
        "Δ: the Selector's AUC minus the baseline's on the same pairs, 95 % interval with whole queries resampled.",
        "",
    ])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--miners", nargs="+", default=["bm25", "dense"])
    ap.add_argument("--forms", nargs="+", default=["original"])
    ap.add_argument("--ship", type=Path, default=None, help="write the model + card here")
    a = ap.parse_args()
    found = rows(a.out, a.miners, a.forms)
    if not found:
        raise SystemExit(f"no eval runs under {a.out / 'eval'}")
    md = table(found)
    (a.out / "selector_embedding.md").write_text(md + "\n")
    (a.out / "selector_embedding.json").write_text(json.dumps(found, indent=1))
    print(md)
    if a.ship:
        meta = json.loads((a.out / "model" / "selector_meta.json").read_text())
        meta["heldout"] = found
        a.ship.mkdir(parents=True, exist_ok=True)
        shutil.copy(a.out / "model" / "adapter.safetensors", a.ship / "adapter.safetensors")
        (a.ship / "selector_meta.json").write_text(json.dumps(meta, indent=2))
        source = f"pairs_{meta.get('config', {}).get('train_miner', 'bm25')}/pairs_train.jsonl"
        (a.ship / "README.md").write_text(card(meta, found, source))
        print(f"shipped -> {a.ship}")


if __name__ == "__main__":
    main()
