"""The Selectors on what a real crawl puts in front of them — every paper in the agent's queues of an
``eval pasa`` run (``trajectories/agent.jsonl``), labelled by the query's gold list — rather than on a built pair set.
Each run names the search backend its crawl used, so a paper is tagged as ``selector=provenance`` would see it
(that backend for a [Search] hit, ``expand`` / ``seed`` otherwise, ``pasa.agent.queue_provenance``).

Per run: ROC AUC of each Selector's P(relevant), of zero-shot MiniLM cosine and BM25 (query vs title + abstract), and of
the crawl's own order (a paper queued earlier ranks higher), with the paired ΔAUC of each against the embedding
Selector (whole queries resampled); over every queued paper and over those with an abstract in the store.

    python scripts/selector_on_crawl_hits.py dense=/work/runs/selector_ranking_dense/heldout \
        bm25=/work/runs/selector_ranking/heldout --out /work/runs/selector_on_crawl_hits
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from scholar_agents.eval.bootstrap import BootstrapConfig, auc_diff_by_query  # noqa: E402
from scholar_agents.eval.metrics import roc_auc  # noqa: E402
from scholar_agents.eval.selector_baselines import bm25_scores, cosine_scores  # noqa: E402
from scholar_agents.papers.ids import norm_id  # noqa: E402
from scholar_agents.pasa.agent import queue_provenance  # noqa: E402
from scholar_agents.pasa.selectors.llm import SelectorPair  # noqa: E402
from scholar_agents.pasa.trajectory import read_trajectories  # noqa: E402

DEV = REPO.parent / "shared" / "data" / "queries" / "autoscholarquery_dev.jsonl"


def crawl_pairs(run_dir: Path, search_name: str, store, gold: dict[str, set[str]]) -> tuple[list[SelectorPair], list]:
    """Every queued paper of every query (run 0 of an ensemble), in queue order, and its position in the queue."""
    pairs, positions = [], []
    for t in read_trajectories(run_dir / "trajectories" / "agent.jsonl"):
        if t.run != 0:
            continue
        g = gold.get(t.qid)
        if g is None:
            raise SystemExit(f"{run_dir}: query {t.qid} is not in the gold file")
        by = queue_provenance([t], search_name)
        ids = [e.paper_id for e in t.queue]
        papers = store.get_many(ids, with_sections=False)
        for i, pid in enumerate(ids):
            if pid in papers:
                pairs.append(SelectorPair.of(t.user_query, papers[pid], label=norm_id(pid) in g, qid=t.qid,
                                             found_by=by.get(pid, "")))
                positions.append(i)
    return pairs, positions


def measure(pairs, positions, selectors: dict, embedder, samples: int) -> dict:
    y = np.array([bool(p.label) for p in pairs])
    groups = [p.qid for p in pairs]
    scores = {name: np.asarray(sel.score(pairs), dtype=np.float64) for name, sel in selectors.items()}
    scores["zero-shot cosine"] = cosine_scores(pairs, embedder)
    scores["zero-shot BM25"] = bm25_scores(pairs)
    scores["crawl order"] = -np.asarray(positions, dtype=np.float64)
    has_abstract = np.array([bool(p.abstract.strip()) for p in pairs])
    boot = BootstrapConfig(samples=samples, seed=0)
    out = {"pairs": int(len(y)), "gold": int(y.sum()), "queries": len(set(groups)),
           "with_abstract": float(has_abstract.mean()), "gold_with_abstract": float(has_abstract[y].mean()),
           "found_by": {k: int(v) for k, v in zip(*np.unique([p.found_by for p in pairs], return_counts=True))},
           "auc": {}, "auc_with_abstract": {}, "vs_embedding": {}}
    ref = scores.get("embedding")
    for name, s in scores.items():
        out["auc"][name] = roc_auc(y, s)
        m = has_abstract
        out["auc_with_abstract"][name] = roc_auc(y[m], s[m]) if y[m].any() and not y[m].all() else float("nan")
        if ref is not None and name != "embedding":
            d = auc_diff_by_query(y, s, ref, groups, boot)
            out["vs_embedding"][name] = [d.diff, list(d.ci) if d.ci else None]
    return out


def render(results: dict) -> str:
    lines = []
    for run, r in results.items():
        lines += [f"### {run}: {r['pairs']} queued papers of {r['queries']} queries, {r['gold']} gold; "
                  f"{r['with_abstract']:.0%} with an abstract (gold: {r['gold_with_abstract']:.0%}); found by "
                  + ", ".join(f"{k or 'unknown'} {v}" for k, v in r["found_by"].items()), "",
                  "| scorer | AUC, every queued paper | Δ vs the embedding Selector (95 % CI) | AUC, papers with an "
                  "abstract |", "|---|---:|---|---:|"]
        for name, auc in r["auc"].items():
            d = r["vs_embedding"].get(name)
            diff = "" if d is None else (f"{d[0]:+.3f} ({d[1][0]:+.3f} to {d[1][1]:+.3f})" if d[1] else f"{d[0]:+.3f}")
            lines.append(f"| {name} | {auc:.3f} | {diff} | {r['auc_with_abstract'][name]:.3f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> dict:
    from scholar_agents.llm.embedder import build_embedder
    from scholar_agents.papers.store import PaperStore
    from scholar_agents.pasa.selectors.embedding import BUNDLED_DIR, EmbeddingSelector
    from scholar_agents.pasa.selectors.lexical import BUNDLED_DIR as LEXICAL_DIR
    from scholar_agents.pasa.selectors.lexical import LexicalSelector
    from scholar_agents.pasa.selectors.provenance import ProvenanceSelector

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="<search backend>=<eval pasa run dir> (its trajectories/agent.jsonl)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--store", default=None, help="the paper store the crawls read (default: papers=shared_corpus's)")
    ap.add_argument("--queries", type=Path, default=DEV, help="the gold file (AutoScholarQuery dev)")
    ap.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    a = ap.parse_args(argv)
    if a.store is None:
        from scholar_agents.hydra_app import compose

        a.store = str(compose("papers_build", ["papers=shared_corpus"]).papers.store)
    gold = {}
    for line in a.queries.read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            gold[str(d["qid"])] = {norm_id(x) for x in d.get("answer_arxiv_id") or []}
    embedder = build_embedder()
    embedding = EmbeddingSelector.load(BUNDLED_DIR, embedder=embedder, max_abstract_chars=600)
    lexical = LexicalSelector.load(LEXICAL_DIR, max_abstract_chars=600)
    selectors = {"embedding": embedding, "lexical": lexical,
                 "provenance": ProvenanceSelector(embedding, lexical, ["dense"])}
    results = {}
    with PaperStore(a.store, readonly=True) as store:
        for spec in a.runs:
            name, sep, path = spec.partition("=")
            if not sep:
                raise SystemExit(f"expected <search backend>=<run dir>, got {spec!r}")
            pairs, positions = crawl_pairs(Path(path), name, store, gold)
            results[f"{name} crawl"] = measure(pairs, positions, selectors, embedder, a.samples)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "crawl_hits.json").write_text(json.dumps(results, indent=1))
    text = render(results)
    (a.out / "crawl_hits.md").write_text(text)
    print(text)
    return results


if __name__ == "__main__":
    main()
