"""BM25 over title + abstract with bm25s (sparse, precomputed scores), before-date filtered.

Documents are numbered in date order (:mod:`dated_docs`), so the filter scores the full vector once and takes the
top-k of its leading slice — exact, and the same cost as an unfiltered query.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from scholar_agents.papers.dated_docs import DatedDocs
from scholar_agents.papers.search_base import Hit, SearchBackend, per_query_dates
from scholar_agents.runtime.jax_guard import import_bm25s
from scholar_agents.runtime.progress import bars_on_terminal

log = logging.getLogger(__name__)


def make_tokenizer(stopwords: str | None = "en", stemmer: str | None = None):
    """The one tokenisation for documents and queries (bm25s' regex word splitter, lower-case, stop words,
    optional Snowball stemmer — ``stemmer="english"`` needs PyStemmer)."""
    Tokenizer = import_bm25s().tokenization.Tokenizer

    stem = None
    if stemmer:
        try:
            import Stemmer
        except ImportError as e:
            raise RuntimeError(f"bm25 stemmer={stemmer!r} needs `pip install PyStemmer`; set stemmer: null") from e
        stem = Stemmer.Stemmer(stemmer).stemWords
    return Tokenizer(lower=True, stopwords=stopwords or [], stemmer=stem)


def top_k_prefix(scores: np.ndarray, cutoff: int, k: int, positive_only: bool) -> tuple[np.ndarray, np.ndarray]:
    """Indices and scores of the ``k`` best among ``scores[:cutoff]``, best first (ties: lower index first)."""
    s = scores[:cutoff]
    if positive_only:
        nz = np.flatnonzero(s > 0)
        if len(nz) <= k:
            order = nz[np.lexsort((nz, -s[nz]))]
            return order, s[order]
        part = nz[np.argpartition(-s[nz], k - 1)[:k]]
    else:
        if cutoff == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=s.dtype)
        kk = min(k, cutoff)
        part = np.argpartition(-s, kk - 1)[:kk] if kk < cutoff else np.arange(cutoff)
    order = part[np.lexsort((part, -s[part]))]
    return order, s[order]


class BM25Search(SearchBackend):
    name = "bm25"

    def __init__(self, docs: DatedDocs, model, tokenizer):
        self.docs = docs
        self.model = model
        self.tokenizer = tokenizer
        # tokenizer id -> index column; bm25s saves this map as JSON, so a reloaded model has string keys
        self._columns = {int(k): int(v) for k, v in model.vocab_dict.items()}

    @classmethod
    def build(cls, docs: DatedDocs, texts: Sequence[str], k1: float = 1.5, b: float = 0.75, method: str = "lucene",
              stopwords: str | None = "en", stemmer: str | None = None, progress: bool = False) -> "BM25Search":
        bm25s = import_bm25s()
        if len(texts) != len(docs):
            raise ValueError(f"{len(texts)} texts for {len(docs)} documents")
        tokenizer = make_tokenizer(stopwords, stemmer)
        # bm25s draws plain tqdm bars ("Tokenize texts", ...): in a log each redraw would stay, so only on a terminal
        progress = progress and bars_on_terminal()
        ids = tokenizer.tokenize(list(texts), update_vocab=True, return_as="ids", show_progress=progress)
        model = bm25s.BM25(k1=k1, b=b, method=method)
        model.index(ids, show_progress=progress)
        search = cls(docs, model, tokenizer)
        search._params = {"k1": k1, "b": b, "method": method, "stopwords": stopwords, "stemmer": stemmer}
        return search

    def save(self, directory: str | Path) -> None:
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.model.save(str(d / "model"), show_progress=False)
        self.tokenizer.save_vocab(str(d / "tokenizer"))
        (d / "bm25_params.json").write_text(json.dumps(getattr(self, "_params", {})))

    @classmethod
    def load(cls, directory: str | Path, docs: DatedDocs) -> "BM25Search":
        bm25s = import_bm25s()
        d = Path(directory)
        params = json.loads((d / "bm25_params.json").read_text())
        model = bm25s.BM25.load(str(d / "model"), mmap=False, show_progress=False)
        tokenizer = make_tokenizer(params.get("stopwords", "en"), params.get("stemmer"))
        tokenizer.load_vocab(str(d / "tokenizer"))
        search = cls(docs, model, tokenizer)
        search._params = params
        n_model = int(model.scores["num_docs"])
        if n_model != len(docs):
            raise ValueError(f"BM25 index in {d} has {n_model} documents, the store has {len(docs)}: rebuild it")
        return search

    def tokenize_queries(self, queries: Sequence[str]) -> list[list[int]]:
        return self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids", show_progress=False)

    def scores(self, q_ids: Sequence[int]) -> np.ndarray | None:
        """BM25 score of every document (date order) for one tokenised query; None when no word is indexed."""
        cols = [self._columns[i] for i in q_ids if i in self._columns]
        return self.model.get_scores_from_ids(cols) if cols else None

    def search_batch(self, queries: Sequence[str], k: int = 10,
                     before: Sequence[str | None] | str | None = None) -> list[list[Hit]]:
        dates = per_query_dates(before, len(queries))
        out = []
        for q_ids, date in zip(self.tokenize_queries(queries), dates):
            scores = self.scores(q_ids)
            if scores is None:  # no known word: nothing matches
                out.append([])
                continue
            idx, sc = top_k_prefix(scores, self.docs.cutoff(date), k, positive_only=True)
            out.append([Hit(self.docs.ids[i], float(s), r) for r, (i, s) in enumerate(zip(idx, sc))])
        return out
