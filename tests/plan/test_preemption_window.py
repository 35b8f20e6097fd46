"""The estimate of one training step + one checkpoint (``plan/preemption_window.py``) for the shipped presets,
what ``scholar plan`` prints of it, and the start-up check of a training job against its Slurm signal lead. The
figures are worked out by hand here from the stated inputs (parameter counts, token counts, the cluster preset's
rates), not read back from the code."""

from __future__ import annotations

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.plan.commands import (inputs_from_config, ppo_window_from_config, sft_inputs_from_config,
                                          sft_window_from_config, startup_window_check)
from scholar_agents.plan.model_sizes import model_shape
from scholar_agents.plan.preemption_window import sized_save_every
from scholar_agents.train.plan_runs import plan, plan_sft, ppo_run, sft_run
from scholar_agents.validation import UsageError

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


def _ppo_window(cfg):
    run = ppo_run(cfg)
    return ppo_window_from_config(run, inputs_from_config(run))


def test_ppo_estimate_of_the_shipped_preset_by_hand(tmp_path):
    """experiment=pasa_crawler_ppo on h100_80gb: 16 sessions x 8,192 tokens per GPU; 2 epochs x (policy + value)
    forward + backward plus 3 scoring forwards at a third; checkpoint = rank 0's 16-bit policy + value, and ZeRO-3
    shards of 14 B per trained parameter (bf16 partition, fp32 master, Adam's two moments) from both nodes."""
    cfg = _ppo_cfg(tmp_path)
    assert (cfg.cluster.nodes, cfg.cluster.generation_tokens_per_s_per_gpu, cfg.cluster.train_tokens_per_s_per_gpu,
            cfg.cluster.checkpoint_write_gb_per_s_per_node, cfg.cluster.shutdown_grace_s) == (2, 8000, 3000, 2.0, 600)
    est = _ppo_window(cfg)
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
    short = _ppo_window(_ppo_cfg(tmp_path, "ppo.plan_seq_len=2048"))
    assert short.step_s == pytest.approx(est.step_s / 4) and short.checkpoint_s == pytest.approx(est.checkpoint_s)


def test_sft_estimate_of_the_selector_preset_by_hand():
    """sft=pasa_7b on one H100 node: 4 x 1 x 1,024 tokens per GPU; rank 0's 16-bit model + 14 B per parameter of
    ZeRO-3 shards from the one node."""
    cfg = compose("train_selector_sft", ["sft=pasa_7b", "cluster=h100_80gb", "cluster.nodes=1"])
    run = sft_run(cfg)
    est = sft_window_from_config(run, sft_inputs_from_config(run))
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
    cfg = ppo_run(_ppo_cfg(tmp_path))
    assert startup_window_check(cfg) == []  # no lead exported: not under our launchers, nothing said
    no_window_env.setenv("SCHOLAR_SIGNAL_LEAD_S", "120")
    with caplog.at_level("WARNING"):
        (line,) = startup_window_check(cfg)
    assert "\n" not in line and line in caplog.text
    assert "Slurm warns this job 120 s before its time limit" in line and "needs ~301 s" in line
    assert "one step + one checkpoint on cluster=h100_80gb (~235 s + ~66 s by `scholar plan`)" in line
    # under torchrun with torch's default window: a second line, torchrun's 30 s against the lead
    no_window_env.setenv("TORCHELASTIC_RUN_ID", "job")
    lines = startup_window_check(cfg)
    assert len(lines) == 2 and "SIGKILLs its workers 30 s after" in lines[1] and "120 s signal lead" in lines[1]
    # the shipped pairing: the template's 600 s lead, torchrun's 600 s window (cluster.shutdown_grace_s)
    no_window_env.setenv("SCHOLAR_SIGNAL_LEAD_S", "600")
    no_window_env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "600")
    assert startup_window_check(cfg) == []
    # SFT on the CPU preset: no GPUs, no estimate; only the torchrun window is checked
    sft = sft_run(compose("train_selector_sft", []))
    no_window_env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "30")
    (line,) = startup_window_check(sft)
    assert "SIGKILLs its workers 30 s after" in line


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_critic_free_step_is_whole_crawls_times_the_group_without_a_value_model(tmp_path, estimator):
    """experiment=pasa_crawler_grpo (rloo: the same crawls): per GPU 1 query x 4 crawls x 16 sessions (crawler.env.
    max_sessions) of 8,192 tokens; 2 epochs of the policy alone + 2 scoring forwards (log pi_old, log pi_sft) at a
    third; the checkpoint holds the policy only (value_head=separate builds no value model here)."""
    cfg = _ppo_cfg(tmp_path, "experiment=pasa_crawler_grpo", f"ppo.estimator={estimator}")
    assert cfg.ppo.value_head == "separate"
    run = ppo_run(cfg)
    x = inputs_from_config(run)
    est = ppo_window_from_config(run, x)
    tokens = 1 * 4 * 16 * 8192
    rollout, train = tokens / 8000, (2 * 1 * tokens + 2 * tokens / 3) / 3000
    weights, shards = 2 * QWEN_PARAMS / 2e9, 14 * QWEN_PARAMS / (2 * 2e9)
    assert [p.seconds for p in est.step] == pytest.approx([rollout, train])
    assert [p.seconds for p in est.checkpoint] == pytest.approx([weights, shards])
    assert est.step_s == pytest.approx(531.6, abs=0.1) and est.checkpoint_s == pytest.approx(34.3, abs=0.1)
    assert est.total_s < cfg.cluster.shutdown_grace_s  # the template's 600-s lead covers the preset's step
    assert est.step[0].amount.startswith("1 query x 4 crawls (ppo.group_size) x 16 sessions (crawler.env budget) "
                                         "= 64 sessions x 8,192")
    assert x.engine_sequences <= 64  # the engine never holds more than the step's crawls can run
    # max_queue bounds a crawl too: S_q plus one session per queued paper while fewer than max_queue are queued
    queue = _ppo_cfg(tmp_path, "experiment=pasa_crawler_grpo", "crawler.env.max_sessions=null",
                     "crawler.env.max_queue=8")
    assert _ppo_window(queue).step[0].seconds == pytest.approx(rollout / 2)
    # the same crawl budget under paper_mc: App. A.2's 16 sessions, and the value model trained, scored and saved
    mc = _ppo_cfg(tmp_path, "experiment=pasa_crawler_grpo", "ppo.estimator=paper_mc", "ppo.queries_per_step=4")
    assert _ppo_window(mc).summary() == _ppo_window(_ppo_cfg(tmp_path)).summary()


