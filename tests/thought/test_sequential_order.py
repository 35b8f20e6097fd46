"""Algorithm 1's order (thought=paper: each query sees the thoughts stored by every query before it) against the
fast path (thought=fast), and the w/o-Filter ablation (§4.5: no confidence generation, every thought stored).

The LLM is an OpenAI-compatible server faked at the HTTP boundary (the outside world) that follows the prompts
it gets the way an instruction-following model does: it answers questions, writes the Figure 3 verdict ("0" when
the answer says the question cannot be answered, else "1" and a knowledge point), and writes a plain passage for
the no-confidence prompt. Everything else is the real `thought run` command: memory, MiniLM retrieval, parser,
filter, merge."""

from __future__ import annotations

import json

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.thought.algorithm import Query, sequential_steps
from tests.fixtures.llm import TINY_TOKENIZER_DIR
from tests.fixtures.openai_http import ScriptedCompletions, serve

DOC = ("Thought-Retriever keeps the intermediate answers of a language model as thoughts in a memory. Each "
       "thought records the chunks it was derived from. A redundancy filter drops thoughts that are too similar "
       "to what the memory already holds. AcademicEval asks a model to write abstracts of long papers.")
# q0's answer becomes a thought about zebras, which no chunk mentions; q1 asks about it
QUERIES = ["When do the zebras of the Serengeti migrate?", "In which month do Serengeti zebras move north?",
           "What is the capital of Atlantis?"]
ZEBRA_ANSWER = "The Serengeti zebras migrate north every July, following the rains."
ZEBRA_THOUGHT = "Zebra herds of the Serengeti start their northward migration in July after the rains."
ATLANTIS_PASSAGE = "Atlantis is a legendary island; the question about its capital could not be answered."


def model_reply(prompt: str) -> str:
    """What a prompt-following model writes for our three prompts (answer, Figure 3, Figure 3 without Step 1)."""
    if "Given question:" in prompt:  # a thought prompt: the question and the answer are quoted
        atlantis = "Atlantis" in prompt.split("Given question:")[1].split(", given answer:")[0]
        if "Step 1: Determine if the answer is an actual answer" in prompt:  # Figure 3: verdict + knowledge point
            return "0" if "given answer:No." in prompt else f"1\n{ZEBRA_THOUGHT}"
        assert "succinctly summarize both the question and answer" in prompt  # w/o Filter: no verdict asked
        return ATLANTIS_PASSAGE if atlantis else ZEBRA_THOUGHT
    # the answer prompt ends with the question; the Appendix M instruction: not enough information -> 'No'
    return "No." if "Atlantis" in prompt.split("answer the question:")[-1] else ZEBRA_ANSWER


class _Model(ScriptedCompletions):
    def do_POST(self):
        req = self.request_json()
        self.send_json({"choices": [{"index": 0, "text": model_reply(req["prompt"]), "finish_reason": "stop"}]})


@pytest.fixture(scope="module")
def model_url():
    with serve(_Model) as url:
        yield url


def _run(tmp_path, model_url, name: str, preset: str, queries: list[str], extra=()) -> list[dict]:
    from scholar_agents.thought.commands import run

    (tmp_path / "k.jsonl").write_text(json.dumps({"id": "doc", "title": "Thought-Retriever", "text": DOC}) + "\n")
    qfile = tmp_path / f"{name}.q.jsonl"
    qfile.write_text("".join(json.dumps({"id": f"q{i}", "query": q}) + "\n" for i, q in enumerate(queries)))
    cfg = compose("thought_run", [
        f"thought={preset}", "llm=openai_server", f"llm.base_url={model_url}", f"llm.model={TINY_TOKENIZER_DIR}",
        "llm.max_model_len=2048", "llm.cache_path=null", "llm.max_retries=0", f"paths.output_dir={tmp_path}/{name}",
        f"paths.cache_dir={tmp_path}/cache", f"queries={qfile}", f"knowledge=[{tmp_path}/k.jsonl]",
        "thought.chunk_size=30", "thought.top_k=3", "thought.token_budget=200", *extra])
    run(cfg)
    return [json.loads(x) for x in (tmp_path / name / "answers.jsonl").read_text().splitlines()]


