"""The assembly of ``data_gen autoscholarquery``'s dataset from the parsed outputs: :func:`assemble` resolves each
question's cited works to arXiv ids, drops questions that are too short, copy a few-shot question
(:func:`fewshot_questions`) or resolve to nothing, de-duplicates, dates each query with its source paper, splits
train/dev/test by source paper (:func:`split_sources`, :class:`SplitConfig`) and counts where queries are lost.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from omegaconf import DictConfig
from rapidfuzz import fuzz

from scholar_agents.data_gen.answers import normalize_question
from scholar_agents.data_gen.citation_resolution import METHODS, UNRESOLVED, CitationResolver
from scholar_agents.data_gen.llm_json import parse_llm_json
from scholar_agents.data_gen.passages import CitedWork, published_time


@dataclass
class SplitConfig:
    """Fractions of SOURCE PAPERS per split (PaSa: "queries in each split derived from distinct source papers")."""

    train: float = 0.8
    dev: float = 0.1
    test: float = 0.1


def split_sources(source_ids: list[str], splits: SplitConfig | DictConfig, seed: int) -> dict[str, str]:
    """Source paper → split, by a seeded shuffle of the sorted ids; every non-zero split gets at least one source
    when there are enough sources."""
    fr = {"train": float(splits.train), "dev": float(splits.dev), "test": float(splits.test)}
    if any(v < 0 for v in fr.values()) or abs(sum(fr.values()) - 1.0) > 1e-6:
        raise ValueError(f"split fractions must be >= 0 and sum to 1, got {fr}")
    ids = sorted(set(source_ids))
    random.Random(seed).shuffle(ids)
    n = len(ids)
    n_dev = round(n * fr["dev"])
    n_test = round(n * fr["test"])
    if n >= 3:
        n_dev = max(n_dev, 1 if fr["dev"] > 0 else 0)
        n_test = max(n_test, 1 if fr["test"] > 0 else 0)
    n_dev = min(n_dev, n)
    n_test = min(n_test, n - n_dev)
    out = {}
    for i, sid in enumerate(ids):
        out[sid] = "dev" if i < n_dev else "test" if i < n_dev + n_test else "train"
    if fr["train"] == 0:  # rounding must not put sources into a split the user switched off
        for sid, s in out.items():
            if s == "train":
                out[sid] = "dev" if fr["dev"] > 0 else "test"
    return out


def _percentile(xs: list[int], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else 0.0


def fewshot_questions(dg) -> list[str]:
    """The (normalised) questions of every configured few-shot example."""
    out = []
    for e in dg.fewshot.examples:
        parsed = parse_llm_json(str(e.output), items="object")
        for item in parsed.value or []:
            if isinstance(item, dict) and isinstance(item.get("question"), str):
                out.append(normalize_question(item["question"]))
    return out


def _copies_fewshot(key: str, shots: list[str], min_score: float | None) -> bool:
    if min_score is None or not shots:
        return False

    return max(fuzz.ratio(key, s) for s in shots) >= float(min_score)


def assemble(records: list[dict], resolver: CitationResolver, dg, seed: int) -> tuple[dict[str, list[dict]], dict]:
    """Resolve, filter, de-duplicate and split the generated questions; PaSa JSONL records per split + stats."""
    stats: dict[str, Any] = {}
    shots = fewshot_questions(dg)
    copy_score = dg.get("fewshot_copy_min_score")
    drops: Counter = Counter()
    answer_methods: Counter = Counter()
    all_methods: Counter = Counter()
    seen_questions: set[str] = set()
    by_source: dict[str, list[dict]] = defaultdict(list)
    # Per source paper: where the queries come from and where they are lost (the report's "queries per source").
    sources: dict[str, Counter] = defaultdict(Counter)
    source_info: dict[str, tuple[str, str]] = {}
    for rec in records:
        src = sources[rec["source_id"]]
        source_info.setdefault(rec["source_id"], (rec["source_format"], rec["source_title"]))
        src["passages"] += 1
        src["questions_parsed"] += len(rec.get("questions") or [])
        works = [CitedWork(**c) for c in rec["citations"]]
        resolved = [resolver.resolve(w) for w in works]
        for r in resolved:
            all_methods[r.method] += 1
        if not rec.get("questions"):
            continue
        try:
            ptime = published_time(rec["source_date"])
        except ValueError:
            drops["no_source_date"] += len(rec["questions"])
            continue
        for q in rec["questions"]:
            text = q["question"].strip()
            if len(text) < int(dg.min_question_chars):
                drops["question_too_short"] += 1
                continue
            key = normalize_question(text)
            if _copies_fewshot(key, shots, copy_score):
                drops["copied_fewshot_question"] += 1
                continue
            ids, titles, methods = [], [], []
            for n in q["cite_ids"]:
                r = resolved[n - 1]
                answer_methods[r.method] += 1
                if r.method == UNRESOLVED or r.arxiv_id in ids:
                    continue
                ids.append(r.arxiv_id)
                titles.append(r.title)
                methods.append(r.method)
            if not ids:
                drops["answers_resolve_to_nothing"] += 1
                continue
            if dg.dedupe and key in seen_questions:
                drops["duplicate_question"] += 1
                continue
            seen_questions.add(key)
            by_source[rec["source_id"]].append({
                "question": text,
                "answer": titles,
                "answer_arxiv_id": ids,
                "source_meta": {
                    "published_time": ptime,
                    "source_paper_id": rec["source_id"],
                    "source_title": rec["source_title"],
                    "passage_id": rec["passage_id"],
                    "resolution": methods,
                },
            })
    assignment = split_sources(list(by_source), dg.splits, seed)
    out: dict[str, list[dict]] = {"train": [], "dev": [], "test": []}
    for sid, split in assignment.items():  # shuffled source order: a split is not sorted by source id
        out[split].extend(by_source[sid])
    for split, rows in out.items():
        for i, row in enumerate(rows):
            row["qid"] = f"{dg.qid_prefix}_{split}_{i}"
            rows[i] = {"qid": row.pop("qid"), **row}
    per_source_rows = []
    for sid, c in sources.items():
        fmt, title = source_info[sid]
        per_source_rows.append({"source_id": sid, "format": fmt, "title": title, "split": assignment.get(sid),
                                "passages": c["passages"], "questions_parsed": c["questions_parsed"],
                                "queries_kept": len(by_source.get(sid, []))})
    stats["per_source_paper"] = sorted(per_source_rows, key=lambda r: (-r["queries_kept"], r["source_id"]))
    by_format: dict[str, Counter] = defaultdict(Counter)
    for r in per_source_rows:
        by_format[r["format"]].update(source_papers=1, source_papers_with_queries=int(r["queries_kept"] > 0),
                                      passages=r["passages"], questions_parsed=r["questions_parsed"],
                                      queries_kept=r["queries_kept"])
    stats["queries_by_source_format"] = {f: dict(c) for f, c in sorted(by_format.items())}
    n_ans = [len(r["answer_arxiv_id"]) for rows in out.values() for r in rows]
    per_source = [len(v) for v in by_source.values()]
    n_answer_cites = sum(answer_methods.values())
    n_all = sum(all_methods.values())
    stats["queries"] = {s: len(v) for s, v in out.items()} | {"total": len(n_ans)}
    stats["source_papers_with_queries"] = {s: sum(1 for a in assignment.values() if a == s) for s in out}
    stats["queries_per_source_paper"] = {"mean": float(np.mean(per_source)) if per_source else 0.0,
                                         "p50": _percentile(per_source, 50), "max": max(per_source, default=0)}
    stats["answers_per_query"] = {"mean": float(np.mean(n_ans)) if n_ans else 0.0, "p50": _percentile(n_ans, 50),
                                  "p90": _percentile(n_ans, 90)}
    stats["dropped_questions"] = dict(drops)
    stats["resolution_of_answer_citations"] = {
        "total": n_answer_cites,
        "by_method": {m: answer_methods.get(m, 0) for m in METHODS},
        "rate": (n_answer_cites - answer_methods.get(UNRESOLVED, 0)) / n_answer_cites if n_answer_cites else 0.0,
    }
    stats["resolution_of_all_passage_citations"] = {
        "total": n_all,
        "by_method": {m: all_methods.get(m, 0) for m in METHODS},
        "rate": (n_all - all_methods.get(UNRESOLVED, 0)) / n_all if n_all else 0.0,
    }
    return out, stats
