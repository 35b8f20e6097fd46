"""Algorithm 1: the filter variants (insertion / retrieval / none), end to end on the tiny model, the sharded
answer + ordered merge, and the `thought run` command. Real MiniLM embeddings, tiny random Qwen2 LLM."""

from __future__ import annotations

import json

import pytest

from scholar_agents.thought.algorithm import Query, StepResult, ThoughtRetriever
from scholar_agents.thought.config import ThoughtConfig
from scholar_agents.thought.ingest import Document, add_documents
from scholar_agents.thought.memory import Memory
from tests.fixtures.thought import DOC


@pytest.fixture(scope="session")
def tr_embedder(request):
    """The shared ``embedder`` fixture (real MiniLM) when tests/fixtures defines one, else MiniLM built once here."""
    try:
        return request.getfixturevalue("embedder")
    except pytest.FixtureLookupError:
        from scholar_agents.llm.embedder import build_embedder

        return build_embedder()


THOUGHT_A = "Thought-Retriever stores past answers as thoughts whose root sources trace back to raw chunks."
THOUGHT_B = "AcademicEval evaluates abstract writing and related work generation on long academic papers."


def _small_cfg(**kw) -> ThoughtConfig:
    base = dict(chunk_size=30, top_k=3, token_budget=100, answer_max_new_tokens=12, thought_max_new_tokens=16,
                batch_size=2)
    base.update(kw)
    return ThoughtConfig(**base)


def _memory_with_doc(path, embedder, tokenizer, scope="s") -> Memory:
    m = Memory(path, dim=embedder.dim)
    add_documents(m, embedder, tokenizer, [Document("doc", DOC, "Thought-Retriever")], scope, chunk_size=30)
    return m


def _result(qid: str, thought: str, confidence, status: str, m: Memory, scope="s") -> StepResult:
    chunk_ids = [it.id for it in m.scope_items(scope, ("chunk",))][:2]
    return StepResult(query_id=qid, query=f"question {qid}", scope=scope, scopes=[scope], answer="an answer",
                      context_ids=chunk_ids, context_tokens=10, thought=thought, confidence=confidence,
                      parse_status=status)


def _hand_results(m: Memory) -> list[StepResult]:
    return [
        _result("q1", THOUGHT_A, 1, "ok", m),
        _result("q2", THOUGHT_A, 1, "ok", m),  # the same thought again: cosine 1.0 >= ε
        _result("q3", "", 0, "invalid", m),  # the model said the question could not be answered
        _result("q4", THOUGHT_B, None, "malformed", m),  # a passage without a 0/1 verdict
    ]


@pytest.mark.parametrize("mode, unmarked, expected", [
    ("insertion", "reject", ["stored", "redundant", "not_confident", "malformed"]),  # the paper
    ("insertion", "accept", ["stored", "redundant", "not_confident", "stored"]),
    ("retrieval", "accept", ["stored", "stored", "not_confident", "stored"]),  # the official code
    ("none", "reject", ["stored", "stored", "not_confident", "stored"]),  # w/o Filter: no confidence check
])
def test_filter_variants_at_insertion(tmp_path, tiny_llm, tr_embedder, mode, unmarked, expected):
    m = _memory_with_doc(tmp_path / "m", tr_embedder, tiny_llm.tokenizer)
    tr = ThoughtRetriever(tiny_llm, tr_embedder, m, _small_cfg(filter_mode=mode, unmarked_thoughts=unmarked))
    results = _hand_results(m)
    tr.commit(results)
    assert [r.decision for r in results] == expected
    if mode == "insertion":
        assert results[1].nearest_id == results[0].thought_id and results[1].max_sim >= 0.99
        assert results[0].max_sim < 0.85  # the first thought was novel against the raw chunks
    assert m.count("thought") == expected.count("stored")
    m.close()


def test_filter_at_retrieval_drops_near_duplicates_among_candidates(tmp_path, tiny_llm, tr_embedder):
    m = _memory_with_doc(tmp_path / "m", tr_embedder, tiny_llm.tokenizer)
    q = Query("probe", "What does Thought-Retriever store as thoughts and how are root sources traced?", scope="s")
    official = ThoughtRetriever(tiny_llm, tr_embedder, m,
                                _small_cfg(filter_mode="retrieval", top_k=4, token_budget=400))
    results = _hand_results(m)[:2]
    official.commit(results)
    dup_ids = {results[0].thought_id, results[1].thought_id}
    assert len(dup_ids) == 2  # both copies stored
    naive = ThoughtRetriever(tiny_llm, tr_embedder, m, _small_cfg(filter_mode="insertion", top_k=4, token_budget=400))
    assert dup_ids <= set(naive.retrieve([q])[0].ids)  # without the retrieval filter both copies take context
    deduped = official.retrieve([q])[0].ids
    assert len(dup_ids & set(deduped)) == 1 and len(deduped) == 4  # one copy, the freed slot goes to another item
    m.close()