def test_paper_preset_is_sequential_and_fast_preset_batches(tmp_path, model_url):
    seq = _run(tmp_path, model_url, "paper", "paper", QUERIES[:2])
    assert seq[0]["decision"] == "stored" and seq[0]["thought"] == ZEBRA_THOUGHT
    # Algorithm 1: q1's retrieval (line 3) already sees the thought q0 stored (line 8) in the same run
    assert seq[0]["thought_id"] in seq[1]["context_ids"]
    assert seq[1]["decision"] == "redundant" and seq[1]["nearest_id"] == seq[0]["thought_id"]

    fast = _run(tmp_path, model_url, "fast", "fast", QUERIES[:2])
    # the fast path (8 queries per step): q1 was retrieved before q0's thought existed; both thoughts meet the
    # redundancy check only at the ordered merge
    assert fast[0]["decision"] == "stored" and fast[0]["thought_id"] not in fast[1]["context_ids"]
    assert fast[1]["decision"] == "redundant"


def test_sequential_steps_share_a_call_only_across_disjoint_scopes():
    qs = [Query("a", "x", scope="s1"), Query("b", "x", scope="s2"), Query("c", "x", scope="s1"),
          Query("d", "x", scope="s3", extra_scopes=("g",)), Query("e", "x", scope="s4", extra_scopes=("g",))]
    assert [[q.id for q in step] for step in sequential_steps(qs)] == [["a", "b"], ["c", "d"], ["e"]]


def test_without_filter_no_verdict_is_generated_and_every_thought_is_stored(tmp_path, model_url):
    paper = _run(tmp_path, model_url, "paper", "paper", [QUERIES[2]])
    assert (paper[0]["answer"], paper[0]["confidence"], paper[0]["decision"]) == ("No.", 0, "not_confident")

    ablation = _run(tmp_path, model_url, "nofilter", "no_filter", [QUERIES[2], QUERIES[0], QUERIES[1]])
    # the question Figure 3 would mark "0" still leaves a thought: no confidence is generated
    assert ablation[0]["decision"] == "stored" and ablation[0]["thought"] == ATLANTIS_PASSAGE
    assert ablation[0]["confidence"] is None and ablation[0]["parse_status"] == "ok"
    # and no thought merge: the same knowledge point twice is stored twice
    assert [r["decision"] for r in ablation[1:]] == ["stored", "stored"]
    assert ablation[1]["thought"] == ablation[2]["thought"] == ZEBRA_THOUGHT


def test_frozen_memory_shards_batch_whatever_the_order_mode(tmp_path, tiny_llm):
    """phase=answer (update=False) cannot let queries see each other's thoughts, so even thought=paper batches them;
    with updates, thought=paper keeps one query per step for queries of one scope."""
    from scholar_agents.llm.embedder import build_embedder
    from scholar_agents.thought.algorithm import FROZEN_STEP_PER_REPLICA, ThoughtRetriever
    from scholar_agents.thought.config import ThoughtConfig
    from scholar_agents.thought.memory import Memory

    qs = [Query(f"q{i}", "x", scope="s") for i in range(FROZEN_STEP_PER_REPLICA + 3)]
    embedder = build_embedder()
    memory = Memory(tmp_path / "m", dim=embedder.dim)
    try:
        tr = ThoughtRetriever(tiny_llm, embedder, memory, ThoughtConfig())  # the paper's batch_size 1
        assert [len(s) for s in tr.steps(qs)] == [1] * len(qs)
        assert [len(s) for s in tr.steps(qs, update=False)] == [FROZEN_STEP_PER_REPLICA, 3]
    finally:
        memory.close()
