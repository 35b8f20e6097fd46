"""``scholar plan``: exact parameter counts of meta-built models, the per-GPU memory plan of session-level PPO, its
verdicts through the real CLI, and the start-up check of ``train crawler_ppo``. No weights anywhere: every model is
built on the meta device from its config.json."""

import dataclasses
import os
import re
import subprocess
import sys

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.runtime.cluster import ClusterConfig, to_cluster_config
from scholar_agents.plan.commands import inputs_from_config, startup_check
from scholar_agents.plan.memory_plan import GIB, build_plan, zero_model_states
from scholar_agents.plan.model_sizes import model_shape
from scholar_agents.train.plan_runs import ppo_run, sft_run
from tests.fixtures.script_loader import load_script

QWEN = "Qwen/Qwen2.5-7B-Instruct"
ZERO2 = "ppo.deepspeed=${sa_pkg:}/conf/deepspeed/zero2.json"
ZERO3 = "ppo.deepspeed=${sa_pkg:}/conf/deepspeed/zero3.json"
# the paper's PPO (Table 9) with the 7B rollout engine and the Selector served on its own GPUs
PAPER = ["ppo=pasa_paper", "crawler=pasa_paper", "llm=qwen25_7b_vllm", "llm@selector_llm=openai_server",
         "cluster=h100_80gb"]


def run_plan(*overrides: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "scholar_agents", "plan", *overrides], capture_output=True,
                          text=True, timeout=300, env=env)


def table_rows(stdout: str) -> list[tuple[str, str, float, str]]:
    """(model, item, GiB, source) of the printed Markdown table's numeric rows."""
    rows = []
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"\d+\.\d\d", cells[2]):
            rows.append((cells[0], cells[1], float(cells[2]), cells[4]))
    return rows


def test_meta_built_qwen25_7b_has_its_known_parameter_count():
    shape = model_shape(QWEN)
    assert shape.params == 7_615_616_512  # 7.62 B (the model card: 7.61 B), untied 152064 x 3584 embeddings + head
    assert shape.backbone_params == shape.params - 152064 * 3584  # the value model has no LM head
    assert shape.largest_layer_params == 152064 * 3584
    # accelerate also counts the rotary embedding's fp32 buffers (inv_freq, original_inv_freq: 64 each)
    assert shape.weights_bytes_16bit == 2 * shape.params + 2 * 64 * 4
    assert (shape.layers, shape.hidden, shape.kv_heads, shape.head_dim) == (28, 3584, 4, 128)
    assert model_shape("qwen/qwen2.5-7b-instruct") == dataclasses.replace(shape, name="qwen/qwen2.5-7b-instruct")


def test_unknown_model_names_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="ppo.policy_model=Qwen/Qwen2.5-7B-Instruct"):
        model_shape(str(tmp_path / "no_such_checkpoint"))


def test_paper_plan_on_16_h100_fits_and_its_model_states_are_deepspeeds_estimate():
    out = run_plan(*PAPER, ZERO3, "llm.gpu_memory_utilization=0.5")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "FITS" in out.stdout and "ZeRO-3 (zero3.json)" in out.stdout
    rows = table_rows(out.stdout)
    states = [r for r in rows if r[0] in ("policy", "value", "policy + value") and "activations" not in r[1]
              and "logits" not in r[1] and "second gathered layer" not in r[1]]
    assert {r[3] for r in states} == {"DeepSpeed estimate_zero3_model_states_mem_needs"}
    # beyond the estimator: the value backbone's own largest layer, gathered with its gradient in the backward
    second = [r for r in rows if "second gathered layer" in r[1]]
    assert len(second) == 1 and second[0][2] == pytest.approx(4 * model_shape(QWEN).largest_layer_params / GIB,
                                                              abs=0.01)
    # the estimator itself, on the meta-built counts: one engine trains the policy and the value model
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    pol, val = model_shape(QWEN), model_shape(QWEN)
    trainable = pol.params + val.backbone_params + val.hidden + 1
    _, gpu, _ = estimate_zero3_model_states_mem_needs(trainable, pol.largest_layer_params, num_gpus_per_node=8,
                                                      num_nodes=2, cpu_offload=False, cpu_offload_params=False)
    assert sum(r[2] for r in states) == pytest.approx(gpu / GIB, abs=0.01 * len(states))


