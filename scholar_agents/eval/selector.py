"""``scholar eval selector``: the Selector on a labelled <query, paper> pair set (PaSa Table 4): precision, recall,
F1, accuracy at the threshold, ROC AUC of P("True"), and a reliability diagram (is P("True") a probability?).
Zero-shot baselines (``baselines``: MiniLM cosine and BM25 of the query against title + abstract, see
``eval.selector_baselines``) are rows of the same table: the fine-tuned Selector has to beat them on AUC.

Input formats (``data.format=auto`` detects them per line):
- ``pairs``: JSONL ``{"query" (or "question"), "title", "abstract", "label"}`` (label: bool, 0/1 or "True"/"False");
  what ``scripts/build_selector_eval_pairs.py`` writes.
- ``messages``: PaSa's released SFT format ``{"messages": [user: Table 15 prompt, assistant: "True/False..."]}``,
  e.g. ``sft_selector/test.jsonl`` (the 200 annotated pairs of App. C) or our own SFT files, read with
  ``data_gen.pasa_release.load_sft_selector``: query, title and abstract back out of the Table 15 prompt, the label
  from the answer's decision token. (The format detection looks at the first record.)
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from omegaconf import DictConfig, OmegaConf

from scholar_agents.data_gen.pasa_release import load_sft_selector
from scholar_agents.data_gen.request_forms import rewrite
from scholar_agents.eval.bootstrap import auc_diff_by_query
from scholar_agents.eval.metrics import binary_metrics, reliability_curve, roc_auc
from scholar_agents.eval.plots import reliability_diagram
from scholar_agents.eval.selector_baselines import baseline_scores, min_max
from scholar_agents.llm import build_llm
from scholar_agents.llm.embedder import build_embedder
from scholar_agents.pasa.selectors.factory import build_selector, needs_llm, selector_kind
from scholar_agents.pasa.selectors.llm import SelectorPair
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.validation import existing_file, jsonl_records, one_of, optional_positive_int, positive_int, reading

log = logging.getLogger(__name__)

FORMATS = ("auto", "pairs", "messages")


def _label(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise ValueError(f"{where}: label must be a bool, 0/1 or 'True'/'False', got {value!r}")


def pair_from_record(row: dict, where: str) -> SelectorPair:
    """One labelled pair in the ``pairs`` format."""
    query = row.get("query", row.get("question"))
    if not query or "title" not in row or "label" not in row:
        raise ValueError(f"{where}: a pair needs 'query' (or 'question'), 'title' and 'label'; got {sorted(row)}")
    return SelectorPair(query=str(query), title=str(row["title"]), abstract=str(row.get("abstract") or ""),
                        label=_label(row["label"], where), qid=str(row.get("qid", "")),
                        paper_id=str(row.get("paper_id", "")), found_by=str(row.get("found_by") or ""))


def detect_format(path: Path) -> str:
    """``messages`` when the first record has a ``messages`` list, else ``pairs``."""
    for _, row in jsonl_records(path):
        return "messages" if "messages" in row else "pairs"
    raise ValueError(f"{path}: no pairs")


def load_labelled_pairs(path: str | Path, fmt: str = "auto", limit: Optional[int] = None) -> list[SelectorPair]:
    """Labelled pairs from a JSONL file in either format (see the module docstring)."""
    path = Path(path)
    if fmt not in FORMATS:
        raise ValueError(f"data.format must be one of {FORMATS}, got {fmt!r}")
    if not path.is_file():
        raise FileNotFoundError(f"pair file not found: {path}")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "messages":
        # The one reader of PaSa's SFT format (data_gen.pasa_release): Table 15 fields back out of the prompt,
        # the label = the answer's decision token.
        pairs = [SelectorPair(query=ex.user_query, title=ex.title, abstract=ex.abstract, label=ex.decision)
                 for ex in load_sft_selector(path, limit=limit)]
    else:
        pairs = []
        for lineno, row in jsonl_records(path):
            pairs.append(pair_from_record(row, f"{path}:{lineno}"))
            if limit is not None and len(pairs) >= limit:
                break
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return pairs


def best_threshold(labels: np.ndarray, scores: np.ndarray) -> tuple[float, float]:
    """The threshold maximising F1 on this set (a diagnostic of ranking quality, not a tuned operating point)."""
    best = (0.5, -1.0)
    for t in np.unique(scores):
        f1 = binary_metrics(labels, scores >= t).f1
        if f1 > best[1]:
            best = (float(t), f1)
    return best


def evaluate_scores(labels: np.ndarray, scores: np.ndarray, threshold: float, n_bins: int = 10) -> dict:
    labels = np.asarray(labels, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    at = binary_metrics(labels, scores >= threshold)
    t_best, f1_best = best_threshold(labels, scores)
    return {
        "threshold": threshold,
        **at.to_dict(),
        "auc": roc_auc(labels, scores),
        "best_f1_threshold": t_best,
        "best_f1": f1_best,
        "always_true_f1": binary_metrics(labels, np.ones_like(labels)).f1,
        "reliability": reliability_curve(labels, scores, n_bins=n_bins).to_dict(),
    }


def scorer_table(scorers: Sequence[tuple[str, dict]]) -> list[str]:
    """Scorers of the same pairs (Selectors, zero-shot baselines): AUC, best F1 (threshold), F1 at 0.5."""
    rows = ["| scorer | AUC | best F1 (threshold) | F1 at 0.5 | precision at 0.5 | recall at 0.5 |",
            "|---|---|---|---|---|---|"]
    for label, x in scorers:
        rows.append(f"| {label} | {x['auc']:.3f} | {x['best_f1']:.3f} ({x['best_f1_threshold']:.3f}) | {x['f1']:.3f} "
                    f"| {x['precision']:.3f} | {x['recall']:.3f} |")
    return rows


def baselines_table(name: str, m: dict, baselines: dict[str, dict], labels: dict[str, str]) -> list[str]:
    """The Selector and the zero-shot baselines on the same pairs."""
    return scorer_table([(f"Selector: {name}", m)] + [(labels.get(b, b), bm) for b, bm in baselines.items()])


def markdown_report(name: str, m: dict, meta: dict, baselines: Optional[dict[str, dict]] = None) -> str:
    rows = [
        f"# Selector evaluation: {name}",
        "",
        f"- data: `{meta['data']}` ({m['n']} pairs, {m['positives']} positive; queries asked in the "
        f"{meta.get('phrasing', 'original')} phrasing"
        + (f"; every paper as found by {meta['found_by']}" if meta.get("found_by") else "")
        + (f"; {meta['excluded_fitted_pairs']} pairs of queries the Selector was fitted on left out"
           if meta.get("excluded_fitted_pairs") else "") + ")",
        f"- model: `{meta['model']}` (backend {meta['backend']}), threshold {m['threshold']}, "
        f"normalize={meta['normalize']}, max_abstract_chars={meta['max_abstract_chars']}",
        f"- scoring: {meta['pairs_per_second']:.2f} pairs/s ({meta['score_seconds']:.1f} s)",
        "",
        "| precision | recall | F1 | accuracy | AUC | ECE | best-F1 threshold (F1) | always-True F1 |",
        "|---|---|---|---|---|---|---|---|",
        f"| {m['precision']:.3f} | {m['recall']:.3f} | {m['f1']:.3f} | {m['accuracy']:.3f} | {m['auc']:.3f} "
        f"| {m['reliability']['ece']:.3f} | {m['best_f1_threshold']:.3f} ({m['best_f1']:.3f}) "
        f"| {m['always_true_f1']:.3f} |",
        "",
        f"Confusion: TP {m['tp']}, FP {m['fp']}, FN {m['fn']}, TN {m['tn']}.",
        "",
        "![reliability](reliability.png)",
    ]
    if baselines:
        rows += ["", "## Zero-shot baselines (same pairs)", "",
                 *baselines_table(name, m, baselines, meta.get("baseline_labels", {})), "",
                 ("Baselines: AUC and the best-F1 ranking read the raw score; F1 / precision / recall at 0.5 and the "
                  "best-F1 threshold read it min-max scaled over this eval set (no per-query normalisation). "
                  f"The Selector's row is at its own threshold ({m['threshold']}).")]
        diffs = [(b, bm["auc_diff"]) for b, bm in baselines.items() if bm.get("auc_diff")]
        if diffs:
            rows += ["", "| Selector AUC − baseline AUC | difference | 95 % interval (queries resampled) | verdict |",
                     "|---|---:|---|---|"]
            for b, d in diffs:
                ci = f"{d['ci'][0]:+.3f} to {d['ci'][1]:+.3f}" if d.get("ci") else "n/a"
                rows.append(f"| vs {meta.get('baseline_labels', {}).get(b, b)} ({d['n']} queries) | "
                            f"{d['diff']:+.3f} | {ci} | {d['verdict']} |")
    return "\n".join(rows) + "\n"


def selector(cfg: DictConfig) -> dict:
    """Score every labelled pair with one forward pass each, then write ``metrics.json``, ``report.md``,
    ``reliability.png`` and ``scores.jsonl`` to the run directory."""
    path = existing_file(cfg.data.get("path"), "data.path")
    one_of(cfg.data.format, "data.format", FORMATS)
    limit = optional_positive_int(cfg.data.get("limit"), "data.limit", "the first N pairs; null = all")
    positive_int(cfg.n_bins, "n_bins", "reliability-diagram bins")
    out = run_dir(cfg)
    with reading("data.path", path):
        pairs = load_labelled_pairs(path, cfg.data.format, limit)
    phrasing = str(cfg.data.get("phrasing") or "original")
    if phrasing != "original":  # the same pairs, each query asked in a request form (data_gen.request_forms)
        import dataclasses

        pairs = [dataclasses.replace(p, query=rewrite(p.query, phrasing)) for p in pairs]
    found_by = cfg.data.get("found_by")
    if found_by:  # every paper as if this retriever had returned it (selector=provenance routes on it)
        import dataclasses

        pairs = [dataclasses.replace(p, found_by=str(found_by)) for p in pairs]
    cross = not needs_llm(cfg.selector)  # no LLM: the cross-encoder / embedding Selector in selector.model scores
    llm = None if cross else build_llm(cfg.llm)
    try:
        sel = build_selector(cfg.selector, lambda: llm)
        excluded = 0
        fitted = set(((getattr(sel, "meta", None) or {}).get("train") or {}).get("qids") or [])
        if fitted and cfg.data.get("exclude_fitted", True):  # never score a model on the queries it was fitted on
            kept = [p for p in pairs if not (p.qid and p.qid in fitted)]
            excluded = len(pairs) - len(kept)
            if not kept:
                raise ValueError(f"every pair of {path} is of a query {cfg.selector.get('model')} was fitted on "
                                 "(its selector_meta.json train.qids): nothing held out to evaluate")
            if excluded:
                log.info("data.exclude_fitted: %d of %d pairs dropped (queries the Selector was fitted on)",
                         excluded, len(pairs))
            pairs = kept
        labels = np.array([p.label for p in pairs], dtype=bool)
        t0 = time.perf_counter()
        probs = sel.probs(pairs, show_progress=True)
        seconds = time.perf_counter() - t0
    finally:
        if llm is not None:
            llm.close()
    scores = sel.scores_from_probs(probs)
    model = str(cfg.selector.model) if cross else str(cfg.llm.model)
    backend = selector_kind(cfg.selector) if cross else str(cfg.llm.backend)
    name = cfg.name or model
    metrics = evaluate_scores(labels, scores, sel.threshold, n_bins=cfg.n_bins)
    raw_baselines, baselines, baseline_labels = _baselines(cfg, pairs, labels)
    groups = [p.qid or p.query for p in pairs]
    for b, v in raw_baselines.items():  # the Selector's AUC minus each baseline's, whole queries resampled
        baselines[b]["auc_diff"] = auc_diff_by_query(labels, scores, v, groups).to_dict()
    meta = {
        "name": name, "data": str(cfg.data.path), "phrasing": phrasing, "found_by": str(found_by or ""),
        "excluded_fitted_pairs": excluded,
        "model": model, "backend": backend,
        "normalize": sel.normalize, "max_abstract_chars": sel.max_abstract_chars,
        "decision_mass_mean": float(probs.sum(axis=1).mean()),
        "score_seconds": seconds, "pairs_per_second": len(pairs) / max(seconds, 1e-9),
        "selector": OmegaConf.to_container(cfg.selector, resolve=True),
        "baseline_labels": baseline_labels,
    }
    (out / "metrics.json").write_text(json.dumps({"metrics": metrics, "meta": meta, "baselines": baselines},
                                                 indent=2))
    with (out / "scores.jsonl").open("w") as f:
        for i, (p, s, (pt, pf)) in enumerate(zip(pairs, scores, probs)):
            f.write(json.dumps({"qid": p.qid, "paper_id": p.paper_id, "query": p.query, "title": p.title,
                                "label": p.label, "score": float(s), "p_true": float(pt), "p_false": float(pf),
                                **{f"baseline_{b}": float(v[i]) for b, v in raw_baselines.items()}}) + "\n")
    reliability_diagram({name: reliability_curve(labels, scores, n_bins=cfg.n_bins)}, out / "reliability.png",
                        title=f"Selector calibration: {name}")
    (out / "report.md").write_text(markdown_report(name, metrics, meta, baselines))
    log.info("selector %s on %d pairs: P %.3f R %.3f F1 %.3f acc %.3f AUC %.3f -> %s", name, len(pairs),
             metrics["precision"], metrics["recall"], metrics["f1"], metrics["accuracy"], metrics["auc"], out)
    for b, bm in baselines.items():
        log.info("baseline %s: AUC %.3f best F1 %.3f, F1 at 0.5 (min-max scaled) %.3f", b, bm["auc"], bm["best_f1"],
                 bm["f1"])
    return {"metrics": metrics, "meta": meta, "baselines": baselines, "output_dir": str(out)}


def _baselines(cfg: DictConfig, pairs: list[SelectorPair], labels: np.ndarray
               ) -> tuple[dict[str, np.ndarray], dict[str, dict], dict[str, str]]:
    """Raw scores, metrics and report labels of the configured zero-shot baselines (``baselines: []`` = none)."""
    names = list(cfg.get("baselines") or [])
    if not names:
        return {}, {}, {}

    def embedder():
        return build_embedder(cfg.embedder)

    raw = baseline_scores(pairs, names, embedder)
    metrics = {}
    for b, v in raw.items():
        m = evaluate_scores(labels, min_max(v), 0.5, n_bins=cfg.n_bins)
        m["auc"] = roc_auc(labels, v)  # the raw ranking (min-max keeps it; computed on raw to say so)
        metrics[b] = m
    labels_ = {"minilm_cosine": f"zero-shot: cosine({cfg.embedder.model}) query vs title + abstract",
               "bm25": "zero-shot: BM25 query vs title + abstract"}
    return raw, metrics, {b: labels_[b] for b in raw}
