"""SKC retrieval stages (SciPIP §3.2, Appendix C) on hand-built graphs and vectors."""

import numpy as np
import pytest

from scholar_agents.scipip.config import SKCConfig
from scholar_agents.scipip.literature_db import KeywordGraph, LiteratureIndex, cocitation_counts, unit_rows
from scholar_agents.scipip.skc import (
    cluster_by_similarity,
    cocite_retrieve,
    expand_keywords,
    filter_lowest_frequency,
    filter_paper_budget,
    keyword_retrieve,
    select_evenly,
    semantic_top_k,
    skc_retrieve,
)

# p1..p6 with keywords; "transformer models" is the high-frequency term of Appendix C's example.
PAPER_KEYWORDS = {
    "p1": ["kv cache", "transformer models", "memory compression"],
    "p2": ["kv cache", "transformer models", "token eviction"],
    "p3": ["kv cache", "token eviction", "attention sinks"],
    "p4": ["transformer models", "image classification"],
    "p5": ["transformer models", "speech recognition"],
    "p6": ["attention sinks", "streaming inference"],
}
EDGES = [(paper, keyword) for paper, keywords in PAPER_KEYWORDS.items() for keyword in keywords]


@pytest.fixture
def graph() -> KeywordGraph:
    return KeywordGraph(EDGES)


def test_graph_frequency_and_cooccurrence(graph):
    assert graph.frequency("transformer models") == 4
    assert graph.frequency("missing") == 0
    co = graph.cooccurring("kv cache")
    assert co == {"transformer models": 2, "memory compression": 1, "token eviction": 2, "attention sinks": 1}
    assert graph.keywords_of(["p1", "p3"]) == ["kv cache", "transformer models", "memory compression", "token eviction", "attention sinks"]


def test_expand_keywords_cooccurrence_threshold(graph):
    # m = 2: only neighbours sharing >= 2 papers with the seed join; seeds first.
    assert expand_keywords(["kv cache"], graph, m=2) == ["kv cache", "token eviction", "transformer models"]
    # m = 1 takes every neighbour.
    assert set(expand_keywords(["kv cache"], graph, m=1)) == {"kv cache", "transformer models", "memory compression", "token eviction", "attention sinks"}
    # the official strict variant (> m) with m = 1 equals "at least 2".
    assert expand_keywords(["kv cache"], graph, m=1, strict=True) == expand_keywords(["kv cache"], graph, m=2)
    assert expand_keywords(["unknown phrase"], graph, m=1) == ["unknown phrase"]


def test_filter_lowest_frequency(graph):
    kws = ["kv cache", "token eviction", "transformer models", "not in db"]
    # n lowest-frequency keywords over the whole database; absent ones dropped.
    assert filter_lowest_frequency(kws, graph, n=2) == ["token eviction", "kv cache"]
    # scope "expanded": seeds survive even when frequent; the limit applies to neighbours.
    assert filter_lowest_frequency(kws, graph, n=1, seeds=["transformer models"], scope="expanded") == ["transformer models", "token eviction"]
    with pytest.raises(ValueError):
        filter_lowest_frequency(kws, graph, n=1, scope="bad")


def test_filter_paper_budget(graph):
    kws = ["transformer models", "kv cache", "token eviction", "attention sinks"]
    # ascending frequency: token eviction(2), attention sinks(2), kv cache(3), transformer models(4)
    assert filter_paper_budget(kws, graph, budget=3, limit=100) == ["token eviction", "attention sinks"]
    assert filter_paper_budget(kws, graph, budget=100, limit=100) == ["token eviction", "attention sinks", "kv cache", "transformer models"]


def test_keyword_retrieve_orders_by_matches(graph):
    assert keyword_retrieve(["kv cache", "token eviction"], graph) == ["p2", "p3", "p1"]
    assert keyword_retrieve([], graph) == []


def test_cocitation_counts_and_retrieve():
    refs = {"c1": ["a", "b", "c"], "c2": ["a", "b"], "c3": ["b", "d"]}
    counts = cocitation_counts(refs)
    assert counts[("a", "b")] == 2 and counts[("b", "c")] == 1 and counts[("b", "d")] == 1 and ("a", "d") not in counts
    cocite = {"a": [("b", 2), ("c", 1)], "b": [("a", 2), ("c", 1), ("d", 1)], "d": [("b", 1)]}
    assert cocite_retrieve(["a"], cocite, n_cocite=1) == ["b"]
    assert cocite_retrieve(["a", "d"], cocite, n_cocite=1) == ["b"]
    assert cocite_retrieve(["b"], cocite, n_cocite=2) == ["a", "c"]
    assert cocite_retrieve(["x"], cocite, n_cocite=1) == []


