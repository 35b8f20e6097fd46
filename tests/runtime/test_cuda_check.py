"""runtime/cuda_check.py: the GPU locks' CUDA and the driver each needs, which configs ask for GPUs, and the refusal
of those configs — through the real ``scholar`` entry point, before anything loads — where torch sees no CUDA (every
machine here: torch is the CPU build). The path where CUDA is there (the start-up log line) needs a GPU: not run."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from scholar_agents.cli import COMMANDS
from scholar_agents.hydra_app import compose
from scholar_agents.runtime import cuda_check
from scholar_agents.runtime.cuda_check import (LOCK_CU12, LOCK_CU13, driver_needs, gpu_request, lock_cuda,
                                               lock_for_driver)
from tests.paths import REPO

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")


def scholar(tmp_path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "scholar_agents", *args, f"hydra.run.dir={tmp_path}/run"],
                          capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})})


def test_each_lock_names_the_cuda_of_its_own_torch_and_the_driver_it_needs():
    """The CUDA 13 lock also holds faiss-gpu-cu12's CUDA 12 runtime: only the pins torch requires count."""
    cu13, cu12 = lock_cuda(LOCK_CU13), lock_cuda(LOCK_CU12)
    assert (cu13.torch, cu13.cuda, cu13.source) == ("2.13.0", "13.0", "cuda-toolkit==13.0.3.0")
    assert (cu12.torch, cu12.cuda) == ("2.10.0", "12.8") and cu12.source.startswith("nvidia-cuda-runtime-cu12==12.8.")
    # the refusal names each lock with these (lock_for_driver): they must stay the locks' own
    assert "(CUDA 13.0, NVIDIA driver >= 580)" in lock_for_driver(None) and f"{LOCK_CU12} (CUDA 12.8)" in \
        lock_for_driver(None)
    assert driver_needs("13.0") == ("580", "580.65.06") and driver_needs("12.8") == ("525.60.13", "570.26")
    assert driver_needs("12.4") == ("525.60.13", None) and driver_needs("11.8") == (None, None)
    lines = cuda_check.lock_lines()
    assert lines[0] == (f"{LOCK_CU13}: torch 2.13.0 for CUDA 13.0 (cuda-toolkit==13.0.3.0): NVIDIA driver >= 580 "
                        f"(>= 580.65.06 for all of CUDA 13.0)")
    assert lines[1].startswith(f"{LOCK_CU12}: torch 2.10.0 for CUDA 12.8 (nvidia-cuda-runtime-cu12==12.8.")
    assert lines[1].endswith("NVIDIA driver >= 525.60.13 (>= 570.26 for all of CUDA 12.8)")


def test_the_lock_for_a_driver():
    assert lock_for_driver("580.65.06").endswith(f"install {LOCK_CU13}")
    assert lock_for_driver("570.86.15") == f"driver 570.86.15 is a CUDA 12 driver (CUDA 13 needs >= 580): install " \
                                           f"{LOCK_CU12}"
    assert lock_for_driver("535.247.01").endswith(LOCK_CU12)
    assert "upgrade it" in lock_for_driver("470.256.02")


@pytest.mark.parametrize("root,overrides,why", [
    ("train_crawler_ppo", ["experiment=pasa_crawler_ppo"], "cluster=h100_80gb (8 GPUs per node)"),
    ("train_selector_sft", ["experiment=pasa_selector_sft_a6000"], "cluster=a6000_48gb (8 GPUs per node)"),
    ("train_crawler_ppo", ["cluster=h100_80gb"], "cluster=h100_80gb (8 GPUs per node)"),
    ("train_selector_sft", ["sft=pasa_7b"], "sft.use_cpu=false"),
    ("train_crawler_sft", ["sft=pasa_7b"], "sft.use_cpu=false"),
    ("pasa_search", ["llm=qwen25_7b_vllm"], "llm.device=cuda"),
    ("eval_pasa", ["llm@selector_llm=qwen25_7b_vllm"], "selector_llm.device=cuda"),
    ("train_crawler_ppo", ["llm=qwen25_7b_vllm_rollout"], "llm.device=cuda"),
    ("papers_build", ["embedder.device=cuda:1"], "embedder.device=cuda:1"),
    ("train_crawler_ppo", ["cluster.require_cuda=true"], "cluster.require_cuda=true"),
    # the escape hatch (CPU twins), and the plans, which only read configs
    ("train_crawler_ppo", ["experiment=pasa_crawler_ppo", "cluster.require_cuda=false"], None),
    ("train_selector_sft", ["sft=pasa_7b", "cluster.require_cuda=false"], None),
    ("plan", ["experiment=pasa_crawler_ppo"], None),
    ("plan_selector_sft", ["experiment=pasa_selector_sft"], None),
    ("plan_crawler_sft", ["sft=pasa_7b", "cluster=h100_80gb"], None),
])
def test_what_asks_for_gpus(root, overrides, why):
    assert gpu_request(compose(root, overrides)) == why


