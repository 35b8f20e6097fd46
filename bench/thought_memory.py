"""Thought memory at scale: insertion with the redundancy check, and top-K retrieval, at 10k / 100k / 1M items —
our persistent incremental store (``thought.Memory``: SQLite + FAISS) against the official code's approach,
measured in the same run.

The official code (ulab-uiuc/Thought-Retriever ``retrieval.py: dense_neiborhood_search``) keeps embeddings in a
Python list of tensors and, for every search, stacks them, builds a fresh FAISS ``IndexFlatL2`` and searches it.
It has no insertion-time redundancy check; the baseline applies its search to that check (rebuild, top-1, then
append), which is what checking "every item in the memory" (§2.3) costs that way.

Vectors are random unit vectors (dimension 384, MiniLM's) — latency does not depend on what they encode.
Our insertion = nearest-neighbour search over chunks ∪ thoughts + one SQLite transaction + FAISS add; our
retrieval = FAISS top-K over chunks ∪ thoughts + fetching the K items from SQLite.

    nice -n 10 python bench/thought_memory.py                         # 10k, 100k, 1M
    nice -n 10 python bench/thought_memory.py --sizes 10000 --ops 50  # quick
    nice -n 10 python bench/thought_memory.py --index hnsw --sizes 10000 100000   # approximate index
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np
import torch

from scholar_agents.thought.memory import Memory


def unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    v = rng.standard_normal((n, dim), dtype=np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v


def official_search(corpus: list[torch.Tensor], query: torch.Tensor, k: int) -> np.ndarray:
    """``dense_neiborhood_search`` of the official code (metric='l2', its default): stack, build, search."""
    xq = torch.vstack([query]).cpu().numpy()
    xb = torch.vstack(corpus).cpu().numpy()
    index = faiss.IndexFlatL2(xb.shape[1])
    index.add(xb)
    _, ids = index.search(xq, k)
    return ids[0]


def ms(samples: list[float]) -> float:
    return 1000 * statistics.median(samples)


def bench_size(n: int, dim: int, ops: int, baseline_ops: int, k: int, epsilon: float, workdir: Path,
               index: str, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    chunks = unit(rng, n, dim)
    new_thoughts = unit(rng, ops, dim)
    queries = unit(rng, ops, dim)
    row: dict = {"items": n, "dim": dim, "index": index}

    # ---- ours: persistent store, incremental index
    path = workdir / f"memory_{n}"
    shutil.rmtree(path, ignore_errors=True)
    t = time.perf_counter()
    mem = Memory(path, dim=dim, index=index)
    step = 50_000
    for s in range(0, n, step):
        e = min(n, s + step)
        mem.add_chunks([f"chunk {i}" for i in range(s, e)], chunks[s:e], scope="bench")
    row["bulk_load_s"] = time.perf_counter() - t
    t = time.perf_counter()
    mem.search(queries[:1], k, ["bench"])  # builds the scope's index from SQLite once
    row["index_build_s"] = time.perf_counter() - t
    mem.save()
    mem.close()
    t = time.perf_counter()
    mem = Memory(path, index=index)  # a restart: snapshot read + catch-up, no re-embedding
    mem.search(queries[:1], k, ["bench"])
    row["reopen_s"] = time.perf_counter() - t

    src = [1, 2]
    ins, stored = [], 0
    for j in range(ops):
        t = time.perf_counter()
        _, sim = mem.nearest(new_thoughts[j:j + 1], ["bench"])[0]
        if sim < epsilon:
            mem.insert_thought(f"thought {j}", new_thoughts[j], src, scope="bench")
            stored += 1
        ins.append(time.perf_counter() - t)
    ret = []
    for j in range(ops):
        t = time.perf_counter()
        hits = mem.search(queries[j:j + 1], k, ["bench"])[0]
        mem.get([i for i, _ in hits])
        ret.append(time.perf_counter() - t)
    mem.close()
    row.update(ours_insert_ms=ms(ins), ours_retrieve_ms=ms(ret), thoughts_stored=stored)

    # ---- official approach: a list of tensors, a fresh index per search
    corpus = list(torch.from_numpy(chunks).unbind(0))
    b_ins, b_ret = [], []
    for j in range(baseline_ops):
        q = torch.from_numpy(new_thoughts[j])
        t = time.perf_counter()
        nearest = official_search(corpus, q, 1)[0]
        xb = corpus[int(nearest)]
        if float(torch.dot(xb, q)) < epsilon:  # unit vectors: cosine = dot product
            corpus.append(q)
        b_ins.append(time.perf_counter() - t)
    for j in range(baseline_ops):
        t = time.perf_counter()
        official_search(corpus, torch.from_numpy(queries[j]), k)
        b_ret.append(time.perf_counter() - t)
    row.update(official_insert_ms=ms(b_ins), official_retrieve_ms=ms(b_ret), baseline_ops=baseline_ops, ops=ops)
    row["insert_speedup"] = row["official_insert_ms"] / row["ours_insert_ms"]
    row["retrieve_speedup"] = row["official_retrieve_ms"] / row["ours_retrieve_ms"]
    shutil.rmtree(path, ignore_errors=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--ops", type=int, nargs="+", default=[200, 200, 100],
                    help="insertions and retrievals timed on our store, per size (the last value repeats)")
    ap.add_argument("--baseline-ops", type=int, nargs="+", default=[50, 20, 5],
                    help="timed operations of the (slow) official approach, per size")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--epsilon", type=float, default=0.85)
    ap.add_argument("--index", choices=["flat", "hnsw"], default="flat")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="thought_memory_bench_"))
    workdir.mkdir(parents=True, exist_ok=True)
    base_ops = (args.baseline_ops + [args.baseline_ops[-1]] * len(args.sizes))[: len(args.sizes)]
    ops = (args.ops + [args.ops[-1]] * len(args.sizes))[: len(args.sizes)]
    rows = []
    print(f"random unit vectors, dim {args.dim}, K={args.k}, eps={args.epsilon}, index={args.index}; "
          f"medians over {ops} ops (ours) / {base_ops} ops (official approach); "
          f"torch threads {torch.get_num_threads()}, faiss threads {faiss.omp_get_max_threads()}")
    print(f"{'items':>9} | {'insert ours ms':>14} {'official ms':>12} {'ratio':>8} | "
          f"{'retrieve ours ms':>16} {'official ms':>12} {'ratio':>8} | {'bulk load s':>11} {'reopen s':>9}")
    for n, o, b in zip(args.sizes, ops, base_ops):
        r = bench_size(n, args.dim, o, b, args.k, args.epsilon, workdir, args.index, args.seed)
        rows.append(r)
        print(f"{n:>9} | {r['ours_insert_ms']:>14.2f} {r['official_insert_ms']:>12.1f} {r['insert_speedup']:>7.0f}x | "
              f"{r['ours_retrieve_ms']:>16.2f} {r['official_retrieve_ms']:>12.1f} {r['retrieve_speedup']:>7.0f}x | "
              f"{r['bulk_load_s']:>11.1f} {r['reopen_s']:>9.1f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
