"""Search on the bundled sample with real BM25 (bm25s), real FAISS and the real MiniLM embedder."""

import numpy as np
import pytest

from scholar_agents.papers.bm25 import top_k_prefix
from scholar_agents.papers.dated_docs import DatedDocs, date_key, normalize_date
from scholar_agents.papers.hybrid import HybridSearch, reciprocal_rank_fusion
from scholar_agents.papers.index import SearchConfig, load_or_build_search, to_search_config
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.search_base import Hit
from scholar_agents.papers.store import PaperStore

KNOWN = ("1605.08527", "Stochastic Optimization for Large-scale Optimal Transport")  # a gold paper, 2016
LATE = ("2506.00236", "Localized LoRA: A Structured Low-Rank Approximation for Efficient Fine-Tuning")  # 2025-06


class CountingEmbedder:
    """The real embedder, recording what it is asked to encode (to prove reloads encode no document)."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []
        self.dim, self.model_id, self.cfg = inner.dim, inner.model_id, inner.cfg

    def encode(self, texts, batch_size=None, show_progress=False, kind="doc"):
        self.calls.append((kind, len(texts)))
        return self.inner.encode(texts, batch_size=batch_size, show_progress=show_progress, kind=kind)


def _backends(sample_search):
    bm25, dense = sample_search.components
    return {"bm25": bm25, "dense": dense, "hybrid": sample_search}


@pytest.mark.parametrize("kind,min_top1", [("bm25", 0.95), ("dense", 0.85), ("hybrid", 0.95)])
def test_papers_found_by_their_titles(sample_search, sample_store, kind, min_top1):
    backend = _backends(sample_search)[kind]
    hits = backend.search(KNOWN[1], k=5)
    assert KNOWN[0] in [h.paper_id for h in hits[:3]]
    assert [h.rank for h in hits] == list(range(5))
    assert all(a.score >= b.score for a, b in zip(hits, hits[1:]))
    # 60 random sample papers searched by title (measured: bm25 99%, dense 92%, hybrid 99% top-1 on 100).
    # Dense misses are near-duplicate topics, e.g. a title-only gold paper outranking a long abstract.
    papers = list(sample_store.iter_papers(with_sections=False))
    picked = [papers[i] for i in np.random.default_rng(0).choice(len(papers), 60, replace=False)]
    results = backend.search_batch([p.title for p in picked], k=1)
    assert np.mean([r[0].paper_id == p.paper_id for r, p in zip(results, picked)]) >= min_top1


@pytest.mark.parametrize("kind", ["bm25", "dense", "hybrid"])
def test_before_date_excludes_later_papers(sample_search, sample_store, kind):
    backend = _backends(sample_search)[kind]
    assert backend.search(LATE[1], k=10)[0].paper_id == LATE[0]
    for before in ["2025-06-01", "20250601", "2021-10-31"]:
        hits = backend.search(LATE[1], k=10, before=before)
        assert hits and LATE[0] not in [h.paper_id for h in hits]
        dates = [sample_store.get(h.paper_id).date for h in hits]
        assert all(date_key(d) < date_key(normalize_date(before)) for d in dates), (before, dates)
    # a month-end query date (PaSa's published_time) keeps papers of that month
    assert LATE[0] in [h.paper_id for h in backend.search(LATE[1], k=10, before="20250630")]
    # one date per query in a batch
    batch = backend.search_batch([LATE[1], LATE[1]], k=3, before=[None, "2024-01-01"])
    assert batch[0][0].paper_id == LATE[0] and LATE[0] not in [h.paper_id for h in batch[1]]
    assert backend.search(LATE[1], k=10, before="1990-01-01") == []


@pytest.fixture(scope="module")
def pool_dir(sample_papers_cfg, sample_search):
    """The embedding pool the sample index was built through: small indexes over sample papers reuse its vectors
    (tests that must encode use their own pool)."""
    return str(sample_papers_cfg.search.embedding_pool)


def _small_store(tmp_path, sample_store, n=60) -> PaperStore:
    papers = list(sample_store.iter_papers(with_sections=False))
    keep = [p for p in papers if p.paper_id in (KNOWN[0], LATE[0])] + papers[:n]
    store = PaperStore(tmp_path / "small.sqlite")
    store.add(keep)
    return store


def test_persisted_indexes_reload_identically_without_encoding_documents(tmp_path, sample_store, papers_embedder):
    store = _small_store(tmp_path, sample_store, n=20)
    queries = [KNOWN[1], LATE[1], "optimal transport regularization", "low-rank adaptation of language models"]
    dates = [None, "2025-06-01", "2020-01-01", None]
    first = CountingEmbedder(papers_embedder)
    built = load_or_build_search(SearchConfig(kind="hybrid"), store, first, tmp_path / "idx")
    assert {k: v["status"] for k, v in built.build_info.items() if k != "documents"} == \
        {"bm25": "built", "embeddings": "built", "dense": "built"}
    assert ("doc", len(store)) in first.calls
    expected = built.search_batch(queries, k=8, before=dates)

    again = CountingEmbedder(papers_embedder)
    reloaded = load_or_build_search(SearchConfig(kind="hybrid"), store, again, tmp_path / "idx")
    assert reloaded.build_info["bm25"]["status"] == "loaded"
    assert reloaded.build_info["embeddings"]["status"] == "loaded"
    assert reloaded.search_batch(queries, k=8, before=dates) == expected
    assert again.calls == [("query", len(queries))]  # queries only: no document was encoded

    # the dense index even reloads with no embedder at all; pre-encoded queries give the same hits
    qvecs = papers_embedder.encode(queries, kind="query")
    dense_only = load_or_build_search(SearchConfig(kind="dense"), store, None, tmp_path / "idx")
    assert dense_only.search_vectors(qvecs, k=8, before=dates) == \
        built.components[1].search_batch(queries, k=8, before=dates)
    with pytest.raises(RuntimeError, match="needs an embedder"):
        dense_only.search("anything")
    store.close()


def test_date_bounded_dense_index_is_exact_before_its_bound_and_refuses_later_searches(tmp_path, sample_store,
                                                                                     papers_embedder):
    store = _small_store(tmp_path, sample_store, n=40)
    queries = [KNOWN[1], "optimal transport regularization", "graph neural networks", LATE[1]]
    dates = ["2021-01-01", "2019-06-30", "2022-12-31", "2022-01-01"]
    full = load_or_build_search(SearchConfig(kind="hybrid"), store, papers_embedder, tmp_path / "full")
    counting = CountingEmbedder(papers_embedder)
    bounded = load_or_build_search(SearchConfig(kind="hybrid", dense_before="2023-01-01"), store, counting,
                                   tmp_path / "bounded")
    n_before = sum(1 for p in store.iter_papers(with_sections=False) if date_key(p.date or "") < "2023-01-01")
    assert 0 < n_before < len(store)
    assert ("doc", n_before) in counting.calls  # only the papers before the bound were encoded
    assert bounded.components[1].index.ntotal == n_before
    # every search on or before the bound: the same hits as the full index, dense and fused
    assert bounded.search_batch(queries, k=8, before=dates) == full.search_batch(queries, k=8, before=dates)
    assert bounded.components[1].search_batch(queries, k=8, before=dates) == \
        full.components[1].search_batch(queries, k=8, before=dates)
    assert bounded.search(KNOWN[1], k=3, before="2023-01-01")
    for later in [None, "2023-01-02", "2025-06-01"]:
        with pytest.raises(ValueError, match="dense_before"):
            bounded.search(LATE[1], k=3, before=later)
    store.close()


def test_index_written_by_an_older_format_is_rebuilt_not_loaded(tmp_path, sample_store):
    """A manifest from older code (no or another ``format``) must not be trusted: the index is rebuilt."""
    import json

    from scholar_agents.papers.index import INDEX_FORMAT_VERSION

    store = _small_store(tmp_path, sample_store, n=20)
    built = load_or_build_search(SearchConfig(kind="bm25"), store, None, tmp_path / "idx")
    expected = built.search(KNOWN[1], k=5)
    manifest_path = tmp_path / "idx" / "bm25" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["format"] == INDEX_FORMAT_VERSION
    assert load_or_build_search(SearchConfig(kind="bm25"), store, None, tmp_path / "idx").build_info["bm25"][
        "status"] == "loaded"
    manifest.pop("format")  # what session-1 code wrote
    manifest_path.write_text(json.dumps(manifest))
    again = load_or_build_search(SearchConfig(kind="bm25"), store, None, tmp_path / "idx")
    assert again.build_info["bm25"]["status"] == "built"
    assert again.search(KNOWN[1], k=5) == expected and expected
    store.close()


def test_a_bm25_build_does_not_wait_for_a_dense_build_in_the_same_directory(tmp_path, sample_store):
    """Locks are per component: while another builder holds the dense lock of an index directory (an hour-long
    encoding on a real corpus), a BM25-only job builds and loads; a second BM25 builder does wait."""
    import threading

    from scholar_agents.papers.index import index_lock

    store = _small_store(tmp_path, sample_store, n=20)
    done = threading.Event()

    def build_bm25():
        load_or_build_search(SearchConfig(kind="bm25"), store, None, tmp_path / "idx")
        done.set()

    with index_lock(tmp_path / "idx", "dense"):
        worker = threading.Thread(target=build_bm25, daemon=True)
        worker.start()
        assert done.wait(timeout=120), "the BM25 build waited for the dense lock"
    done.clear()
    with index_lock(tmp_path / "idx", "bm25"):
        worker = threading.Thread(target=build_bm25, daemon=True)
        worker.start()
        assert not done.wait(timeout=3)  # same component: it waits for the holder
    assert done.wait(timeout=120)
    store.close()


def test_corpus_change_rebuilds_and_reuses_unchanged_vectors(tmp_path, sample_store, papers_embedder):
    # no pool: the index's own previous vectors are what gets reused
    store = _small_store(tmp_path, sample_store, n=15)
    emb = CountingEmbedder(papers_embedder)
    load_or_build_search(SearchConfig(kind="hybrid"), store, emb, tmp_path / "idx")
    new = Paper("2401.99999", "Sinkhorn barycenters for entropic optimal transport on graphs",
                abstract="We study entropic optimal transport barycenters on graphs.", date="2024-01-15")
    store.add([new])
    emb.calls.clear()
    backend = load_or_build_search(SearchConfig(kind="hybrid"), store, emb, tmp_path / "idx")
    assert backend.build_info["bm25"]["status"] == "built"
    assert backend.build_info["embeddings"] == {**backend.build_info["embeddings"], "status": "built", "encoded": 1}
    assert emb.calls[0] == ("doc", 1)  # only the new paper was encoded
    for c in backend.components:
        assert c.search(new.title, k=1)[0].paper_id == new.paper_id
    store.close()


def test_embedding_pool_is_shared_between_indexes(tmp_path, sample_store, papers_embedder):
    store = _small_store(tmp_path, sample_store, n=10)
    cfg = SearchConfig(kind="dense", embedding_pool=str(tmp_path / "pool"))
    first = load_or_build_search(cfg, store, papers_embedder, tmp_path / "a")
    assert first.build_info["embeddings"]["encoded"] == len(store)
    emb = CountingEmbedder(papers_embedder)
    other = load_or_build_search(cfg, store, emb, tmp_path / "b")  # another corpus name, same papers
    assert other.build_info["embeddings"]["encoded"] == 0 and emb.calls == []
    assert other.search(KNOWN[1], k=3) == first.search(KNOWN[1], k=3)
    store.close()


@pytest.mark.parametrize("index_type", ["ivf", "hnsw"])
def test_ivf_and_hnsw_from_cached_embeddings(tmp_path, sample_store, papers_embedder, pool_dir, index_type):
    store = _small_store(tmp_path, sample_store, n=100)
    flat = load_or_build_search(SearchConfig(kind="dense", embedding_pool=pool_dir), store, papers_embedder,
                                tmp_path / "idx")
    emb = CountingEmbedder(papers_embedder)
    cfg = SearchConfig(kind="dense", faiss_index=index_type, ivf_nlist=2, ivf_nprobe=2, hnsw_ef_search=64,
                       embedding_pool=pool_dir)
    ann = load_or_build_search(cfg, store, emb, tmp_path / "idx")
    assert ann.build_info["embeddings"]["status"] == "loaded" and ann.build_info["dense"]["status"] == "built"
    assert ("doc", len(store)) not in emb.calls
    assert ann.search(KNOWN[1], k=1) == flat.search(KNOWN[1], k=1)
    hits = ann.search(LATE[1], k=5, before="2025-06-01")
    assert hits and all(date_key(store.get(h.paper_id).date) < "2025-06-01" for h in hits)
    reloaded = load_or_build_search(cfg, store, emb, tmp_path / "idx")
    assert reloaded.build_info["dense"]["status"] == "loaded"
    assert reloaded.search(LATE[1], k=5) == ann.search(LATE[1], k=5)
    store.close()


def test_reciprocal_rank_fusion_by_hand():
    a = [Hit("a", 9.0, 0), Hit("b", 5.0, 1), Hit("c", 1.0, 2)]
    b = [Hit("b", 0.9, 0), Hit("d", 0.8, 1)]
    fused = reciprocal_rank_fusion([a, b], k=3, rrf_k=60)
    assert [h.paper_id for h in fused] == ["b", "a", "d"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61) and fused[1].score == pytest.approx(1 / 61)
    assert [h.rank for h in fused] == [0, 1, 2]
    # weights; ties are broken by best rank, then id
    assert [h.paper_id for h in reciprocal_rank_fusion([a, b], k=4, weights=[0.0, 1.0])][:2] == ["b", "d"]
    assert [h.paper_id for h in reciprocal_rank_fusion([[Hit("y", 1, 0)], [Hit("x", 1, 0)]], k=2)] == ["x", "y"]
    with pytest.raises(ValueError):
        HybridSearch([])


def test_top_k_prefix_and_dates():
    s = np.array([0.5, 3.0, 0.0, 2.0, 3.0, 9.0], dtype=np.float32)
    idx, sc = top_k_prefix(s, cutoff=5, k=3, positive_only=True)
    assert idx.tolist() == [1, 4, 3] and sc.tolist() == [3.0, 3.0, 2.0]
    assert top_k_prefix(s, cutoff=3, k=5, positive_only=True)[0].tolist() == [1, 0]
    assert top_k_prefix(s, cutoff=3, k=5, positive_only=False)[0].tolist() == [1, 0, 2]
    assert top_k_prefix(s, cutoff=0, k=5, positive_only=False)[0].tolist() == []
    docs, _ = DatedDocs.from_papers([Paper("a", "A", date="2025-06"), Paper("b", "B", date=""),
                                     Paper("c", "C", date="2016"), Paper("d", "D", date="2025-06-15")], ["title"])
    assert docs.ids == ["b", "c", "a", "d"]
    assert [docs.cutoff(x) for x in [None, "2016-01-01", "2016-01-02", "2025-06-01", "20250602", "2025-06-16"]] == \
        [4, 1, 2, 2, 3, 4]
    strict, _ = DatedDocs.from_papers([Paper("b", "B"), Paper("c", "C", date="2016")], ["title"], keep_undated=False)
    assert strict.ids == ["c", "b"] and strict.cutoff("2030-01-01") == 1 and strict.cutoff(None) == 2
    with pytest.raises(ValueError, match="YYYY-MM-DD"):
        docs.cutoff("June 2025")


def test_search_config_from_the_real_yaml_and_bad_settings(tmp_path, sample_store):
    from scholar_agents.hydra_app import compose

    cfg = to_search_config(compose("papers_search", ["search=bm25"]).search)
    assert cfg.kind == "bm25" and cfg.rrf_k == 60 and cfg.text_fields == ["title", "abstract"]
    assert to_search_config(compose("papers_search", ["search=cluster_hnsw"]).search).faiss_index == "hnsw"
    with pytest.raises(ValueError, match="kind"):
        load_or_build_search({"kind": "magic"}, sample_store, None, tmp_path)
    with pytest.raises(ValueError, match="faiss_index"):
        load_or_build_search({"kind": "dense", "faiss_index": "lsh"}, sample_store, None, tmp_path)
    with pytest.raises(RuntimeError, match="no embedder"):
        load_or_build_search({"kind": "dense"}, sample_store, None, tmp_path / "fresh")
