"""What the no-LLM Selectors' trainers share (``train selector_cross_encoder``, ``train selector_embedding``):
the labelled pairs and the typed config of a Hydra task, the by-query dev split that never enters the gradient,
and the decision threshold fitted on it (best F1)."""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np
from omegaconf import OmegaConf

from scholar_agents.eval.metrics import binary_metrics, roc_auc
from scholar_agents.eval.selector import load_labelled_pairs
from scholar_agents.pasa.selectors.llm import SelectorPair
from scholar_agents.validation import existing_file, reading


def task_inputs(cfg, config_cls) -> tuple[list[SelectorPair], object]:
    """``train.train_file`` (pairs JSONL, ``train.limit``) and ``config_cls`` filled from the ``train`` node."""
    path = existing_file(cfg.train.get("train_file"), "train.train_file")
    with reading("train.train_file", path):
        pairs = load_labelled_pairs(path, "pairs", cfg.train.get("limit"))
    node = OmegaConf.to_container(cfg.train, resolve=True)
    return pairs, config_cls(**{k: v for k, v in node.items() if k in config_cls.__dataclass_fields__})


def split_by_query(pairs: Sequence[SelectorPair], dev_fraction: float, seed: int
                   ) -> tuple[list[SelectorPair], list[SelectorPair]]:
    """(train, dev): whole queries (``qid``, else the query text) on one side only."""
    keys = sorted({p.qid or p.query for p in pairs})
    random.Random(seed).shuffle(keys)
    n_dev = int(round(len(keys) * dev_fraction)) if dev_fraction > 0 else 0
    if dev_fraction > 0 and len(keys) > 1:
        n_dev = min(max(n_dev, 1), len(keys) - 1)
    dev_keys = set(keys[:n_dev])
    return ([p for p in pairs if (p.qid or p.query) not in dev_keys],
            [p for p in pairs if (p.qid or p.query) in dev_keys])


def fit_threshold(labels: np.ndarray, scores: np.ndarray) -> dict:
    """The threshold with the best F1 on (labels, scores), and its precision / recall / F1; AUC of the scores."""
    labels = np.asarray(labels, dtype=bool)
    best = {"threshold": 0.5, "f1": -1.0}
    for t in np.unique(scores):
        m = binary_metrics(labels, scores >= t)
        if m.f1 > best["f1"]:
            best = {"threshold": float(t), "f1": m.f1, "precision": m.precision, "recall": m.recall}
    if best["f1"] < 0:  # no scores
        best = {"threshold": 0.5, "f1": 0.0, "precision": 0.0, "recall": 0.0}
    best["auc"] = roc_auc(labels, scores) if labels.any() and not labels.all() else float("nan")
    best["n"] = int(len(labels))
    best["positives"] = int(labels.sum())
    return best
