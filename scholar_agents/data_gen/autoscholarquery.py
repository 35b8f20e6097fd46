"""``scholar data_gen autoscholarquery``: synthesise AutoScholarQuery from related-work sections (PaSa §3.1, Table 16).

1. Extract related-work passages with numbered ``\\cite{n}`` markers from the inputs (unarXive full text,
   research-town papers, LaTeX/plain text + .bib/JSON bibliography, PaSa's paper database).
2. Prompt the LLM with Table 16 (few-shot examples from ``conf/data_gen/fewshot/``), batched, in resumable shards.
3. Parse the JSON leniently (``data_gen.llm_json``), map the answers' markers back to the cited works, resolve
   those to arXiv ids through the paper store (bibliography ids first, then title), drop questions whose answers
   resolve to nothing, de-duplicate, date each query with its source paper (PaSa: "the publication date of the
   source paper as the query date"), split train/dev/test by source paper, write PaSa's JSONL format and a stats
   report (Table 11's answers per query, parse failures by kind, resolution rate by method).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from omegaconf import DictConfig, OmegaConf

from scholar_agents.data_gen.answers import normalize_question, read_items
from scholar_agents.data_gen.citation_resolution import METHODS, UNRESOLVED, CitationResolver, ResolutionConfig
from scholar_agents.data_gen.latex_passages import LatexSource, passages_from_latex
from scholar_agents.data_gen.llm_json import parse_llm_json, strict_json_ok
from scholar_agents.data_gen.passages import (
    DEFAULT_RELATED_WORK_HEADINGS,
    CitedPassage,
    CitedWork,
    passages_from_paper,
    published_time,
    related_work_matcher,
)
from scholar_agents.data_gen.research_town_passages import iter_research_town, passages_from_research_town
from scholar_agents.data_gen.shards import LazyLLM, ShardedRun, run_shards, write_json, write_jsonl
from scholar_agents.data_gen.unarxive_passages import passages_from_unarxive
from scholar_agents.pasa.prompts import AUTOSCHOLARQUERY_EXAMPLE, AUTOSCHOLARQUERY_GENERATION
from scholar_agents.validation import jsonl_records

log = logging.getLogger(__name__)

# PaSa Table 11 (answers per query), for the stats report.
TABLE_11 = {
    "ICLR 2023": {"papers": 888, "queries": 5204, "ans_mean": 2.46, "ans_p50": 2.0, "ans_p90": 5.0},
    "ICML 2023": {"papers": 981, "queries": 5743, "ans_mean": 2.37, "ans_p50": 2.0, "ans_p90": 5.0},
    "NeurIPS 2023": {"papers": 1948, "queries": 11761, "ans_mean": 2.59, "ans_p50": 2.0, "ans_p90": 5.0},
    "CVPR 2024": {"papers": 1336, "queries": 9528, "ans_mean": 2.94, "ans_p50": 2.0, "ans_p90": 6.0},
    "ACL 2024": {"papers": 485, "queries": 3315, "ans_mean": 2.16, "ans_p50": 2.0, "ans_p90": 4.0},
}


@dataclass
class FewShotExample:
    section: str = ""
    output: str = ""


@dataclass
class FewShotConfig:
    examples: list[FewShotExample] = field(default_factory=list)
    num_examples: int = 3  # Table 16 shows three; fewer are used automatically when the prompt would not fit


@dataclass
class AutoScholarQueryInputs:
    """Source papers. Every list may be empty; at least one input is needed."""

    unarxive: list[str] = field(default_factory=list)  # unarXive JSONL(.gz) files
    research_town: list[str] = field(default_factory=list)  # research-town paper dumps (JSON)
    latex: list[LatexSource] = field(default_factory=list)  # {tex, bib (.bib or JSON), paper_id, title, date}
    pasa_db: list[str] = field(default_factory=list)  # PaSa paper_database/ folders (papers.loaders.load_pasa_db)


@dataclass
class SplitConfig:
    """Fractions of SOURCE PAPERS per split (PaSa: "queries in each split derived from distinct source papers")."""

    train: float = 0.8
    dev: float = 0.1
    test: float = 0.1


@dataclass
class AutoScholarQueryConfig:
    """``data_gen`` schema of ``scholar data_gen autoscholarquery`` (presets: ``conf/data_gen/autoscholarquery*``)."""

    inputs: AutoScholarQueryInputs = field(default_factory=AutoScholarQueryInputs)
    related_work_headings: list[str] = field(default_factory=lambda: list(DEFAULT_RELATED_WORK_HEADINGS))
    # PaSa prompts GPT-4o with the whole Related Work section; a small model's context needs passages of a few
    # paragraphs (split at paragraph boundaries; ours).
    max_passage_chars: int = 20000
    min_citations: int = 1  # passages citing fewer distinct works are skipped
    fewshot: FewShotConfig = field(default_factory=FewShotConfig)
    max_new_tokens: int = 2048
    # Stop strings: small models continue the few-shot pattern after their answer ("[End of examples]", a new
    # "[OUTPUT]:"); stopping there saves the tokens. Empty = the paper's setting (the model ends by itself).
    stop: list[str] = field(default_factory=list)
    temperature: float = 0.0  # greedy: reproducible and cacheable
    # Ours, for small models: the answer is started for the model (e.g. '[{"question": "'), which turns a numbered
    # prose list into JSON; the prefix is part of the parsed output. Empty = the paper's setting.
    response_prefix: str = ""
    # Ours, for small models: decode under Table 16's JSON schema (pasa.prompts.autoscholarquery_schema: an array
    # of <= max_questions {"question", "answer"} objects whose answers are the passage's own \cite{n} markers).
    # false = the paper's free generation, parsed leniently.
    constrained: bool = False
    max_questions: int = 5  # the schema's cap (Table 16 asks for "five objects ... three question-answer pairs")
    max_question_chars: int = 300
    shard_size: int = 16  # passages per shard (one batched LLM call, one done-marker)
    resolution: ResolutionConfig = field(default_factory=ResolutionConfig)
    splits: SplitConfig = field(default_factory=SplitConfig)
    qid_prefix: str = "AutoScholarQuery"
    dedupe: bool = True  # drop repeated questions (case/punctuation-insensitive), first occurrence kept
    min_question_chars: int = 15
    # Ours: small teachers copy the few-shot questions verbatim or nearly so; such questions are dropped (counted)
    # when they score >= this against a few-shot question (0-100 edit-distance ratio). null = keep them.
    fewshot_copy_min_score: Optional[float] = 90.0
    title_min_score: float = 90.0  # answers written as titles are matched to the passage's citations


# ---- passages ----


def collect_passages(dg: AutoScholarQueryConfig | DictConfig) -> tuple[list[CitedPassage], Counter]:
    """Every input's related-work passages in input order, and counts of source papers by format."""
    headings = related_work_matcher(list(dg.related_work_headings))
    kw = dict(headings=headings, max_chars=int(dg.max_passage_chars), min_citations=int(dg.min_citations))
    passages: list[CitedPassage] = []
    sources: Counter = Counter()
    inputs = dg.inputs
    for path in inputs.unarxive:
        for _, rec in jsonl_records(path):
            sources["unarxive_papers"] += 1
            passages += passages_from_unarxive(rec, **kw)
    for path in inputs.research_town:
        for rec in iter_research_town(path):
            sources["research_town_papers"] += 1
            passages += passages_from_research_town(rec, **kw)
    for src in inputs.latex:
        sources["latex_papers"] += 1
        passages += passages_from_latex(LatexSource(**dict(src)), **kw)
    if inputs.pasa_db:
        from scholar_agents.papers.loaders import load_pasa_db

        for paper in load_pasa_db([str(p) for p in inputs.pasa_db], stubs_for_missing=False):
            sources["pasa_db_papers"] += 1
            passages += passages_from_paper(paper, **kw)
    if not sum(sources.values()):
        raise ValueError("data_gen.inputs names no input file (unarxive, research_town, latex, pasa_db)")
    seen: set[str] = set()
    unique = []
    for p in passages:  # a paper present in two inputs yields its passages once
        if p.passage_id not in seen:
            seen.add(p.passage_id)
            unique.append(p)
    return unique, sources


