"""Local search at development scale: the full shared corpus (~97k arXiv CS papers), AutoScholarQuery dev queries.

Measured in one run, on the same documents, tokenisation, queries and before-dates (each query's own date, as
PaSa searches):
- store: loading the corpus into the SQLite PaperStore;
- BM25 (bm25s, ours) vs ``rank_bm25.BM25Okapi`` (same tokens; it scores every document in Python per query, so it
  runs on a subset of queries, stated in the output): build time, per-query latency p50/p95, queries/s;
- dense (FAISS flat inner product, ours) vs numpy brute force (``V[:cutoff] @ q`` + argpartition): build time,
  on-disk size, per-query latency p50/p95, batched throughput, and whether the top-k agree;
- MiniLM encoding throughput (timed afresh on a random subset; the corpus vectors themselves come from the shared
  embedding pool after the first run, which encodes all of them) and query encoding, separate from search.

    nice -n 10 python bench/search.py > bench/results/search.log 2>&1          # first run encodes 97k abstracts
    python bench/search.py --corpus other.jsonl.gz --n-queries 200 --rank-bm25-queries 20

The ratios are baseline time / ours (>1 = ours faster). Every figure also lands in bench/results/search.json,
with the machine's load average (other jobs on a shared machine slow both sides alike but add noise).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from scholar_agents.llm.config import EmbedderConfig
from scholar_agents.llm.embedder import build_embedder
from scholar_agents.papers.bm25 import BM25Search, top_k_prefix
from scholar_agents.papers.dated_docs import DatedDocs, normalize_date
from scholar_agents.papers.dense import DenseSearch, build_faiss_index
from scholar_agents.papers.index import SearchConfig, load_or_build_search
from scholar_agents.papers.loaders import load_arxiv_jsonl
from scholar_agents.papers.store import PaperStore

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "papers" / "arxiv_cs_papers.jsonl.gz"
DEFAULT_QUERIES = REPO.parent / "shared" / "data" / "queries" / "autoscholarquery_dev.jsonl"
DEFAULT_CACHE = Path(os.environ.get("SCHOLAR_CACHE", Path.home() / ".cache" / "scholar_agents")) / "bench_search"


def du(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q))


def latency_stats(per_query_s: list[float]) -> dict[str, float]:
    return {"p50_ms": pct(per_query_s, 50) * 1e3, "p95_ms": pct(per_query_s, 95) * 1e3,
            "qps_sequential": len(per_query_s) / sum(per_query_s), "n": len(per_query_s)}


def load_queries(path: Path, n: int) -> tuple[list[str], list[str | None]]:
    qs, dates = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                d = json.loads(line)
                qs.append(d["question"])
                dates.append(normalize_date((d.get("source_meta") or {}).get("published_time")))
    return qs[:n], dates[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="arXiv metadata JSONL(.gz)")
    ap.add_argument("--queries", type=Path, default=DEFAULT_QUERIES, help="PaSa-format query JSONL")
    ap.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE, help="store and indexes of the bench")
    ap.add_argument("--embedding-pool", type=Path, default=DEFAULT_CACHE.parent / "embedding_pool",
                    help="shared document-vector cache (the papers/search configs' default)")
    ap.add_argument("--encode-sample", type=int, default=512, help="papers encoded afresh to time MiniLM")
    ap.add_argument("--vectors", choices=["minilm", "minilm_titles", "random"], default="minilm",
                    help="corpus vectors for the dense rows: MiniLM (encoded once, then cached in the embedding "
                         "pool) or random unit vectors of the same shape. FAISS/numpy search cost depends only "
                         "on N and dim, so `random` gives the same latencies when encoding 97k abstracts is not "
                         "affordable (it is printed with the results); but IVF/HNSW recall needs vectors with "
                         "real structure: `minilm_titles` encodes titles only (~10x cheaper than abstracts)")
    ap.add_argument("--ann", default="ivf,hnsw", help="approximate FAISS indexes timed against exact search ('' = none)")
    ap.add_argument("--n-queries", type=int, default=1000)
    ap.add_argument("--rank-bm25-queries", type=int, default=50, help="subset for rank_bm25 (slow per query)")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64, help="queries per batched dense call")
    ap.add_argument("--threads", type=int, default=None, help="FAISS/BLAS/torch threads (default: libraries' own)")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall time, or the bench process's CPU time (all threads) -- robust on a machine shared "
                         "with other jobs; with --threads 1 it equals the time on an idle core")
    ap.add_argument("--encode-only", action="store_true", help="fill the embedding cache and stop")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "search.json")
    args = ap.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if not args.corpus.exists():
        sys.exit(f"corpus {args.corpus} not found (pass --corpus)")
    if args.threads:  # same thread budget for ours and the baselines
        import faiss
        import torch
        from threadpoolctl import threadpool_limits

        faiss.omp_set_num_threads(args.threads)
        torch.set_num_threads(args.threads)
        threadpool_limits(args.threads)
    res: dict = {"corpus": str(args.corpus), "queries_file": str(args.queries), "k": args.k, "threads": args.threads,
                 "clock": args.clock,
                 "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                             "loadavg_start": os.getloadavg()}}
    args.cache_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    # --- store ---------------------------------------------------------------------------------------------------
    store_path = args.cache_dir / "store.sqlite"
    sig = f"{args.corpus.resolve()}:{args.corpus.stat().st_size}:{int(args.corpus.stat().st_mtime)}"
    fresh = True
    if store_path.exists():
        with PaperStore(store_path) as s:
            fresh = s.get_meta("bench_corpus") != sig
    if fresh:
        for suffix in ("", "-wal", "-shm"):
            Path(str(store_path) + suffix).unlink(missing_ok=True)
        t = clock()
        with PaperStore(store_path) as s:
            s.add(load_arxiv_jsonl(args.corpus), progress=True)
            s.set_meta("bench_corpus", sig)
            s.set_meta("bench_store_seconds", json.dumps({args.clock: clock() - t}))
    store = PaperStore(store_path, readonly=True)
    measured = json.loads(store.get_meta("bench_store_seconds"))
    if args.clock not in measured:
        sys.exit(f"the cached store was timed with another clock ({list(measured)}): delete {store_path}")
    res["store"] = {"papers": len(store), "load_seconds": measured[args.clock],
                    "measured": "this run" if fresh else "the run that built the cached store",
                    "bytes": du(store_path)}
    print(f"store: {len(store)} papers, loaded in {res['store']['load_seconds']:.1f}s ({res['store']['measured']})",
          flush=True)

    # --- documents and embeddings (cached) -------------------------------------------------------------------------
    t = clock()
    docs, texts = DatedDocs.from_papers(list(store.iter_papers(with_sections=False)), ["title", "abstract"])
    res["documents"] = {"n": len(docs), "collect_seconds": clock() - t}
    embedder = build_embedder(EmbedderConfig())
    index_dir = args.cache_dir / "index"
    if args.vectors == "minilm" or args.encode_only:
        dense = load_or_build_search(SearchConfig(kind="dense", embedding_pool=str(args.embedding_pool)), store,
                                     embedder, index_dir, progress=True)
        print(f"corpus vectors: {dense.build_info['embeddings']}", flush=True)
        if args.encode_only:
            return
        vectors = np.load(index_dir / "embeddings" / "vectors.npy")
        vectors_note = f"MiniLM ({dense.build_info['embeddings']['status']})"
    elif args.vectors == "minilm_titles":
        cached = args.cache_dir / f"title_vectors_{len(docs)}.npy"
        if cached.exists():
            vectors = np.load(cached)
        else:
            titles = [p.title for p in store.get_many(docs.ids).values()]
            vectors = embedder.encode(titles, kind="doc", show_progress=True)
            np.save(cached, vectors)
        vectors_note = "MiniLM vectors of the titles only (abstracts too costly to encode here; same N and dim)"
    else:
        vectors = np.random.default_rng(0).standard_normal((len(docs), embedder.dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors_note = "random unit vectors (same shape as MiniLM's; search cost does not depend on the values)"
    res["dense_vectors"] = vectors_note
    # Encoding throughput measured in this run on a random subset (the corpus vectors may come from the cache).
    rng = np.random.default_rng(0)
    sample = [texts[i] for i in rng.choice(len(texts), min(args.encode_sample, len(texts)), replace=False)]
    t = clock()
    embedder.encode(sample, kind="doc")
    rate = len(sample) / (clock() - t)
    res["encode_corpus"] = {"docs_per_s": rate, "measured_on": len(sample), "estimated_corpus_seconds": len(texts) / rate,
                            "embedder": embedder.model_id}
    print(f"MiniLM: {rate:.1f} papers/s on {len(sample)} papers -> ~{len(texts) / rate / 60:.0f} min for the corpus",
          flush=True)

    queries, qdates = load_queries(args.queries, args.n_queries)
    cutoffs = [docs.cutoff(d) for d in qdates]
    # Two settings: the whole corpus (the scale test; ratios are computed here) and each query's own before-date
    # (how PaSa searches; on this 2024-26 corpus it leaves only the few older papers).
    modes = {"full": ([None] * len(queries), [len(docs)] * len(queries)), "dated": (qdates, cutoffs)}
    res["queries"] = {"n": len(queries), "mean_docs_allowed_dated": float(np.mean(cutoffs)), "corpus_docs": len(docs)}
    print(f"{len(queries)} queries; with their before-dates on average {np.mean(cutoffs):.0f} of {len(docs)} "
          "documents are older than the query", flush=True)

    # --- BM25: bm25s (ours) ---------------------------------------------------------------------------------------
    tmp = Path(tempfile.mkdtemp(prefix="bench_bm25_"))
    try:
        t = clock()
        bm25 = BM25Search.build(docs, texts)
        bm25_build = clock() - t
        bm25.save(tmp / "bm25")
        bm25_bytes = du(tmp / "bm25")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["bm25"] = {"build_seconds": bm25_build, "disk_bytes": bm25_bytes}
    bm25_hits: list[list[str]] = []
    for mode, (dates, _) in modes.items():
        bm25.search_batch(queries[:5], k=args.k, before=dates[:5])  # warm-up
        lat = []
        for i, q in enumerate(queries):
            t = clock()
            hits = bm25.search(q, k=args.k, before=dates[i])
            lat.append(clock() - t)
            if mode == "full":
                bm25_hits.append([h.paper_id for h in hits])
        t = clock()
        bm25.search_batch(queries, k=args.k, before=dates)
        res["bm25"][mode] = {**latency_stats(lat), "qps_batched": len(queries) / (clock() - t),
                             "per_query_s": lat}
    print(f"bm25s: build {bm25_build:.1f}s, p50 {res['bm25']['full']['p50_ms']:.2f} ms", flush=True)

    # --- BM25: rank_bm25 baseline (same tokens, whole corpus) ----------------------------------------------------------
    from rank_bm25 import BM25Okapi

    vocab_inv = {v: k for k, v in bm25.tokenizer.get_vocab_dict().items()}
    t = clock()
    doc_ids = bm25.tokenizer.tokenize(texts, update_vocab=False, return_as="ids", show_progress=False)
    corpus_tokens = [[vocab_inv[i] for i in ids] for ids in doc_ids]
    tok_s = clock() - t
    t = clock()
    okapi = BM25Okapi(corpus_tokens)
    okapi_build = clock() - t
    del corpus_tokens, doc_ids
    n_sub = min(args.rank_bm25_queries, len(queries))
    lat_b, overlap = [], []
    q_tok = bm25.tokenize_queries(queries[:n_sub])
    for i in range(n_sub):
        words = [vocab_inv[j] for j in q_tok[i] if vocab_inv.get(j)]
        t = clock()
        scores = okapi.get_scores(words)
        idx, _ = top_k_prefix(np.asarray(scores), len(docs), args.k, positive_only=True)
        lat_b.append(clock() - t)
        theirs = {docs.ids[j] for j in idx}
        overlap.append(len(theirs & set(bm25_hits[i])) / max(1, len(theirs)))
    res["rank_bm25"] = {"build_seconds": okapi_build, "tokenize_seconds": tok_s, **latency_stats(lat_b),
                        "queries_used": n_sub, "top_k_overlap_with_bm25s": float(np.mean(overlap))}
    ours_sub = latency_stats(res["bm25"]["full"]["per_query_s"][:n_sub])
    res["bm25_ratio"] = {"p50_latency": res["rank_bm25"]["p50_ms"] / ours_sub["p50_ms"],
                         "p95_latency": res["rank_bm25"]["p95_ms"] / ours_sub["p95_ms"],
                         # ours includes tokenisation; so does theirs here (same tokenizer, timed separately)
                         "build": (tok_s + okapi_build) / bm25_build, "on_queries": n_sub}
    del okapi
    print(f"rank_bm25: build {okapi_build:.1f}s, p50 {res['rank_bm25']['p50_ms']:.1f} ms", flush=True)

    # --- dense: FAISS flat (ours) vs numpy brute force ------------------------------------------------------------------
    t = clock()
    qvecs = embedder.encode(queries, kind="query")
    enc_q = clock() - t
    res["encode_queries"] = {"seconds": enc_q, "qps": len(queries) / enc_q}
    t = clock()
    flat = build_faiss_index(vectors, "flat")
    flat_build = clock() - t
    import faiss

    with tempfile.TemporaryDirectory() as td:
        faiss.write_index(flat, str(Path(td) / "flat.index"))
        flat_bytes = du(Path(td) / "flat.index")
    ds = DenseSearch(docs, flat, embedder, "flat")
    res["dense_faiss_flat"] = {"build_seconds": flat_build, "disk_bytes_index": flat_bytes, "batch": args.batch}
    res["dense_numpy"] = {}
    for mode, (dates, cuts) in modes.items():
        ds.search_vectors(qvecs[:5], k=args.k, before=dates[:5])  # warm-up
        lat_d, faiss_hits = [], []
        for i in range(len(queries)):
            t = clock()
            hits = ds.search_vectors(qvecs[i:i + 1], k=args.k, before=dates[i])[0]
            lat_d.append(clock() - t)
            faiss_hits.append({h.paper_id for h in hits})
        t = clock()
        for b in range(0, len(queries), args.batch):
            ds.search_vectors(qvecs[b:b + args.batch], k=args.k, before=dates[b:b + args.batch])
        faiss_batch_s = clock() - t
        lat_n, agree = [], []
        for i in range(len(queries)):
            t = clock()
            scores = vectors[:cuts[i]] @ qvecs[i]
            idx, _ = top_k_prefix(scores, cuts[i], args.k, positive_only=False)
            lat_n.append(clock() - t)
            agree.append(len({docs.ids[j] for j in idx} & faiss_hits[i]) / max(1, len(idx)))
        t = clock()
        for b in range(0, len(queries), args.batch):
            qb, cb = qvecs[b:b + args.batch], cuts[b:b + args.batch]
            scores = qb @ vectors[:max(cb)].T  # one matmul per batch, then each query's own prefix
            for row, c in zip(scores, cb):
                top_k_prefix(row, c, args.k, positive_only=False)
        numpy_batch_s = clock() - t
        res["dense_faiss_flat"][mode] = {**latency_stats(lat_d), "qps_batched": len(queries) / faiss_batch_s}
        res["dense_numpy"][mode] = {**latency_stats(lat_n), "qps_batched": len(queries) / numpy_batch_s,
                                    "top_k_agreement_with_faiss": float(np.mean(agree))}
    f, n = res["dense_faiss_flat"]["full"], res["dense_numpy"]["full"]
    res["dense_ratio"] = {"p50_latency": n["p50_ms"] / f["p50_ms"], "p95_latency": n["p95_ms"] / f["p95_ms"],
                          "batched_throughput": f["qps_batched"] / n["qps_batched"]}
    # --- dense at scale: IVF / HNSW (ours, the configs for millions) vs exact numpy, with recall -----------------------
    exact = [set(top_k_prefix(vectors @ qvecs[i], len(docs), args.k, positive_only=False)[0]) for i in range(len(queries))]
    res["dense_ann"] = {}
    position = {pid: i for i, pid in enumerate(docs.ids)}
    for kind in [a for a in args.ann.split(",") if a]:
        scfg = SearchConfig(kind="dense", faiss_index=kind)
        t = clock()
        index = build_faiss_index(vectors, kind, ivf_nlist=scfg.ivf_nlist, hnsw_m=scfg.hnsw_m,
                                  hnsw_ef_construction=scfg.hnsw_ef_construction)
        build_s = clock() - t
        with tempfile.TemporaryDirectory() as td:
            faiss.write_index(index, str(Path(td) / "ann.index"))
            nbytes = du(Path(td) / "ann.index")
        ann = DenseSearch(docs, index, embedder, kind, ivf_nprobe=scfg.ivf_nprobe, hnsw_ef_search=scfg.hnsw_ef_search)
        ann.search_vectors(qvecs[:5], k=args.k)  # warm-up
        lat, recall = [], []
        for i in range(len(queries)):
            t = clock()
            hits = ann.search_vectors(qvecs[i:i + 1], k=args.k)[0]
            lat.append(clock() - t)
            got = {position[h.paper_id] for h in hits}
            recall.append(len(got & exact[i]) / max(1, len(exact[i])))
        t = clock()
        for b in range(0, len(queries), args.batch):
            ann.search_vectors(qvecs[b:b + args.batch], k=args.k)
        m = {**latency_stats(lat), "qps_batched": len(queries) / (clock() - t)}
        params = (f"nlist {index.nlist}, nprobe {scfg.ivf_nprobe}" if kind == "ivf"
                  else f"M {scfg.hnsw_m}, efConstruction {scfg.hnsw_ef_construction}, efSearch {scfg.hnsw_ef_search}")
        res["dense_ann"][kind] = {"build_seconds": build_s, "disk_bytes_index": nbytes, "params": params,
                                  "full": m, f"recall_at_{args.k}_vs_exact": float(np.mean(recall)),
                                  "ratio_numpy_p50": n["p50_ms"] / m["p50_ms"],
                                  "ratio_numpy_batched": m["qps_batched"] / n["qps_batched"]}
        print(f"faiss {kind}: build {build_s:.1f}s, p50 {m['p50_ms']:.2f} ms, recall@{args.k} "
              f"{np.mean(recall):.3f}", flush=True)
    for mode in modes:
        res["bm25"][mode].pop("per_query_s")
    res["machine"]["loadavg_end"] = os.getloadavg()
    res["total_seconds"] = time.perf_counter() - t0

    print_table(res)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=1))
    print(f"\nwrote {args.out}")


def print_table(r: dict) -> None:
    mb = lambda b: f"{b / 2**20:.1f} MB"
    q = r["queries"]
    print(f"\n== search bench: {r['documents']['n']} papers, {q['n']} AutoScholarQuery dev queries, k={r['k']}")
    print(f"load avg start {tuple(round(x, 1) for x in r['machine']['loadavg_start'])}, "
          f"end {tuple(round(x, 1) for x in r['machine']['loadavg_end'])} on {r['machine']['cpus']} CPUs; "
          f"threads {r['threads'] or 'default'}; times are {'CPU time of the bench process' if r['clock'] == 'cpu' else 'wall-clock'}")
    print(f"store load: {r['store']['load_seconds']:.1f}s ({r['store']['measured']}), {mb(r['store']['bytes'])}")
    e = r["encode_corpus"]
    print(f"MiniLM encoding (title + abstract, max 256 tokens): {e['docs_per_s']:.1f} papers/s on {e['measured_on']} "
          f"papers -> ~{e['estimated_corpus_seconds'] / 60:.0f} min for the corpus; queries "
          f"{r['encode_queries']['qps']:.0f}/s ({r['encode_queries']['seconds']:.1f}s for {q['n']})")
    print(f"'full' = whole corpus; 'dated' = each query's before-date (avg {q['mean_docs_allowed_dated']:.0f} "
          f"of {q['corpus_docs']} papers allowed)\n")
    hdr = f"{'backend':<30}{'build s':>9}{'disk':>11}{'p50 ms':>10}{'p95 ms':>10}{'q/s seq':>10}{'q/s batch':>11}"
    print(hdr)
    print("-" * len(hdr))  # build times include tokenisation

    def row(name, build, disk, m):
        print(f"{name:<30}{build:>9}{disk:>11}{m['p50_ms']:>10.2f}{m['p95_ms']:>10.2f}{m['qps_sequential']:>10.1f}"
              f"{(format(m['qps_batched'], '.1f') if 'qps_batched' in m else '-'):>11}")

    b, o, d, n = r["bm25"], r["rank_bm25"], r["dense_faiss_flat"], r["dense_numpy"]
    row("bm25s (ours), full", f"{b['build_seconds']:.1f}", mb(b["disk_bytes"]), b["full"])
    row("bm25s (ours), dated", "", "", b["dated"])
    row(f"rank_bm25 Okapi, full ({o['queries_used']} q)", f"{o['tokenize_seconds'] + o['build_seconds']:.1f}",
        "(memory)", o)
    row("faiss flat (ours), full", f"{d['build_seconds']:.2f}", mb(d["disk_bytes_index"]), d["full"])
    row("faiss flat (ours), dated", "", "", d["dated"])
    row("numpy brute force, full", "-", "(memory)", n["full"])
    row("numpy brute force, dated", "", "", n["dated"])
    for kind, a in r.get("dense_ann", {}).items():
        row(f"faiss {kind} (ours), full", f"{a['build_seconds']:.1f}", mb(a["disk_bytes_index"]), a["full"])
    br, dr = r["bm25_ratio"], r["dense_ratio"]
    print(f"\nratio rank_bm25 / bm25s (full corpus): p50 latency x{br['p50_latency']:.1f}, p95 x{br['p95_latency']:.1f}, "
          f"build x{br['build']:.2f}; rank_bm25 ran the first {br['on_queries']} queries only (ours on the same "
          f"subset for the ratio); top-{r['k']} overlap {o['top_k_overlap_with_bm25s']:.2f} (Okapi vs Lucene idf)")
    print(f"dense corpus vectors: {r['dense_vectors']}; queries encoded with MiniLM")
    print(f"ratio numpy / faiss flat (full corpus): p50 latency x{dr['p50_latency']:.2f}, p95 x{dr['p95_latency']:.2f}, "
          f"batched throughput x{dr['batched_throughput']:.2f}; top-{r['k']} agreement "
          f"{n['full']['top_k_agreement_with_faiss']:.3f}")
    recall_key = f"recall_at_{r['k']}_vs_exact"
    for kind, a in r.get("dense_ann", {}).items():
        print(f"ratio numpy / faiss {kind} ({a['params']}): p50 latency x{a['ratio_numpy_p50']:.1f}, batched "
              f"throughput x{a['ratio_numpy_batched']:.1f} at recall@{r['k']} {a[recall_key]:.3f} "
              "vs exact search")


if __name__ == "__main__":
    main()
