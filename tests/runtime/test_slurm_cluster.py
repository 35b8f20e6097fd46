"""End to end on the real local Slurm cluster: a plain sbatch job with accounting, preemption -> checkpoint ->
requeue -> exact resume (single process and srun + torchrun), a Hydra sweep as one job array, and its report."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.slurm import REPO

pytestmark = pytest.mark.slurm
SCHOLAR = str(Path(sys.executable).with_name("scholar"))


def _sh(*cmd: str, env=None, timeout: float = 60) -> str:
    out = subprocess.run(list(cmd), capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)} -> {out.returncode}\n{out.stdout}\n{out.stderr}"
    return out.stdout


def _sacct(job: str) -> list[dict[str, str]]:
    """Every accounting record of a job, requeued attempts included (-D), allocations only (-X)."""
    out = _sh("sacct", "-j", job, "-D", "-X", "-n", "-P", "-o", "JobID,State,ExitCode")
    return [dict(zip(("id", "state", "exit"), line.split("|"))) for line in out.splitlines() if line]


def _wait_finished(job: str, timeout: float) -> list[dict[str, str]]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        records = _sacct(job)
        if records and records[-1]["state"] in {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY",
                                                "NODE_FAIL"}:
            return records
        time.sleep(1)
    raise AssertionError(f"job {job} did not finish in {timeout} s: {_sacct(job)}")


def test_sbatch_job_completes_with_accounting(slurm_cluster, tmp_path):
    out_file = tmp_path / "hello.out"
    job = _sh("sbatch", "--parsable", f"--partition={slurm_cluster.partition}", f"--output={out_file}",
              "--wrap", "echo hello from $SLURM_JOB_ID on $SLURMD_NODENAME").strip()
    records = _wait_finished(job, timeout=60)
    assert records[-1]["state"] == "COMPLETED" and records[-1]["exit"] == "0:0", records
    assert out_file.read_text().strip() == f"hello from {job} on localhost"


def test_preempted_jobs_checkpoint_requeue_and_resume(slurm_cluster, tmp_path):
    """Two jobs at once: (a) one process, warned like `--signal=B:USR1@120` does before the time limit (the batch
    shell traps it and forwards SIGTERM); (b) srun + torchrun with 2 ranks (gloo), preempted with `scontrol requeue`
    (SIGTERM to every process). Both must checkpoint, be requeued, resume from the checkpoint and end with the
    same weights as an uninterrupted run."""
    from omegaconf import OmegaConf

    from scholar_agents.runtime.slurm_probe import SlurmProbeConfig, probe

    steps, step_s = 16, 0.25
    overrides = [f"probe.steps={steps}", f"probe.step_seconds={step_s}", "probe.checkpoint_every=100"]
    logs = tmp_path / "logs"
    logs.mkdir()
    jobs = {}
    for name, extra_env in {"single": {}, "torchrun": {"SCHOLAR_PROBE_TORCHRUN": "1", "SCHOLAR_NPROC_PER_NODE": "2"}}.items():
        env = slurm_cluster.env(SCHOLAR_OUTPUTS=str(tmp_path / name), SCHOLAR_REPO=str(REPO),
                                # the running interpreter's venv: a worktree checkout has no .venv of its own
                                SCHOLAR_VENV=str(Path(sys.executable).parents[1]), **extra_env)
        job = _sh("sbatch", "--parsable", f"--job-name=probe_{name}", f"--output={logs}/%x-%j.out",
                  f"--partition={slurm_cluster.partition}", str(REPO / "slurm" / "probe.sbatch"), *overrides,
                  env=env).strip()
        jobs[name] = (job, tmp_path / name / "slurm" / f"probe_{name}" / job)

    # Preempt each job once training is under way: a routine checkpoint is disabled (checkpoint_every=100), so a
    # checkpoint file can only come from the preemption path.
    preempt = {"single": ["scancel", "--batch", "--signal=USR1"], "torchrun": ["scontrol", "requeue"]}
    deadline = time.time() + 150
    while preempt and time.time() < deadline:
        for name in list(preempt):
            job, ranks = jobs[name][0], 2 if name == "torchrun" else 1
            if _log_text(logs, job).count("training from step 0") >= ranks:  # every rank is in the loop
                _sh(*preempt.pop(name), job)
        time.sleep(0.3)
    assert not preempt, f"jobs never started training: {preempt}"

    # Same config, uninterrupted, in this process: the reference the resumed runs must reproduce.
    ref_dir = tmp_path / "reference"
    ref_cfg = OmegaConf.create({"probe": OmegaConf.structured(SlurmProbeConfig(steps=steps, checkpoint_every=100)),
                                "paths": {"output_dir": str(ref_dir)}})
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    try:
        reference = probe(ref_cfg)
    finally:  # the probe leaves its preemption handler installed (it belongs to the process)
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    for name, (job, run_dir) in jobs.items():
        records = _wait_finished(job, timeout=150)
        log_text = _log_text(logs, job)
        assert [r["state"] for r in records] == ["REQUEUED", "COMPLETED"], (name, records, log_text)
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["restart_count"] == 1 and metrics["restarts"] == [0, 1], (name, metrics)
        assert 0 < metrics["resumed_from_step"] < steps, (name, metrics, log_text)
        assert "caught SIGTERM" in log_text and "exiting for requeue" in log_text, log_text
        if name == "single":
            assert "caught SIGUSR1 in the batch shell" in log_text, log_text
            assert metrics["world_size"] == 1
            # Exact resume: the data stream and optimizer state continue where they stopped.
            assert metrics["final_loss"] == pytest.approx(reference["final_loss"], rel=1e-5)
            assert metrics["weight_error"] == pytest.approx(reference["weight_error"], rel=1e-5)
        else:
            assert metrics["world_size"] == 2 and metrics["allreduce_ok"] is True, metrics
            assert metrics["final_loss"] < metrics["initial_loss"] / 10


def test_torchrun_window_keeps_the_step_in_flight_and_its_checkpoint(slurm_cluster, tmp_path):
    """The time-limit warning through srun + torchrun (`SCHOLAR_PROBE_TORCHRUN=1`, `scholar_torchrun`): the batch
    shell gets SIGUSR1 (what `--signal=B:USR1@120` does) 2 s into an 8-s step. With cluster.shutdown_grace_s=120
    (torchrun's --shutdown-timeout) both ranks finish that step AFTER the signal, checkpoint it (routine checkpoints
    are off), the job is requeued and resumes from exactly that step. With 3 s, torch's own default being 30 s,
    torchrun SIGKILLs the worker mid-step: no checkpoint, the requeued job starts again from step 0, and the worker
    warned at start-up that its window was shorter than the lead."""
    steps, step_s = 3, 8.0
    logs = tmp_path / "logs"
    logs.mkdir()
    jobs = {}
    for name, grace, nproc in (("long", 120, 2), ("short", 3, 1)):
        env = slurm_cluster.env(SCHOLAR_OUTPUTS=str(tmp_path / name), SCHOLAR_REPO=str(REPO), PYTHONPATH=str(REPO),
                                SCHOLAR_VENV=str(Path(sys.executable).parents[1]), OMP_NUM_THREADS="1",
                                SCHOLAR_PROBE_TORCHRUN="1", SCHOLAR_NPROC_PER_NODE=str(nproc))
        job = _sh("sbatch", "--parsable", f"--job-name=window_{name}", f"--output={logs}/%x-%j.out",
                  f"--partition={slurm_cluster.partition}", str(REPO / "slurm" / "probe.sbatch"),
                  f"probe.steps={steps}", f"probe.step_seconds={step_s}", "probe.checkpoint_every=100",
                  f"cluster.shutdown_grace_s={grace}", env=env).strip()
        jobs[name] = (job, nproc, tmp_path / name / "slurm" / f"window_{name}" / job)

    signalled, deadline = {}, time.time() + 180
    while len(signalled) < len(jobs):
        assert time.time() < deadline, f"jobs never started training: {[(n, _sacct(j[0])) for n, j in jobs.items()]}"
        for name, (job, nproc, _) in jobs.items():
            if name not in signalled and _log_text(logs, job).count("training from step 0") >= nproc:
                time.sleep(2.0)  # into step 0 (8 s of it)
                signalled[name] = time.time()
                _sh("scancel", "--batch", "--signal=USR1", job)
        time.sleep(0.2)

    job, _, run_dir = jobs["long"]
    records = _wait_finished(job, timeout=180)
    text = _log_text(logs, job)
    assert [r["state"] for r in records] == ["REQUEUED", "COMPLETED"], (records, text[-4000:])
    assert "caught SIGUSR1 in the batch shell" in text and "SIGUSR1 -> pid" in text, text[-4000:]
    assert "preemption window: Slurm signal lead 120 s, torchrun shutdown window 120 s" in text
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["restarts"] == [0, 1] and metrics["world_size"] == 2, metrics
    (record,) = metrics["preemptions"]
    assert record["restart"] == 0 and set(record["signals"]) == {"SIGUSR1"}, record
    # the step in flight (step 0) was interrupted by the signal, finished after it, and is what was checkpointed
    assert record["step_started_at"] < signalled["long"] <= record["signal_at"] < record["checkpoint_at"]
    assert record["checkpoint_at"] - record["step_started_at"] >= step_s and record["checkpoint_step"] == 1
    assert metrics["resumed_from_step"] == 1  # the requeued job resumed from exactly that checkpoint

    job, _, run_dir = jobs["short"]
    records = _wait_finished(job, timeout=180)
    text = _log_text(logs, job)
    assert [r["state"] for r in records] == ["REQUEUED", "COMPLETED"], (records, text[-4000:])
    assert "torchrun SIGKILLs its workers 3 s after passing on the warning" in text  # the start-up warning
    assert "forcefully exiting via 9" in text and "checkpointed at step" not in text, text[-4000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["restarts"] == [1] and metrics["resumed_from_step"] == 0 and metrics["preemptions"] == []


def _log_text(logs: Path, job: str) -> str:
    return "\n".join(p.read_text(errors="replace") for p in logs.glob(f"*-{job}.out"))


def test_hydra_sweep_is_one_job_array_and_report_has_four_rows(slurm_cluster, tmp_path):
    sweep_dir = tmp_path / "sweep"
    lrs = ["0.01", "0.03", "0.1", "0.3"]
    env = slurm_cluster.env(SCHOLAR_OUTPUTS=str(tmp_path / "outputs"))
    out = subprocess.run(
        [SCHOLAR, "slurm", "probe", "-m", "hydra/launcher=slurm", f"hydra.launcher.partition={slurm_cluster.partition}",
         f"hydra.sweep.dir={sweep_dir}", f"probe.lr={','.join(lrs)}", "probe.steps=20"],
        capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = [json.loads((sweep_dir / str(i) / "metrics.json").read_text()) for i in range(4)]
    assert [m["lr"] for m in metrics] == [float(x) for x in lrs]
    # One job array: every submitit folder is <array id>_<task>, with a single array id.
    ids = {re.match(r"(\d+)_(\d+)$", p.name).group(1) for p in (sweep_dir / ".submitit").iterdir()
           if re.match(r"\d+_\d+$", p.name)}
    assert len(ids) == 1, sorted(p.name for p in (sweep_dir / ".submitit").iterdir())
    array_id = ids.pop()
    # submitit returns as soon as each task wrote its result; Slurm records the end (and, for a task that started
    # late, sometimes the record itself) a moment later -- wait for all four records, each COMPLETED.
    expected = [f"{array_id}_{i}" for i in range(4)]
    deadline = time.time() + 90
    records = _sacct(array_id)
    while (sorted(r["id"] for r in records) != expected or {r["state"] for r in records} != {"COMPLETED"}) \
            and time.time() < deadline:
        time.sleep(1)
        records = _sacct(array_id)
    assert sorted(r["id"] for r in records) == expected, records
    assert {r["state"] for r in records} == {"COMPLETED"}, records
    assert {m["slurm"]["array_job_id"] for m in metrics} == {array_id}

    report_dir = tmp_path / "report"
    rep = subprocess.run([SCHOLAR, "sweep", "report", f"sweep_dir={sweep_dir}", f"hydra.run.dir={report_dir}",
                          "report.metrics=[final_loss,weight_error]"],
                         capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr[-3000:]
    md = (report_dir / "sweep_report.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| 0.")]
    assert [r.split("|")[1].strip() for r in rows] == lrs, md
    assert (report_dir / "sweep_report.png").stat().st_size > 5000
    summary = json.loads((report_dir / "sweep_report.json").read_text())
    assert summary["runs_with_metrics"] == 4 and summary["params"] == ["probe.lr"]
    losses = {r["params"]["probe.lr"]: r["metrics"]["final_loss"] for r in summary["rows"]}
    assert losses[0.1] < losses[0.01]  # a larger step size converges faster on this problem


# ---------------------------------------------------------------------------------------------------------------
# SFT on the cluster: per-job output dirs in a sweep, preemption -> checkpoint -> requeue -> resume


def _sft_job_env(slurm_cluster, tmp_path: Path) -> dict[str, str]:
    """This checkout's package and the venv of the running interpreter, in every job."""
    stale = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "WANDB_RUN_ID",
             "WANDB_RESUME", "WANDB_DIR")
    env = {k: v for k, v in slurm_cluster.env(SCHOLAR_OUTPUTS=str(tmp_path / "outputs"), SCHOLAR_REPO=str(REPO),
                                               SCHOLAR_VENV=str(Path(sys.executable).parents[1]),
                                               PYTHONPATH=str(REPO), OMP_NUM_THREADS="1").items() if k not in stale}
    return env


