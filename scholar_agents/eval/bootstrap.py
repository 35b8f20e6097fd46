"""Percentile-bootstrap intervals over queries (Efron & Tibshirani 1993, ch. 13) for the retrieval reports.

A mean over 20-200 queries moves by several points between query samples, so every learned-vs-baseline figure is
shown with the 95 % interval of its mean, and a comparison of two methods on the same queries with the interval
of the *paired* difference (both resampled with the same query indices), which is much tighter than two
overlapping marginal intervals suggest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from scholar_agents.eval.metrics import roc_auc


@dataclass(frozen=True)
class BootstrapConfig:
    samples: int = 2000  # resamples of the queries; 0 turns the intervals off
    level: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        if self.samples < 0:
            raise ValueError(f"bootstrap.samples must be >= 0, got {self.samples}")
        if not 0.0 < self.level < 1.0:
            raise ValueError(f"bootstrap.level must be in (0, 1), got {self.level}")


def _clean(values: Sequence[Optional[float]]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))],
                      dtype=np.float64)


def _indices(n: int, cfg: BootstrapConfig) -> np.ndarray:
    # one fixed stream per (n, seed): every metric of a row, and both sides of a paired difference, are resampled
    # with the same query indices
    return np.random.default_rng(cfg.seed).integers(0, n, size=(cfg.samples, n))


def _interval(stats: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(stats, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def mean_ci(values: Sequence[Optional[float]],
            cfg: BootstrapConfig = BootstrapConfig()) -> Optional[tuple[float, float]]:
    """The percentile interval of the mean; None with fewer than 2 values or ``samples=0``."""
    x = _clean(values)
    if cfg.samples == 0 or len(x) < 2:
        return None
    return _interval(x[_indices(len(x), cfg)].mean(axis=1), cfg.level)


@dataclass(frozen=True)
class PairedDiff:
    n: int
    mean_a: float
    mean_b: float
    diff: float  # mean(a - b)
    ci: Optional[tuple[float, float]]

    @property
    def verdict(self) -> str:
        """above / below when the interval excludes 0, else a tie within the interval."""
        if self.ci is None:
            return "n/a"
        if self.ci[0] > 0:
            return "above"
        if self.ci[1] < 0:
            return "below"
        return "tie (interval spans 0)"

    def to_dict(self) -> dict:
        return {"n": self.n, "mean_a": self.mean_a, "mean_b": self.mean_b, "diff": self.diff,
                "ci": list(self.ci) if self.ci else None, "verdict": self.verdict}


def paired_diff(a: Sequence[float], b: Sequence[float], cfg: BootstrapConfig = BootstrapConfig()) -> PairedDiff:
    """mean(a) - mean(b) over the same queries, with the bootstrap interval of the paired difference."""
    if len(a) != len(b):
        raise ValueError(f"paired samples must have equal length, got {len(a)} and {len(b)}")
    if not a:
        raise ValueError("paired_diff needs at least one pair")
    xa, xb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    d = xa - xb
    ci = None
    if cfg.samples and len(d) >= 2:
        ci = _interval(d[_indices(len(d), cfg)].mean(axis=1), cfg.level)
    return PairedDiff(len(d), float(xa.mean()), float(xb.mean()), float(d.mean()), ci)


def auc_diff_by_query(labels: Sequence[bool], a: Sequence[float], b: Sequence[float], groups: Sequence[str],
                      cfg: BootstrapConfig = BootstrapConfig()) -> PairedDiff:
    """ROC AUC(a) − AUC(b) on the same labelled pairs, with a cluster-bootstrap interval: whole queries (``groups``)
    are resampled, so the pairs of one query move together, and both scorers are read on the same resample. A
    resample with one class only is skipped (counted in neither AUC)."""
    y = np.asarray(labels, dtype=bool)
    sa, sb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not (len(y) == len(sa) == len(sb) == len(groups)):
        raise ValueError("labels, both scores and groups must have equal length")
    keys = list(dict.fromkeys(groups))
    members = [np.flatnonzero(np.asarray([g == k for g in groups])) for k in keys]
    auc_a, auc_b = roc_auc(y, sa), roc_auc(y, sb)
    ci = None
    if cfg.samples and len(keys) >= 2:
        diffs = []
        for row in _indices(len(keys), cfg):
            idx = np.concatenate([members[i] for i in row])
            if y[idx].all() or not y[idx].any():
                continue
            diffs.append(roc_auc(y[idx], sa[idx]) - roc_auc(y[idx], sb[idx]))
        if diffs:
            ci = _interval(np.asarray(diffs), cfg.level)
    return PairedDiff(len(keys), float(auc_a), float(auc_b), float(auc_a - auc_b), ci)