def test_no_root_asks_for_gpus_with_its_cpu_defaults():
    """Every command as `scholar <group> <command>` composes it (cluster=cpu, the CPU presets): never refused."""
    asking = {name: gpu_request(compose(name)) for _, name, _ in COMMANDS.values()}
    assert not {k: v for k, v in asking.items() if v}, asking


def test_every_experiment_asks_for_gpus():
    """Each experiment=* preset with each of its roots: refused without CUDA, by the cluster it sets."""
    from scripts import experiment_table

    for experiment, roots in experiment_table.experiment_roots().items():
        for root in roots:
            assert gpu_request(compose(root, [f"experiment={experiment}"])).startswith("cluster="), (experiment, root)


def test_a_cpu_config_is_not_checked_at_all():
    assert cuda_check.cuda_refusal(compose("train_crawler_ppo", [])) is None


def test_the_cuda_probe_runs_in_a_child_and_agrees_with_torch():
    """torch.cuda.is_available() initialises the CUDA driver: asked in a child, this process stays fork-safe."""
    probe = cuda_check.probe_cuda()
    assert set(probe) == {"available", "devices", "why"} and probe["available"] == torch.cuda.is_available()
    assert cuda_check.probe_cuda(timeout_s=0.01)["available"] == probe["available"]  # no answer: asked here


@no_cuda
@pytest.mark.parametrize("driver,says", [
    ("570.86.15", f"NVIDIA driver 570.86.15 (nvidia-smi), older than the 580 CUDA 13.0 needs: driver 570.86.15 is a "
                  f"CUDA 12 driver (CUDA 13 needs >= 580): install {LOCK_CU12} (docs/cluster.md"),
    ("580.95.05", "NVIDIA driver 580.95.05 (nvidia-smi): check that the job was given GPUs (CUDA_VISIBLE_DEVICES"),
])
def test_a_cuda_build_without_cuda_names_the_lock_of_the_driver(tmp_path, monkeypatch, driver, says):
    """A CUDA 13 torch that sees no GPU: under a CUDA 12 driver the refusal names the CUDA 12 lock; under a 580
    driver, the allocation. The driver is a stand-in nvidia-smi on PATH and torch's build is set to CUDA 13.0 (the
    outside world, both); the CUDA probe itself runs (and finds none)."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!/bin/sh\necho {driver}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    message = cuda_check.cuda_refusal(compose("train_crawler_ppo", ["experiment=pasa_crawler_ppo"]))
    assert "\n" not in message and message.startswith("cluster=h100_80gb (8 GPUs per node) asks for GPUs, but torch ")
    assert "(CUDA 13.0 build) sees no CUDA" in message and says in message, message
    assert message.endswith("cluster.require_cuda=false runs it on the CPU on purpose")


@no_cuda
@pytest.mark.parametrize("args", [
    ["train", "crawler_ppo", "experiment=pasa_crawler_ppo"],
    ["train", "selector_sft", "sft=pasa_7b", "sft.train_file=/nope.jsonl"],
    ["pasa", "search", "query=graph neural networks", "llm=qwen25_7b_vllm"],
], ids=lambda a: " ".join(a[:3]))
def test_a_gpu_config_without_cuda_is_refused_in_one_line_before_loading(tmp_path, args):
    out = scholar(tmp_path, *args)
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stdout + out.stderr, out.stderr[-2000:]
    line = lines[0]
    assert line.startswith(f"scholar {args[0]} {args[1]}: error: ") and "asks for GPUs" in line
    assert f"torch {torch.__version__} (CPU build) has no CUDA" in line
    assert "no NVIDIA driver found (no nvidia-smi on PATH" in line or "NVIDIA driver " in line
    assert LOCK_CU13 in line and LOCK_CU12 in line and "cluster.require_cuda=false" in line
    assert not (tmp_path / "run" / "checkpoints").exists()


@no_cuda
def test_the_cpu_preset_and_the_escape_hatch_pass_the_guard(tmp_path):
    """cluster=cpu (the default), and a GPU preset with cluster.require_cuda=false, reach the command's own checks:
    here its next one-line refusal (flash attention asked for by name), which comes after the guard."""
    for extra in ([], ["experiment=pasa_crawler_ppo", "cluster.require_cuda=false"]):
        out = scholar(tmp_path, "train", "crawler_ppo", *extra, "ppo.attn_implementation=flash_attention_2")
        assert out.returncode == 2, out.stderr[-2000:]
        assert "flash_attn does not import" in out.stderr and "asks for GPUs" not in out.stderr, out.stderr[-2000:]