def test_todays_zero2_plan_on_80gb_is_refused_naming_zero3():
    out = run_plan(*PAPER, ZERO2)
    assert out.returncode != 0, out.stdout
    assert "DOES NOT FIT" in out.stderr
    assert "use conf/deepspeed/zero3.json" in out.stderr
    rows = table_rows(out.stdout)
    # ZeRO-2 replicates the 16-bit weights: 2 B/param of the policy on every GPU, as DeepSpeed's estimator says
    weights = next(r for r in rows if r[:2] == ("policy", "weights"))
    assert weights[2] == pytest.approx(2 * model_shape(QWEN).params / GIB, abs=0.01)
    assert weights[3] == "DeepSpeed estimate_zero2_model_states_mem_needs"


def _paper_inputs(*extra):
    return inputs_from_config(ppo_run(compose("train_crawler_ppo", [*PAPER, ZERO3, *extra])))


def test_zero2_states_match_deepspeeds_estimator_with_offload():
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    x = _paper_inputs()
    c = x.cluster
    for offload in (False, True):
        gpu, cpu, source = zero_model_states(10**9, 10**8, 2, c, offload, False, 2)
        assert (cpu, gpu) == estimate_zero2_model_states_mem_needs(10**9, c.gpus_per_node, c.nodes, offload)
    plan = build_plan(dataclasses.replace(x, zero_stage=2, offload_optimizer=True))
    assert any("CPU RAM" in r.item for r in plan.cpu_rows)
    assert all(r.gib == 0 for r in plan.rows if r.item in ("gradients", "optimizer states"))


def test_gradient_checkpointing_lowers_activations_and_its_fix_is_named():
    x = _paper_inputs()
    acts = {}
    for gc in (True, False):
        plan = build_plan(dataclasses.replace(x, gradient_checkpointing=gc))
        acts[gc] = sum(r.gib for r in plan.rows if "activations" in r.item)
    assert acts[True] < acts[False] / 5  # 28 layers: one recomputed layer + 28 layer inputs vs all 28 layers
    no_gc = dataclasses.replace(x, gradient_checkpointing=False, gpu_memory_utilization=0.5)
    plan = build_plan(no_gc)
    assert not plan.fits and plan.peak_phase == "update"
    from scholar_agents.plan.commands import verdict

    ok, message = verdict(plan)
    assert not ok and "enable gradient checkpointing (ppo.gradient_checkpointing=true)" in message


def test_sleep_mode_frees_the_engine_outside_rollouts():
    x = dataclasses.replace(_paper_inputs(), gpu_memory_utilization=0.5)
    awake, asleep = build_plan(x), build_plan(dataclasses.replace(x, sleep=True))
    budget = 0.5 * x.cluster.gpu_memory_gib
    assert asleep.phase_total("rollout") == pytest.approx(awake.phase_total("rollout"))
    for phase in ("score", "update"):
        assert asleep.phase_total(phase) < awake.phase_total(phase) - budget + 1.0
    assert asleep.peak_gib == max(asleep.phase_total(p) for p in ("rollout", "score", "update"))


def test_startup_check_refuses_a_plan_that_does_not_fit_and_the_switch_turns_it_off(caplog):
    refused = compose("train_crawler_ppo", [*PAPER, ZERO2])
    with pytest.raises(SystemExit, match="use conf/deepspeed/zero3.json"):
        startup_check(ppo_run(refused))
    assert startup_check(ppo_run(compose("train_crawler_ppo", [*PAPER, ZERO2, "cluster.memory_check=false"]))) is None
    fits = startup_check(ppo_run(compose("train_crawler_ppo", [*PAPER, ZERO3, "llm.gpu_memory_utilization=0.5"])))
    assert fits is not None and fits.fits
    with caplog.at_level("INFO"):
        assert startup_check(ppo_run(compose("train_crawler_ppo", []))) is None  # cluster=cpu, no CUDA here
    assert "memory check skipped" in caplog.text
    # the task function checks before it builds the trainer (which would load the 7B checkpoint)
    from scholar_agents.train.crawler_ppo import crawler_ppo

    with pytest.raises(SystemExit, match="DOES NOT FIT"):
        crawler_ppo(refused)


def test_cluster_schema_validates():
    cfg = compose("train_crawler_ppo", ["cluster=a6000_48gb"])
    assert to_cluster_config(cfg.cluster).world_size == 16
    with pytest.raises(ValueError, match="cluster.gpu_memory_gib"):
        ClusterConfig(name="x", gpus_per_node=8, gpu_memory_gib=0)
    with pytest.raises(Exception, match="gpu_memory_gib"):
        compose("train_crawler_ppo", ["cluster.gpu_memory_gib=lots"])


