"""``scholar thought calibrate``: where a cosine threshold sits for the configured embedder on a corpus.

The paper's thresholds were set for the paper's embedders: Thought-Retriever's redundancy filter drops a thought
whose cosine to an item in memory is >= ε = 0.85 (§4.1, Contriever), SciPIP merges at τ = 0.8 (its embedder).
Cosines of another embedder (MiniLM on CPU, Contriever-msmarco, jina-v3) sit on another scale, so the same number
filters a different share. This command chunks the corpus as ``thought run`` does (``thought.chunk_size`` tokens
of the LLM's tokenizer), embeds a seeded sample of chunks, and reports quantiles of

* ``pairwise``: the cosine of random pairs of different chunks (how similar unrelated text looks), and
* ``nearest``: each sampled chunk's cosine to its nearest other sampled chunk (what the redundancy check sees),

plus the percentile at which each threshold falls in both. To carry a threshold to another embedder, read its
percentile under the paper's embedder and take the value at the same percentile under yours (or run both here).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from scholar_agents.llm.embedder import build_embedder
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.thought.chunking import chunk_text
from scholar_agents.thought.commands import _tokenizer_only, load_documents
from scholar_agents.thought.config import thought_config
from scholar_agents.validation import UsageError, existing_file, optional_positive_int, positive_int, reading

log = logging.getLogger(__name__)


def _unit(vecs: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs / np.maximum(norms, 1e-12)


def similarity_stats(vecs: np.ndarray, n_pairs: int, quantiles, thresholds: dict, seed: int) -> dict:
    """Quantiles of random-pair and nearest-other cosines over the rows of ``vecs`` (any norm), and the percentile
    of each threshold in both (the share of values below it)."""
    n = len(vecs)
    if n < 2:
        raise UsageError(f"calibration needs at least 2 chunks, the corpus gave {n}: add knowledge files")
    x = _unit(np.asarray(vecs, dtype=np.float64))
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, size=n_pairs)
    j = (i + rng.integers(1, n, size=n_pairs)) % n  # a different chunk, uniformly
    pairwise = np.einsum("ij,ij->i", x[i], x[j])
    nearest = np.empty(n)
    for start in range(0, n, 1024):  # blocks of the n x n cosine matrix
        sims = x[start:start + 1024] @ x.T
        sims[np.arange(len(sims)), np.arange(start, start + len(sims))] = -np.inf  # not itself
        nearest[start:start + 1024] = sims.max(axis=1)

    def describe(values: np.ndarray) -> dict:
        return {"n": int(values.size), "mean": float(values.mean()),
                "quantiles": {f"{100 * q:g}%": float(np.quantile(values, q)) for q in quantiles},
                "thresholds": {name: {"value": float(t), "percentile": float(100 * np.mean(values < t)),
                                      "share_at_or_above": float(np.mean(values >= t))}
                               for name, t in thresholds.items()}}

    return {"pairwise": describe(pairwise), "nearest": describe(nearest)}


def table(stats: dict) -> str:
    """The quantiles and the thresholds' percentiles as a Markdown table."""
    qs = list(stats["pairwise"]["quantiles"])
    lines = ["| cosine | mean | " + " | ".join(qs) + " |", "|---|" + "---|" * (len(qs) + 1)]
    for kind, label in (("pairwise", "random pair of chunks"), ("nearest", "chunk to its nearest other chunk")):
        s = stats[kind]
        lines.append(f"| {label} (n={s['n']}) | {s['mean']:.3f} | "
                     + " | ".join(f"{v:.3f}" for v in s["quantiles"].values()) + " |")
    lines += ["", "| threshold | value | percentile among random pairs | percentile among nearest | "
              "chunks whose nearest is >= it |", "|---|---|---|---|---|"]
    for name, t in stats["pairwise"]["thresholds"].items():
        near = stats["nearest"]["thresholds"][name]
        lines.append(f"| {name} | {t['value']:g} | {t['percentile']:.2f} | {near['percentile']:.2f} | "
                     f"{100 * near['share_at_or_above']:.1f}% |")
    return "\n".join(lines)


def calibrate(cfg: DictConfig) -> dict:
    if not cfg.knowledge:
        raise UsageError("thought calibrate needs knowledge=[<JSONL(.gz) or .txt files>] (default: the bundled sample)")
    files = [existing_file(p, "knowledge") for p in cfg.knowledge]
    max_chunks = optional_positive_int(cfg.max_chunks, "max_chunks", "chunks sampled; null = all")
    n_pairs = positive_int(cfg.pairs, "pairs", "random chunk pairs")
    quantiles = [float(q) for q in cfg.quantiles]
    if not quantiles or not all(0.0 <= q <= 1.0 for q in quantiles):
        raise UsageError(f"quantiles must be fractions in [0, 1], e.g. [0.5,0.99], got {list(quantiles)}")
    thresholds = {str(k): float(v) for k, v in cfg.thresholds.items()}
    tcfg = thought_config(cfg.thought)

    tokenizer = _tokenizer_only(cfg)  # chunk sizes are in the LLM's tokens, as in `thought run`
    docs = []
    for f in files:
        with reading("knowledge", f):
            docs += load_documents(f)
    rng = np.random.default_rng(int(cfg.seed))
    # sample documents before chunking (chunking every document of a large corpus costs more than embedding)
    order = rng.permutation(len(docs))
    chunks: list[str] = []
    for d in order:
        chunks += [c for c in chunk_text(docs[d].text, tokenizer, tcfg.chunk_size, tcfg.chunk_overlap) if c.strip()]
        if max_chunks is not None and len(chunks) >= max_chunks:
            break
    chunks = chunks[:max_chunks] if max_chunks is not None else chunks
    embedder = build_embedder(cfg.embedder)
    vecs = embedder.encode(chunks, kind="doc", show_progress=len(chunks) > 256)
    stats = similarity_stats(vecs, n_pairs, quantiles, thresholds, int(cfg.seed))
    report = {"embedder": str(cfg.embedder.model), "knowledge": [str(f) for f in files], "documents": len(docs),
              "chunks": len(chunks), "chunk_size": tcfg.chunk_size, "pairs": n_pairs, "seed": int(cfg.seed),
              **stats, "config": OmegaConf.to_container(cfg.embedder, resolve=True)}
    out = run_dir(cfg)
    (out / "calibration.json").write_text(json.dumps(report, indent=2) + "\n")
    text = (f"Cosine similarity of `{report['embedder']}` on {len(chunks)} chunks of {tcfg.chunk_size} tokens "
            f"({len(docs)} documents):\n\n{table(stats)}\n")
    (out / "calibration.md").write_text(text)
    print(text)
    log.info("calibration: %s", Path(out) / "calibration.json")
    return report
