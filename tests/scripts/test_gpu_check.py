"""scripts/gpu_check.sh, the one-GPU check of issue 28, and its CPU twin (GPU_CHECK_PROFILE=cpu): the same script,
gloo and the tiny Qwen2 shape, so that what runs on the H100 cannot rot. Also the wrapper's contract (the packed
dependencies first on PYTHONPATH) and its refusal to fall back to CPU when asked for a GPU."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile

import pytest
import torch
from tests.paths import REPO

SCRIPT = REPO / "scripts" / "gpu_check.sh"
ENV = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO)}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_profile_without_cuda_is_refused_not_run_on_cpu(tmp_path):
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], env={**ENV, "GPU_CHECK_PROFILE": "gpu"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "CUDA is not available" in proc.stderr and "does not fall back to CPU" in proc.stderr
    assert not (tmp_path / "out" / "gpu_check.json").exists()


def test_the_packed_site_packages_go_first_on_pythonpath(tmp_path):
    """With a pack, its site-packages is unpacked and put before anything else; the interpreter (a stub here)
    is handed the driver and OUT_DIR."""
    pack = tmp_path / "site-packages.tar.xz"
    with tarfile.open(pack, "w:xz") as tar:
        data = b"NAME = 'from the pack'\n"
        info = tarfile.TarInfo("site-packages/packed_probe.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    stub = tmp_path / "python_stub.sh"
    stub.write_text("#!/usr/bin/env bash\necho \"PYTHONPATH=$PYTHONPATH\"\necho \"ARGS=$*\"\n"
                    "first=${PYTHONPATH%%:*}; test -f \"$first/packed_probe.py\" && echo PACK_FIRST\n")
    stub.chmod(0o755)
    env = {**ENV, "PYTHON": str(stub), "GPU_PACK": str(pack), "PYTHONPATH": "/somewhere/else"}
    out = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], env=env, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "PACK_FIRST" in out
    path = next(line for line in out.splitlines() if line.startswith("PYTHONPATH=")).split("=", 1)[1].split(":")
    assert path[0].endswith("/site-packages") and path[1] == str(REPO) and path[-1] == "/somewhere/else"
    assert f"ARGS={REPO / 'scripts' / 'gpu_check.py'} {tmp_path / 'out'}" in out


@pytest.mark.slow
def test_cpu_twin_writes_every_phase_beside_the_plan(tmp_path):
    """The whole check on CPU (~2-3 min on 2 cores): probe, PPO (ZeRO-3, random weights, hf rollouts, BM25), SFT full
    and LoRA; the JSON and the Markdown table hold every phase of every run with the planner's estimate."""
    out = tmp_path / "gpu_check"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], env={**ENV, "GPU_CHECK_PROFILE": "cpu"},
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["profile"] == "cpu" and report["environment"]["backend"] == "gloo"
    runs = {r["name"]: r for r in report["runs"]}
    assert set(runs) == {"slurm_probe", "ppo_2L", "sft_full_2L", "sft_lora_2L"}
    assert all(r["status"] == "ok" for r in runs.values())
    ppo = runs["ppo_2L"]
    assert [m["phase"] for m in ppo["phases"]] == ["rollout", "score", "update"]
    assert set(ppo["plan"]["phases_gib"]) == {"rollout", "score", "update"}
    assert ppo["phases"][0]["steps"] == 2 and all(m["seconds"] is not None for m in ppo["phases"])
    assert all(m["allocated_gib"] is None for m in ppo["phases"])  # CPU: no CUDA peaks, never a made-up number
    for name in ("sft_full_2L", "sft_lora_2L"):
        (m,) = runs[name]["phases"]
        assert m["phase"] == "update" and m["steps"] == 2 and m["step_seconds"] > 0 and m["tokens_per_s"] > 0
        assert runs[name]["plan"]["phases_gib"]["update"] > 0
    # the LoRA plan is smaller than full fine-tuning's: the planner saw the same overrides as the run
    assert runs["sft_lora_2L"]["plan"]["phases_gib"]["update"] < runs["sft_full_2L"]["plan"]["phases_gib"]["update"]
    # ppo.save_final=false / sft.save_final=false: nothing written after the last step
    assert not list((out / "runs" / "ppo_2L").glob("checkpoints/step_*"))
    assert not (out / "runs" / "sft_full_2L" / "ckpt" / "final").exists()
    md = (out / "gpu_check.md").read_text()
    assert "| plan GiB |" in md and "slurm probe" in md
    for row in ("| ppo_2L | 2L", "| sft_full_2L | 2L", "| sft_lora_2L | 2L"):
        assert row in md
    for phase in ("rollout", "score", "update"):
        assert f"| sdpa | {phase} |" in md
