"""Figures of ``eval academiceval``: the self-evolution curve (Figure 6), abstraction level of retrieved items
vs query abstraction (Figure 5) and root-source precision vs recall (Figure 8). Headless matplotlib."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(results: Sequence[dict], path: Path) -> Path:
    """ROUGE-L F1 of Thought-Retriever against the mean number of thoughts per case, one line per dataset."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for res in results:
        pts = [p for p in res["curve"] if p["rouge_l_f1"] == p["rouge_l_f1"]]  # drop NaN (no labels)
        if pts:
            ax.plot([p["mean_thoughts"] for p in pts], [p["rouge_l_f1"] for p in pts], marker="o", label=res["dataset"])
            for p in pts:
                ax.annotate(f"r{p['round']}", (p["mean_thoughts"], p["rouge_l_f1"]), fontsize=7,
                            textcoords="offset points", xytext=(3, 3))
    ax.set_xlabel("thoughts in memory per case")
    ax.set_ylabel("ROUGE-L F1")
    ax.set_title("Self-evolution: F1 vs number of thoughts")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_abstraction(results: Sequence[dict], path: Path) -> Path:
    """Mean abstraction level L of the retrieved (packed) items for Table 6's queries ranked by abstraction."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for res in results:
        pts = res["abstraction"]
        if pts:
            ax.plot([p["rank"] for p in pts], [p["mean_level"] for p in pts], marker="s", label=res["dataset"])
    ax.set_xlabel("query abstraction rank (Table 6: 1 concrete … 6 abstract)")
    ax.set_ylabel("mean abstraction level L of retrieved items")
    ax.set_title("Deeper thoughts for abstract queries?")
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_precision_recall(results: Sequence[dict], path: Path) -> Path:
    """Root-source precision vs recall per method (datasets with a retrieval ground truth)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 5))
    for res in results:
        for method, v in res["precision_recall"].items():
            ax.scatter(v["recall"], v["precision"], s=40)
            ax.annotate(f"{method} ({res['dataset']})", (v["recall"], v["precision"]), fontsize=7,
                        textcoords="offset points", xytext=(4, 2))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("recall (root sources)")
    ax.set_ylabel("precision (root sources)")
    ax.set_title("Retrieval precision vs recall")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
