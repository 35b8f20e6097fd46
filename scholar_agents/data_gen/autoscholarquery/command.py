"""``scholar data_gen autoscholarquery``: synthesise AutoScholarQuery from related-work sections (PaSa §3.1, Table 16).

1. Extract related-work passages with numbered ``\\cite{n}`` markers from the inputs (unarXive full text,
   research-town papers, LaTeX/plain text + .bib/JSON bibliography, PaSa's paper database).
2. Prompt the LLM with Table 16 (few-shot examples from ``conf/data_gen/fewshot/``), batched, in resumable shards.
3. Parse the JSON leniently (``data_gen.llm_json``), map the answers' markers back to the cited works, resolve
   those to arXiv ids through the paper store (bibliography ids first, then title), drop questions whose answers
   resolve to nothing, de-duplicate, date each query with its source paper (PaSa: "the publication date of the
   source paper as the query date"), split train/dev/test by source paper, write PaSa's JSONL format and a stats
   report (Table 11's answers per query, parse failures by kind, resolution rate by method).

This module is the command and its config (:class:`AutoScholarQueryConfig`); beside it in this folder, step 1 is
``inputs.py``, step 2 and the parsing ``generation.py``, step 3's resolution, filters and splits ``assembly.py``, the
stats report ``report.py``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from scholar_agents.data_gen.autoscholarquery.assembly import SplitConfig, assemble
from scholar_agents.data_gen.autoscholarquery.generation import FewShotConfig, generate_shard, parse_record
from scholar_agents.data_gen.autoscholarquery.inputs import AutoScholarQueryInputs, collect_passages
from scholar_agents.data_gen.autoscholarquery.report import parsing_stats, stats_markdown
from scholar_agents.data_gen.citation_resolution import CitationResolver, ResolutionConfig
from scholar_agents.data_gen.paper_access import open_store
from scholar_agents.data_gen.passages import DEFAULT_RELATED_WORK_HEADINGS
from scholar_agents.data_gen.shards import LazyLLM, ShardedRun, run_shards, write_json, write_jsonl
from scholar_agents.pasa.prompts import autoscholarquery_schema
from scholar_agents.typed_config import typed
from scholar_agents.validation import existing_file, optional_positive_int, reading

log = logging.getLogger(__name__)


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
    schema = autoscholarquery_schema(1, int(dg.max_questions), int(dg.max_question_chars))
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()[:16]


def autoscholarquery(cfg: DictConfig) -> dict:
    dg = cfg.data_gen
    # typed before any passage is read or prompt sent: a bad value ends the command here, not after the LLM calls
    resolution = typed(ResolutionConfig, dg.resolution, "data_gen.resolution")
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
        resolver = CitationResolver(store, resolution)
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
        parsing=parsing_stats(records),
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