# ---- prompt ----


def render_prompt(passage: CitedPassage, examples: list[FewShotExample]) -> list[dict[str, str]]:
    """Table 16 as a one-message chat."""
    shots = "".join(AUTOSCHOLARQUERY_EXAMPLE.format(section=e.section.strip(), output=e.output.strip())
                    for e in examples)
    content = AUTOSCHOLARQUERY_GENERATION.format(examples=shots, section=passage.section_text())
    return [{"role": "user", "content": content}]


def fit_prompt(llm, passage: CitedPassage, examples: list[FewShotExample], budget: int, response_prefix: str = ""):
    """The prompt with as many few-shot examples as fit in ``budget`` tokens (examples are dropped from the end
    first); ``None`` if even the zero-shot prompt is too long. With a ``response_prefix`` the prompt is the rendered
    chat followed by the start of the answer (a raw string)."""
    for k in range(len(examples), -1, -1):
        msgs = render_prompt(passage, examples[:k])
        prompt = llm.render(msgs) + response_prefix if response_prefix else msgs
        if llm.count_tokens(llm.render(prompt)) <= budget:
            return prompt, k
    return None, 0


# ---- generation (one shard) ----


def _passage_record(p: CitedPassage) -> dict[str, Any]:
    return {
        "passage_id": p.passage_id,
        "source_id": p.source_id,
        "source_title": p.source_title,
        "source_date": p.source_date,
        "source_format": p.source_format,
        "heading": p.heading,
        "citations": [asdict(c) for c in p.citations],
    }


