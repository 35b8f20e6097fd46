"""How far a calibrated fusion of the embedding Selector with BM25 could go on held-out pairs —
measured before building one, since on dense-mined negatives BM25 is the bar the Selector loses to.

For each held-out pair set (``OUT/pairs_<miner>/pairs_test.jsonl`` of scripts/selector_embedding.sh) it scores the
trained adapter's cosine, the zero-shot MiniLM cosine and BM25 (eval selector's baselines), then fits a logistic
regression on [features] over HALF the held-out queries and scores the other half (two folds, by query, swapped):
weights fitted on held-out data itself, an upper bound on what any fusion fitted on training queries reaches. Each
fusion against BM25 and against the zero-shot cosine: paired ΔAUC with whole queries resampled.

    python scripts/selector_fusion_ceiling.py /work/runs/selector [--model DIR] [--miners bm25 dense]

Writes OUT/fusion_ceiling.md and .json; docs/selector.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from scholar_agents.eval.bootstrap import BootstrapConfig, auc_diff_by_query  # noqa: E402
from scholar_agents.eval.metrics import roc_auc  # noqa: E402
from scholar_agents.eval.selector import load_labelled_pairs  # noqa: E402
from scholar_agents.eval.selector_baselines import bm25_scores  # noqa: E402
from scholar_agents.llm.embedder import build_embedder  # noqa: E402
from scholar_agents.pasa.selectors.embedding import EmbeddingSelector  # noqa: E402
from scholar_agents.pasa.selectors.llm import truncate_abstract  # noqa: E402
from scholar_agents.pasa.selectors.pair_judge import pair_text  # noqa: E402

FUSIONS = {"adapter + BM25": ("adapter", "bm25"), "zero-shot cosine + BM25": ("cosine", "bm25"),
           "adapter + zero-shot cosine + BM25": ("adapter", "cosine", "bm25")}


def cross_fitted(features: np.ndarray, y: np.ndarray, fold: np.ndarray) -> tuple[np.ndarray, list[list[float]]]:
    """Scores of each fold from a logistic regression fitted on the other fold; the fitted weights."""
    from sklearn.linear_model import LogisticRegression

    out, weights = np.zeros(len(y)), []
    for f in (0, 1):
        model = LogisticRegression(class_weight="balanced").fit(features[fold != f], y[fold != f])
        out[fold == f] = model.decision_function(features[fold == f])
        weights.append([round(float(w), 3) for w in model.coef_[0]])
    return out, weights


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="scripts/selector_embedding.sh's OUT")
    ap.add_argument("--model", type=Path, default=None, help="the embedding Selector (default OUT/model)")
    ap.add_argument("--miners", nargs="+", default=["bm25", "dense"])
    ap.add_argument("--max-abstract-chars", type=int, default=600)
    ap.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    a = ap.parse_args()
    adapter = EmbeddingSelector.load(a.model or a.out / "model")
    # W = I on the base embedder: the plain cosine (a fine-tuned Selector's own embedder is not the zero-shot one)
    zero_shot = EmbeddingSelector(build_embedder() if "+lora" in adapter.embedder.model_id else adapter.embedder)
    boot = BootstrapConfig(samples=a.samples, seed=0)
    result, lines = {}, []
    for miner in a.miners:
        pairs = load_labelled_pairs(a.out / f"pairs_{miner}" / "pairs_test.jsonl")
        queries = [p.query for p in pairs]
        docs = [pair_text(p.title, truncate_abstract(p.abstract, a.max_abstract_chars)) for p in pairs]
        y = np.array([bool(p.label) for p in pairs])
        groups = [str(p.qid or p.query) for p in pairs]
        feats = {"adapter": adapter.similarities(queries, docs), "cosine": zero_shot.similarities(queries, docs),
                 "bm25": np.log1p(bm25_scores(pairs))}
        order = list(dict.fromkeys(groups))
        fold = np.array([order.index(g) % 2 for g in groups])  # alternate queries: two halves by query
        row = {"pairs": len(pairs), "queries": len(order),
               "single": {k: round(roc_auc(y, v), 4) for k, v in feats.items()}, "fusions": {}}
        for name, cols in FUSIONS.items():
            scores, weights = cross_fitted(np.stack([feats[c] for c in cols], 1), y, fold)
            vs_bm25 = auc_diff_by_query(y, scores, feats["bm25"], groups, boot)
            vs_cos = auc_diff_by_query(y, scores, feats["cosine"], groups, boot)
            row["fusions"][name] = {"auc": round(vs_bm25.mean_a, 4), "weights": dict(zip(cols, map(list, zip(*weights)))),
                                    "vs_bm25": [round(vs_bm25.diff, 4), vs_bm25.ci],
                                    "vs_cosine": [round(vs_cos.diff, 4), vs_cos.ci]}
        result[miner] = row
        print(json.dumps({miner: row}, indent=1))
    ci = lambda d: f"{d[0]:+.3f} ({d[1][0]:+.3f} to {d[1][1]:+.3f})" if d[1] else f"{d[0]:+.3f}"  # noqa: E731
    lines += ["| negatives | pairs (queries) | scorer | AUC | Δ vs BM25 (95 % CI) | Δ vs zero-shot cosine | "
              "weights (fold 1, fold 2) |", "|---|---|---|---:|---|---|---|"]
    for miner, row in result.items():
        s = row["single"]
        lines.append(f"| {miner}-mined | {row['pairs']} ({row['queries']}) | adapter / zero-shot cosine / BM25 "
                     f"alone | {s['adapter']:.3f} / {s['cosine']:.3f} / {s['bm25']:.3f} | | | |")
        for name, f in row["fusions"].items():
            w = "; ".join(f"{k} {v[0]:+.2f}, {v[1]:+.2f}" for k, v in f["weights"].items())
            lines.append(f"| | | {name} | {f['auc']:.3f} | {ci(f['vs_bm25'])} | {ci(f['vs_cosine'])} | {w} |")
    (a.out / "fusion_ceiling.json").write_text(json.dumps(result, indent=1))
    (a.out / "fusion_ceiling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
