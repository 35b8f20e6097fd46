"""PNG figures of an ``eval pasa`` report (matplotlib, headless)."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence

from scholar_agents.eval.pasa.metrics import METRIC_COLUMNS

LABELS = {"crawler_recall": "crawler recall", "precision": "precision", "recall": "recall",
          "recall_at_100": "recall@100", "recall_at_50": "recall@50", "recall_at_20": "recall@20"}


def metrics_bars(summary: Mapping[str, Mapping[str, Optional[float]]], path: str | Path,
                 title: str = "PaSa evaluation") -> Path:
    """Grouped bars: one group per metric (Table 2's columns), one bar per method; missing metrics are gaps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not summary:
        raise ValueError("metrics_bars needs at least one method")
    methods = list(summary)
    metrics = [m for m in METRIC_COLUMNS if any(summary[r].get(m) is not None for r in methods)]
    width = 0.8 / len(methods)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(metrics) + 0.4 * len(methods)), 4.2))
    for i, name in enumerate(methods):
        xs = [j + i * width for j, m in enumerate(metrics) if summary[name].get(m) is not None]
        ys = [summary[name][m] for m in metrics if summary[name].get(m) is not None]
        ax.bar(xs, ys, width=width, label=name)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(metrics))])
    ax.set_xticklabels([LABELS[m] for m in metrics])
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean over queries")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def recall_vs_actions(points: Mapping[str, Sequence[tuple[float, float]]], path: str | Path) -> Path:
    """Per query: crawler actions (x) against crawler recall (y), one colour per agent (Table 6's trade-off)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.0))
    for name, pts in points.items():
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, alpha=0.7, label=name)
    ax.set_xlabel("crawler actions ([Search] + [Expand]) per query")
    ax.set_ylabel("crawler recall")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Crawler recall vs actions")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
