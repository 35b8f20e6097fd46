"""``scholar thought run``: Thought-Retriever over a query file, batch / served mode.

Phases (``phase=``):
  all     ingest knowledge, optional pre-queries, then every query through Algorithm 1 (memory updated as it goes)
  ingest  only chunk + embed the knowledge files into the memory
  answer  one shard (``shard.index`` of ``shard.count``) answers its queries against the memory as it is
          (read-only) and writes its results to ``<shard.dir>/shard-<i>-of-<n>.jsonl``
  merge   read every shard file and apply the memory updates in global query order (deterministic)

The LLM is whatever ``llm=`` says: the hf backend on CPU, vLLM's offline engine (``llm=qwen25_7b_vllm``,
``llm.tensor_parallel_size`` / ``llm.data_parallel_size``: the engine shards each batch over its replicas) or
an OpenAI-compatible server (``llm=openai_server``). Runs are resumable: the memory persists in ``memory_dir``,
answered query ids are skipped, LLM responses are cached.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from scholar_agents.llm import build_llm
from scholar_agents.llm.base import LLM
from scholar_agents.llm.cache import copy_cache_file, merge_caches
from scholar_agents.llm.embedder import build_embedder
from scholar_agents.llm.factory import resolve_model_path
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.thought.algorithm import Query, StepResult, ThoughtRetriever
from scholar_agents.thought.config import thought_config
from scholar_agents.thought.ingest import Document, add_documents
from scholar_agents.thought.memory import Memory
from scholar_agents.thought.prequery import PreQuerySource, make_prequeries, sentences_of
from scholar_agents.validation import UsageError, existing_file, jsonl_records, read_jsonl

log = logging.getLogger(__name__)


def load_documents(path: str | os.PathLike) -> list[Document]:
    """Knowledge documents: ``.txt`` (one document), or JSONL(.gz) with ``text`` or ``title`` + ``abstract``
    (arXiv metadata / PaperStore JSONL) and an id field (``id``, ``doc_id``, ``arxiv_id`` or ``paper_id``)."""
    path = Path(path)
    if path.suffix == ".txt":
        return [Document(path.stem, path.read_text(encoding="utf-8"))]
    docs = []
    for n, (line, rec) in enumerate(jsonl_records(path), 1):  # n: the record's number (default ids), line: errors
        title = rec.get("title") or ""
        text = rec.get("text") or "\n".join(x for x in (title, rec.get("abstract") or "") if x)
        if not text.strip():
            raise ValueError(f"{path}:{line}: a knowledge record needs `text` or `title`/`abstract`")
        doc_id = str(rec.get("id") or rec.get("doc_id") or rec.get("arxiv_id") or rec.get("paper_id")
                     or f"{path.stem}:{n}")
        docs.append(Document(doc_id, text, title))
    return docs


def load_queries(path: str | os.PathLike, default_scope: str) -> list[Query]:
    """Queries JSONL: ``query`` (or PaSa's ``question``), optional ``id``/``qid``, ``scope``, ``task``, ``fields``."""
    out, seen = [], set()
    for n, (line, rec) in enumerate(jsonl_records(path), 1):  # n: the record's number (default ids), line: errors
        text = rec.get("query") or rec.get("question")
        if not text:
            raise ValueError(f"{path}:{line}: a query record needs `query` (or `question`)")
        qid = str(rec.get("id") or rec.get("qid") or f"q{n}")
        if qid in seen:
            raise ValueError(f"{path}:{line}: duplicate query id {qid!r}")
        seen.add(qid)
        out.append(Query(id=qid, text=text, scope=rec.get("scope") or default_scope, task=rec.get("task", "qa"),
                         fields=rec.get("fields") or {}))
    return out


def _ingest(cfg: DictConfig, tr_cfg, memory: Memory, embedder, tokenizer) -> list[Document]:
    all_docs = []
    for p in cfg.knowledge or []:
        path = Path(str(p)).resolve()
        docs = load_documents(path)
        all_docs.extend(docs)
        st = path.stat()
        key = f"ingested:{cfg.scope}:{path}:{st.st_size}:{int(st.st_mtime)}"
        if memory.get_meta(key):
            log.info("already in memory: %s", path)
            continue
        ids = add_documents(memory, embedder, tokenizer, docs, scope=cfg.scope, chunk_size=tr_cfg.chunk_size,
                            overlap=tr_cfg.chunk_overlap)
        memory.set_meta(key, str(len(ids)))
        log.info("ingested %s: %d documents -> %d chunks", path, len(docs), len(ids))
    return all_docs


def _write_jsonl(path: Path, rows, mode: str = "a") -> None:
    with open(path, mode, encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def check_inputs(cfg: DictConfig) -> None:
    """What ``thought run`` needs, checked before the embedder or the LLM loads: a query file for every phase that
    answers (unless ``phase=all`` asks pre-queries of the knowledge), and every named file present."""
    phase = cfg.phase
    if phase != "ingest" and not cfg.queries and not (phase == "all" and cfg.prequery_from_knowledge):
        raise UsageError("thought run needs queries=<JSONL of {id, query}> (or prequery_from_knowledge=true with "
                         "knowledge=[...]), e.g. scholar thought run queries=q.jsonl 'knowledge=[docs.jsonl]'")
    if cfg.queries:
        existing_file(cfg.queries, "queries")
    for i, p in enumerate(cfg.knowledge or []):
        existing_file(p, f"knowledge[{i}]")


def run(cfg: DictConfig) -> dict:
    out_dir = run_dir(cfg)
    tr_cfg = thought_config(cfg.thought)
    phase = cfg.phase
    if phase not in {"all", "ingest", "answer", "merge"}:
        raise ValueError(f"phase must be all | ingest | answer | merge, got {phase!r}")
    memory_dir = Path(str(cfg.memory_dir)) if cfg.memory_dir else out_dir / "memory"
    shard_dir = Path(str(cfg.shard.dir)) if cfg.shard.dir else memory_dir / "shards"
    n_shards, shard = int(cfg.shard.count), int(cfg.shard.index)
    if not 0 <= shard < n_shards:
        raise ValueError(f"shard.index must be in [0, shard.count), got {shard}/{n_shards}")
    check_inputs(cfg)  # before any model loads: a missing file fails in a second, not after the load

    embedder = build_embedder(cfg.embedder)
    shared_cache = cfg.llm.get("cache_path")
    local_cache = None
    if phase == "answer" and shared_cache:
        # Array tasks on different nodes must not share one SQLite (WAL) file on network storage: this task
        # caches on local disk (seeded with a copy of the shared cache) and publishes its file for the merge.
        local_cache = Path(tempfile.mkdtemp(prefix="scholar-llm-cache-", dir=local_scratch())) / "llm_cache.sqlite"
        copy_cache_file(shared_cache, local_cache)
        llm_cfg = OmegaConf.merge(cfg.llm, {"cache_path": str(local_cache)})
        log.info("shard %d: LLM cache on local disk %s (merged into %s by phase=merge)", shard, local_cache,
                 shared_cache)
    else:
        llm_cfg = cfg.llm
    # ingest needs no model; merge only counts tokens of stored thoughts: neither starts an engine
    llm = build_llm(llm_cfg) if phase in {"all", "answer"} else None
    if phase == "merge":
        llm = TokenizerOnly(_tokenizer_only(cfg), str(cfg.llm.tokenizer or cfg.llm.model))
    memory = Memory(memory_dir, dim=embedder.dim, index=tr_cfg.index, hnsw_m=tr_cfg.hnsw_m,
                    readonly=phase == "answer")
    summary: dict = {"phase": phase, "memory_dir": str(memory_dir), "llm": llm.model_id if llm is not None else None}
    try:
        if phase in {"all", "ingest"}:
            tokenizer = llm.tokenizer if llm is not None else _tokenizer_only(cfg)
            docs = _ingest(cfg, tr_cfg, memory, embedder, tokenizer)
            summary["documents"] = len(docs)
            if phase == "ingest":
                return _finish(summary, memory, out_dir)
        tr = ThoughtRetriever(llm, embedder, memory, tr_cfg)
        queries = load_queries(cfg.queries, cfg.scope) if cfg.queries else []
        if cfg.limit:
            queries = queries[: int(cfg.limit)]
        order = {q.id: i for i, q in enumerate(queries)}

        if phase == "merge":
            results = []
            for f in sorted(shard_dir.glob(f"shard-*-of-{n_shards}.jsonl")):
                results += [StepResult.from_dict(r["result"]) for r in read_jsonl(f)]
            missing = set(order) - {r.query_id for r in results}
            if missing:
                raise ValueError(f"merge: {len(missing)} queries have no shard result (e.g. {sorted(missing)[:3]})")
            results.sort(key=lambda r: order[r.query_id])
            caches = sorted(shard_dir.glob(f"llm-cache-shard-*-of-{n_shards}.sqlite"))
            if shared_cache and caches:
                summary["llm_cache_rows_added"] = merge_caches(shared_cache, caches)
            tr.commit(results)
            memory.save()
            _write_jsonl(out_dir / "answers.jsonl", [r.to_dict() for r in results], mode="w")
            summary.update(_decisions(results), merged=len(results))
            return _finish(summary, memory, out_dir, tr)

        if phase == "answer":
            queries = [q for i, q in enumerate(queries) if i % n_shards == shard]
            shard_dir.mkdir(parents=True, exist_ok=True)
            path = shard_dir / f"shard-{shard}-of-{n_shards}.jsonl"
            done = {r["result"]["query_id"] for r in read_jsonl(path)} if path.exists() else set()
            todo = [q for q in queries if q.id not in done]
            for batch in tr.steps(todo, update=False):
                _write_jsonl(path, [{"order": order[r.query_id], "result": r.to_dict()}
                                    for r in tr.step(batch, update=False)])
            summary.update(shard=shard, answered=len(todo), skipped_done=len(done), queries_per_step=tr.batch_size)
            return _finish(summary, memory, out_dir, tr)

        # phase == all: pre-queries from the knowledge documents, then the queries, memory updated as we go
        if cfg.prequery_from_knowledge:
            titled = [d for d in docs if d.title]
            sources = [PreQuerySource(d.title, d.text[:2000], sentences_of(d.text)) for d in titled]
            pre, stats = make_prequeries(llm, sources, tr_cfg.prequery)
            pre_q = [Query(id=f"pre:{d.doc_id}:{j}", text=q, scope=cfg.scope)
                     for d, qs in zip(titled, pre) for j, q in enumerate(qs)]
            summary["prequeries"] = {**stats, "asked": len(pre_q)}
            pre_results = tr.run(pre_q)
            summary["prequery_decisions"] = _decisions(pre_results)
        answers_path = out_dir / "answers.jsonl"
        done = {r["query_id"] for r in read_jsonl(answers_path)} if answers_path.exists() else set()
        todo = [q for q in queries if q.id not in done]
        results = []
        for step in tr.steps(todo):  # Algorithm 1's order (thought.batch_size=1) or the fast path's batches
            batch = tr.step(step, update=True)
            _write_jsonl(answers_path, [r.to_dict() for r in batch])
            results += batch
        memory.save()
        summary.update(answered=len(todo), skipped_done=len(done), decisions=_decisions(results),
                       queries_per_step=tr.batch_size)
        return _finish(summary, memory, out_dir, tr)
    finally:
        memory.close()
        if llm is not None:
            llm.close()
        if local_cache is not None:  # publish this task's cache (closed: WAL checkpointed) for phase=merge
            copy_cache_file(local_cache, shard_dir / f"llm-cache-shard-{shard}-of-{n_shards}.sqlite")
            shutil.rmtree(local_cache.parent, ignore_errors=True)


def local_scratch() -> str:
    """Node-local scratch for per-task files: ``$SLURM_TMPDIR`` (some sites), ``$TMPDIR`` (Slurm's per-job tmp on
    many sites), else the system temp dir."""
    return os.environ.get("SLURM_TMPDIR") or os.environ.get("TMPDIR") or tempfile.gettempdir()


class TokenizerOnly(LLM):
    """The model's tokenizer behind the LLM interface, for the merge phase: it re-applies stored answers and
    thoughts (token counts only) and must not start an engine (8 vLLM replicas for nothing)."""

    def __init__(self, tokenizer, name: str):
        self._tokenizer = tokenizer
        self.model_id = f"tokenizer-only:{name}"

    @property
    def tokenizer(self):
        return self._tokenizer

    def generate(self, prompts, params=None):
        raise RuntimeError("thought run phase=merge applies stored shard results; it never generates")

    def next_token_probs(self, prompts, candidates):
        raise RuntimeError("thought run phase=merge applies stored shard results; it never scores")


def _tokenizer_only(cfg: DictConfig):
    """The LLM's tokenizer without loading its weights (chunk sizes are in the LLM's tokens)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_model_path(cfg.llm.tokenizer or cfg.llm.model))


def _decisions(results) -> dict:
    out: dict[str, int] = {}
    for r in results:
        out[r.decision] = out.get(r.decision, 0) + 1
    return out


def _finish(summary: dict, memory: Memory, out_dir: Path, tr: ThoughtRetriever | None = None) -> dict:
    summary["memory"] = {"chunks": memory.count("chunk"), "thoughts": memory.count("thought")}
    if tr is not None:
        summary["stats"] = dict(tr.stats)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("thought run: %s", json.dumps(summary))
    return summary

