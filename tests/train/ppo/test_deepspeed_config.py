"""DeepSpeed for PPO on CPU: the JSONs' "auto" values filled from the PPO config (both conf/deepspeed JSONs), and the
policy weights the rollout engine receives under ZeRO-3 — gathered module by module in 2 torchrun processes (gloo) —
equal to the unsharded policy's (names, order and values, LoRA merged). The 2-process PPO runs under ZeRO-2/3 and the
ZeRO-3 kill-and-resume are in tests/train/test_distributed_cpu.py."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from scholar_agents.hydra_app import CONF_DIR
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.deepspeed_config import (
    auto_keys,
    fill_deepspeed_config,
    load_deepspeed_json,
    reference_config,
    zero_stage,
)
from tests.paths import REPO

HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


@pytest.mark.parametrize("name", ["zero2", "zero3"])
def test_every_auto_in_our_deepspeed_jsons_is_filled_from_the_ppo_config(name):
    raw = load_deepspeed_json(CONF_DIR / "deepspeed" / f"{name}.json")
    assert auto_keys(raw)  # the JSON really carries "auto" values (HF Trainer fills them for SFT)
    p = PPOConfig(forward_batch_size=2, grad_accum=8, max_grad_norm=0.5, model_dtype="bfloat16")
    ds = fill_deepspeed_config(raw, p, hidden_size=64, world_size=16)
    assert auto_keys(ds) == []
    assert "auto" not in json.dumps(ds)
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["train_batch_size"]) == \
        (2, 8, 2 * 8 * 16)
    assert ds["gradient_clipping"] == 0.5
    assert ds["bf16"]["enabled"] is True and ds["fp16"]["enabled"] is False
    zero = ds["zero_optimization"]
    assert zero["stage"] == zero_stage(raw) and zero["reduce_bucket_size"] == 64 * 64  # HF Trainer's rule
    if name == "zero3":
        assert zero["stage3_prefetch_bucket_size"] == int(0.9 * 64 * 64)
        assert zero["stage3_param_persistence_threshold"] == 10 * 64
    assert auto_keys(raw)  # the shipped JSON is left as it was, for SFT


def test_an_auto_without_a_rule_is_refused_with_the_key_named():
    raw = {"zero_optimization": {"stage": 3, "sub_group_size": "auto"}}
    with pytest.raises(ValueError, match=r"zero_optimization\.sub_group_size"):
        fill_deepspeed_config(raw, PPOConfig(), hidden_size=64, world_size=1)


def test_reference_engine_config_has_no_optimizer_and_offloads_on_request():
    ds = fill_deepspeed_config(load_deepspeed_json(CONF_DIR / "deepspeed" / "zero3.json"), PPOConfig(), 64, 2)
    ds["optimizer"] = {"type": "AdamW"}
    ds["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    ref = reference_config(ds, offload=False)
    assert "optimizer" not in ref and "offload_optimizer" not in ref["zero_optimization"]
    assert "offload_param" not in ref["zero_optimization"] and zero_stage(ref) == 3
    assert reference_config(ds, offload=True)["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert "optimizer" in ds  # the training config is untouched


def test_paper_preset_runs_zero3_and_zero2_stays_selectable():
    """The commands docs/ppo.md gives compose: the paper preset on ZeRO-3, ZeRO-2 by override, the CPU preset
    without DeepSpeed."""
    from scholar_agents.hydra_app import compose

    paper = compose("train_crawler_ppo", ["ppo=pasa_paper"]).ppo
    assert zero_stage(load_deepspeed_json(paper.deepspeed)) == 3 and paper.ref_offload is False
    assert compose("train_crawler_ppo", ["ppo=pasa_paper", "ppo.ref_offload=true"]).ppo.ref_offload is True
    zero2 = compose("train_crawler_ppo", ["ppo=pasa_paper", "ppo.deepspeed=${sa_pkg:}/conf/deepspeed/zero2.json"]).ppo
    assert zero_stage(load_deepspeed_json(zero2.deepspeed)) == 2
    assert compose("train_crawler_ppo", ["ppo=cpu_smollm2"]).ppo.deepspeed is None


GATHER_SCRIPT = r'''
import json, os, sys
import torch
import deepspeed
import torch.distributed as dist
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.deepspeed_config import fill_deepspeed_config, load_deepspeed_json, zero3_init
from scholar_agents.train.ppo.policy_weights import gathered_policy_weights, merged_policy_weights

model_dir, conf, out, lora = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "lora"
dist.init_process_group("gloo")
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
rank = dist.get_rank()
ds = fill_deepspeed_config(load_deepspeed_json(conf), PPOConfig(), hidden_size=64, world_size=2)


def policy(sharded):
    with zero3_init(ds) if sharded else torch.no_grad():
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if lora:
        torch.manual_seed(0)  # the same random A in both models; and B = 0 at init would make the merge trivial
        m = get_peft_model(m, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
        for n, p in m.named_parameters():
            if "lora_B" in n:
                with torch.no_grad():
                    p.normal_(0, 0.1)
    return m


sharded = policy(True)
# as the trainer does: the engine partitions what zero.Init did not create (the LoRA adapters)
engine = deepspeed.initialize(model=sharded, optimizer=torch.optim.AdamW(sharded.parameters()), config=ds)[0]
partitioned = all(p.data.numel() == 0 and p.ds_tensor.numel() < p.ds_numel for p in sharded.parameters())
pairs = list(gathered_policy_weights(sharded))
released = all(p.data.numel() == 0 for p in sharded.parameters())
if rank == 0:
    reference = list(merged_policy_weights(policy(False)))
    names = [n for n, _ in pairs] == [n for n, _ in reference]
    worst = max(float((a - b).abs().max()) for (_, a), (_, b) in zip(pairs, reference)) if names else None
    json.dump({"partitioned": partitioned, "released": released, "names": names, "n": len(pairs),
               "n_reference": len(reference), "worst": worst, "lora_names": [n for n, _ in pairs if "lora" in n]},
              open(out, "w"))
dist.barrier()
'''


@pytest.mark.slow
@pytest.mark.skipif(not HAS_DEEPSPEED, reason="deepspeed not installed")
@pytest.mark.parametrize("lora", ["full", "lora"])
def test_zero3_gathered_policy_weights_equal_the_unsharded_policys(tiny_model_dir, tmp_path, lora):
    """What ``DeepSpeedEngine.policy_weights`` yields under ZeRO-3 (gathered_policy_weights) in 2 processes == what the
    unsharded policy yields (merged_policy_weights): the same names in the same order, the same values (LoRA merged
    into the base weights in both), while each rank holds only its shard before and after."""
    script = tmp_path / "gather.py"
    script.write_text(GATHER_SCRIPT)
    out = tmp_path / "result.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), str(tiny_model_dir), str(CONF_DIR / "deepspeed" / "zero3.json"), str(out),
                           lora], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    r = json.loads(out.read_text())
    assert r["partitioned"] and r["released"]  # sharded before, and the gathered copies were released again
    assert r["names"] and r["n"] == r["n_reference"] > 0
    assert r["worst"] == 0.0  # the same additions in the same dtype: bit-identical
    assert r["lora_names"] == []  # plain HF names, what vLLM / transformers load
