"""AcademicEval (Thought-Retriever §3, Appendix A.1 Table 4, Appendix T) from full-text papers and
related-work sets, plus a loader for the official files.

Tasks and their fields (Table 4's names):
- ``abstract_single``: ``title``, ``abstract`` (the label), ``main_content`` (the paper without its abstract and
  conclusion).
- ``abstract_multi``: ``title 1`` … ``title 5``, ``abstract 1`` …, ``main_content 1`` …, ``label`` (an LLM's
  summary of the five abstracts, Figure 11 prompt).
- ``related_multi``: ``title``, ``abstract`` (the query), ``gt`` (the paper's own related work: the label) and
  ``papers``: the memory, one abstract each, ``label`` "related work" (cited) or "random paper" (a random paper
  of the same broad field) — the official code's record layout and labels (``dataset[0]`` + ``dataset[1:]``).

Inputs: unarXive JSONL(.gz) and research-town JSON full texts; CiteBench JSON (``target`` = related-work text,
``input`` = ``<abs>`` target abstract then the cited abstracts) and research-town's interdisciplinary bench
(papers with their references' abstracts but no related-work text: ``gt`` is null, such cases serve the
retrieval precision/recall of §4.6 only).

``load_cases`` reads our JSONL, the official Thought-Retriever per-case JSON files, and the AcademicEval
benchmark release (ulab-uiuc/AcademicEval: ``abs_9K/…test….json``, ``related_34K/…``; fields ``title``,
``abstract``, ``main_content``, ``gt``; related samples are ``[target, *citations]``).

One file (~500 lines) on purpose: the three task builders, the writer and the loader share one record layout (Table 4's
field names); split apart, each would restate it.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from omegaconf import DictConfig

from scholar_agents.data_gen.research_town_passages import iter_research_town
from scholar_agents.llm import SamplingParams, build_llm
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.thought.ingest import Document
from scholar_agents.thought.prompts import FIGURE11_MULTI_LABEL
from scholar_agents.validation import UsageError, existing_file, jsonl_records

log = logging.getLogger(__name__)

TASKS = ("abstract_single", "abstract_multi", "related_multi")
CITED, RANDOM = "related work", "random paper"  # the official code's labels (early draft Table 3)
MULTI_SIZE = 5  # Abstract-multi groups five papers (§3, Table 4)

# Sections left out of main_content: the conclusion (Appendix A.1) — the abstract is not a body section.
CONCLUSION_HEADING = re.compile(r"\b(conclu\w*|concluding remarks|summary and outlook)\b", re.I)
# Appendix T: "papers with clear section demarcations" — ours: an introduction and at least three sections
# (this drops e.g. a reply-to-reviewers document whose only headings are "Reviewer 1..3").
INTRODUCTION_HEADING = re.compile(r"\bintroduction\b", re.I)
_SPAN = re.compile(r"\{\{(cite|formula|figure|table|ref):([^}]*)\}\}")
_WS = re.compile(r"[ \t]+")


@dataclass
class FullTextPaper:
    paper_id: str
    title: str
    abstract: str
    sections: list[tuple[str, str]]  # (heading, text) in document order
    categories: list[str] = field(default_factory=list)
    source: str = ""

    @property
    def field(self) -> str:
        """Broad field: the arXiv archive of the first category (``cs.CL`` -> ``cs``)."""
        return self.categories[0].split(".")[0] if self.categories else ""


# ------------------------------------------------------------------------------------------ full-text readers

def _clean_unarxive(text: str, ref_entries: dict[str, Any]) -> str:
    def repl(m: re.Match) -> str:
        kind, ref = m.group(1), m.group(2)
        if kind == "formula":
            latex = ((ref_entries.get(ref) or {}).get("latex") or "").strip()
            return f"${latex}$" if 0 < len(latex) <= 40 else "[formula]"
        return "" if kind == "cite" else f"[{kind}]"

    return _WS.sub(" ", _SPAN.sub(repl, text)).strip()


def _unarxive_paper(rec: dict[str, Any]) -> FullTextPaper:
    meta = rec.get("metadata") or {}
    refs = rec.get("ref_entries") or {}
    sections: list[tuple[str, str]] = []
    for par in rec.get("body_text") or []:
        if par.get("content_type", "paragraph") not in ("paragraph", "list"):
            continue
        heading = (par.get("section") or "").strip()
        text = _clean_unarxive(par.get("text") or "", refs)
        if not text:
            continue
        if sections and sections[-1][0] == heading:
            sections[-1] = (heading, sections[-1][1] + "\n" + text)
        else:
            sections.append((heading, text))
    abstract = rec.get("abstract")
    abstract = abstract.get("text", "") if isinstance(abstract, dict) else (abstract or meta.get("abstract") or "")
    return FullTextPaper(
        paper_id=str(rec.get("paper_id") or meta.get("id") or ""), title=" ".join((meta.get("title") or "").split()),
        abstract=" ".join(abstract.split()), sections=sections, categories=(meta.get("categories") or "").split(),
        source="unarxive",
    )


def _research_town_paper(rec: dict[str, Any]) -> FullTextPaper:
    sections = []
    for heading, text in (rec.get("sections") or {}).items():
        body = (text or "").strip()
        if body.startswith(heading):  # research-town repeats the heading as the first line
            body = body[len(heading):].strip()
        sections.append((heading, _WS.sub(" ", body)))
    url = rec.get("url") or ""
    arxiv = re.search(r"(\d{4}\.\d{4,5})", url)
    domain = rec.get("domain") or ""
    return FullTextPaper(
        paper_id=arxiv.group(1) if arxiv else str(rec.get("pk") or rec.get("title")), title=rec.get("title") or "",
        abstract=" ".join((rec.get("abstract") or "").split()), sections=sections,
        categories=[domain] if domain else [], source="research_town",
    )


def iter_fulltext(path: str | Path) -> Iterator[FullTextPaper]:
    """Full-text papers from unarXive JSONL(.gz) or a research-town JSON dump (one reader per format)."""
    p = Path(path)
    if p.suffix == ".json":
        for rec in iter_research_town(p):
            yield _research_town_paper(rec)
    elif p.name.endswith((".jsonl", ".jsonl.gz")):
        for _, rec in jsonl_records(p):
            if "body_text" not in rec:
                raise ValueError(f"{p}: expected unarXive records with 'body_text', got keys {sorted(rec)[:8]}")
            yield _unarxive_paper(rec)
    else:
        raise ValueError(f"{p}: unknown full-text format (expected unarXive .jsonl[.gz] or research-town .json)")


def main_content(paper: FullTextPaper) -> str:
    """The paper without its abstract and conclusion (Appendix A.1), headings kept as lines."""
    parts = []
    for heading, text in paper.sections:
        if heading and CONCLUSION_HEADING.search(heading):
            continue
        parts.append(f"{heading}\n{text}" if heading else text)
    return "\n\n".join(parts).strip()


# ------------------------------------------------------------------------------------------ builders

def _keep_field(paper: FullTextPaper, fields: Sequence[str]) -> bool:
    return not fields or any(c == f or c.startswith(f + ".") for c in paper.categories for f in fields)


def abstract_single_records(papers: Iterable[FullTextPaper], min_main_words: int = 1000,
                            fields: Sequence[str] = (), max_cases: int | None = None) -> tuple[list[dict], Counter]:
    """One case per paper with a title, an abstract and at least ``min_main_words`` words of main content
    (Appendix T: a length constraint and clear sections)."""
    out, skipped, seen = [], Counter(), set()
    for p in papers:
        if p.paper_id in seen:
            skipped["duplicate"] += 1
            continue
        seen.add(p.paper_id)
        if not _keep_field(p, fields):
            skipped["other_field"] += 1
            continue
        body = main_content(p)
        if not p.title or not p.abstract:
            skipped["no_title_or_abstract"] += 1
        elif len(p.sections) < 3 or not any(INTRODUCTION_HEADING.search(h) for h, _ in p.sections):
            skipped["no_clear_sections"] += 1
        elif len(body.split()) < min_main_words:
            skipped["too_short"] += 1
        else:
            out.append({"id": p.paper_id, "title": p.title, "abstract": p.abstract, "main_content": body,
                        "categories": p.categories, "source": p.source})
        if max_cases is not None and len(out) >= max_cases:
            break
    return out, skipped


def abstract_multi_groups(singles: Sequence[dict], rng: random.Random,
                          max_cases: int | None = None) -> list[list[dict]]:
    """Groups of five papers, drawn within one broad field where it has five, leftovers pooled across fields."""
    by_field: dict[str, list[dict]] = defaultdict(list)
    for s in singles:
        cats = s.get("categories") or [""]
        by_field[cats[0].split(".")[0]].append(s)
    groups, leftovers = [], []
    for f in sorted(by_field):
        items = list(by_field[f])
        rng.shuffle(items)
        while len(items) >= MULTI_SIZE:
            groups.append(items[:MULTI_SIZE])
            items = items[MULTI_SIZE:]
        leftovers += items
    rng.shuffle(leftovers)
    while len(leftovers) >= MULTI_SIZE:
        groups.append(leftovers[:MULTI_SIZE])
        leftovers = leftovers[MULTI_SIZE:]
    return groups[:max_cases] if max_cases is not None else groups


def abstract_multi_records(groups: Sequence[Sequence[dict]], llm,
                           max_new_tokens: int = 512) -> tuple[list[dict], Counter]:
    """Table 4's flat record per group; ``label`` = the LLM's Figure 11 summary of the five abstracts (the paper
    used GPT-4o; any ``llm`` here — state which in reports)."""
    skipped: Counter = Counter()
    limit = getattr(getattr(llm, "cfg", None), "max_model_len", None)
    kept, prompts = [], []
    for g in groups:
        prompt = [{"role": "user", "content": FIGURE11_MULTI_LABEL.format(
            **{f"abs{i + 1}": g[i]["abstract"] for i in range(MULTI_SIZE)})}]
        if limit is not None and llm.count_tokens(llm.render(prompt)) + max_new_tokens > limit:
            skipped["prompt_too_long"] += 1  # five abstracts do not fit a small model's window
            continue
        kept.append(g)
        prompts.append(prompt)
    gens = llm.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)) if prompts else []
    out = []
    for g, gen in zip(kept, gens):
        label = gen.text.strip()
        if len(label.split()) < 20:  # an empty or truncated reply is no label
            skipped["empty_label"] += 1
            log.warning("Abstract-multi label too short for group %s: %r", [s["id"] for s in g], label[:120])
            continue
        rec: dict[str, Any] = {"id": "+".join(s["id"] for s in g)}
        for i, s in enumerate(g, 1):
            rec[f"title {i}"] = s["title"]
            rec[f"abstract {i}"] = s["abstract"]
            rec[f"main_content {i}"] = s["main_content"]
        rec["label"] = label
        rec["label_model"] = getattr(llm, "model_id", "")
        out.append(rec)
    return out, skipped


@dataclass
class RelatedSource:
    """One target paper (or related-work paragraph) with its cited abstracts, before distractors."""

    case_id: str
    paper_key: str  # citations of the same paper are never its distractors
    title: str
    abstract: str
    gt: str | None
    cited: list[dict]  # {"title", "abstract"}
    field: str


def _norm_key(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())[:300]


def iter_related_sources(path: str | Path) -> Iterator[RelatedSource]:
    """CiteBench JSON (list of ``target``/``input``) or research-town's interdisciplinary bench (dict of papers
    with ``references``)."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"related-work set not found: {p}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}:{e.lineno}: invalid JSON ({e.msg})") from None
    if isinstance(data, list) and data and isinstance(data[0], dict) and "target" in data[0]:
        for i, rec in enumerate(data):
            inputs = [str(x) for x in rec.get("input") or []]
            own = next((x for x in inputs if x.lstrip().startswith("<abs>")), None)
            if own is None:
                raise ValueError(f"{p}: record {i} has no '<abs>' target abstract in 'input'")
            abstract = re.sub(r"</?abs>", "", own).strip()
            cited = [{"title": "", "abstract": " ".join(x.split())} for x in inputs if x is not own and x.strip()]
            yield RelatedSource(f"{p.stem}:{i}", _norm_key(abstract), "", " ".join(abstract.split()),
                                " ".join(str(rec["target"]).split()), cited, "cs")
        return
    if isinstance(data, dict):
        for key, rec in data.items():
            if not isinstance(rec, dict) or "references" not in rec:
                raise ValueError(f"{p}: expected research-town bench papers with 'references', got {str(rec)[:80]!r}")
            cited = [{"title": r.get("title") or "", "abstract": " ".join((r.get("abstract") or "").split())}
                     for r in rec["references"] if (r.get("abstract") or "").strip()]
            fields = Counter(f for r in rec["references"] for f in (r.get("fieldsOfStudy") or []))
            title = rec.get("paper_title") or key
            yield RelatedSource(f"{p.stem}:{rec.get('arxiv_id') or key}", _norm_key(title), title,
                                " ".join((rec.get("abstract") or "").split()), None, cited,
                                fields.most_common(1)[0][0] if fields else "")
        return
    raise ValueError(f"{p}: unknown related-work format (expected CiteBench or research-town bench JSON)")