def generate_shard(llm, passages: list[CitedPassage], dg, budget: int, seed: int) -> tuple[list[dict], dict]:
    """One batched LLM call over the shard's passages. A shard keeps only what the LLM cost: the passage and the
    raw output (prefix included); parsing happens at assembly (:func:`parse_record`), so an improved parser
    re-reads finished shards without a single LLM call."""
    from scholar_agents.llm import SamplingParams

    stats: Counter = Counter()
    examples = [FewShotExample(**dict(e)) for e in dg.fewshot.examples][: int(dg.fewshot.num_examples)]
    prompts, todo, records = [], [], []
    for p in passages:
        rec = _passage_record(p)
        msgs, k = fit_prompt(llm, p, examples, budget, str(dg.response_prefix))
        if msgs is None:
            stats["prompt_too_long"] += 1
            rec.update(raw_output=None, skipped="prompt_too_long")
            records.append(rec)
            continue
        stats[f"prompts_with_{k}_examples"] += 1
        rec["fewshot_used"] = k
        prompts.append(msgs)
        todo.append(rec)
        records.append(rec)
    if prompts:
        params = SamplingParams(max_new_tokens=int(dg.max_new_tokens), temperature=float(dg.temperature), seed=seed,
                                stop=tuple(dg.stop))
        gens = _generate(llm, prompts, [len(rec["citations"]) for rec in todo], params, dg)
        stats["llm_prompts"] += len(prompts)
        for rec, gen in zip(todo, gens):
            comp = gen.completions[0]
            rec.update(raw_output=str(dg.response_prefix) + comp.text, finish_reason=comp.finish_reason)
    return records, dict(stats)


