"""The attention kernel trained models load with: the 7B presets ask for ``auto`` — flash attention
where ``flash_attn`` imports and CUDA is there, sdpa otherwise — with one log line saying which; an explicit
``flash_attention_2`` that cannot load is one line, not a transformers traceback. Here (no flash-attn, no CUDA)
``auto`` is sdpa; the flash side is shown with a stand-in ``flash_attn`` module and CUDA reported available."""

import logging
import sys
import types

import pytest
import torch

from scholar_agents.hydra_app import compose
from scholar_agents.llm import attention
from scholar_agents.llm.attention import resolve_attn_implementation
from scholar_agents.validation import UsageError


@pytest.fixture(autouse=True)
def fresh_choice():
    attention._resolve.cache_clear()  # one log line per process: each test starts as a new process would
    yield
    attention._resolve.cache_clear()


@pytest.fixture
def no_flash_attn(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # `import flash_attn` raises ImportError


@pytest.fixture
def flash_attn_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(__version__="2.8.3"))


def choices(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("attention: ")]


def test_auto_is_sdpa_without_flash_attn_and_says_so_once(no_flash_attn, caplog):
    with caplog.at_level(logging.INFO, logger="scholar_agents.llm.attention"):
        assert resolve_attn_implementation("auto", "ppo.attn_implementation") == "sdpa"
        assert resolve_attn_implementation("auto", "ppo.attn_implementation") == "sdpa"
    lines = choices(caplog)
    assert len(lines) == 1 and lines[0].startswith("attention: sdpa (ppo.attn_implementation=auto: flash_attn does "
                                                   "not import")


def test_auto_is_flash_attention_where_it_imports_and_cuda_is_there(flash_attn_module, monkeypatch, caplog):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_attn_implementation("auto", "sft.attn_implementation") == "sdpa"  # the package alone is not enough
    attention._resolve.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with caplog.at_level(logging.INFO, logger="scholar_agents.llm.attention"):
        assert resolve_attn_implementation("auto", "sft.attn_implementation") == "flash_attention_2"
        assert resolve_attn_implementation("flash_attention_2", "sft.attn_implementation") == "flash_attention_2"
    assert "attention: flash_attention_2 (sft.attn_implementation=auto: flash_attn 2.8.3 imports and CUDA is " \
           "available)" in choices(caplog)


def test_explicit_flash_attention_without_the_package_is_one_line_naming_auto(no_flash_attn):
    with pytest.raises(UsageError, match=r"ppo.attn_implementation=flash_attention_2 but flash_attn does not import.*"
                                         r"use ppo.attn_implementation=auto") as e:
        resolve_attn_implementation("flash_attention_2", "ppo.attn_implementation")
    assert "\n" not in str(e.value)


def test_other_kernels_pass_through_and_null_is_transformers_default(no_flash_attn):
    assert resolve_attn_implementation("sdpa") == "sdpa" and resolve_attn_implementation("eager") == "eager"
    assert resolve_attn_implementation(None) is None


def test_the_7b_presets_ask_for_auto():
    assert compose("train_crawler_ppo", ["ppo=pasa_paper"]).ppo.attn_implementation == "auto"
    assert compose("train_selector_sft", ["sft=pasa_7b"]).sft.attn_implementation == "auto"
    assert compose("train_crawler_ppo", ["experiment=pasa_crawler_ppo"]).ppo.attn_implementation == "auto"


def test_sft_loads_the_model_with_the_resolved_kernel(no_flash_attn, tiny_model_dir, tmp_path):
    """``sft.attn_implementation=auto`` (the 7B preset's) reaches from_pretrained as sdpa here."""
    from scholar_agents.train.sft import SFTRecipeConfig, build_trainer

    data = tmp_path / "d.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "Is it relevant?"}, '
                    '{"role": "assistant", "content": "True"}]}\n')
    trainer, _ = build_trainer(SFTRecipeConfig(model=str(tiny_model_dir), train_file=str(data), use_cpu=True,
                                               bf16=False, output_dir=str(tmp_path / "o"), attn_implementation="auto"))
    assert trainer.model.config._attn_implementation == "sdpa"


def test_startup_check_of_train_crawler_ppo_names_the_kernel(no_flash_attn, caplog):
    from scholar_agents.plan.commands import startup_check
    from scholar_agents.train.plan_runs import ppo_run

    with caplog.at_level(logging.INFO):
        assert startup_check(ppo_run(compose("train_crawler_ppo", ["ppo=pasa_paper"]))) is None  # cluster=cpu: no plan
    assert choices(caplog) == ["attention: sdpa (ppo.attn_implementation=auto: flash_attn does not import "
                               "(ModuleNotFoundError: import of flash_attn halted; None in sys.modules))"]


def test_the_hf_backend_loads_with_the_resolved_kernel(no_flash_attn, tiny_model_dir):
    """llm.attn_implementation (hf rollouts on a GPU node): auto is sdpa here; an explicit kernel is used as asked."""
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    for asked, loaded in (("auto", "sdpa"), ("eager", "eager")):
        llm = build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), device="cpu", dtype="float32",
                                  attn_implementation=asked))
        assert llm.model.config._attn_implementation == loaded
