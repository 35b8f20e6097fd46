"""The SQLite response cache in front of the real hf backend (tiny model): hits, misses, resume, processes."""

from __future__ import annotations

import multiprocessing as mp
import os
from pathlib import Path

import numpy as np
import pytest

from scholar_agents.llm import SamplingParams
from scholar_agents.llm.base import LLM
from scholar_agents.llm.cache import CachedLLM, ResponseCache, model_identity

PROMPTS = ["Hello", "Title: graph neural networks", [{"role": "user", "content": "Find papers on retrieval."}],
           "a b c d e f", "True or False?"]


class CountingLLM(LLM):
    """Passes every call to the real backend and records how many prompts reached it; ``fail_after`` calls
    simulate a job killed mid-way (the interruption is the outside world here, not our code)."""

    def __init__(self, inner: LLM, fail_after: int | None = None):
        self.inner, self.model_id, self.fail_after = inner, inner.model_id, fail_after
        self.seen: list[int] = []

    @property
    def tokenizer(self):
        return self.inner.tokenizer

    def _count(self, prompts):
        if self.fail_after is not None and len(self.seen) >= self.fail_after:
            raise KeyboardInterrupt("job killed")
        self.seen.append(len(prompts))

    def generate(self, prompts, params=None):
        self._count(prompts)
        return self.inner.generate(prompts, params)

    def next_token_probs(self, prompts, candidates):
        self._count(prompts)
        return self.inner.next_token_probs(prompts, candidates)


def _texts(gens):
    return [[c.token_ids for c in g.completions] for g in gens]


def test_second_call_is_served_from_the_cache(tiny_llm, tmp_path):
    backend = CountingLLM(tiny_llm)
    llm = CachedLLM(backend, tmp_path / "c.sqlite")
    params = SamplingParams(max_new_tokens=6, logprobs=True)
    first = llm.generate(PROMPTS[:3], params)
    assert (llm.hits, llm.misses, backend.seen) == (0, 3, [3])
    # Only the new prompts reach the backend; cached ones come back identical, logprobs and prompt ids included.
    second = llm.generate(PROMPTS, params)
    assert (llm.hits, llm.misses, backend.seen) == (3, 5, [3, 2])
    assert _texts(second[:3]) == _texts(first)
    assert second[0].completions[0].logprobs == first[0].completions[0].logprobs
    assert [g.prompt_token_ids for g in second] == [tiny_llm.prompt_token_ids(p) for p in PROMPTS]
    # A different request (more tokens) is a different key.
    llm.generate(PROMPTS[:1], SamplingParams(max_new_tokens=7))
    assert backend.seen[-1] == 1
    llm.close()


def test_an_interrupted_job_resumes_without_paying_twice(tiny_llm, tmp_path):
    path = tmp_path / "c.sqlite"
    params = SamplingParams(max_new_tokens=5)
    killed = CachedLLM(CountingLLM(tiny_llm, fail_after=1), path, flush_every=2)
    with pytest.raises(KeyboardInterrupt):
        killed.generate(PROMPTS, params)  # the first chunk of 2 is written, then the job dies
    killed.cache.close()

    backend = CountingLLM(tiny_llm)
    resumed = CachedLLM(backend, path, flush_every=2)  # a new process would open the same file
    out = resumed.generate(PROMPTS, params)
    assert resumed.hits == 2 and sum(backend.seen) == 3
    assert _texts(out) == _texts(tiny_llm.generate(PROMPTS, params))
    resumed.close()


def test_sampled_outputs_are_cached_by_seed_and_sample_index(tiny_llm, tmp_path):
    backend = CountingLLM(tiny_llm)
    llm = CachedLLM(backend, tmp_path / "c.sqlite")
    two = llm.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, temperature=1.0, n=2, seed=1))[0]
    four = llm.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, temperature=1.0, n=4, seed=1))[0]
    # Samples 0 and 1 replay the cached ones; 2 and 3 are new.
    assert [c.token_ids for c in four.completions[:2]] == [c.token_ids for c in two.completions]
    assert len(four.completions) == 4 and backend.seen == [1, 1]
    llm.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, temperature=1.0, n=4, seed=1))
    assert backend.seen == [1, 1]  # all four cached now
    llm.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, temperature=1.0, n=4, seed=2))
    assert backend.seen == [1, 1, 1]  # a new seed is a new request

    fresh = CachedLLM(backend, tmp_path / "c2.sqlite", cache_sampled=False)
    for _ in range(2):
        fresh.generate(PROMPTS[:1], SamplingParams(max_new_tokens=6, temperature=1.0, seed=1))
    assert backend.seen[-2:] == [1, 1] and fresh.hits == 0
    llm.close()
    fresh.close()


def test_next_token_probs_are_cached(tiny_llm, tmp_path):
    backend = CountingLLM(tiny_llm)
    llm = CachedLLM(backend, tmp_path / "c.sqlite")
    a = llm.next_token_probs(PROMPTS[:3], ["True", "False"])
    b = llm.next_token_probs(PROMPTS, ["True", "False"])
    assert backend.seen == [3, 2] and llm.hits == 3
    np.testing.assert_array_equal(a, b[:3])
    # cached rows were scored in other batches (3 + 2 vs 5 prompts): left padding moves fp32 results by ~1e-6
    np.testing.assert_allclose(b, tiny_llm.next_token_probs(PROMPTS, ["True", "False"]), rtol=2e-5)
    llm.next_token_probs(PROMPTS[:1], ["False", "True"])  # other candidates: another key
    assert backend.seen[-1] == 1
    llm.close()


def _writer(path: str, worker: int, n: int) -> None:
    cache = ResponseCache(path)
    for i in range(n):
        cache.put_many("completions", [(f"w{worker}-{i}", "{}", 0.0)], 3)
    cache.close()


def test_concurrent_processes_share_one_cache_file(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ResponseCache(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, w, 200)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    keys = [f"w{w}-{i}" for w in range(3) for i in range(200)]
    assert len(ResponseCache(path).get_many("completions", keys)) == 600


def test_model_identity_changes_when_weights_change(tiny_model_dir, tmp_path):
    import shutil

    copy = Path(shutil.copytree(tiny_model_dir, tmp_path / "m"))
    before = model_identity("m", str(copy), "hf")
    weights = copy / "model.safetensors"
    os.utime(weights, (weights.stat().st_atime, weights.stat().st_mtime + 10))
    assert model_identity("m", str(copy), "hf") != before
    assert model_identity("m", str(copy), "hf", "float32") != model_identity("m", str(copy), "hf", "bfloat16")


def test_the_wrapper_keeps_backend_attributes_reachable(tiny_llm, tmp_path):
    llm = CachedLLM(tiny_llm, tmp_path / "c.sqlite")
    assert llm.model is tiny_llm.model and llm.eos_token_ids == tiny_llm.eos_token_ids
    assert llm.model_id == tiny_llm.model_id
    with pytest.raises(AttributeError):
        llm.no_such_attribute
    llm.cache.close()