def related_multi_records(sources: Sequence[RelatedSource], n_random: int, rng: random.Random,
                          min_citations: int = 2, require_label: bool = False,
                          max_cases: int | None = None) -> tuple[list[dict], Counter]:
    """Memory = the cited abstracts + ``n_random`` abstracts cited by other papers of the same field (§3),
    shuffled so that position says nothing about being cited."""
    skipped: Counter = Counter()
    pool: dict[str, list[tuple[str, dict]]] = defaultdict(list)  # field -> (paper_key, abstract record)
    seen_pool: set[str] = set()
    for s in sources:
        for c in s.cited:
            k = _norm_key(c["abstract"])
            if k and k not in seen_pool:
                seen_pool.add(k)
                pool[s.field].append((s.paper_key, c))
    cited_by_paper: dict[str, set[str]] = defaultdict(set)
    for s in sources:
        cited_by_paper[s.paper_key].update(_norm_key(c["abstract"]) for c in s.cited)
    out = []
    for s in sources:
        if len(s.cited) < min_citations:
            skipped["too_few_citations"] += 1
            continue
        if not s.abstract:
            skipped["no_abstract"] += 1
            continue
        if require_label and not s.gt:
            skipped["no_label"] += 1
            continue
        own = cited_by_paper[s.paper_key]
        candidates = [c for key, c in pool[s.field] if key != s.paper_key and _norm_key(c["abstract"]) not in own]
        if len(candidates) < n_random:
            skipped["short_distractor_pool"] += 1
        randoms = rng.sample(candidates, min(n_random, len(candidates)))
        papers = [{**c, "label": CITED} for c in s.cited] + [{**c, "label": RANDOM} for c in randoms]
        rng.shuffle(papers)
        out.append({"id": s.case_id, "title": s.title, "abstract": s.abstract, "gt": s.gt, "papers": papers,
                    "field": s.field})
        if max_cases is not None and len(out) >= max_cases:
            break
    return out, skipped


