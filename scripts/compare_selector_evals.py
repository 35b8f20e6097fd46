"""Put several ``scholar eval selector`` runs side by side: one Markdown table and one reliability diagram.

    python scripts/compare_selector_evals.py outputs/selector_learning/eval_base outputs/selector_learning/eval_tuned \
        --out outputs/selector_learning/comparison
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from scholar_agents.eval.metrics import reliability_curve
from scholar_agents.eval.plots import reliability_diagram


def main(argv: list[str] | None = None) -> str:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="eval selector run directories (metrics.json + scores.jsonl)")
    ap.add_argument("--out", required=True, help="directory for comparison.md and reliability.png")
    args = ap.parse_args(argv)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| model | pairs (pos) | precision | recall | F1 | accuracy | AUC | ECE | pairs/s |",
             "|---|---|---|---|---|---|---|---|---|"]
    curves = {}
    for run in map(Path, args.runs):
        report = json.loads((run / "metrics.json").read_text())
        m, meta = report["metrics"], report["meta"]
        rows = [json.loads(line) for line in (run / "scores.jsonl").open()]
        labels = np.array([r["label"] for r in rows], dtype=bool)
        scores = np.array([r["score"] for r in rows])
        curves[meta["name"]] = reliability_curve(labels, scores, n_bins=len(m["reliability"]["counts"]))
        lines.append(f"| {meta['name']} | {m['n']} ({m['positives']}) | {m['precision']:.3f} | {m['recall']:.3f} | "
                     f"{m['f1']:.3f} | {m['accuracy']:.3f} | {m['auc']:.3f} | {m['reliability']['ece']:.3f} | "
                     f"{meta['pairs_per_second']:.2f} |")
    # the zero-shot rows (eval selector `baselines`) of the first run that has them: the bar on AUC
    for run in map(Path, args.runs):
        report = json.loads((run / "metrics.json").read_text())
        if report.get("baselines"):
            labels = report["meta"].get("baseline_labels", {})
            for b, m in report["baselines"].items():
                lines.append(f"| {labels.get(b, b)} (F1 at min-max 0.5) | {m['n']} ({m['positives']}) | "
                             f"{m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {m['accuracy']:.3f} | "
                             f"{m['auc']:.3f} | - | - |")
            break
    reliability_diagram(curves, out / "reliability.png", title="Selector calibration (held-out queries)")
    table = "\n".join(lines) + "\n"
    (out / "comparison.md").write_text(table + "\n![reliability](reliability.png)\n")
    print(table)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