def test_semantic_top_k_excludes_and_orders():
    ids = ["a", "b", "c", "d"]
    mat = unit_rows(np.array([[1, 0], [0.9, 0.1], [0, 1], [0, 0]], dtype=np.float32))  # d: no embedding
    q = np.array([1, 0], dtype=np.float32)
    assert [p for p, _ in semantic_top_k(q, mat, ids, 2)] == ["a", "b"]
    assert [p for p, _ in semantic_top_k(q, mat, ids, 2, exclude=["a"])] == ["b", "c"]
    assert [p for p, _ in semantic_top_k(q, mat, ids, 10)] == ["a", "b", "c"]  # the zero row never matches


def test_cluster_single_vs_complete_linkage():
    # a-b similar, b-c similar, a-c not: single linkage chains all three, complete linkage does not.
    sim = np.array([[1.0, 0.9, 0.1, 0.0], [0.9, 1.0, 0.85, 0.0], [0.1, 0.85, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    assert cluster_by_similarity(sim, 0.8, "single") == [0, 0, 0, 3]
    assert cluster_by_similarity(sim, 0.8, "complete") == [0, 0, 2, 3]
    assert cluster_by_similarity(sim, 0.95, "single") == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        cluster_by_similarity(sim, 0.8, "average")


def test_select_evenly_round_robin():
    ranked = ["a1", "a2", "a3", "b1", "c1", "b2"]
    labels = {"a1": 0, "a2": 0, "a3": 0, "b1": 1, "b2": 1, "c1": 2}
    assert select_evenly(ranked, labels, 4) == ["a1", "b1", "c1", "a2"]
    assert select_evenly(ranked, labels, 10) == ["a1", "b1", "c1", "a2", "b2", "a3"]


def _index() -> LiteratureIndex:
    ids = sorted(PAPER_KEYWORDS)
    rng = np.random.default_rng(0)
    bg = unit_rows(rng.normal(size=(len(ids), 8)).astype(np.float32))
    return LiteratureIndex(
        ids=ids,
        vectors={"background": bg, "summary": bg.copy(), "abstract": bg.copy()},
        graph=KeywordGraph(EDGES),
        cocite={"p3": [("p6", 3)], "p6": [("p3", 3)]},
    )


def test_skc_retrieve_stages_and_ablations():
    index = _index()
    q = index.vectors["background"][index.row["p1"]]
    cfg = SKCConfig(top_k=1, cooccur_min_papers=2, lowfreq_n=10, n_cocite=1, n_papers=10, cluster_threshold=0.99)
    res = skc_retrieve(q, ["token eviction"], index, cfg)
    assert res.n1 == ["p1"]
    # seeds = query keyword + N1's keywords; expansion and filters keep db keywords only.
    assert res.seed_keywords[:1] == ["token eviction"] and "kv cache" in res.seed_keywords
    assert "p3" in res.n2 and res.n3 == ["p6"] or "p6" in res.n2
    assert set(res.papers) >= {"p1", "p2", "p3"}
    assert res.stages["n1"] == 1 and res.stages["candidates"] == len(res.scores) and res.stages["selected"] == len(res.papers)
    assert res.papers[0] == "p1"  # the query is p1's own background
    # exclusion drops a paper from every stage
    assert "p1" not in skc_retrieve(q, ["token eviction"], index, cfg, exclude=["p1"]).papers
    kw_only = skc_retrieve(q, ["attention sinks"], index, SKCConfig(mode="keyword", cooccur_min_papers=5, n_papers=10))
    assert kw_only.n1 == [] and set(kw_only.papers) == {"p3", "p6"} and kw_only.n3 == []
    vec_only = skc_retrieve(q, [], index, SKCConfig(mode="abstract", n_papers=3, cluster_threshold=0.99))
    assert vec_only.papers[0] == "p1" and len(vec_only.papers) == 3 and vec_only.n2 == []
    with pytest.raises(ValueError):
        skc_retrieve(q, [], index, SKCConfig(mode="bm25"))


def test_skc_nPapers_limits_and_clusters_merge():
    index = _index()
    q = index.vectors["background"][0]
    # threshold -1: everything is one cluster, selection is then the top-scored papers
    res = skc_retrieve(q, ["transformer models"], index, SKCConfig(top_k=2, n_papers=2, cluster_threshold=-1.0))
    assert res.stages["clusters"] == 1 and len(res.papers) == 2
    ranked = sorted(res.scores, key=lambda p: -res.scores[p])
    assert res.papers == ranked[:2]


def test_faiss_index_matches_exact_search():
    from scholar_agents.scipip.skc import semantic_search

    index = _index()
    q = index.vectors["background"][2]
    exact = semantic_search(index, "background", q, 3, exclude=["p3"])
    index.build_ann("background", "flat")
    assert [p for p, _ in semantic_search(index, "background", q, 3, exclude=["p3"])] == [p for p, _ in exact]
    with pytest.raises(ValueError):
        index.build_ann("background", "ivf")