def test_critic_free_crawls_without_a_budget_are_refused_by_the_plan(tmp_path):
    cfg = _ppo_cfg(tmp_path, "ppo.estimator=grpo")  # experiment=pasa_crawler_ppo: depth 3, no budgets
    with pytest.raises(UsageError, match=r"max_sessions and max_queue are null \(depth 3\): a step has no bound"):
        _ppo_window(cfg)
    with pytest.raises(UsageError, match="experiment=pasa_crawler_grpo"):
        plan(cfg)


def test_save_every_is_one_where_the_lead_does_not_cover_a_step_and_a_checkpoint(tmp_path, no_window_env, caplog):
    """The step in flight is checkpointed on a warning only if the lead covers step + checkpoint; otherwise every
    step is (ppo.save_every -> 1): a preemption then loses at most one step, not save_every of them."""
    cfg = _ppo_cfg(tmp_path)  # paper_mc, save_every 10: ~301 s
    est = _ppo_window(cfg)
    assert sized_save_every(est, 600, 10)[0] == 10 and sized_save_every(est, None, 10)[0] == 10
    sized, why = sized_save_every(est, 300, 10)
    assert sized == 1 and "the 300-s signal lead is shorter than one step + one checkpoint (~301 s)" in why
    assert "a checkpoint costs ~66 s, 28 % of the ~235-s step" in why
    from scholar_agents.plan.commands import startup_save_every

    run = ppo_run(cfg)
    assert startup_save_every(run) == 10  # no lead exported: as configured
    no_window_env.setenv("SCHOLAR_SIGNAL_LEAD_S", "600")
    assert startup_save_every(run) == 10
    no_window_env.setenv("SCHOLAR_SIGNAL_LEAD_S", "300")
    with caplog.at_level("WARNING"):
        assert startup_save_every(run) == 1
    assert "ppo.save_every=10 -> 1" in caplog.text
    # torchrun's window is what the workers really get when it is shorter than the lead
    no_window_env.setenv("SCHOLAR_SIGNAL_LEAD_S", "600")
    no_window_env.setenv("TORCHELASTIC_RUN_ID", "job")
    no_window_env.setenv("SCHOLAR_SHUTDOWN_GRACE_S", "120")
    assert startup_save_every(run) == 1
