"""``scholar train selector_lexical``: fit the lexical Selector (ours; ``pasa/selectors/lexical.py``) on
labelled <query, paper> pairs — the dense-mined ``pairs_train.jsonl`` of ``scripts/build_selector_eval_pairs.py``,
since it is the route ``selector=provenance`` takes for papers a dense search found.

The document frequencies its IDF reads are counted over the training file's distinct papers (no labels) and ship
with it. The TRAIN queries are split again by query: a logistic regression (L2, ``C`` chosen among ``c_grid`` by dev
AUC) is fitted on the rest — also asked in ``augment_forms`` — and the decision threshold is fitted on dev (best F1).
Seconds on a CPU core.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from scholar_agents.data_gen.request_forms import rewrite
from scholar_agents.eval.metrics import roc_auc
from scholar_agents.pasa.selectors.lexical import (FEATURES, LexicalSelector, TermStats, feature_matrix,
                                                  save_lexical_head)
from scholar_agents.pasa.selectors.llm import SelectorPair, truncate_abstract
from scholar_agents.pasa.selectors.pair_judge import pair_text
from scholar_agents.train.selector.pair_fitting import fit_threshold, split_by_query, task_inputs

log = logging.getLogger(__name__)


@dataclass
class LexicalSelectorTrainConfig:
    c_grid: list = field(default_factory=lambda: [0.01, 0.1, 1.0, 10.0])  # inverse L2 strengths; dev AUC picks one
    max_abstract_chars: Optional[int] = 600
    dev_fraction: float = 0.2  # of the TRAIN queries: C and the threshold, never fitted on
    seed: int = 0
    # every TRAIN pair also in these request forms (data_gen.request_forms); dev stays as written
    augment_forms: list = field(default_factory=list)


def train_lexical_selector(pairs: Sequence[SelectorPair], out_dir: str | Path,
                           cfg: LexicalSelectorTrainConfig) -> dict:
    """Fit on ``pairs`` (labelled), choose C and the threshold on a by-query dev split; write ``out_dir``."""
    from sklearn.linear_model import LogisticRegression  # lazy: heavy, only where the Selector is fitted

    if not pairs:
        raise ValueError("no training pairs")
    if any(p.label is None for p in pairs):
        raise ValueError("every training pair needs a label")
    if not cfg.c_grid:
        raise ValueError("train.c_grid is empty: nothing to fit")
    t0 = time.perf_counter()
    cut = [dataclasses.replace(p, abstract=truncate_abstract(p.abstract, cfg.max_abstract_chars)) for p in pairs]
    stats = TermStats.of_texts([pair_text(p.title, p.abstract) for p in cut])
    train, dev = split_by_query(cut, cfg.dev_fraction, cfg.seed)
    if not dev:
        raise ValueError("train.dev_fraction must leave at least one query for dev (it chooses C and the threshold)")
    if cfg.augment_forms:
        train = train + [dataclasses.replace(p, query=rewrite(p.query, form))
                         for form in cfg.augment_forms for p in train]
    ytr = np.array([bool(p.label) for p in train])
    ydev = np.array([bool(p.label) for p in dev])
    if ytr.all() or not ytr.any():
        raise ValueError(f"the training split needs both labels, got {int(ytr.sum())} positive / "
                         f"{int((~ytr).sum())} negative")
    xtr = feature_matrix(stats, [p.query for p in train], [p.title for p in train], [p.abstract for p in train])
    xdev = feature_matrix(stats, [p.query for p in dev], [p.title for p in dev], [p.abstract for p in dev])
    mean, scale = xtr.mean(0), np.where(xtr.std(0) > 1e-12, xtr.std(0), 1.0)
    grid, best = [], None
    for c in cfg.c_grid:
        model = LogisticRegression(C=float(c), max_iter=5000).fit((xtr - mean) / scale, ytr)
        coef, intercept = model.coef_[0], float(model.intercept_[0])
        head = LexicalSelector(stats, mean, scale, coef, intercept, threshold=0.5)
        auc = roc_auc(ydev, head.probabilities_of_features(xdev))
        grid.append({"C": float(c), "dev_auc": auc})
        log.info("C %g: dev AUC %.4f", c, auc)
        if best is None or auc > best[0]["dev_auc"] + 1e-12:
            best = (grid[-1], coef, intercept, head)
    row, coef, intercept, head = best
    dev_fit = fit_threshold(ydev, head.probabilities_of_features(xdev))
    # the zero-shot bar on dev: BM25 of the query against title + abstract (the first feature)
    bm25_dev_auc = roc_auc(ydev, xdev[:, 0])
    meta = {
        "kind": "lexical",
        "threshold": float(dev_fit["threshold"]),
        "features": list(FEATURES),
        "weights": {f: round(float(w), 4) for f, w in zip(FEATURES, coef)},  # on standardised features
        "C": row["C"],
        "dev": {**dev_fit, "bm25_auc": bm25_dev_auc, "queries": len({p.qid or p.query for p in dev})},
        "grid": grid,
        "terms": {"documents": stats.n, "vocabulary": len(stats.df)},
        "train": {"pairs": len(train), "positives": int(ytr.sum()), "queries": len({p.qid or p.query for p in train}),
                  # every query whose pairs fitted something here (train and dev): evaluations exclude them
                  "qids": sorted({p.qid for p in pairs if p.qid}), "seconds": time.perf_counter() - t0},
        "config": asdict(cfg),
    }
    out = save_lexical_head(out_dir, mean, scale, coef, intercept, stats, meta)
    log.info("lexical Selector -> %s: C %g, threshold %.3f (dev AUC %.3f vs BM25 %.3f; F1 %.3f, P %.3f, R %.3f)",
             out, row["C"], meta["threshold"], dev_fit["auc"], bm25_dev_auc, dev_fit["f1"], dev_fit["precision"],
             dev_fit["recall"])
    return {"output_dir": str(out), **meta}


def selector_lexical(cfg) -> dict:
    """The Hydra task: ``train.train_file`` (pairs JSONL) -> ``train.output_dir``."""
    pairs, tcfg = task_inputs(cfg, LexicalSelectorTrainConfig)
    return train_lexical_selector(pairs, str(cfg.train.output_dir), tcfg)
