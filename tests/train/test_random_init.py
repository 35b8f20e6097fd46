"""Random-weight models from a config dir (``llm.init`` / ``ppo.policy_init`` / ``sft.init``),
per-phase peak CUDA memory metrics, and the skip-the-final-checkpoint switches."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from tests.fixtures.llm import TINY_TOKENIZER_DIR


@pytest.fixture()
def config_dir(tmp_path) -> Path:
    """A tiny Qwen2 as config.json + tokenizer, no weights: what a shipped model config becomes."""
    from transformers import AutoTokenizer, Qwen2Config

    tok = AutoTokenizer.from_pretrained(str(TINY_TOKENIZER_DIR))
    Qwen2Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=False,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id).save_pretrained(str(tmp_path))
    for f in TINY_TOKENIZER_DIR.iterdir():
        shutil.copy(f, tmp_path / f.name)
    assert not list(tmp_path.glob("*.safetensors"))
    return tmp_path


def test_random_models_are_seeded_and_the_value_backbone_matches_the_policy(config_dir):
    """One seed, one draw: π_sft equals the starting policy (KL 0 at step 0) and the value model's backbone is the
    policy's decoder, as when all three load one checkpoint."""
    from scholar_agents.llm.model_init import load_base_model, load_causal_lm

    a = load_causal_lm(config_dir, "random", seed=3, dtype=torch.bfloat16)
    b = load_causal_lm(config_dir, "random", seed=3, dtype=torch.bfloat16)
    c = load_causal_lm(config_dir, "random", seed=4, dtype=torch.bfloat16)
    backbone = load_base_model(config_dir, "random", seed=3, dtype=torch.bfloat16)
    assert a.dtype == torch.bfloat16
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.layers.0.mlp.up_proj.weight"], sc["model.layers.0.mlp.up_proj.weight"])
    for k, v in backbone.state_dict().items():
        assert torch.equal(v, sa[f"model.{k}"]), k


def test_random_init_needs_a_config_and_a_known_name(tmp_path, config_dir):
    from scholar_agents.llm.model_init import load_causal_lm

    with pytest.raises(FileNotFoundError, match="config.json"):
        load_causal_lm(tmp_path / "nothing", "random")
    with pytest.raises(ValueError, match="pretrained"):
        load_causal_lm(config_dir, "randm")
    with pytest.raises(OSError):  # pretrained (the default) still wants weights
        load_causal_lm(config_dir)


def test_llm_init_random_runs_the_hf_backend_on_a_config_dir_and_only_there(config_dir):
    from scholar_agents.llm.base import SamplingParams
    from scholar_agents.llm.factory import build_llm

    llm = build_llm({"backend": "hf", "model": str(config_dir), "init": "random", "dtype": "float32",
                     "device": "cpu"})
    out = llm.generate(["Title: a paper"], SamplingParams(max_new_tokens=4, temperature=0.0))
    assert 1 <= len(out[0].completions[0].token_ids) <= 4 and llm.model_id.endswith("|random:0")
    with pytest.raises(ValueError, match="llm.backend=hf"):
        build_llm({"backend": "vllm", "model": str(config_dir), "init": "random"})


def test_ppo_and_sft_switches_compose_and_bad_values_are_refused():
    from scholar_agents.hydra_app import compose
    from scholar_agents.train.ppo.config import to_ppo_config
    from scholar_agents.train.sft import _as_config

    cfg = compose("train_crawler_ppo", ["ppo.policy_init=random", "ppo.save_final=false"])
    p = to_ppo_config(cfg.ppo)
    assert p.policy_init == "random" and p.save_final is False
    with pytest.raises(ValueError, match="ppo.policy_init"):
        to_ppo_config(compose("train_crawler_ppo", ["ppo.policy_init=zeros"]).ppo)
    with pytest.raises(ValueError, match="ppo.ref_model=null"):
        to_ppo_config(compose("train_crawler_ppo", ["ppo.policy_init=random", "ppo.ref_model=/some/sft"]).ppo)
    sft = compose("train_selector_sft", ["sft.init=random", "sft.save_final=false"]).sft
    assert sft.init == "random" and sft.save_final is False
    sft.init = "zeros"
    with pytest.raises(ValueError, match="sft.init"):
        _as_config(sft)


def test_peak_metrics_are_absent_off_cuda_and_named_per_phase_on_it(monkeypatch):
    from scholar_agents.runtime import cuda_memory

    assert cuda_memory.peak_metrics("cpu", "rollout") == {}
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: calls.append(d))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 3 * 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d: 4 * 2**30)
    cuda_memory.reset_peak("cuda:0")
    assert calls == ["cuda:0"]
    assert cuda_memory.peak_metrics(torch.device("cuda:0"), "update") == {
        "perf/max_memory_allocated_gb/update": 3.0, "perf/max_memory_reserved_gb/update": 4.0}


def test_sft_callback_puts_interval_peak_step_time_and_tokens_into_logs_and_history(monkeypatch):
    from types import SimpleNamespace

    from scholar_agents.runtime import cuda_memory

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: None)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: 2**30)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda d: 2 * 2**30)
    cb = cuda_memory.peak_memory_callback()
    args = SimpleNamespace(device=torch.device("cuda:0"))
    state = SimpleNamespace(num_input_tokens_seen=0, global_step=0, log_history=[])
    cb.on_train_begin(args, state, None)
    cb.on_step_begin(args, state, None)
    state.num_input_tokens_seen, state.global_step = 512, 1
    cb.on_step_end(args, state, None)
    logs = {"loss": 1.0}
    state.log_history.append({**logs, "step": 1})
    cb.on_log(args, state, None, logs=logs)
    for d in (logs, state.log_history[-1]):
        assert d["perf/max_memory_allocated_gb"] == 1.0 and d["perf/max_memory_reserved_gb"] == 2.0
        assert d["timing_s/step"] > 0 and d["perf/tokens_per_s"] > 0
    end = {"train_loss": 1.0, "train_runtime": 1.0}
    cb.on_log(args, state, None, logs=end)
    assert "perf/max_memory_allocated_gb" not in end  # the end-of-training summary is no interval


def test_sft_random_init_trains_without_weights_and_save_final_false_writes_no_final(config_dir, tmp_path):
    """sft.init=random on a config-only dir: TRL trains it; sft.save_final=false leaves no final/ behind."""
    from omegaconf import OmegaConf

    from scholar_agents.pasa.prompts import selector_messages, selector_target
    from scholar_agents.train.sft import SFTRecipeConfig, run_sft

    data = tmp_path / "pairs.jsonl"
    rows = [{"messages": selector_messages(f"query {i}", f"title {i}", "an abstract")
             + [{"role": "assistant", "content": selector_target(i % 2 == 0, "why")}]} for i in range(4)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = OmegaConf.structured(SFTRecipeConfig(model=str(config_dir), init="random", train_file=str(data),
                                               output_dir=str(tmp_path / "out"), max_steps=2,
                                               per_device_train_batch_size=2, logging_steps=1, save_steps=100,
                                               bf16=False, model_dtype="float32", use_cpu=True, save_final=False))
    summary = run_sft(cfg, report_dir=tmp_path / "report")
    assert summary["global_step"] == 2 and summary["final_dir"] is None
    assert not (tmp_path / "out" / "final").exists()
    steps = [h for h in summary["log_history"] if "loss" in h]
    assert len(steps) == 2 and all(h["timing_s/step"] > 0 and h["perf/tokens_per_s"] > 0 for h in steps)
