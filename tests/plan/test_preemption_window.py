"""The estimate of one training step + one checkpoint (``plan/preemption_window.py``) for the shipped presets,
what ``scholar plan`` prints of it, and the start-up check of a training job against its Slurm signal lead. The
figures are worked out by hand here from the stated inputs (parameter counts, token counts, the cluster preset's
rates), not read back from the code."""

from __future__ import annotations

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.plan.commands import (inputs_from_config, plan, plan_sft, ppo_window_from_config,
                                          sft_inputs_from_config, sft_window_from_config, startup_window_check)
from scholar_agents.plan.model_sizes import model_shape

QWEN_PARAMS = 7_615_616_512  # Qwen2.5-7B-Instruct, meta-built (tests/plan/test_plan.py)
QWEN_BACKBONE = QWEN_PARAMS - 152064 * 3584  # the value model: no LM head, a scalar head on 3,584 features


@pytest.fixture
def no_window_env(monkeypatch):
    for var in ("SCHOLAR_SIGNAL_LEAD_S", "SCHOLAR_SHUTDOWN_GRACE_S", "TORCHELASTIC_RUN_ID", "PET_SHUTDOWN_TIMEOUT",
                "TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "RANK"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _ppo_cfg(tmp_path, *extra):
    # paths.output_root: the preset's policy (the SFT run's output) is not there: planned from ppo.base_model
    return compose("plan", ["experiment=pasa_crawler_ppo", f"paths.output_root={tmp_path}", *extra])


def test_ppo_estimate_of_the_shipped_preset_by_hand(tmp_path):
    """experiment=pasa_crawler_ppo on h100_80gb: 16 sessions x 8,192 tokens per GPU; 2 epochs x (policy + value)
    forward + backward plus 3 scoring forwards at a third; checkpoint = rank 0's 16-bit policy + value, and ZeRO-3
    shards of 14 B per trained parameter (bf16 partition, fp32 master, Adam's two moments) from both nodes."""
    cfg = _ppo_cfg(tmp_path)
    assert (cfg.cluster.nodes, cfg.cluster.generation_tokens_per_s_per_gpu, cfg.cluster.train_tokens_per_s_per_gpu,
            cfg.cluster.checkpoint_write_gb_per_s_per_node, cfg.cluster.shutdown_grace_s) == (2, 8000, 3000, 2.0, 600)
    est = ppo_window_from_config(cfg, inputs_from_config(cfg))
    tokens = (4 + 6 + 6) * 8192
    rollout, train = tokens / 8000, (2 * 2 * tokens + 3 * tokens / 3) / 3000
    trained = QWEN_PARAMS + QWEN_BACKBONE + 3584
    assert model_shape("Qwen/Qwen2.5-7B-Instruct").backbone_params == QWEN_BACKBONE
    weights, shards = 2 * trained / 2e9, 14 * trained / (2 * 2e9)
    assert [p.seconds for p in est.step] == pytest.approx([rollout, train])
    assert [p.seconds for p in est.checkpoint] == pytest.approx([weights, shards])
    assert est.step_s == pytest.approx(234.8, abs=0.1) and est.checkpoint_s == pytest.approx(66.1, abs=0.1)
    # why the PPO template's lead went from 300 s to 600 s (cluster.shutdown_grace_s on h100_80gb)
    assert 300 < est.total_s < cfg.cluster.shutdown_grace_s
    # a shorter session bound (ppo.plan_seq_len) shortens the step, not the checkpoint
    short = ppo_window_from_config(cfg, inputs_from_config(_ppo_cfg(tmp_path, "ppo.plan_seq_len=2048")))
    assert short.step_s == pytest.approx(est.step_s / 4) and short.checkpoint_s == pytest.approx(est.checkpoint_s)


def test_sft_estimate_of_the_selector_preset_by_hand():
    """sft=pasa_7b on one H100 node: 4 x 1 x 1,024 tokens per GPU; rank 0's 16-bit model + 14 B per parameter of
    ZeRO-3 shards from the one node."""
    cfg = compose("train_selector_sft", ["sft=pasa_7b", "cluster=h100_80gb", "cluster.nodes=1"])
    est = sft_window_from_config(cfg, sft_inputs_from_config(cfg))
    assert [p.seconds for p in est.step] == pytest.approx([4 * 1 * 1024 / 3000])
    assert [p.seconds for p in est.checkpoint] == pytest.approx([2 * QWEN_PARAMS / 2e9, 14 * QWEN_PARAMS / 2e9])
    assert est.total_s == pytest.approx(62.3, abs=0.1)


def test_scholar_plan_prints_the_estimate_and_whether_the_grace_covers_it(tmp_path, capsys):
    out = plan(_ppo_cfg(tmp_path))
    text = capsys.readouterr().out
    assert "# Preemption window: one step ~235 s + one checkpoint ~66 s = ~301 s (5.0 min)" in text
    assert "| rollout: prompt + generated tokens per GPU | 16 sessions x 8,192 (llm.max_model_len) = 131,072 tokens " \
           "| 16 | cluster.generation_tokens_per_s_per_gpu 8,000 |" in text
    assert "cluster.shutdown_grace_s=600 s covers it" in text and text.rstrip().endswith("GiB usable per GPU.")
    assert out["preemption_window_s"]["total"] == pytest.approx(301, abs=1)
    plan(_ppo_cfg(tmp_path, "cluster.shutdown_grace_s=120"))
    assert "WARNING: cluster.shutdown_grace_s=120 s is shorter than the estimate (301 s)" in capsys.readouterr().out
    plan_sft(compose("plan_selector_sft", ["sft=pasa_7b", "cluster=a6000_48gb", "cluster.nodes=1"]))
    text = capsys.readouterr().out
    assert "# Preemption window: one step ~6 s + one checkpoint ~122 s = ~128 s" in text
    assert "cluster.shutdown_grace_s=1200 s covers it" in text


def test_startup_check_warns_in_one_line_naming_both_figures(tmp_path, no_window_env, caplog):
    cfg = _ppo_cfg(tmp_path)
    assert startup_window_check(cfg, "ppo") == []  # no lead exported: not under our launchers, nothing said
    no_window_env.setenv("SCHOLAR_SIGNAL_LEAD_S", "120")
    with caplog.at_level("WARNING"):
        (line,) = startup_window_check(cfg, "ppo")
    assert "\n" not in line and line in caplog.text
    assert "Slurm warns this job 120 s before its time limit" in line and "needs ~301 s" in line
    assert "one step + one checkpoint on cluster=h100_80gb (~235 s + ~66 s by `scholar plan`)" in line
    # under torchrun with torch's default window: a second line, torchrun's 30 s against the lead
    no_window_env.setenv("TORCHELASTIC_RUN_ID", "job")
    lines = startup_window_check(cfg, "ppo")
    assert len(lines) == 2 and "SIGKILLs its workers 30 s after" in lines[1] and "120 s signal lead" in lines[1]
    # the shipped pairing: the template's 600 s lead, torchrun's 600 s window (cluster.shutdown_grace_s)
    no_window_env.setenv("SCHOLAR_SIGNAL_LEAD_S", "600")
    no_window_env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "600")
    assert startup_window_check(cfg, "ppo") == []
    # SFT on the CPU preset: no GPUs, no estimate; only the torchrun window is checked
    sft = compose("train_selector_sft", [])
    no_window_env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "30")
    (line,) = startup_window_check(sft, "sft")
    assert "SIGKILLs its workers 30 s after" in line
