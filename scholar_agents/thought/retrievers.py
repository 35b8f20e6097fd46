"""R(Q, K ∪ T): the switchable retrievers over the memory (§2.3; the §4.5 ablation swaps the retriever).

``dense`` embeds the query with the configured embedder and searches the memory's FAISS indexes (the paper:
Contriever; the embedded default: MiniLM). ``bm25`` (bm25s) and ``tfidf`` (scikit-learn) index the texts of the
requested scopes and are rebuilt only when a scope changed. The redundancy check always uses embeddings,
whatever the retriever (the paper computes it "based on Contriever").
"""

from __future__ import annotations

import abc
from typing import Sequence

import numpy as np

from scholar_agents.runtime.jax_guard import import_bm25s
from scholar_agents.thought.memory import KINDS, Memory

Hits = list[tuple[int, float]]


class Retriever(abc.ABC):
    name: str

    def __init__(self, memory: Memory):
        self.memory = memory

    @abc.abstractmethod
    def retrieve(self, queries: Sequence[str], scopes: Sequence[Sequence[str]], k: int,
                 kinds: Sequence[str] = KINDS) -> list[Hits]:
        """Top-k (item id, score) per query over the given scopes and item kinds, best first."""


class DenseRetriever(Retriever):
    name = "dense"

    def __init__(self, memory: Memory, embedder):
        super().__init__(memory)
        self.embedder = embedder

    def retrieve(self, queries, scopes, k, kinds=KINDS):
        if not queries:
            return []
        vecs = self.embedder.encode(list(queries), kind="query")
        # group queries that share scopes: one FAISS call per group
        groups: dict[tuple, list[int]] = {}
        for i, s in enumerate(scopes):
            groups.setdefault(tuple(s), []).append(i)
        results: dict[int, Hits] = {}
        for key, rows in groups.items():
            for row, hits in zip(rows, self.memory.search(vecs[rows], k, list(key), kinds)):
                results[row] = hits
        return [results[i] for i in range(len(queries))]


class _SparseRetriever(Retriever):
    """Shared caching: one sparse index per (scopes, kinds), rebuilt when any scope's version changes."""

    def __init__(self, memory: Memory):
        super().__init__(memory)
        self._cache: dict[tuple, tuple[tuple, list[int], object]] = {}

    @abc.abstractmethod
    def _build(self, texts: list[str]) -> object: ...

    @abc.abstractmethod
    def _scores(self, index: object, query: str) -> np.ndarray: ...

    def _index_for(self, scopes: tuple[str, ...], kinds: tuple[str, ...]):
        version = tuple(self.memory.scope_version(s) for s in scopes)
        cached = self._cache.get((scopes, kinds))
        if cached is not None and cached[0] == version:
            return cached[1], cached[2]
        items = [it for s in scopes for it in self.memory.scope_items(s, kinds)]
        ids = [it.id for it in items]
        index = self._build([it.text for it in items]) if items else None
        self._cache[(scopes, kinds)] = (version, ids, index)
        return ids, index

    def retrieve(self, queries, scopes, k, kinds=KINDS):
        out: list[Hits] = []
        for q, s in zip(queries, scopes):
            ids, index = self._index_for(tuple(dict.fromkeys(s)), tuple(kinds))
            if not ids:
                out.append([])
                continue
            scores = self._scores(index, q) if index is not None else np.zeros(len(ids))
            # stable order: score descending, then id (deterministic ties, e.g. all-zero BM25 scores)
            order = sorted(range(len(ids)), key=lambda j: (-float(scores[j]), ids[j]))[:k]
            out.append([(ids[j], float(scores[j])) for j in order])
        return out


class BM25Retriever(_SparseRetriever):
    name = "bm25"

    def _build(self, texts):
        bm25s = import_bm25s()
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        return retriever

    def _scores(self, index, query):
        bm25s = import_bm25s()
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)[0]
        if not tokens:  # a query of stop words only matches nothing
            return np.zeros(index.scores["num_docs"])
        return np.asarray(index.get_scores(tokens), dtype=np.float64)


class TfidfRetriever(_SparseRetriever):
    name = "tfidf"

    def _build(self, texts):
        from sklearn.feature_extraction.text import TfidfVectorizer

        vectorizer = TfidfVectorizer(stop_words="english", sublinear_tf=True)
        try:
            matrix = vectorizer.fit_transform(texts)
        except ValueError:  # every text was stop words / empty: no vocabulary
            return None
        return vectorizer, matrix

    def _scores(self, index, query):
        vectorizer, matrix = index
        # rows are L2-normalised by TfidfVectorizer, so the dot product is the cosine
        return np.asarray((matrix @ vectorizer.transform([query]).T).toarray()).ravel()


def build_retriever(kind: str, memory: Memory, embedder=None) -> Retriever:
    if kind == "dense":
        if embedder is None:
            raise ValueError("the dense retriever needs an embedder")
        return DenseRetriever(memory, embedder)
    if kind == "bm25":
        return BM25Retriever(memory)
    if kind == "tfidf":
        return TfidfRetriever(memory)
    raise ValueError(f"unknown retriever {kind!r}; expected dense | bm25 | tfidf")