def _saved_activation_bytes(layers: int, attn: str, checkpointing: bool, b: int, s: int) -> int:
    """Bytes autograd saves for backward in a forward of a tiny random bf16 Qwen2 backbone (parameters excluded)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=256, intermediate_size=704, num_hidden_layers=layers, num_attention_heads=8,
                      num_key_value_heads=2, vocab_size=512, attn_implementation=attn, use_cache=False)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=torch.randint(0, 512, (b, s)))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(n for ptr, n in storages.items() if ptr not in params)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_activation_formula_matches_what_autograd_saves_for_a_tiny_qwen2(attn):
    """The per-layer formula (Korthikanti et al. 2022 Eq. 1 redone for Qwen2) against the tensors autograd keeps:
    the difference between a 4- and a 2-layer model is two layers' activations. On CPU; CUDA peaks are unmeasured."""
    from scholar_agents.plan.memory_plan import layer_activation_bytes
    from scholar_agents.plan.model_sizes import ModelShape

    b, s = 2, 192
    shape = ModelShape("tiny", "", 0, 0, 0, 0, hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32,
                       intermediate=704, vocab=512)
    two_layers = _saved_activation_bytes(4, attn, False, b, s) - _saved_activation_bytes(2, attn, False, b, s)
    assert two_layers == pytest.approx(2 * layer_activation_bytes(shape, b, s, attn), rel=0.01)
    # gradient checkpointing keeps each layer's 16-bit input only: 2sbh
    two_layers_gc = _saved_activation_bytes(4, attn, True, b, s) - _saved_activation_bytes(2, attn, True, b, s)
    assert two_layers_gc == 2 * 2 * s * b * 256


def _sleep_override() -> str:
    """``ppo.rollout_sleep`` comes with the colocated-rollout work; before it is in PPOConfig it has to be added."""
    from dataclasses import fields

    from scholar_agents.train.ppo.config import PPOConfig

    return ("" if "rollout_sleep" in {f.name for f in fields(PPOConfig)} else "+") + "ppo.rollout_sleep=true"


def test_a6000_plans_of_docs_cluster_md():
    """docs/cluster.md: ZeRO-3 with the default engine is refused on 2 A6000 nodes; 4 nodes with a smaller engine
    and scoring batch fit, and so do 2 nodes with vLLM sleep mode."""
    a6000 = [*PAPER[:-1], "cluster=a6000_48gb", ZERO3]
    default = build_plan(inputs_from_config(ppo_run(compose("train_crawler_ppo", a6000))))
    assert not default.fits
    four_nodes = build_plan(inputs_from_config(ppo_run(compose("train_crawler_ppo", [
        *a6000, "cluster.nodes=4", "llm.gpu_memory_utilization=0.45", "ppo.score_batch_size=4"]))))
    assert four_nodes.fits and four_nodes.inputs.world == 32
    asleep = build_plan(inputs_from_config(ppo_run(compose("train_crawler_ppo", [
        *a6000, "llm.gpu_memory_utilization=0.45", _sleep_override()]))))
    assert asleep.fits and asleep.inputs.sleep and asleep.peak_phase == "rollout"


PRESET = ["experiment=pasa_crawler_ppo", f"ppo.policy_model={QWEN}"]


@pytest.mark.parametrize("extra, fits", [
    ([], True),                                                          # 16 x H100: fits
    ([ZERO2], False),                                                    # replicated ZeRO-2: refused
    (["cluster=a6000_48gb"], False),                                     # 2 A6000 nodes, engine at 0.30: refused
    (["cluster=a6000_48gb", "cluster.nodes=4", "llm.gpu_memory_utilization=0.45", "ppo.score_batch_size=4"], True),
    (["cluster=a6000_48gb", "ppo.rollout_sleep=true", "llm.gpu_memory_utilization=0.5"], True),
])
def test_the_ppo_preset_plans_of_docs_cluster_md(extra, fits):
    """The verdicts docs/cluster.md shows for `scholar plan experiment=pasa_crawler_ppo ...` (the paper run)."""
    cfg = compose("train_crawler_ppo", [*PRESET, *extra])
    plan = build_plan(inputs_from_config(ppo_run(cfg)))
    assert plan.fits == fits
    assert plan.inputs.zero_stage == (2 if ZERO2 in extra else 3)