def test_algorithm1_end_to_end_on_the_tiny_model(tmp_path, tiny_llm, tr_embedder):
    m = _memory_with_doc(tmp_path / "m", tr_embedder, tiny_llm.tokenizer)
    cfg = _small_cfg(unmarked_thoughts="accept")  # the random model never writes a verdict: store its passages
    tr = ThoughtRetriever(tiny_llm, tr_embedder, m, cfg)
    queries = [Query(f"q{i}", t, scope="s") for i, t in enumerate([
        "What does Thought-Retriever keep in memory?", "Why do thoughts raise recall?",
        "What does AcademicEval ask a model to do?", "What does the redundancy filter drop?"])]
    results = tr.run(queries, progress=False)
    assert [r.query_id for r in results] == ["q0", "q1", "q2", "q3"]
    chunk_ids = {it.id for it in m.scope_items("s", ("chunk",))}
    all_ids = {it.id for it in m.scope_items("s")}
    assert sum(tr.stats[k] for k in tr.stats if k.startswith("parse_")) == 4
    assert sum(tr.stats[k] for k in tr.stats if k.startswith("decision_")) == 4
    for r in results:
        assert r.answer_finish in {"stop", "length"}
        assert 0 < len(r.context_ids) <= cfg.top_k and set(r.context_ids) <= all_ids
        assert 0 < r.context_tokens <= cfg.token_budget
        assert r.decision in {"stored", "redundant", "not_confident", "malformed"}
        if r.decision == "stored":
            t = m.get([r.thought_id])[0]
            srcs = m.get(t.sources)
            assert t.origin == r.query_id and t.sources == r.context_ids and t.text == r.thought
            assert set(t.root_sources) <= chunk_ids
            assert set(t.root_sources) == {x for s in srcs for x in s.root_sources}
            assert t.level == pytest.approx(1 + sum(s.level for s in srcs) / len(srcs))
        if r.decision == "redundant":
            assert r.max_sim >= cfg.epsilon
    assert m.count("thought") == sum(r.decision == "stored" for r in results)
    m.close()


def test_a_prompt_that_cannot_fit_is_counted_not_fatal(tmp_path, tiny_llm, tr_embedder):
    m = _memory_with_doc(tmp_path / "m", tr_embedder, tiny_llm.tokenizer)
    tr = ThoughtRetriever(tiny_llm, tr_embedder, m, _small_cfg())
    long_abstract = "retrieval " * 600  # the tiny model's window is 512 tokens
    queries = [Query("short", "What is a thought?", scope="s"),
               Query("long", "Write the related work.", scope="s", task="related", fields={"abstract": long_abstract})]
    results = tr.step(queries)
    assert results[0].answer_finish in {"stop", "length"} and results[0].parse_status
    got = (results[1].answer, results[1].answer_finish, results[1].parse_status)
    assert got == ("", "prompt_too_long", "not_answered")
    assert results[1].decision == "malformed" and tr.stats["prompt_too_long"] == 1
    m.close()


def test_sharded_answers_merged_in_order_equal_the_batched_update(tmp_path, tiny_llm, tr_embedder):
    queries = [Query(f"q{i}", t, scope="s") for i, t in enumerate([
        "What is a thought?", "What is a root source?", "How is redundancy checked?"])]
    cfg = _small_cfg(unmarked_thoughts="accept", batch_size=3)
    m1 = _memory_with_doc(tmp_path / "a", tr_embedder, tiny_llm.tokenizer)
    direct = ThoughtRetriever(tiny_llm, tr_embedder, m1, cfg).step(queries, update=True)
    m2 = _memory_with_doc(tmp_path / "b", tr_embedder, tiny_llm.tokenizer)
    tr2 = ThoughtRetriever(tiny_llm, tr_embedder, m2, cfg)
    # two "shards" answered against the frozen memory, serialised, merged back in query order
    shard_a = [r.to_dict() for r in tr2.step(queries[0::2], update=False)]
    shard_b = [r.to_dict() for r in tr2.step(queries[1::2], update=False)]
    assert m2.count("thought") == 0
    merged = sorted((StepResult.from_dict(json.loads(json.dumps(d))) for d in shard_a + shard_b),
                    key=lambda r: int(r.query_id[1:]))
    tr2.commit(merged)
    assert [r.decision for r in merged] == [r.decision for r in direct]
    snap = lambda m: [(t.text, t.sources, t.origin) for t in m.scope_items("s", ("thought",))]
    assert snap(m1) == snap(m2)
    m1.close()
    m2.close()


