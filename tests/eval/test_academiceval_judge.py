"""The win-rate judge of `scholar eval academiceval` is its own llm group (`llm@judge_llm`), as in the paper (a
separate Qwen1.5-72B-chat judge): a run with a distinct judge model asks that model and names it; a run without one
is judged by the generator and flagged "judge = generator". Tiny random Qwen2 models (seed 0 answers, seed 1 judges)."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.llm import make_tiny_qwen2


@pytest.fixture(scope="module")
def judge_model_dir(tmp_path_factory):
    return make_tiny_qwen2(tmp_path_factory.mktemp("tiny_judge"), seed=1)


def test_distinct_judge_is_asked_and_named_and_the_generator_judge_is_flagged(tmp_path, tiny_model_dir,
                                                                              judge_model_dir):
    from scholar_agents.eval.academiceval import evaluate
    from scholar_agents.eval.winrate import judge_pairs
    from scholar_agents.hydra_app import compose
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig
    from scholar_agents.thought.prompts import judge_prompt

    body = " ".join(f"Section {i}: thoughts are stored with their sources and retrieved later." for i in range(12))
    (tmp_path / "abs.jsonl").write_text("".join(json.dumps(
        {"id": f"p{i}", "title": f"Paper {i} on memory", "abstract": f"Paper {i} studies thought memories.",
         "main_content": body}) + "\n" for i in range(2)))
    tiny = ["dtype=float32", "device=cpu", "max_model_len=1024", "cache_path=null"]
    common = [f"llm.model={tiny_model_dir}", *(f"llm.{o}" for o in tiny), f"paths.output_dir={tmp_path}/out",
              f"paths.cache_dir={tmp_path}/cache", f"datasets=[{{name: abs, path: '{tmp_path}/abs.jsonl'}}]",
              "methods=[thought_retriever,bm25]", "thought.chunk_size=40", "thought.token_budget=120",
              "thought.top_k=3", "thought.answer_max_new_tokens=8", "thought.thought_max_new_tokens=8",
              "thought.prequery.method=template", "thought.prequery.n_template=1", "curve_checkpoints=[0]",
              "judge.mode=forced_choice", "bootstrap.n=50", "abstraction.tasks=[]"]

    # 1. a separate judge: a different model, on the hf backend here (any backend: the same llm presets)
    separate = ["llm@judge_llm=smollm2", f"judge_llm.model={judge_model_dir}", *(f"judge_llm.{o}" for o in tiny)]
    report = evaluate(compose("eval_academiceval", common + separate))
    judge = report["meta"]["judge"]
    assert judge == {"model": str(judge_model_dir), "backend": "hf", "same_as_generator": False, "configured": True}
    md = (tmp_path / "out" / "report.md").read_text()
    assert f"win-rate judge: `{judge_model_dir}`" in md and "judge = generator" not in md
    # the verdicts are the judge model's: its forced-choice probabilities on the run's own answers, both orders
    rows = [json.loads(x) for x in (tmp_path / "out" / "answers.jsonl").read_text().splitlines()]
    refs = ["Paper 0 studies thought memories.", "Paper 1 studies thought memories."]
    a, b = [r["bm25"]["answer"] for r in rows], [r["thought_retriever"]["answer"] for r in rows]
    stage = json.loads((tmp_path / "out" / "stages" / "abs.judge.bm25.json").read_text())
    for model_dir, same in ((judge_model_dir, True), (tiny_model_dir, False)):
        llm = build_llm(LLMConfig(backend="hf", model=str(model_dir), dtype="float32", device="cpu",
                                  max_model_len=1024))
        _, raw = judge_pairs(llm, judge_prompt, refs, a, b, mode="forced_choice")
        llm.close()
        assert ([list(p) for p in raw] == stage["raw"]) is same
    assert stage["judge"] == str(judge_model_dir)
    wr = report["datasets"][0]["table"]["bm25"]["win_rate_vs_tr"]
    assert wr["n_items"] == 2 and wr["n_scored"] == 2

    # 2. the same run directory resumed without a judge: answers are reused, the verdicts are asked again of the
    # generator (not the first judge's), and the report flags it
    again = evaluate(compose("eval_academiceval", common))
    assert again["meta"]["judge"] == {"model": str(tiny_model_dir), "backend": "hf", "same_as_generator": True,
                                      "configured": False}
    assert "**judge = generator**" in (tmp_path / "out" / "report.md").read_text()
    stage = json.loads((tmp_path / "out" / "stages" / "abs.judge.bm25.json").read_text())
    assert stage["judge"] == str(tiny_model_dir)
    rows2 = [json.loads(x) for x in (tmp_path / "out" / "answers.jsonl").read_text().splitlines()]
    assert rows2 == rows

    # 3. a judge_llm that names the generator's model is flagged too
    same = ["llm@judge_llm=smollm2", f"judge_llm.model={tiny_model_dir}", *(f"judge_llm.{o}" for o in tiny)]
    assert evaluate(compose("eval_academiceval", common + same))["meta"]["judge"]["same_as_generator"] is True
