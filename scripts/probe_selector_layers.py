"""Where does a base model hold query-paper relevance? A linear probe per layer on the Selector's decision position.

For every labelled pair (``pairs_*.jsonl`` of scripts/build_selector_eval_pairs.py) the Table 15 prompt is rendered
with the model's chat template (as the Selector scores it) and the hidden state at the last prompt position — the one
that predicts the decision token — is taken from every layer. A logistic regression per layer (standardized
features, balanced classes) is fitted on the train pairs and scored on the held-out pairs: AUC and F1 at 0.5.
The layer to use is chosen on the TRAIN part only: 5-fold cross-validated AUC with folds split by query
(``cv_auc``, ``best_layer_by_cv``) — the held-out columns are reported, never used to choose.
The states are cached in ``--out`` (``states_{train,test}.npz``), so a re-fit costs seconds.
``--normed-layer N`` (default: the layer chosen by cross-validation) adds the probe on layer N after the final
RMSNorm, without intercept: what an output head on an N-layer (``sft.keep_layers=N``) model can represent.

    python scripts/probe_selector_layers.py --train outputs/selector_teacher/pairs/pairs_train.jsonl \\
        --test outputs/selector_teacher/pairs/pairs_test.jsonl --out outputs/selector_probe
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np

log = logging.getLogger("probe_selector_layers")


def hidden_states(model, tok, rows: list[dict], max_abstract_chars: int | None, batch: int) -> np.ndarray:
    """[n, layers + 1, d] states at the last prompt position (left padding keeps it at index -1)."""
    import torch

    from scholar_agents.pasa.prompts import selector_messages
    from scholar_agents.pasa.selectors.llm import truncate_abstract
    from scholar_agents.runtime.progress import progress_bar

    texts = [tok.apply_chat_template(selector_messages(r["query"], r["title"],
                                                       truncate_abstract(r["abstract"], max_abstract_chars)),
                                     tokenize=False, add_generation_prompt=True) for r in rows]
    out = []
    for i in progress_bar(range(0, len(texts), batch), desc="hidden states", unit="batch"):
        enc = tok(texts[i:i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            hs = model(**enc, output_hidden_states=True).hidden_states
        out.append(torch.stack([h[:, -1, :].float() for h in hs], 1).numpy())
    return np.concatenate(out)


def cv_auc(x, y, groups, C: float, folds: int = 5) -> float:
    """Mean AUC over query-grouped folds of the train part (no held-out pair involved)."""
    from sklearn.model_selection import GroupKFold

    aucs = [probe(x[tr], y[tr], x[va], y[va], C)["auc"]
            for tr, va in GroupKFold(n_splits=folds).split(x, y, groups) if len(set(y[va])) == 2]
    return float(np.mean(aucs))


def probe(xtr, ytr, xte, yte, C: float, standardize: bool = True, intercept: bool = True) -> dict:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score, roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = LogisticRegression(C=C, class_weight="balanced", max_iter=5000, fit_intercept=intercept)
    model = make_pipeline(StandardScaler(), clf) if standardize else clf
    model.fit(xtr, ytr)
    p = model.predict_proba(xte)[:, 1]
    return {"auc": float(roc_auc_score(yte, p)), "f1": float(f1_score(yte, p >= 0.5)),
            "train_auc": float(roc_auc_score(ytr, model.predict_proba(xtr)[:, 1]))}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--model", default="embedded:smollm2")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-abstract-chars", type=int, default=600)
    ap.add_argument("--C", type=float, default=0.01, help="inverse L2 strength of the per-layer probes")
    ap.add_argument("--normed-layer", type=int, default=None,
                    help="the layer for the head-view probe (default: the best by train cross-validation)")
    ap.add_argument("--limit", type=int, default=None, help="first N pairs of each file (smoke runs)")
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s][%(name)s] %(message)s")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scholar_agents.llm.factory import resolve_model_path

    path = resolve_model_path(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {}
    for split, f in (("train", args.train), ("test", args.test)):
        rows = [json.loads(line) for line in open(f) if line.strip()][:args.limit]
        if len({r["label"] for r in rows}) < 2:
            raise SystemExit(f"{f}: the probe needs both labels among the pairs used")
        cache = out / f"states_{split}.npz"
        key = f"{args.model}|{f}|{len(rows)}|{args.max_abstract_chars}"
        cached = np.load(cache) if cache.is_file() else None
        if cached is not None and str(cached["key"]) == key:
            x = cached["x"]
        else:
            x = hidden_states(model, tok, rows, args.max_abstract_chars, args.batch)
            np.savez(cache, x=x, key=key)
        data[split] = (x, np.array([bool(r["label"]) for r in rows]), np.array([r["qid"] for r in rows]))
    (xtr, ytr, gtr), (xte, yte, _) = data["train"], data["test"]
    layers = {layer: {**probe(xtr[:, layer], ytr, xte[:, layer], yte, args.C),
                      "cv_auc": cv_auc(xtr[:, layer], ytr, gtr, args.C)} for layer in range(1, xtr.shape[1])}
    g = model.model.norm.weight.detach().float().numpy()
    eps = model.config.rms_norm_eps

    def normed(x):
        return g * x / np.sqrt((x ** 2).mean(1, keepdims=True) + eps)

    best = max(layers, key=lambda k: layers[k]["cv_auc"])
    n = args.normed_layer if args.normed_layer is not None else best
    head_view = {C: probe(normed(xtr[:, n]), ytr, normed(xte[:, n]), yte, C, standardize=False, intercept=False)
                 for C in (0.1, 1.0, 10.0)}
    z = normed(xtr[:, n])
    summary = {"model": args.model, "train_pairs": len(ytr), "test_pairs": len(yte),
               "best_layer_by_cv": best, "normed_layer": n,
               "test_always_true_f1": float(2 * yte.mean() / (1 + yte.mean())), "C": args.C,
               "per_layer": layers, f"layer{n}_normed_no_intercept_by_C": head_view,
               f"layer{n}_normed_feature_mean_abs_max": float(np.abs(z.mean(0)).max()),
               f"layer{n}_normed_feature_std_range": [float(z.std(0).min()), float(z.std(0).max())]}
    (out / "probe.json").write_text(json.dumps(summary, indent=2))
    lines = ["| layer | train 5-fold CV AUC (by query) | held-out AUC | held-out F1@0.5 | train AUC |",
             "|---|---|---|---|---|"]
    lines += [f"| {k} | {v['cv_auc']:.3f} | {v['auc']:.3f} | {v['f1']:.3f} | {v['train_auc']:.3f} |"
              for k, v in layers.items()]
    (out / "probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(json.dumps({k: v for k, v in summary.items() if k != "per_layer"}, indent=1))
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
