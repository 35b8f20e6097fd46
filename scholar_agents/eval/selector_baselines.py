"""Zero-shot baselines of ``eval selector``: scores of a <query, paper> pair that need no training,
the bar a fine-tuned Selector must clear on AUC.

- ``minilm_cosine``: cosine of the configured embedder's vectors (default the embedded MiniLM) of the query and of
  the paper's title + abstract;
- ``bm25``: the BM25 score (bm25s, Lucene variant, the same tokenizer as our BM25 search) of the paper's title +
  abstract for the query, with IDF over the eval set's distinct papers.

AUC and the best-F1 threshold read the raw ranking. A raw cosine or BM25 score is no probability, so "F1 at 0.5"
and the reliability bins read the score min-max scaled over the whole eval set (ours: one scale for all queries,
no per-query normalisation); the best-F1 threshold is reported on that scale too.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scholar_agents.papers.bm25 import BM25Search
from scholar_agents.papers.dated_docs import DatedDocs
from scholar_agents.pasa.selectors.llm import SelectorPair

BASELINES = ("minilm_cosine", "bm25")


def paper_text(p: SelectorPair) -> str:
    return f"{p.title}. {p.abstract}".strip() if p.abstract else p.title


def min_max(scores: np.ndarray) -> np.ndarray:
    """Scores scaled to [0, 1] over the set (all 0.5 when they are all equal: no ranking)."""
    scores = np.asarray(scores, dtype=np.float64)
    lo, hi = float(scores.min()), float(scores.max())
    if hi <= lo:
        return np.full_like(scores, 0.5)
    return (scores - lo) / (hi - lo)


def cosine_scores(pairs: Sequence[SelectorPair], embedder) -> np.ndarray:
    """cos(query, title + abstract) per pair; every distinct text encoded once."""
    queries = list(dict.fromkeys(p.query for p in pairs))
    docs = list(dict.fromkeys(paper_text(p) for p in pairs))
    qv = embedder.encode(queries, kind="query").astype(np.float64)
    dv = embedder.encode(docs, kind="doc").astype(np.float64)
    # unit rows whatever the preset's `normalize`: a cosine, not an inner product
    qv /= np.maximum(np.linalg.norm(qv, axis=1, keepdims=True), 1e-12)
    dv /= np.maximum(np.linalg.norm(dv, axis=1, keepdims=True), 1e-12)
    qi = {q: i for i, q in enumerate(queries)}
    di = {d: i for i, d in enumerate(docs)}
    return np.array([float(qv[qi[p.query]] @ dv[di[paper_text(p)]]) for p in pairs])


def bm25_scores(pairs: Sequence[SelectorPair], k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """BM25(query, title + abstract) per pair over an index of the eval set's distinct papers (0 = no word shared)."""
    docs = list(dict.fromkeys(paper_text(p) for p in pairs))
    index = BM25Search.build(DatedDocs([str(i) for i in range(len(docs))], [""] * len(docs)), docs, k1=k1, b=b)
    di = {d: i for i, d in enumerate(docs)}
    by_query: dict[str, np.ndarray] = {}
    out = []
    for p in pairs:
        if p.query not in by_query:
            [ids] = index.tokenize_queries([p.query])
            scores = index.scores(ids)
            by_query[p.query] = np.zeros(len(docs)) if scores is None else np.asarray(scores, dtype=np.float64)
        out.append(float(by_query[p.query][di[paper_text(p)]]))
    return np.array(out)


def baseline_scores(pairs: Sequence[SelectorPair], names: Sequence[str], embedder_factory) -> dict[str, np.ndarray]:
    """Raw scores of each named baseline (``embedder_factory()`` is called only when the cosine is asked for)."""
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise ValueError(f"unknown Selector baselines {unknown}; known: {', '.join(BASELINES)}")
    out: dict[str, np.ndarray] = {}
    for name in names:
        out[name] = cosine_scores(pairs, embedder_factory()) if name == "minilm_cosine" else bm25_scores(pairs)
    return out
