"""``build_llm(cfg)``: the one way to get an ``LLM`` from a config (a preset in ``conf/llm/`` or an LLMConfig)."""

from __future__ import annotations

import logging
from typing import Callable

from omegaconf import DictConfig

from scholar_agents.llm.adapters import merged_checkpoint, resolve_adapter
from scholar_agents.llm.base import LLM, SamplingParams, repetition_controls
from scholar_agents.llm.cache import CachedLLM
from scholar_agents.llm.config import LLMConfig
from scholar_agents.llm.embedded import smollm2_path
from scholar_agents.llm.openai_backend import OpenAIBackend
from scholar_agents.llm.vllm_backend import VLLMBackend
from scholar_agents.typed_config import typed

log = logging.getLogger(__name__)

BACKENDS = ("hf", "vllm", "openai")


def _embedded_models() -> dict[str, Callable[[], object]]:
    return {"smollm2": smollm2_path}


def resolve_model_path(model: str) -> str:
    """``embedded:<name>`` -> the converted local directory; anything else (a path or a hub name) unchanged."""
    if not model.startswith("embedded:"):
        return model
    name = model.split(":", 1)[1]
    known = _embedded_models()
    if name not in known:
        raise ValueError(f"unknown embedded model {model!r}; embedded LLMs: {['embedded:' + k for k in known]}")
    return str(known[name]())


def to_llm_config(cfg: LLMConfig | DictConfig | dict) -> LLMConfig:
    """Validate against the schema: unknown keys and wrong types fail here, with their names."""
    return typed(LLMConfig, cfg, "llm config")


def build_llm(cfg: LLMConfig | DictConfig | dict) -> LLM:
    """The configured backend on the configured model, behind the response cache when ``cfg.cache_path`` is set."""
    cfg = to_llm_config(cfg)
    if cfg.backend not in BACKENDS:
        raise ValueError(f"unknown llm.backend {cfg.backend!r}; choose one of {list(BACKENDS)}")
    from scholar_agents.llm.model_init import check_init  # lazy: imports torch

    if check_init(cfg.init, "llm.init") == "random" and cfg.backend != "hf":
        raise ValueError(f"llm.init=random draws weights in process: it needs llm.backend=hf (got {cfg.backend!r})")

    repetition_controls(SamplingParams(), cfg)  # a repetition switch the backend lacks: refused before loading
    tokenizer = resolve_model_path(cfg.tokenizer) if cfg.tokenizer else None
    adapter = None
    if cfg.adapter:
        adapter = resolve_adapter(cfg.adapter)
        if cfg.backend == "openai":
            raise ValueError(f"llm.adapter={cfg.adapter} with llm.backend=openai: the server holds the weights; serve "
                             "a merged checkpoint (`llm=smollm2_vllm` merges the adapter once into "
                             "<cache>/models/merged/) or set llm.adapter=null")
    if cfg.backend == "openai":
        # The model runs on the server; locally we need only its tokenizer (chat template, token counting).
        llm: LLM = OpenAIBackend(cfg, tokenizer or resolve_model_path(cfg.model))
    elif cfg.backend == "vllm":
        model_path = resolve_model_path(cfg.model)
        if adapter is not None:  # vLLM loads a plain checkpoint: the adapter merged once into the cache
            tokenizer = tokenizer or model_path
            model_path = str(merged_checkpoint(model_path, adapter))
        llm = VLLMBackend(cfg, model_path, tokenizer)
    else:
        from scholar_agents.llm.hf_backend import HFBackend  # lazy: imports torch

        llm = HFBackend(cfg, resolve_model_path(cfg.model), tokenizer, adapter=adapter)
    if cfg.cache_path:
        llm = CachedLLM(llm, cfg.cache_path, cache_sampled=cfg.cache_sampled)
    return llm