def test_thought_run_command_all_and_sharded(tmp_path, tiny_model_dir):
    from scholar_agents.hydra_app import compose
    from scholar_agents.thought.commands import run

    (tmp_path / "k.jsonl").write_text(json.dumps({"id": "doc", "title": "Thought-Retriever", "text": DOC}) + "\n")
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "query": q}) + "\n" for i, q in enumerate(
        ["What is a thought?", "Why do thoughts help?", "What is AcademicEval?"])))
    common = [f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.device=cpu", "llm.max_model_len=512",
              "llm.cache_path=null", f"paths.cache_dir={tmp_path}/cache", f"queries={tmp_path}/q.jsonl",
              f"knowledge=[{tmp_path}/k.jsonl]", "thought.chunk_size=30", "thought.token_budget=100",
              "thought.top_k=3", "thought.answer_max_new_tokens=8", "thought.thought_max_new_tokens=12",
              "thought.unmarked_thoughts=accept", "thought.batch_size=2"]
    cfg = compose("thought_run", common + [f"paths.output_dir={tmp_path}/all"])
    summary = run(cfg)
    assert summary["answered"] == 3 and summary["memory"]["chunks"] > 0
    lines = [json.loads(x) for x in (tmp_path / "all" / "answers.jsonl").read_text().splitlines()]
    assert [r["query_id"] for r in lines] == ["q0", "q1", "q2"]
    assert run(cfg)["answered"] == 0  # resumed: every query already answered, memory reopened

    mem = f"memory_dir={tmp_path}/all/memory"  # shards answer against the memory the first run left
    for i in range(2):
        run(compose("thought_run", common + [mem, "phase=answer", "shard.count=2", f"shard.index={i}",
                                             f"paths.output_dir={tmp_path}/shard{i}"]))
    merged = run(compose("thought_run", common + [mem, "phase=merge", "shard.count=2",
                                                  f"paths.output_dir={tmp_path}/merge"]))
    assert merged["merged"] == 3
    order = [json.loads(x)["query_id"] for x in (tmp_path / "merge" / "answers.jsonl").read_text().splitlines()]
    assert order == ["q0", "q1", "q2"]


@pytest.mark.vllm
def test_algorithm1_served_by_a_vllm_server(tmp_path, vllm_server, tr_embedder):
    """Answers and thoughts through the OpenAI-compatible client against a real vLLM server (SmolLM2)."""
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    llm = build_llm(LLMConfig(backend="openai", model="embedded:smollm2", base_url=vllm_server.base_url,
                              served_model_name=vllm_server.model, max_model_len=2048, cache_path=None))
    try:
        m = _memory_with_doc(tmp_path / "m", tr_embedder, llm.tokenizer)
        tr = ThoughtRetriever(llm, tr_embedder, m, _small_cfg(token_budget=300, answer_max_new_tokens=48,
                                                           thought_max_new_tokens=48, unmarked_thoughts="accept"))
        results = tr.run([Query("q0", "What does Thought-Retriever keep in memory?", scope="s"),
                          Query("q1", "What does AcademicEval ask a model to do?", scope="s")], progress=False)
        assert all(r.answer for r in results)
        assert {r.decision for r in results} <= {"stored", "redundant", "not_confident", "malformed"}
        # thought.constrained (default): the server decodes Figure 3's layout, so every verdict is read
        assert all(r.parse_status in {"ok", "invalid"} for r in results), [r.parse_status for r in results]
        assert m.count("thought") == sum(r.decision == "stored" for r in results)
        m.close()
    finally:
        llm.close()


@pytest.mark.parametrize("preset", ["paper", "official_code", "no_filter", "cpu_small"])
def test_thought_presets_compose_and_validate(preset):
    from scholar_agents.hydra_app import compose
    from scholar_agents.thought.config import thought_config

    cfg = thought_config(compose("thought_run", [f"thought={preset}"]).thought)
    assert cfg.top_k == 8 and cfg.epsilon == 0.85  # the paper's K and ε in every preset
    assert cfg.filter_mode == {"official_code": "retrieval", "no_filter": "none"}.get(preset, "insertion")
    with pytest.raises(ValueError, match="filter_mode"):
        thought_config(compose("thought_run", ["thought.filter_mode=sometimes"]).thought)
