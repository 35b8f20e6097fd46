"""The hf backend on the tiny random Qwen2 (fp32): batching, stop strings, samples, logprobs, next-token probs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from scholar_agents.llm import SamplingParams

# Different lengths, raw strings and chats, so batches need real left padding.
PROMPTS = [
    "Hello",
    [{"role": "user", "content": "Find papers on graph neural networks for molecule property prediction."}],
    "Title: Attention is all you need",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "x"}],
    "True or False?",
]


def _forward_logprobs(llm, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        logits = llm.model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def test_batched_left_padding_equals_one_at_a_time(tiny_llm):
    params = SamplingParams(max_new_tokens=12)
    batched = tiny_llm.generate(PROMPTS, params)  # batch_size 4: two left-padded, length-sorted batches
    for prompt, gen in zip(PROMPTS, batched):
        alone = tiny_llm.generate([prompt], params)[0]
        assert gen.prompt_text == tiny_llm.render(prompt)
        assert gen.prompt_token_ids == alone.prompt_token_ids == tiny_llm.prompt_token_ids(prompt)
        assert gen.completions[0].token_ids == alone.completions[0].token_ids
        assert gen.text == alone.text


def test_chat_prompts_use_the_chat_template(tiny_llm):
    gen = tiny_llm.generate([PROMPTS[1]], SamplingParams(max_new_tokens=2))[0]
    assert gen.prompt_text.startswith("<|im_start|>user\n") and gen.prompt_text.endswith("<|im_start|>assistant\n")
    im_start = tiny_llm.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert gen.prompt_token_ids[0] == im_start and gen.prompt_token_ids.count(im_start) == 2


def test_greedy_generation_is_the_argmax_path_with_its_logprobs(tiny_llm):
    gen = tiny_llm.generate([PROMPTS[2]], SamplingParams(max_new_tokens=10, logprobs=True))[0]
    comp = gen.completions[0]
    assert comp.finish_reason == "length" and len(comp.token_ids) == 10 == len(comp.logprobs)
    lp = _forward_logprobs(tiny_llm, gen.prompt_token_ids + comp.token_ids)
    n = len(gen.prompt_token_ids)
    for t, tok in enumerate(comp.token_ids):
        row = lp[n - 1 + t]
        assert int(row.argmax()) == tok
        assert comp.logprobs[t] == pytest.approx(float(row[tok]), abs=1e-4)


def test_sampled_logprobs_are_the_models_raw_distribution(tiny_llm):
    """Logprobs are those of the model (temperature 1), not of the tempered sampler: what PPO's ratio needs."""
    gen = tiny_llm.generate([PROMPTS[0]], SamplingParams(max_new_tokens=8, temperature=0.7, seed=3, logprobs=True))[0]
    comp = gen.completions[0]
    lp = _forward_logprobs(tiny_llm, gen.prompt_token_ids + comp.token_ids)
    n = len(gen.prompt_token_ids)
    expected = [float(lp[n - 1 + t, tok]) for t, tok in enumerate(comp.token_ids)]
    np.testing.assert_allclose(comp.logprobs, expected, atol=1e-4)


def test_stop_strings_cut_text_and_token_ids_consistently(tiny_llm):
    params = SamplingParams(max_new_tokens=24)
    full = tiny_llm.generate([PROMPTS[3]], params)[0].completions[0]
    text = full.text
    # A stop string that first occurs in the middle of the generated text.
    stop = next(text[i : i + 2] for i in range(3, len(text) - 2) if text.find(text[i : i + 2]) == i
                and text[i : i + 2].strip())
    cut = text.find(stop)
    params = SamplingParams(max_new_tokens=24, stop=(stop, "never-there"))
    comp = tiny_llm.generate([PROMPTS[3]], params)[0].completions[0]
    assert comp.text == text[:cut] and stop not in comp.text
    assert comp.finish_reason == "stop"
    tok = tiny_llm.tokenizer
    assert comp.token_ids == full.token_ids[: len(comp.token_ids)]
    # The shortest token prefix covering the returned text.
    assert tok.decode(comp.token_ids).startswith(comp.text)
    assert not tok.decode(comp.token_ids[:-1]).startswith(comp.text)


def test_n_samples_and_seeds(tiny_llm):
    params = SamplingParams(max_new_tokens=8, temperature=1.0, n=4, seed=7)
    first = tiny_llm.generate(PROMPTS[:2], params)
    again = tiny_llm.generate(PROMPTS[:2], params)
    other = tiny_llm.generate(PROMPTS[:2], SamplingParams(max_new_tokens=8, temperature=1.0, n=4, seed=8))
    for a, b, c in zip(first, again, other):
        assert len(a.completions) == 4
        assert len({tuple(x.token_ids) for x in a.completions}) > 1  # samples differ from each other
        assert [x.token_ids for x in a.completions] == [x.token_ids for x in b.completions]  # same seed, same
        assert [x.token_ids for x in a.completions] != [x.token_ids for x in c.completions]  # new seed, new
    greedy = tiny_llm.generate([PROMPTS[0]], SamplingParams(max_new_tokens=6, n=3))[0].completions
    assert len(greedy) == 3 and all(g.token_ids == greedy[0].token_ids for g in greedy)
    assert greedy[0] is not greedy[1]  # copies: a caller may edit one sample without touching the others


def test_next_token_probs_equal_a_manual_forward_pass(tiny_llm):
    cands = ["True", "False"]
    probs = tiny_llm.next_token_probs(PROMPTS, cands)
    assert probs.shape == (len(PROMPTS), 2)
    ids = tiny_llm.candidate_token_ids(cands)
    for i, prompt in enumerate(PROMPTS):
        lp = _forward_logprobs(tiny_llm, tiny_llm.prompt_token_ids(prompt))[-1]
        np.testing.assert_allclose(probs[i], lp[ids].exp().numpy(), rtol=1e-4, atol=1e-7)
    # Probabilities over the full vocabulary: the candidates need not sum to one.
    assert np.all(probs > 0) and np.all(probs.sum(axis=1) < 1)


def test_bad_requests_raise_clear_errors(tiny_llm):
    with pytest.raises(ValueError, match="share a first token"):
        tiny_llm.next_token_probs(PROMPTS[:1], ["True", "Tr"])
    with pytest.raises(ValueError, match="max_model_len"):
        tiny_llm.generate(["graph " * 600], SamplingParams(max_new_tokens=4))
    with pytest.raises(ValueError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0.0)
