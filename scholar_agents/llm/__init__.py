"""One batch-first LLM interface (``base.LLM``) with hf / vllm / openai backends and a persistent response cache.

    from scholar_agents.llm import build_llm, SamplingParams
    llm = build_llm(cfg.llm)   # a conf/llm/*.yaml preset or an LLMConfig
    gens = llm.generate(prompts, SamplingParams(max_new_tokens=64))
    gens = llm.generate(prompts, SamplingParams(constraint=OutputConstraint.json(schema)))  # valid JSON
    p_true = llm.next_token_probs(prompts, ["True", "False"])[:, 0]
"""

from scholar_agents.llm.base import LLM, Completion, Generation, SamplingParams
from scholar_agents.llm.constraints import OutputConstraint
from scholar_agents.llm.factory import build_llm

__all__ = ["LLM", "Completion", "Generation", "OutputConstraint", "SamplingParams", "build_llm"]