def test_sft_plans_selector_on_8_a6000_and_names_zero3_without_deepspeed():
    """`scholar plan selector_sft`: the paper's Selector SFT (sft=pasa_7b, ZeRO-3) fits one node of 8 A6000; the
    same without DeepSpeed (every state replicated) is refused naming zero3.json. Model states = DeepSpeed's
    estimator."""
    out = run_plan("selector_sft", "sft=pasa_7b", "cluster=a6000_48gb", "cluster.nodes=1")
    assert out.returncode == 0, out.stdout + out.stderr
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    qwen = model_shape(QWEN)
    _, gpu, _ = estimate_zero3_model_states_mem_needs(qwen.params, qwen.largest_layer_params, num_gpus_per_node=8,
                                                      num_nodes=1, cpu_offload=False, cpu_offload_params=False)
    states = [r for r in table_rows(out.stdout) if r[3] == "DeepSpeed estimate_zero3_model_states_mem_needs"]
    assert len(states) == 4 and sum(r[2] for r in states) == pytest.approx(gpu / GIB, abs=0.04)

    from scholar_agents.plan.commands import sft_inputs_from_config, verdict
    from scholar_agents.plan.sft_plan import build_sft_plan

    cfg = compose("train_selector_sft", ["sft=pasa_7b", "cluster=a6000_48gb", "cluster.nodes=1", "sft.deepspeed=null"])
    plan = build_sft_plan(sft_inputs_from_config(sft_run(cfg)))
    ok, message = verdict(plan)
    assert not ok and "use conf/deepspeed/zero3.json (sft.deepspeed=" in message


@pytest.mark.parametrize("overrides,fits,peak", [
    (["cluster=h100_80gb", "cluster.nodes=1"], True, 25.4),
    (["cluster=a6000_48gb", "cluster.nodes=1", "sft.deepspeed=${sa_pkg:}/conf/deepspeed/zero2.json"], True, 37.6),
    (["cluster=a6000_48gb", "cluster.nodes=1", "cluster.gpus_per_node=1", "sft.lora.enabled=true",
      "sft.deepspeed=null"], True, 21.9),
])
def test_sft_rows_of_docs_cluster_md(overrides, fits, peak):
    from scholar_agents.plan.commands import sft_inputs_from_config
    from scholar_agents.plan.sft_plan import build_sft_plan

    plan = build_sft_plan(sft_inputs_from_config(sft_run(compose("train_selector_sft", ["sft=pasa_7b", *overrides]))))
    assert plan.fits == fits and round(plan.peak_gib, 1) == peak


def test_startup_check_plans_for_the_world_size_the_launcher_started(monkeypatch):
    """cluster=h100_80gb says 16 GPUs; a launch on 1 node x 8 is checked for 8: ZeRO-3 shards over half as many
    GPUs, and the engine size that fits 16 (test above) no longer does."""
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    with pytest.raises(SystemExit, match=r"1 node x 8 GPUs = 8(.|\n)*lower llm.gpu_memory_utilization to 0.3"):
        startup_check(ppo_run(compose("train_crawler_ppo", [*PAPER, ZERO3, "llm.gpu_memory_utilization=0.5"])))
    plan = startup_check(ppo_run(compose("train_crawler_ppo", [*PAPER, ZERO3, "llm.gpu_memory_utilization=0.3"])))
    assert plan.fits and plan.inputs.world == 8 and plan.inputs.cluster.nodes == 1


def test_scholar_plan_defaults_to_crawler_ppo():
    from scholar_agents.cli import resolve

    assert resolve(["plan", "ppo=pasa_paper", "cluster=h100_80gb"]) == (("plan", "crawler_ppo"),
                                                                         ["ppo=pasa_paper", "cluster=h100_80gb"])
    assert resolve(["plan"]) == (("plan", "crawler_ppo"), [])
    assert resolve(["plan", "selector_sft", "sft=pasa_7b"]) == (("plan", "selector_sft"), ["sft=pasa_7b"])
    with pytest.raises(SystemExit, match="takes one of"):
        resolve(["plan", "nonsense"])


def test_the_shipped_ppo_experiment_plans_from_its_base_model_before_sft_ran(tmp_path):
    """`scholar plan experiment=pasa_crawler_ppo` as shipped: the policy is the SFT run's output,
    not written yet; the plan reads the architecture of the model it fine-tunes (ppo.base_model) and says so."""
    out = run_plan("experiment=pasa_crawler_ppo", f"paths.output_root={tmp_path}")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert f"# policy {tmp_path}/checkpoints/pasa_crawler_sft/final (not there yet: sizes of ppo.base_model={QWEN}): " \
           f"7,615,616,512 parameters" in out.stdout
    assert "FITS" in out.stdout
    # the GPU locks' CUDA and driver, and no CUDA check: a plan runs on a CPU
    assert "  requirements/gpu-linux-x86_64-py312.lock: torch 2.13.0 for CUDA 13.0 (cuda-toolkit==13.0.3.0): NVIDIA " \
           "driver >= 580 (>= 580.65.06 for all of CUDA 13.0)" in out.stdout
    assert "  requirements/gpu-cu12-linux-x86_64-py312.lock: torch 2.10.0 for CUDA 12.8" in out.stdout
    cfg = compose("plan", ["experiment=pasa_crawler_ppo", f"paths.output_root={tmp_path}"])
    assert cfg.cluster.gpus_per_node == 8 and cfg.cluster.require_cuda is False
    x = inputs_from_config(ppo_run(cfg))
    assert x.policy.params == x.ref.params == model_shape(QWEN).params and x.value.layers == 28


