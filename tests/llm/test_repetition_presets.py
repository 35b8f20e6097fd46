"""Repetition control on the generation presets — each backend's own switch, set per preset, overridable
per request (the Crawler turns it off), refused where a backend lacks it, and part of the response cache's key."""

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.llm import SamplingParams, build_llm
from scholar_agents.llm.base import REPETITION_OFF, repetition_controls
from scholar_agents.llm.config import LLMConfig
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig

PROMPT = ["the cat sat on the mat and the cat sat on the mat and the cat"]


def _ids(llm, **kw):
    return llm.generate(PROMPT, SamplingParams(max_new_tokens=24, **kw))[0].completions[0].token_ids


def test_hf_repetition_penalty_changes_greedy_output_and_a_request_turns_it_off(tiny_model_dir, torch_one_thread):
    base = build_llm({"model": str(tiny_model_dir), "dtype": "float32", "max_model_len": 256})
    penalised = build_llm({"model": str(tiny_model_dir), "dtype": "float32", "max_model_len": 256,
                           "repetition_penalty": 1e6})
    free = _ids(base)
    assert len(set(free)) < len(free)  # the tiny random model repeats itself
    strict = _ids(penalised)
    # a huge penalty on the generated tokens: no generated token comes twice
    assert len(set(strict)) == len(strict) and strict != free
    assert _ids(penalised, **REPETITION_OFF) == free  # the request's neutral values win over the preset
    assert _ids(base, repetition_penalty=1e6) == strict


def test_a_switch_the_backend_lacks_is_refused_before_loading():
    with pytest.raises(ValueError, match="the hf backend has no such switch; its repetition controls are "
                                         "repetition_penalty, no_repeat_ngram_size"):
        build_llm({"model": "/nonexistent/model", "frequency_penalty": 0.5})
    with pytest.raises(ValueError, match="openai backend has no such switch"):
        build_llm({"backend": "openai", "model": "/nonexistent/model", "repetition_penalty": 1.3})
    assert repetition_controls(SamplingParams(), LLMConfig(backend="vllm", repetition_penalty=1.2,
                                                           frequency_penalty=0.5)) == {
        "repetition_penalty": 1.2, "frequency_penalty": 0.5}
    assert repetition_controls(SamplingParams(**REPETITION_OFF), LLMConfig(repetition_penalty=1.2)) == {}


def test_the_cache_keys_repetition_control_apart(tiny_model_dir, tmp_path, torch_one_thread):
    cfg = {"model": str(tiny_model_dir), "dtype": "float32", "max_model_len": 256,
           "cache_path": str(tmp_path / "cache.sqlite")}
    plain = build_llm(cfg)
    assert _ids(plain)
    penalised = build_llm({**cfg, "repetition_penalty": 1e6})
    strict = _ids(penalised)
    assert penalised.misses == 1 and len(set(strict)) == len(strict)  # not served the unpenalised answer
    assert _ids(penalised, **REPETITION_OFF) == _ids(plain) and penalised.hits == 1


def test_the_crawler_samples_without_repetition_control():
    params = Crawler(None, CrawlerConfig()).sampling()
    assert repetition_controls(params, LLMConfig(repetition_penalty=1.3)) == {}


@pytest.mark.parametrize("preset, switch", [("smollm2", "repetition_penalty"), ("smollm2_vllm", "frequency_penalty"),
                                            ("openai_server", "frequency_penalty")])
def test_the_embedded_presets_set_their_backends_switch(preset, switch):
    cfg = compose("thought_run", [f"llm={preset}"]).llm
    rep = repetition_controls(SamplingParams(), LLMConfig(**{k: cfg[k] for k in ("backend", "repetition_penalty",
                                                                                  "no_repeat_ngram_size",
                                                                                  "frequency_penalty")}))
    assert list(rep) == [switch]