def test_sft_sweep_jobs_write_their_own_output_dirs(slurm_cluster, tmp_path, tiny_model_dir):
    """`train selector_sft -m hydra/launcher=slurm` over 2 learning rates: one job array, each task training into
    <sweep dir>/<task>/checkpoints with its own final model (a shared sft.output_dir made the second job skip)."""
    from tests.fixtures.sft import sft_overrides, write_selector_pairs

    sweep_dir = tmp_path / "sweep"
    overrides = [o for o in sft_overrides(tiny_model_dir, write_selector_pairs(tmp_path / "pairs.jsonl"), "unused")
                 if not o.startswith(("sft.output_dir=", "sft.learning_rate="))]
    out = subprocess.run(
        [sys.executable, "-m", "scholar_agents", "train", "selector_sft", "-m", "hydra/launcher=slurm",
         f"hydra.launcher.partition={slurm_cluster.partition}", "hydra.launcher.mem_gb=4",
         f"hydra.sweep.dir={sweep_dir}", *overrides, "sft.learning_rate=1e-3,3e-3", "logging.wandb.enabled=false"],
        capture_output=True, text=True, env=_sft_job_env(slurm_cluster, tmp_path), timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    finals = [sweep_dir / str(i) / "checkpoints" / "final" for i in (0, 1)]
    done = [json.loads((f / "SFT_DONE.json").read_text()) for f in finals]
    assert [d["global_step"] for d in done] == [2, 2], done
    assert (finals[0] / "model.safetensors").read_bytes() != (finals[1] / "model.safetensors").read_bytes()
    assert not (tmp_path / "outputs" / "checkpoints").exists()  # nothing in the single-run default dir
    ids = {re.match(r"(\d+)_(\d+)$", p.name).group(1) for p in (sweep_dir / ".submitit").iterdir()
           if re.match(r"\d+_\d+$", p.name)}
    assert len(ids) == 1  # one job array


def test_sft_job_preempted_checkpoints_requeues_and_resumes_into_one_wandb_run(slurm_cluster, tmp_path,
                                                                               tiny_model_dir):
    """sbatch + job_env.sh + requeue_glue.sh, as the templates run SFT: the batch shell is warned with SIGUSR1
    (what `--signal=B:USR1@300` does before the time limit), forwards SIGTERM, the HF Trainer checkpoints at the
    end of its step, the job requeues itself (exit 75) and the second run resumes to the same final step, logging
    into the same wandb run."""
    from tests.fixtures.sft import sft_overrides, write_selector_pairs

    steps = 4
    script = tmp_path / "sft.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --requeue\n#SBATCH --open-mode=append\n"
                      'source "$SCHOLAR_REPO/slurm/job_env.sh"\nscholar_single train selector_sft "$@"\nexit $?\n')
    logs = tmp_path / "logs"
    logs.mkdir()
    overrides = [o for o in sft_overrides(tiny_model_dir, write_selector_pairs(tmp_path / "pairs.jsonl"), "unused", steps)
                 if not o.startswith("sft.output_dir=")]  # the default: outputs/checkpoints/selector_sft
    job = _sh("sbatch", "--parsable", "--job-name=sft_preempt", f"--output={logs}/%x-%j.out", "--mem=4G",
              f"--partition={slurm_cluster.partition}", str(script), *overrides, "logging.wandb.mode=offline",
              env=_sft_job_env(slurm_cluster, tmp_path)).strip()
    deadline = time.time() + 120
    while "preemption handler on" not in _log_text(logs, job):
        assert time.time() < deadline, f"SFT never started: {_sacct(job)}\n{_log_text(logs, job)[-3000:]}"
        time.sleep(0.3)
    _sh("scancel", "--batch", "--signal=USR1", job)  # lands before the first step ends: checkpoint-1

    records = _wait_finished(job, timeout=150)
    log_text = _log_text(logs, job)
    assert [r["state"] for r in records] == ["REQUEUED", "COMPLETED"], (records, log_text[-4000:])
    assert "caught SIGUSR1 in the batch shell" in log_text and "caught SIGTERM" in log_text, log_text[-4000:]
    assert "exiting for requeue" in log_text, log_text[-4000:]
    ckpt = tmp_path / "outputs" / "checkpoints" / "selector_sft"
    summary = json.loads((tmp_path / "outputs" / "slurm" / "sft_preempt" / job / "sft_summary.json").read_text())
    assert summary["restart_count"] == 1 and summary["resumed_from"] == str(ckpt / "checkpoint-1"), summary
    assert summary["global_step"] == steps and (ckpt / "final" / "SFT_DONE.json").is_file()
    run_id = (ckpt / "wandb_run_id").read_text().strip()
    assert summary["wandb_run_id"] == run_id
    runs = sorted(p.name for p in (tmp_path / "outputs" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(r.endswith(f"-{run_id}") for r in runs), runs


def test_submitit_job_with_two_srun_tasks_forms_one_torch_distributed_world(slurm_cluster, tmp_path):
    """`hydra.launcher.tasks_per_node=2`: submitit's srun starts 2 Python processes; hydra_app.task_environment
    exports RANK / WORLD_SIZE / MASTER_ADDR from submitit's JobEnvironment and the probe's gloo all-reduce adds up
    over both ranks (without the export each task trains alone as a world of one)."""
    sweep_dir = tmp_path / "sweep"
    out = subprocess.run(
        [sys.executable, "-m", "scholar_agents", "slurm", "probe", "-m", "hydra/launcher=slurm",
         f"hydra.launcher.partition={slurm_cluster.partition}", "hydra.launcher.tasks_per_node=2",
         f"hydra.sweep.dir={sweep_dir}", "probe.lr=0.1", "probe.steps=10"],
        capture_output=True, text=True, env=_sft_job_env(slurm_cluster, tmp_path), timeout=180, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = json.loads((sweep_dir / "0" / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["allreduce_ok"] is True, metrics


def test_sft_under_the_submitit_launcher_with_two_srun_tasks_trains_as_one_world(slurm_cluster, tmp_path,
                                                                                 tiny_model_dir):
    """An SFT failure seen on a cluster: under the submitit launcher no RANK / WORLD_SIZE reached the trainer
    (DeepSpeed then looked for MPI; plain DDP trained each task alone). Two srun tasks must train as one world of
    2 with ZeRO-2 over gloo and write one final model."""
    import importlib.util

    from scholar_agents.hydra_app import CONF_DIR
    from tests.fixtures.sft import sft_overrides, write_selector_pairs

    if importlib.util.find_spec("deepspeed") is None:
        pytest.skip("deepspeed not installed")
    sweep_dir = tmp_path / "sweep"
    overrides = [o for o in sft_overrides(tiny_model_dir, write_selector_pairs(tmp_path / "pairs.jsonl"), "unused")
                 if not o.startswith("sft.output_dir=")]
    out = subprocess.run(
        [sys.executable, "-m", "scholar_agents", "train", "selector_sft", "-m", "hydra/launcher=slurm",
         f"hydra.launcher.partition={slurm_cluster.partition}", "hydra.launcher.tasks_per_node=2",
         "hydra.launcher.mem_gb=6", f"hydra.sweep.dir={sweep_dir}", *overrides, "logging.wandb.enabled=false",
         f"sft.deepspeed={CONF_DIR / 'deepspeed' / 'zero2.json'}"],
        capture_output=True, text=True, env=_sft_job_env(slurm_cluster, tmp_path), timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads((sweep_dir / "0" / "sft_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["effective_batch"] == 4 and summary["global_step"] == 2, summary
    assert (sweep_dir / "0" / "checkpoints" / "final" / "model.safetensors").is_file()


def test_sft_sweep_job_preempted_under_submitit_resumes_in_its_own_dir(slurm_cluster, tmp_path, tiny_model_dir):
    """The submitit launcher's path: its warning signal (SIGUSR2, to the srun-started Python process) -> checkpoint
    at step 1 -> `scontrol requeue` + exit 75 -> the job reruns in the same sweep subdir, resumes
    and returns its result to the waiting launcher."""
    from tests.fixtures.sft import sft_overrides, write_selector_pairs

    sweep_dir, steps = tmp_path / "sweep", 4
    overrides = [o for o in sft_overrides(tiny_model_dir, write_selector_pairs(tmp_path / "pairs.jsonl"), "unused", steps)
                 if not o.startswith("sft.output_dir=")]
    launcher = subprocess.Popen(
        [sys.executable, "-m", "scholar_agents", "train", "selector_sft", "-m", "hydra/launcher=slurm",
         f"hydra.launcher.partition={slurm_cluster.partition}", "hydra.launcher.mem_gb=4",
         f"hydra.sweep.dir={sweep_dir}", *overrides, "sft.seed=0", "logging.wandb.mode=offline"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_sft_job_env(slurm_cluster, tmp_path),
        cwd=tmp_path)
    try:
        deadline, task = time.time() + 120, None
        while task is None:
            assert time.time() < deadline and launcher.poll() is None, "the sweep job never started training"
            # (a one-job sweep is a plain job, not an array: its submitit folder is the job id)
            for log_file in (sweep_dir / ".submitit").glob("*/*_0_log.*") if (sweep_dir / ".submitit").is_dir() \
                    else []:
                if "preemption handler on" in log_file.read_text(errors="replace"):
                    task = log_file.parent.name
            time.sleep(0.2)
        _sh("scancel", "--signal=USR2", task)
        out = launcher.communicate(timeout=240)[0]
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, out[-4000:]
    records = _wait_finished(task, timeout=60)
    assert [r["state"] for r in records] == ["REQUEUED", "COMPLETED"], records
    summary = json.loads((sweep_dir / "0" / "sft_summary.json").read_text())
    assert summary["restart_count"] == 1 and summary["resumed_from"].endswith("checkpoint-1"), summary
    assert summary["global_step"] == steps
    assert summary["wandb_run_id"] == (sweep_dir / "0" / "checkpoints" / "wandb_run_id").read_text().strip()