def _generate(llm, prompts: list, n_citations: list[int], params, dg) -> list:
    """One batched call, or with ``dg.constrained`` one per distinct schema (the answer enum depends on the
    passage's number of citations), results in the prompts' order."""
    if not dg.get("constrained", False):
        return llm.generate(prompts, params)
    from dataclasses import replace

    from scholar_agents.llm.constraints import OutputConstraint
    from scholar_agents.pasa.prompts import autoscholarquery_schema

    out: list = [None] * len(prompts)
    groups: dict[int, list[int]] = defaultdict(list)
    for i, n in enumerate(n_citations):
        groups[n].append(i)
    for n, idx in groups.items():
        schema = autoscholarquery_schema(n, int(dg.max_questions), int(dg.max_question_chars))
        gens = llm.generate([prompts[i] for i in idx], replace(params, constraint=OutputConstraint.json(schema)))
        for i, g in zip(idx, gens):
            out[i] = g
    return out


def parse_record(rec: dict, dg) -> dict:
    """The questions of one generated record (lenient JSON, answers mapped to the passage's citations), with the
    repairs and failures by kind. Unusable outputs are logged, never raised."""
    text = rec.get("raw_output")
    if text is None:
        return {**rec, "failure": rec.get("skipped", "no_output"), "repairs": [], "questions": [], "item_failures": {}}
    parsed = parse_llm_json(text, expect="array", items="object")
    item_failures: Counter = Counter()
    questions = []
    repairs = set(parsed.repairs)
    if parsed.ok:
        titles = [c["title"] for c in rec["citations"]]
        for q in read_items(parsed.value, titles, item_failures, float(dg.title_min_score), repairs=repairs):
            questions.append({"question": q.question, "cite_ids": q.cite_ids, "via_title": q.via_title})
    else:
        log.warning("passage %s: unusable output (%s %s): %r", rec["passage_id"], parsed.failure, parsed.detail,
                    text[:200])
    return {**rec, "failure": parsed.failure, "repairs": sorted(repairs), "strict_json": strict_json_ok(text.strip()),
            "questions": questions, "item_failures": dict(item_failures)}


# ---- assembly ----


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
    from rapidfuzz import fuzz

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


# ---- report ----


def stats_markdown(stats: dict) -> str:
    q, a = stats["queries"], stats["answers_per_query"]
    lines = [
        "# AutoScholarQuery synthesis",
        "",
        f"- model: `{stats['model']}`; inputs: {stats['sources']}",
        f"- passages: {stats['passages']['total']} from {stats['passages']['source_papers']} source papers; "
        f"LLM prompts this run: {stats['llm_prompts_this_run']} (shards resumed: {stats['shards']['resumed']}, "
        f"computed: {stats['shards']['computed']})",
        f"- queries: train {q['train']}, dev {q['dev']}, test {q['test']} (total {q['total']}); "
        f"source papers per split: {stats['source_papers_with_queries']}",
        f"- queries per source paper: mean {stats['queries_per_source_paper']['mean']:.2f}, "
        f"p50 {stats['queries_per_source_paper']['p50']:.1f}, max {stats['queries_per_source_paper']['max']}",
        "",
        "## Queries per source",
        "",
        "| source | papers with passages | passages | questions parsed | queries kept | papers with queries |",
        "|---|---|---|---|---|---|",
    ]
    for fmt, c in stats["queries_by_source_format"].items():
        lines.append(f"| {fmt} | {c['source_papers']} | {c['passages']} | {c['questions_parsed']} | "
                     f"{c['queries_kept']} | {c['source_papers_with_queries']} |")
    lines += [
        "",
        "| source paper | format | split | passages | questions parsed | queries kept |",
        "|---|---|---|---|---|---|",
    ]
    for r in stats["per_source_paper"]:
        lines.append(f"| {r['source_id']} {r['title'][:60]} | {r['format']} | {r['split'] or '-'} | {r['passages']} | "
                     f"{r['questions_parsed']} | {r['queries_kept']} |")
    lines += [
        "",
        "## Answers per query vs PaSa Table 11",
        "",
        "| set | papers | queries | Ans(/Q) | Ans-50 | Ans-90 |",
        "|---|---|---|---|---|---|",
        f"| ours | {stats['source_papers_with_queries_total']} | {q['total']} | {a['mean']:.2f} | {a['p50']:.1f} | "
        f"{a['p90']:.1f} |",
    ]
    for name, t in TABLE_11.items():
        lines.append(f"| PaSa {name} | {t['papers']} | {t['queries']} | {t['ans_mean']:.2f} | {t['ans_p50']:.1f} | "
                     f"{t['ans_p90']:.1f} |")
    p = stats["parsing"]
    lines += [
        "",
        "## Parsing the LLM outputs",
        "",
        f"- outputs: {p['outputs']}; strict JSON: {p['strict_json']}; usable after repair: {p['usable']}; "
        f"unusable: {p['unusable']}; hit max_new_tokens: {p['truncated_generations']}",
        "",
        "| kind | count |",
        "|---|---|",
    ]
    lines += [f"| failure: {k} | {v} |" for k, v in sorted(p["failures"].items())]
    lines += [f"| repair: {k} | {v} |" for k, v in sorted(p["repairs"].items())]
    lines += [f"| dropped item: {k} | {v} |" for k, v in sorted(p["item_failures"].items())]
    lines += [f"| dropped question: {k} | {v} |" for k, v in sorted(stats["dropped_questions"].items())]
    lines += ["", "## Citation resolution (bibliography id first, then title through the paper store)", "",
              "| method | answer citations | all passage citations |", "|---|---|---|"]
    ra, rp = stats["resolution_of_answer_citations"], stats["resolution_of_all_passage_citations"]
    for m in METHODS:
        lines.append(f"| {m} | {ra['by_method'][m]} | {rp['by_method'][m]} |")
    lines.append(f"| **resolved rate** | {ra['rate']:.1%} | {rp['rate']:.1%} |")
    lines += ["", f"Paper store: `{stats['store']}` ({stats['store_papers']} papers); "
              f"require_in_store={stats['require_in_store']}.", ""]
    return "\n".join(lines)


