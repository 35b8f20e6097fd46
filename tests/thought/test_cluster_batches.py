"""Thought-Retriever on a cluster: the batch per vLLM replica, answer shards (Slurm array tasks on different nodes)
caching on local disk and publishing their caches, the merge phase folding them into the shared cache without
starting an engine. On CPU with the tiny model and the hf backend (the same code path as vLLM on GPUs)."""

import json
import sqlite3

from scholar_agents.hydra_app import compose
from scholar_agents.llm.cache import merge_caches
from scholar_agents.llm.config import LLMConfig
from scholar_agents.thought.algorithm import queries_per_step
from scholar_agents.thought.config import ThoughtConfig

DOC = ("Thought-Retriever stores thoughts: condensed answers to earlier queries. It retrieves chunks and thoughts, "
       "answers, then writes a new thought with a confidence. Redundant thoughts are filtered with a cosine "
       "threshold. AcademicEval is a benchmark of academic writing tasks on arXiv papers.")


def test_thought_batch_is_per_vllm_replica():
    cfg = ThoughtConfig(batch_size=32)
    assert queries_per_step(cfg, LLMConfig(backend="vllm", data_parallel_size=8)) == 256  # 32 prompts per GPU
    assert queries_per_step(cfg, LLMConfig(backend="vllm", data_parallel_size=1)) == 32
    assert queries_per_step(cfg, LLMConfig(backend="openai", data_parallel_size=8)) == 32  # a server batches itself
    assert queries_per_step(ThoughtConfig(batch_size=1), LLMConfig(backend="hf")) == 1  # Algorithm 1 exactly


def _rows(path) -> int:
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT COUNT(*) FROM completions").fetchone()[0]
    finally:
        db.close()


def test_answer_shards_cache_on_local_disk_and_merge_folds_the_caches_in(tmp_path, tiny_model_dir, monkeypatch):
    from scholar_agents.thought.commands import run

    local = tmp_path / "node_local"
    local.mkdir()
    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(local))
    (tmp_path / "k.jsonl").write_text(json.dumps({"id": "doc", "title": "Thought-Retriever", "text": DOC}) + "\n")
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "query": q}) + "\n" for i, q in enumerate(
        ["What is a thought?", "Why do thoughts help?", "What is AcademicEval?"])))
    shared = tmp_path / "shared" / "llm_cache.sqlite"  # on the network file system in a real run
    common = [f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.device=cpu", "llm.max_model_len=512",
              f"llm.cache_path={shared}", f"paths.cache_dir={tmp_path}/cache", f"queries={tmp_path}/q.jsonl",
              f"knowledge=[{tmp_path}/k.jsonl]", f"memory_dir={tmp_path}/memory", "thought.chunk_size=30",
              "thought.token_budget=100", "thought.top_k=3", "thought.answer_max_new_tokens=8",
              "thought.thought_max_new_tokens=12", "thought.unmarked_thoughts=accept", "thought.batch_size=2"]

    def phase(name, *extra, out):
        return run(compose("thought_run", common + [f"phase={name}", f"paths.output_dir={tmp_path}/{out}", *extra]))

    phase("ingest", out="ingest")
    for i in range(2):
        s = phase("answer", "shard.count=2", f"shard.index={i}", out=f"shard{i}")
        assert s["queries_per_step"] == 2
    shard_caches = sorted((tmp_path / "memory" / "shards").glob("llm-cache-shard-*-of-2.sqlite"))
    assert [p.name for p in shard_caches] == ["llm-cache-shard-0-of-2.sqlite", "llm-cache-shard-1-of-2.sqlite"]
    assert not shared.exists(), "answer tasks must never write the shared cache"
    assert list(local.iterdir()) == []  # the node-local copies are cleaned up
    n_shard_rows = sum(_rows(p) for p in shard_caches)
    assert n_shard_rows > 0

    merged = phase("merge", "shard.count=2", out="merge")
    assert merged["merged"] == 3 and merged["llm"].startswith("tokenizer-only:")  # no engine in the merge phase
    assert not (tmp_path / "shared" / "llm_cache.sqlite-wal").exists()  # checkpointed: plain copies are complete
    assert merged["llm_cache_rows_added"]["completions"] == _rows(shared) == n_shard_rows

    # A re-answered shard starts from (a local copy of) the merged cache: its published cache holds every merged
    # row, plus only the requests the merge made new (the merge stored thoughts, so the memory -- and with it some
    # prompts -- grew); merging it back adds exactly those.
    (tmp_path / "memory" / "shards" / "shard-0-of-2.jsonl").unlink()
    phase("answer", "shard.count=2", "shard.index=0", out="shard0_again")
    before = _rows(shared)
    assert _rows(shard_caches[0]) >= before
    added = merge_caches(shared, [shard_caches[0]])["completions"]
    assert _rows(shared) == _rows(shard_caches[0]) == before + added