def test_a_missing_model_without_a_base_is_one_usage_error_naming_the_setting(tmp_path):
    from scholar_agents.validation import UsageError

    missing = tmp_path / "not_trained_yet"
    with pytest.raises(UsageError, match=r"^ppo.policy_model: no config.json for model .*or set ppo.base_model="):
        inputs_from_config(ppo_run(compose("train_crawler_ppo", [*PAPER, f"ppo.policy_model={missing}",
                                                                  "ppo.base_model=null"])))
    with pytest.raises(UsageError, match=r"does not exist yet and ppo.base_model: no config.json for model '/nope'"):
        inputs_from_config(ppo_run(compose("train_crawler_ppo", [*PAPER, f"ppo.policy_model={missing}",
                                                                  "ppo.base_model=/nope"])))


def test_the_plans_sequence_length_is_its_own_input():
    """ppo.plan_seq_len: the plan for sessions of 2,048 tokens, whatever the engine's max_model_len (8,192)."""
    default = inputs_from_config(ppo_run(compose("train_crawler_ppo", [*PAPER, ZERO3])))
    short = inputs_from_config(ppo_run(compose("train_crawler_ppo", [*PAPER, ZERO3, "ppo.plan_seq_len=2048"])))
    assert (default.seq_len, default.seq_len_source) == (8192, "llm.max_model_len")
    assert (short.seq_len, short.seq_len_source) == (2048, "ppo.plan_seq_len")
    assert build_plan(short).phase_total("update") < build_plan(default).phase_total("update")
    out = run_plan(*PAPER, ZERO3, "ppo.plan_seq_len=2048")
    assert "# sequences of <= 2048 tokens (ppo.plan_seq_len)" in out.stdout, out.stderr[-2000:]


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_critic_free_estimators_plan_no_value_model_and_print_what_it_saves(estimator):
    """ppo.estimator=grpo|rloo builds no value model: the plan has no value row, its model states are DeepSpeed's
    estimate for the policy alone, and it prints per phase what paper_mc's value model adds (the paper preset, 16 x
    H100, ZeRO-3: its states and gathered layer in every phase, its activations in the update)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs

    from scholar_agents.plan.commands import format_plan

    x = inputs_from_config(ppo_run(compose("train_crawler_ppo", [*PRESET, f"ppo.estimator={estimator}"])))
    plan, with_critic = build_plan(x), build_plan(dataclasses.replace(x, critic=True, estimator="paper_mc"))
    assert not x.critic and not any(r.model == "value" or "value" in r.model for r in plan.rows)
    assert any(r.model == "value" for r in with_critic.rows)
    states = sum(r.gib for r in plan.rows if r.source == "DeepSpeed estimate_zero3_model_states_mem_needs")
    _, gpu, _ = estimate_zero3_model_states_mem_needs(x.policy.params, x.policy.largest_layer_params,
                                                      num_gpus_per_node=8, num_nodes=2, cpu_offload=False,
                                                      cpu_offload_params=False)
    assert states == pytest.approx(gpu / GIB, abs=0.01)
    saved = {p: with_critic.phase_total(p) - plan.phase_total(p) for p in plan.phases}
    assert saved["update"] > saved["score"] > 1.0 and saved["score"] == pytest.approx(saved["rollout"])
    text = format_plan(plan)
    assert f"no value model (ppo.estimator={estimator}): saves {saved['rollout']:.1f} GiB in rollout" in text
    assert f"{saved['update']:.1f} GiB in update per GPU" in text
    assert "no value model" not in format_plan(with_critic)


def test_the_planner_reads_typed_configs_and_imports_nothing_above_its_floor():
    """plan/ gets the run's config typed by the training floor's dataclasses (train/plan_runs.py); it needs nothing
    of train/ itself, so none of its imports climbs a floor (the estimator names and crawl budgets it reads are in
    pasa/crawl_budget.py)."""
    graph = load_script("import_graph")
    climbs = [f"{a}:{line} -> {b}" for a, b, line, _ in graph.upward(graph.edges()) if graph.part_of(a) == "plan"]
    assert climbs == []
