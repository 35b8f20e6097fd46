"""build_llm: configs (real composed presets), validation errors, the cache wrapper, dtype choice."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from scholar_agents.hydra_app import compose
from scholar_agents.llm import LLM, build_llm
from scholar_agents.llm.cache import CachedLLM
from scholar_agents.llm.config import LLMConfig
from scholar_agents.llm.factory import resolve_model_path, to_llm_config
from scholar_agents.llm.precision import cpu_supports_bf16, resolve_dtype_name
from tests.paths import REPO

LLM_CONF_DIR = REPO / "scholar_agents" / "conf" / "llm"
PRESETS = sorted(p.stem for p in LLM_CONF_DIR.glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_llm_preset_composes_into_a_valid_config(preset, tmp_path):
    cfg = compose("pasa_search", [f"llm={preset}", f"paths.cache_dir={tmp_path}"])
    llm_cfg = to_llm_config(cfg.llm)
    assert llm_cfg.backend in ("hf", "vllm", "openai")
    assert llm_cfg.cache_path is None or llm_cfg.cache_path.startswith(str(tmp_path))


def test_build_from_a_dictconfig_with_the_response_cache(tiny_model_dir, tmp_path):
    node = OmegaConf.create({"backend": "hf", "model": str(tiny_model_dir), "dtype": "float32", "device": "cpu",
                             "cache_path": str(tmp_path / "cache.sqlite")})
    llm = build_llm(node)
    assert isinstance(llm, CachedLLM) and isinstance(llm, LLM)
    assert llm.count_tokens("graph neural networks") == len(llm.tokenizer.encode("graph neural networks"))
    assert (tmp_path / "cache.sqlite").exists()
    llm.close()


def test_bad_configs_raise_clear_errors(tiny_model_dir):
    with pytest.raises(ValueError, match="unknown llm.backend 'tgi'"):
        build_llm(LLMConfig(backend="tgi", model=str(tiny_model_dir)))
    with pytest.raises(ValueError, match=r"unknown llm config keys \['temprature'\]"):
        build_llm({"backend": "hf", "model": str(tiny_model_dir), "temprature": 0.5})
    with pytest.raises(ValueError, match="unknown embedded model 'embedded:gpt5'"):
        resolve_model_path("embedded:gpt5")
    with pytest.raises(ValueError, match="unknown dtype"):
        build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), dtype="int3"))
    with pytest.raises(ValueError, match="batch_size"):
        build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), batch_size=0))
    with pytest.raises(Exception, match="batch_size"):  # OmegaConf's type check names the field
        to_llm_config({"batch_size": "many"})


def test_auto_dtype_follows_the_cpu(monkeypatch):
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    native = "amx_bf16" in flags or "avx512_bf16" in flags
    assert cpu_supports_bf16() == native
    assert resolve_dtype_name("auto", "cpu") == ("bfloat16" if native else "float32")
    assert resolve_dtype_name("fp32", "cpu") == "float32" and resolve_dtype_name("bf16", "cuda") == "bfloat16"


def test_vllm_backend_is_import_guarded(monkeypatch, tiny_model_dir):
    """Without vLLM installed the error says how to install it (simulated by hiding the module)."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'scholar-agents\[gpu\]'"):
        build_llm(LLMConfig(backend="vllm", model=str(tiny_model_dir)))