def _parsing_stats(records: list[dict]) -> dict:
    out = [r for r in records if r.get("raw_output") is not None]
    failures = Counter(r["failure"] for r in out if r.get("failure"))
    repairs = Counter(k for r in out if not r.get("failure") for k in r.get("repairs", []))
    items = Counter()
    for r in out:
        items.update(r.get("item_failures", {}))
    return {
        "outputs": len(out),
        "strict_json": sum(1 for r in out if r.get("strict_json")),
        "usable": sum(1 for r in out if not r.get("failure")),
        "unusable": sum(failures.values()),
        "truncated_generations": sum(1 for r in out if r.get("finish_reason") == "length"),
        "failures": dict(failures),
        "repairs": dict(repairs),
        "item_failures": dict(items),
        "prompt_too_long": sum(1 for r in records if r.get("failure") == "prompt_too_long"),
    }


# ---- the command ----


def _fingerprint(cfg: DictConfig) -> dict:
    dg = cfg.data_gen
    prompt_side = OmegaConf.to_container(dg.fewshot, resolve=True)
    return {
        "task": "autoscholarquery",
        "model": str(cfg.llm.model),
        "backend": str(cfg.llm.backend),
        "dtype": str(cfg.llm.get("dtype", "")),
        "fewshot_sha": hashlib.sha256(json.dumps(prompt_side, sort_keys=True).encode()).hexdigest()[:16],
        "max_new_tokens": int(dg.max_new_tokens),
        "stop": list(dg.stop),
        "response_prefix": str(dg.response_prefix),
        **({"constrained": True, "schema_sha": _schema_sha(dg)} if dg.get("constrained", False) else {}),
        "temperature": float(dg.temperature),
        "max_passage_chars": int(dg.max_passage_chars),
        "related_work_headings": list(dg.related_work_headings),
        "min_citations": int(dg.min_citations),
        # Greedy outputs do not depend on the seed (it only splits the data, at assembly).
        "seed": int(cfg.seed) if float(dg.temperature) > 0 else None,
    }


def _schema_sha(dg) -> str:
    """Identifies the decoding schema (caps included) so that shards made under another schema are not reused."""
    from scholar_agents.pasa.prompts import autoscholarquery_schema

    schema = autoscholarquery_schema(1, int(dg.max_questions), int(dg.max_question_chars))
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]