# ------------------------------------------------------------------------------------------ loading cases

@dataclass
class Case:
    """One evaluation case, whatever file it came from."""

    task: str
    id: str
    title: str
    query_abstract: str  # related_multi: the target paper's abstract (part of the query)
    references: list[str]  # labels; ROUGE takes the max over them
    documents: list[Document]  # the case's external knowledge K
    whole_documents: bool = False  # related_multi: one memory chunk per abstract
    cited_doc_ids: list[str] = field(default_factory=list)  # related_multi: the ground truth of §4.6
    titles: list[str] = field(default_factory=list)  # the paper titles (pre-queries)


def case_from_record(rec: dict, task: str | None = None, where: str = "") -> Case:
    task = task or detect_task(rec, where)
    cid = str(rec.get("id") or rec.get("title") or where)
    if task == "abstract_single":
        for k in ("title", "main_content"):
            if not rec.get(k):
                raise ValueError(f"{where}: Abstract-single record without {k!r}")
        label = rec.get("gt") or rec.get("abstract")
        if not label:
            raise ValueError(f"{where}: Abstract-single record without 'abstract' (the label)")
        return Case(task, cid, rec["title"], "", [label], [Document(cid, rec["main_content"], rec["title"])],
                    titles=[rec["title"]])
    if task == "abstract_multi":
        docs, titles = [], []
        for i in range(1, MULTI_SIZE + 1):
            t, body = rec.get(f"title {i}"), rec.get(f"main_content {i}")
            if not t or not body:
                raise ValueError(f"{where}: Abstract-multi record without 'title {i}' / 'main_content {i}'")
            docs.append(Document(f"{cid}:{i}", body, t))
            titles.append(t)
        if not rec.get("label"):
            raise ValueError(f"{where}: Abstract-multi record without 'label'")
        return Case(task, cid, "", "", [rec["label"]], docs, titles=titles)
    if task == "related_multi":
        papers = rec.get("papers")
        if not isinstance(papers, list) or not rec.get("abstract"):
            raise ValueError(f"{where}: Related-multi record needs 'abstract' and a 'papers' list")
        docs, cited = [], []
        for j, p in enumerate(papers):
            text = "\n".join(x for x in ((p.get("title") or "").strip(), (p.get("abstract") or "").strip()) if x)
            if not text:
                continue
            doc_id = f"{cid}:p{j}"
            docs.append(Document(doc_id, text, p.get("title") or ""))
            if (p.get("label") or CITED) == CITED:
                cited.append(doc_id)
        refs = [rec["gt"]] if rec.get("gt") else []
        return Case(task, cid, rec.get("title") or "", rec["abstract"], refs, docs, whole_documents=True,
                    cited_doc_ids=cited, titles=[rec.get("title") or ""])
    raise ValueError(f"{where}: unknown task {task!r}; expected one of {TASKS}")


def detect_task(rec: dict, where: str = "") -> str:
    if "papers" in rec:
        return "related_multi"
    if "title 1" in rec:
        return "abstract_multi"
    if "main_content" in rec:
        return "abstract_single"
    raise ValueError(f"{where}: cannot tell the AcademicEval task of a record with keys {sorted(rec)[:10]}")


def _official_record(obj: Any, where: str) -> dict:
    """The official per-case JSON → our record. Related samples are lists: ``[target, *papers]`` with
    ``label`` on papers (Thought-Retriever code) or without (AcademicEval release: all are citations)."""
    if isinstance(obj, list):
        if not obj or not isinstance(obj[0], dict):
            raise ValueError(f"{where}: an official Related-multi sample is a list of paper objects")
        head, tail = obj[0], obj[1:]
        papers = [{"title": p.get("title") or "", "abstract": p.get("abstract") or "",
                   "label": p.get("label") or CITED} for p in tail if p.get("label") != "original paper"]
        return {"id": head.get("title") or where, "title": head.get("title") or "",
                "abstract": head.get("abstract") or "", "gt": head.get("gt"), "papers": papers}
    if isinstance(obj, dict):
        return obj
    raise ValueError(f"{where}: expected a JSON object or list, got {type(obj).__name__}")


def load_cases(path: str | Path, task: str | None = None, limit: int | None = None) -> list[Case]:
    """Cases from our JSONL, a single official JSON file, or a directory of official per-case JSON files
    (the AcademicEval release keeps ``*test*.json`` files: only those are read when present)."""
    p = Path(path)
    recs: list[tuple[dict, str]] = []
    if p.is_dir():
        files = sorted(p.glob("*.json"))
        tests = [f for f in files if "test" in f.name]
        for f in tests or files:
            try:
                obj = json.loads(f.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{f}:{e.lineno}: invalid JSON ({e.msg})") from None
            recs.append((_official_record(obj, str(f)), str(f)))
    elif p.suffix == ".json":
        obj = json.loads(p.read_text(encoding="utf-8"))
        recs.append((_official_record(obj, str(p)), str(p)))
    elif p.is_file():
        recs = [(r, f"{p}:{i}") for i, r in jsonl_records(p)]
    else:
        raise FileNotFoundError(f"AcademicEval data not found: {p}")
    cases = [case_from_record(r, task, where) for r, where in recs]
    return cases[:limit] if limit is not None else cases


# ------------------------------------------------------------------------------------------ command

def _write(path: Path, records: Sequence[dict]) -> None:
    tmp = path.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    tmp.replace(path)


def build(cfg: DictConfig) -> dict:
    """``scholar data_gen academiceval``: write ``<out>/<task>.jsonl`` for each requested task."""
    tasks = list(cfg.tasks)
    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise UsageError(f"unknown AcademicEval tasks {sorted(unknown)}; expected {TASKS}")
    for name in ("fulltext_files", "related_files"):
        for i, path in enumerate(cfg.get(name) or []):
            existing_file(path, f"{name}[{i}]")
    out = Path(str(cfg.out_dir)) if cfg.out_dir else run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(int(cfg.seed))
    summary: dict[str, Any] = {"out_dir": str(out)}

    singles: list[dict] = []
    if {"abstract_single", "abstract_multi"} & set(tasks):
        papers = [p for path in cfg.fulltext_files for p in iter_fulltext(str(path))]
        singles, skipped = abstract_single_records(papers, int(cfg.abstract.min_main_words),
                                                   list(cfg.abstract.fields or []))
        summary["fulltext_papers"] = len(papers)
        summary["abstract_skipped"] = dict(skipped)
    if "abstract_single" in tasks:
        recs = singles[: cfg.abstract.max_cases] if cfg.abstract.max_cases else singles
        _write(out / "abstract_single.jsonl", recs)
        summary["abstract_single"] = len(recs)
    if "abstract_multi" in tasks:
        groups = abstract_multi_groups(singles, rng, cfg.multi.max_cases)
        llm = build_llm(cfg.llm)
        try:
            recs, skipped = abstract_multi_records(groups, llm, int(cfg.multi.label_max_new_tokens))
        finally:
            llm.close()
        _write(out / "abstract_multi.jsonl", recs)
        summary["abstract_multi"] = len(recs)
        summary["abstract_multi_skipped"] = dict(skipped)
    if "related_multi" in tasks:
        sources = [s for path in cfg.related_files for s in iter_related_sources(str(path))]
        recs, skipped = related_multi_records(sources, int(cfg.related.n_random), rng, int(cfg.related.min_citations),
                                              bool(cfg.related.require_label), cfg.related.max_cases)
        _write(out / "related_multi.jsonl", recs)
        summary["related_multi"] = len(recs)
        summary["related_multi_with_label"] = sum(1 for r in recs if r["gt"])
        summary["related_skipped"] = dict(skipped)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("academiceval: %s", json.dumps(summary))
    return summary