def autoscholarquery(cfg: DictConfig) -> dict:
    from scholar_agents.data_gen.paper_access import open_store

    from scholar_agents.validation import existing_file, optional_positive_int, reading

    dg = cfg.data_gen
    if dg.get("constrained", False) and str(dg.response_prefix):
        raise ValueError("data_gen.constrained=true decodes Table 16's JSON schema from the first token; set "
                         "data_gen.response_prefix='' (a prefix would start the JSON outside the schema)")
    out_dir = Path(str(cfg.out_dir))
    limit = optional_positive_int(cfg.get("limit"), "limit", "the first N passages; null = all")
    for kind in ("unarxive", "research_town", "pasa_db"):
        for i, path in enumerate(dg.inputs.get(kind) or []):
            if kind != "pasa_db" or not Path(str(path)).is_dir():  # PaSa's database may be a folder
                existing_file(path, f"data_gen.inputs.{kind}[{i}]")
    with reading("data_gen.inputs", "(the input files)"):
        passages, sources = collect_passages(dg)
    passages = passages[:limit]
    log.info("%d related-work passages from %s", len(passages), dict(sources))
    run = ShardedRun(out_dir, _fingerprint(cfg), overwrite=bool(cfg.get("overwrite", False)))
    budget = int(cfg.llm.max_model_len) - int(dg.max_new_tokens)
    if budget <= 0:
        raise ValueError(f"data_gen.max_new_tokens={dg.max_new_tokens} leaves no room for the prompt in "
                         f"llm.max_model_len={cfg.llm.max_model_len}")
    llm = LazyLLM(cfg.llm)
    try:
        raw, shard_stats, computed = run_shards(
            run, passages, lambda p: p.passage_id, int(dg.shard_size),
            lambda chunk: generate_shard(llm.get(), chunk, dg, budget, int(cfg.seed)), "autoscholarquery shards")
    finally:
        llm.close()
    records = [parse_record(r, dg) for r in raw]
    llm_prompts = computed.get("llm_prompts", 0)
    store = open_store(cfg)
    try:
        resolver = CitationResolver(store, ResolutionConfig(**OmegaConf.to_container(dg.resolution, resolve=True)))
        splits, stats = assemble(records, resolver, dg, int(cfg.seed))
        store_desc, store_len = str(store.path), len(store)
    finally:
        store.close()
    files = {}
    for split, rows in splits.items():
        files[split] = str(out_dir / f"{split}.jsonl")
        write_jsonl(files[split], rows)
    failed = [{"passage_id": r["passage_id"], "failure": r["failure"], "raw_output": r["raw_output"]}
              for r in records if r.get("failure") and r.get("raw_output") is not None]
    write_jsonl(out_dir / "parse_failures.jsonl", failed)
    stats.update(
        model=str(cfg.llm.model),
        sources=dict(sources),
        passages={"total": len(passages), "source_papers": len({p.source_id for p in passages}),
                  "by_format": dict(Counter(p.source_format for p in passages))},
        shards={"total": run.resumed + run.computed, "resumed": run.resumed, "computed": run.computed},
        llm_prompts_this_run=llm_prompts,
        prompt_fitting={k: v for k, v in shard_stats.items() if k.startswith("prompts_with") or k == "prompt_too_long"},
        parsing=_parsing_stats(records),
        store=store_desc,
        store_papers=store_len,
        require_in_store=bool(dg.resolution.require_in_store),
        source_papers_with_queries_total=sum(stats["source_papers_with_queries"].values()),
        files=files,
    )
    write_json(out_dir / "stats.json", stats)
    (out_dir / "stats.md").write_text(stats_markdown(stats), encoding="utf-8")
    log.info("AutoScholarQuery: %s queries (%s) in %s", stats["queries"]["total"], stats["queries"], out_dir)
    return {"out_dir": str(out_dir), "stats": stats}
