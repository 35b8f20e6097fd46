"""The launch/preemption glue without a cluster: signal handler, Slurm environment helpers, the batch-shell signal
forwarding, exact resume of the probe after SIGTERM, the sweep report, and the Hydra launcher configs."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from scholar_agents.eval.sweep_report import build_report, choose_metrics, collect_runs, resolve_sweep_dir
from scholar_agents.runtime import preemption
from scholar_agents.runtime.slurm_probe import SlurmProbeConfig, probe
from tests.paths import REPO

SCHOLAR = str(Path(sys.executable).with_name("scholar"))
SLURM_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_RESTART_COUNT", "SLURM_PROCID",
              "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_NTASKS_PER_NODE", "RANK", "LOCAL_RANK",
              "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE", "SLURM_STEP_ID", "SLURM_JOB_NUM_NODES",
              "SLURM_NODEID", "TORCHELASTIC_RUN_ID", "SUBMITIT_EXECUTOR")


@pytest.fixture
def no_slurm(monkeypatch):
    for var in SLURM_VARS:
        # set-then-delete so that monkeypatch restores the variable's absence too: the code under test writes
        # RANK / WORLD_SIZE / MASTER_ADDR into os.environ, which must not leak into later tests (a Slurm job
        # submitted later inherits the environment and would wait for a rendezvous on a host that does not exist)
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    return {k: v for k, v in os.environ.items() if k not in SLURM_VARS}


def test_handler_sets_flag_on_signal_and_uninstall_restores(no_slurm):
    before = signal.getsignal(signal.SIGUSR1)
    handler = preemption.PreemptionHandler.install(["SIGUSR1", "SIGTERM"])
    try:
        assert not handler.requested and not handler.should_stop()
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert handler.requested and handler.should_stop() and handler.received == ["SIGUSR1"]
        with pytest.raises(SystemExit) as exc:  # outside Slurm: nothing to requeue, just the exit code
            handler.exit_for_requeue()
        assert exc.value.code == preemption.REQUEUE_EXIT_CODE == 75
    finally:
        handler.uninstall()
    assert signal.getsignal(signal.SIGUSR1) == before
    with pytest.raises(ValueError, match="unknown signal"):
        preemption.PreemptionHandler.install(["SIGNOPE"])


def test_trainer_callback_saves_and_stops_on_preemption(no_slurm):
    from transformers import TrainerControl, TrainerState, TrainingArguments

    handler = preemption.PreemptionHandler.install(["SIGUSR2"])
    try:
        callback = preemption.trainer_callback(handler)
        args, state = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[]), TrainerState()
        control = callback.on_step_end(args, state, TrainerControl())
        assert not control.should_save and not control.should_training_stop
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.05)
        control = callback.on_step_end(args, state, TrainerControl())
        assert control.should_save and control.should_training_stop
    finally:
        handler.uninstall()


def test_slurm_environment_helpers(no_slurm, monkeypatch):
    assert preemption.slurm_job_id() is None and preemption.restart_count() == 0
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert preemption.slurm_job_id() == "1234" and preemption.restart_count() == 2
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "1200")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert preemption.slurm_job_id() == "1200_3"  # what scontrol requeue wants for an array task
    assert preemption.slurm_info()["array_task_id"] == "3"


def test_export_torch_distributed_env_from_srun_tasks(no_slurm, monkeypatch):
    srun_task = {"SLURM_JOB_ID": "4321", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "16", "SLURM_PROCID": "9",
                 "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_NODEID": "1",
                 "SLURM_JOB_NODELIST": "gpu[03-04]"}
    for k, v in srun_task.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("RANK", "0")  # stale, inherited from the submitting shell: Slurm's task id wins
    assert preemption.export_torch_distributed_env() == "slurm"
    env = os.environ
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("9", "1", "16", "8")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("gpu03", str(20000 + 4321))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "4321")  # a torchrun worker inside srun: torchrun's ranks stay
    monkeypatch.setenv("RANK", "5")
    assert preemption.export_torch_distributed_env() == "torchrun" and env["RANK"] == "5"


def test_export_torch_distributed_env_single_process(no_slurm, monkeypatch):
    """One process (a laptop, a batch script without srun, a 1-task srun): a world of one with a rendezvous
    address, never DeepSpeed's MPI fallback. A batch script's SLURM_NTASKS=16 is not 16 ranks (no SLURM_STEP_ID)."""
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_NTASKS", "16")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert preemption.export_torch_distributed_env() == "single"
    env = os.environ
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "0", "1", "127.0.0.1")
    assert 0 < int(env["MASTER_PORT"]) < 65536
    monkeypatch.setenv("RANK", "3")  # another launcher (e.g. `deepspeed`) set the ranks: left alone
    assert preemption.export_torch_distributed_env() == "preset" and env["RANK"] == "3"


def test_job_env_sets_nccl_debug_to_warn_unless_the_user_chose(no_slurm):
    """slurm/job_env.sh (sourced by every sbatch template) exports NCCL_DEBUG=WARN, and keeps a value exported
    before sbatch (NCCL_DEBUG=INFO for a rerun of a hang)."""
    env = {**no_slurm, "SCHOLAR_DRY_RUN": "1", "SCHOLAR_REPO": str(REPO), "SCHOLAR_VENV": sys.prefix}
    env.pop("NCCL_DEBUG", None)
    script = f'source {REPO}/slurm/job_env.sh\nbash -c \'echo "NCCL_DEBUG=$NCCL_DEBUG"\'\n'
    for exported, expect in ((None, "WARN"), ("INFO", "INFO")):
        out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                             env=env if exported is None else {**env, "NCCL_DEBUG": exported})
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == f"NCCL_DEBUG={expect}"


def preemptible_step(path, shebang: bool = False):
    """A job step that waits for a preemption signal through our handler, prints which one, and exits for requeue
    (75); ``shebang``: an executable file (standing in for ``srun``, which passes the signal on)."""
    path.write_text((f"#!{sys.executable}\n" if shebang else "") + "import time\n"
                    "from scholar_agents.runtime.preemption import PreemptionHandler\n"
                    "h = PreemptionHandler.install()\n"
                    "print('ready', flush=True)\n"
                    "while not h.should_stop():\n    time.sleep(0.02)\n"
                    "print('stopping on', h.received, flush=True)\n"
                    "h.exit_for_requeue()\n")
    if shebang:
        path.chmod(0o755)
    return path


def test_requeue_glue_forwards_batch_shell_signal_as_sigterm(no_slurm, tmp_path):
    """What `--signal=B:USR1@120` does: only the batch shell gets USR1; the glue must pass SIGTERM to the step."""
    step = preemptible_step(tmp_path / "step.py")
    script = tmp_path / "job.sh"
    script.write_text(f"source {REPO}/slurm/requeue_glue.sh\nrun_preemptible {sys.executable} {step}\nexit $?\n")
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=no_slurm)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 75, err
    assert "stopping on ['SIGTERM']" in out
    assert "caught SIGUSR1 in the batch shell" in err and "step exited 75" in err


def test_requeue_glue_passes_the_warning_to_srun_as_sigusr1(no_slurm, tmp_path):
    """srun turns a SIGTERM of its own into SIGKILL for its tasks ("forcing job termination"): a step started
    through srun (`scholar_torchrun`) gets the warning as SIGUSR1, which srun passes on. Here `srun` is a stand-in
    that records the signal it got (the real path runs in tests/runtime/test_slurm_cluster.py)."""
    srun = preemptible_step(tmp_path / "srun", shebang=True)
    script = tmp_path / "job.sh"
    script.write_text(f"source {REPO}/slurm/requeue_glue.sh\nrun_preemptible {srun}\nexit $?\n")
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**no_slurm, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 75, err
    assert "stopping on ['SIGUSR1']" in out
    assert "caught SIGUSR1 in the batch shell" in err and "SIGUSR1 -> pid" in err


def test_a_warning_before_the_step_starts_is_kept_and_the_step_told(no_slurm, tmp_path):
    """Slurm sends `--signal=B:USR1@<lead>` as soon as the time left is under the lead (at once when the job's
    --time is under it; the local cluster did so 6 s into a 5-min job): a batch shell still composing the config
    died of it, bash's default for USR1. The glue records it from the moment it is sourced, and the next step, the
    real probe here, is told as it starts: it checkpoints at its first step boundary and exits 75. A later step is
    not told again."""
    run_dir = tmp_path / "run"
    script = tmp_path / "job.sh"
    script.write_text(
        f"source {REPO}/slurm/requeue_glue.sh\n"
        "kill -USR1 $$\n"
        f"run_preemptible {SCHOLAR} slurm probe hydra.run.dir={run_dir} probe.steps=50 probe.step_seconds=0.05 "
        "probe.checkpoint_every=100\n"
        'echo "first=$?"\n'
        f"run_preemptible {sys.executable} -c \"import os; print('pending=' + os.environ.get('SCHOLAR_PREEMPTION_PENDING', "
        "'none'))\"\n"
        'echo "second=$?"\n')
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=no_slurm, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "caught SIGUSR1 in the batch shell of job ? before the step started" in out.stderr
    assert "first=75" in out.stdout and "second=0" in out.stdout and "pending=none" in out.stdout, out.stdout
    checkpoint = run_dir / "probe_checkpoint.pt"
    assert checkpoint.exists() and not (run_dir / "metrics.json").exists()
    assert "before this step started" in out.stdout + out.stderr


def _job_env_lines(tmp_path, header: str, env: dict, body: str) -> list[str]:
    """Run a batch script with ``header`` (its #SBATCH lines) that sources slurm/job_env.sh in dry-run mode."""
    script = tmp_path / "job.sbatch"
    script.write_text(f"#!/bin/bash\n{header}source {REPO}/slurm/job_env.sh\n{body}")
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**env, "SCHOLAR_DRY_RUN": "1", "SCHOLAR_REPO": str(REPO), "SCHOLAR_VENV": sys.prefix,
                              "SCHOLAR_OUTPUTS": str(tmp_path / "outputs")})
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines() + out.stderr.splitlines()


def test_job_env_reads_the_signal_lead_the_job_was_submitted_with(no_slurm, tmp_path):
    """The lead is in no Slurm variable: SBATCH_SIGNAL (what sbatch read) wins over the script's #SBATCH line; an
    exported SCHOLAR_SIGNAL_LEAD_S over both; a --signal without @<s> is Slurm's default 60 s."""
    env = {k: v for k, v in no_slurm.items() if k not in ("SBATCH_SIGNAL", "SCHOLAR_SIGNAL_LEAD_S")}
    show = 'echo "lead=${SCHOLAR_SIGNAL_LEAD_S:-none}"\n'
    cases = [("#SBATCH --signal=B:USR1@450\n", {}, "lead=450"),
             ("#SBATCH --time=10\n#SBATCH --signal B:USR1@90\n", {}, "lead=90"),
             ("#SBATCH --signal=B:USR1@450\n", {"SBATCH_SIGNAL": "B:USR1@700"}, "lead=700"),
             ("#SBATCH --signal=B:USR1@450\n", {"SCHOLAR_SIGNAL_LEAD_S": "30"}, "lead=30"),
             ("#SBATCH --signal=USR2\n", {}, "lead=60"),
             ("#SBATCH --time=10\n", {}, "lead=none")]
    for header, extra, expect in cases:
        assert expect in _job_env_lines(tmp_path, header, {**env, **extra}, show), (header, extra)


def test_scholar_torchrun_passes_cluster_shutdown_grace_s_to_torchrun(no_slurm, tmp_path):
    """torchrun's --shutdown-timeout is the composed config's cluster.shutdown_grace_s (or SCHOLAR_SHUTDOWN_GRACE_S),
    and torchrun handles the warnings (SIGUSR1 reaches it through srun)."""
    env = {k: v for k, v in no_slurm.items() if not k.startswith(("SBATCH_", "SCHOLAR_"))}
    run = 'scholar_torchrun slurm probe "$@"\n'
    header = "#SBATCH --signal=B:USR1@120\n"
    lines = _job_env_lines(tmp_path, header, env, run.replace('"$@"', "cluster.shutdown_grace_s=45"))
    step = next(line for line in lines if line.startswith("[dry-run] srun "))
    assert "--shutdown-timeout=45 " in step and "cluster.shutdown_grace_s=45" in step
    assert "--signals-to-handle=SIGTERM\\,SIGINT\\,SIGHUP\\,SIGQUIT\\,SIGUSR1\\,SIGUSR2" in step
    assert "[job_env] preemption window: Slurm's signal lead 120 s, torchrun's shutdown window 45 s " \
           "(cluster.shutdown_grace_s)" in lines
    default = next(line for line in _job_env_lines(tmp_path, header, env, run.replace('"$@"', ""))
                   if line.startswith("[dry-run] srun "))
    assert "--shutdown-timeout=300 " in default  # conf/cluster/cpu.yaml
    exported = _job_env_lines(tmp_path, header, {**env, "SCHOLAR_SHUTDOWN_GRACE_S": "77"}, run.replace('"$@"', ""))
    assert any("--shutdown-timeout=77 " in line for line in exported)


def _torchrun_without(flag: str, bin_dir: Path) -> Path:
    """A `torchrun` that is the installed one (torch.distributed.run, its real parser and launcher) without ``flag``:
    what torch 2.10's torchrun (the CUDA 12 lock) is to --shutdown-timeout."""
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / "torchrun"
    exe.write_text(f"""#!{sys.executable}
import sys
from torch.distributed import run

_parser = run.get_args_parser


def _without_the_flag():
    parser = _parser()
    for action in [a for a in parser._actions if {flag!r} in a.option_strings]:
        parser._remove_action(action)
        for group in parser._action_groups:
            if action in group._group_actions:
                group._group_actions.remove(action)
        for option in action.option_strings:
            parser._option_string_actions.pop(option)
    return parser


_parse_args = run.parse_args


def _parse_without_the_flag(args):  # the launcher below reads the setting: torch 2.10 had none, 30 s fixed
    namespace = _parse_args(args)
    setattr(namespace, {flag.lstrip("-").replace("-", "_")!r}, None)
    return namespace


run.get_args_parser = _without_the_flag
run.parse_args = _parse_without_the_flag
sys.exit(run.main())
""")
    exe.chmod(0o755)
    return exe


def test_scholar_torchrun_passes_only_the_flags_the_installed_torchrun_has(no_slurm, tmp_path):
    """A torchrun without --shutdown-timeout (torch 2.10) rejects it at start; scholar_torchrun probes the flags
    once, leaves that one out, says the window is torch's fixed 30 s and exports it for the workers' check. The
    printed torchrun line then starts for real under that torchrun."""
    env = {k: v for k, v in no_slurm.items() if not k.startswith(("SBATCH_", "SCHOLAR_"))}
    old = _torchrun_without("--shutdown-timeout", tmp_path / "old_bin")
    body = (f'export PATH="{old.parent}:$PATH"\nscholar_torchrun slurm probe cluster.shutdown_grace_s=45\n'
            'scholar_torchrun slurm probe cluster.shutdown_grace_s=45\n'
            'echo "window=$SCHOLAR_SHUTDOWN_GRACE_S fixed=${SCHOLAR_SHUTDOWN_GRACE_FIXED:-}"\n')
    lines = _job_env_lines(tmp_path, "#SBATCH --signal=B:USR1@120\n", env, body)
    steps = [line for line in lines if line.startswith("[dry-run] srun ")]
    assert len(steps) == 2 and all("--shutdown-timeout" not in s for s in steps)
    assert "--signals-to-handle=SIGTERM\\,SIGINT\\,SIGHUP\\,SIGQUIT\\,SIGUSR1\\,SIGUSR2" in steps[0]
    assert sum(line.startswith("[job_env] torchrun probed: torch ") for line in lines) == 1  # once per job
    assert any("lacks: --shutdown-timeout" in line for line in lines)
    assert any("has no --shutdown-timeout" in line and "cluster.shutdown_grace_s=45 says" in line for line in lines)
    assert "[job_env] preemption window: Slurm's signal lead 120 s, torchrun's shutdown window 30 s " \
           "(torchrun's fixed default)" in lines
    assert "window=30 fixed=1" in lines

    # the launch line itself, without srun, under that torchrun: it starts and the probe job runs to the end
    argv = shlex.split(steps[0][len("[dry-run] "):])
    launch = [str(old), *argv[argv.index("torchrun") + 1:]]
    launch = [a.replace(f"hydra.run.dir={a.partition('=')[2]}", f"hydra.run.dir={tmp_path / 'run'}")
              if a.startswith("hydra.run.dir=") else a for a in launch]
    run_env = {**env, "MASTER_PORT": "0", "OMP_NUM_THREADS": "1", "SCHOLAR_SHUTDOWN_GRACE_S": "30",
               "SCHOLAR_SHUTDOWN_GRACE_FIXED": "1"}
    launch = [a for a in launch if not a.startswith("--rdzv")]  # a local rendezvous (no Slurm here)
    launch.insert(1, "--standalone")
    proc = subprocess.run(launch, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # ... and the same line with the flag is what an old torchrun refuses at once
    refused = subprocess.run([*launch[:2], "--shutdown-timeout=45", *launch[2:]], cwd=REPO, env=run_env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "unrecognized arguments: --shutdown-timeout=45" in refused.stderr


def test_a_node_s_ranks_share_its_cpus(no_slurm, tmp_path):
    """OMP_NUM_THREADS is the task's CPUs divided among the node's ranks (at least 1), not the whole task per rank."""
    env = {k: v for k, v in no_slurm.items() if not k.startswith(("SBATCH_", "SCHOLAR_", "OMP_"))}
    show = 'echo "omp=$OMP_NUM_THREADS"\n'
    for cpus, ranks, expect in (("32", "4", "omp=8"), ("6", "4", "omp=1"), ("3", "8", "omp=1"), ("16", "1", "omp=16")):
        lines = _job_env_lines(tmp_path, "", {**env, "SLURM_CPUS_PER_TASK": cpus, "SCHOLAR_NPROC_PER_NODE": ranks},
                               show)
        assert expect in lines, (cpus, ranks, lines[-3:])
    assert "omp=3" in _job_env_lines(tmp_path, "", {**env, "SLURM_CPUS_PER_TASK": "32", "OMP_NUM_THREADS": "3"},
                                     show)  # an exported value wins


def test_requeue_glue_reports_a_step_that_ignores_the_protocol(no_slurm, tmp_path):
    """A step without preemption.py dies of the forwarded SIGTERM; the glue would requeue the job (here: no job)."""
    script = tmp_path / "job.sh"
    script.write_text(f"source {REPO}/slurm/requeue_glue.sh\nrun_preemptible sleep 30\nexit $?\n")
    proc = subprocess.Popen(["bash", str(script)], stderr=subprocess.PIPE, text=True, env=no_slurm)
    time.sleep(0.5)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "step died (exit 143) after a preemption signal; not a Slurm job" in err


def test_probe_resumes_exactly_after_sigterm(no_slurm, tmp_path):
    run_dir = tmp_path / "run"
    cmd = [SCHOLAR, "slurm", "probe", f"hydra.run.dir={run_dir}", "probe.steps=12", "probe.checkpoint_every=100"]
    # Hydra logs to stdout.
    proc = subprocess.Popen([*cmd, "probe.step_seconds=0.3"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=no_slurm)
    for line in proc.stdout:
        if "training from step 0" in line:
            proc.send_signal(signal.SIGTERM)
            break
    proc.stdout.read()
    assert proc.wait(timeout=60) == 75
    assert (run_dir / "probe_checkpoint.pt").exists() and not (run_dir / "metrics.json").exists()
    subprocess.run(cmd, check=True, capture_output=True, env=no_slurm, timeout=120)
    resumed = json.loads((run_dir / "metrics.json").read_text())
    # The same run without interruption, in this process.
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)}
    try:
        straight = probe(OmegaConf.create({"probe": OmegaConf.structured(SlurmProbeConfig(steps=12)),
                                           "paths": {"output_dir": str(tmp_path / "straight")}}))
    finally:  # the probe leaves its preemption handler installed (it belongs to the process): take it out, or a
        # later test's trainer would take it for its entry's and never install its own
        if preemption.active() is not None:
            preemption.active().uninstall()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    assert 0 < resumed["resumed_from_step"] < 12 and straight["resumed_from_step"] == 0
    assert resumed["final_loss"] == pytest.approx(straight["final_loss"], rel=1e-6)
    assert resumed["weight_error"] == pytest.approx(straight["weight_error"], rel=1e-6)


def test_probe_refuses_a_wrong_typed_setting_in_one_line_naming_it(no_slurm, tmp_path):
    from scholar_agents.validation import UsageError

    cfg = OmegaConf.create({"probe": {"steps": "many"}, "paths": {"output_dir": str(tmp_path)}})
    with pytest.raises(UsageError) as e:
        probe(cfg)
    assert str(e.value) == "probe.steps: Value 'many' of type 'str' could not be converted to Integer"
    assert not any(tmp_path.iterdir())  # refused before anything was written


def _fake_sweep(root: Path, results: dict[float, dict | None]) -> Path:
    """A Hydra multirun dir as Hydra writes it: <n>/.hydra/overrides.yaml (+ the job's metrics file)."""
    root.mkdir(parents=True)
    (root / "multirun.yaml").write_text("hydra: {}\n")
    for i, (alpha, metrics) in enumerate(results.items()):
        job = root / str(i)
        (job / ".hydra").mkdir(parents=True)
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"ppo.alpha={alpha}", "seed=1"]))
        if metrics is not None:
            (job / "metrics.json").write_text(json.dumps(metrics))
    return root


def test_sweep_report_table6_style(tmp_path):
    # PaSa Table 6's numbers, as a crawler_ppo sweep would report them; one job died without metrics.
    table6 = {0.5: (0.7227, 175.9), 1.0: (0.7708, 319.8), 1.5: (0.7931, 382.4), 2.0: (0.8063, 785.5)}
    results = {a: {"eval": {"crawler_recall": r, "crawler_actions": n, "queries": 100}, "alpha": a}
               for a, (r, n) in table6.items()}
    results[2.5] = None
    sweep = _fake_sweep(tmp_path / "multirun" / "train_crawler_ppo" / "2026-01-01_00-00-00", results)
    runs = collect_runs(sweep, ["metrics.json"])
    assert [r.params for r in runs][:2] == [{"ppo.alpha": 0.5}, {"ppo.alpha": 1.0}]  # `seed` is not swept
    # Default columns: numeric metrics that vary, without the echo of the swept alpha and the constant `queries`.
    assert choose_metrics(runs, None, 6) == ["eval.crawler_recall", "eval.crawler_actions"]
    assert resolve_sweep_dir(tmp_path / "multirun" / "train_crawler_ppo") == sweep

    out = build_report(tmp_path / "multirun" / "train_crawler_ppo", tmp_path / "report",
                       labels={"ppo.alpha": "α", "eval.crawler_recall": "Crawler Recall",
                               "eval.crawler_actions": "Crawler Actions"})
    md = (tmp_path / "report" / "sweep_report.md").read_text()
    assert "| α | Crawler Recall | Crawler Actions | status |" in md
    assert "| 0.5 | 0.7227 | 175.9 | ok |" in md and "| 2 | 0.8063 | 785.5 | ok |" in md
    assert "| 2.5 | – | – | no metrics |" in md
    assert out["runs"] == 5 and out["runs_with_metrics"] == 4
    assert (tmp_path / "report" / "sweep_report.png").stat().st_size > 5000
    with pytest.raises(ValueError, match="no run's metrics"):
        build_report(sweep, tmp_path / "r2", metrics=["eval.precision"])
    with pytest.raises(ValueError, match="not a Hydra multirun"):
        resolve_sweep_dir(tmp_path / "report")


@pytest.mark.parametrize("launcher,target,nodes,partition", [
    ("slurm", "SlurmLauncher", 1, "test"), ("slurm_h100", "SlurmLauncher", 2, "h100"),
    ("slurm_a6000", "SlurmLauncher", 2, "a6000"), ("local", "LocalLauncher", 1, None)])
def test_launcher_configs_compose(monkeypatch, launcher, target, nodes, partition):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from scholar_agents import hydra_app

    monkeypatch.delenv("SCHOLAR_SLURM_PARTITION", raising=False)
    hydra_app._register_resolvers()
    hydra_app.register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(hydra_app.CONF_DIR)):
        cfg = compose("slurm_probe", [f"hydra/launcher={launcher}"], return_hydra_config=True)
    launch = cfg.hydra.launcher
    assert launch._target_.endswith(target) and launch.nodes == nodes
    if target == "SlurmLauncher":  # the preemption window: cluster.shutdown_grace_s, exported for the start-up check
        assert launch.signal_delay_s == cfg.cluster.shutdown_grace_s == 300  # cluster=cpu
        assert "export SCHOLAR_SIGNAL_LEAD_S=300" in launch.setup
    if partition is not None:
        assert launch.partition == partition
        assert OmegaConf.to_container(launch.additional_parameters) == {"requeue": True}
        assert launch.tasks_per_node * nodes == (16 if nodes == 2 else 1)  # one process per GPU on 2 x 8 GPUs


def test_shell_scripts_parse():
    scripts = [*sorted((REPO / "slurm").glob("*.sh")), *sorted((REPO / "slurm").glob("*.sbatch")),
               *sorted((REPO / "scripts").glob("*.sh"))]  # the learning / Show scripts the docs run
    assert len(scripts) > 10
    for script in scripts:
        out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert out.returncode == 0, f"{script}: {out.stderr}"


@pytest.mark.slurm  # submitit's SlurmExecutor refuses to start where `srun` is not on PATH
@pytest.mark.parametrize("launcher,cpus", [("slurm", 1), ("slurm_h100", 12), ("slurm_a6000", 8)])
def test_launcher_sbatch_gives_srun_the_cpus_per_task(monkeypatch, tmp_path, launcher, cpus):
    """The sbatch file submitit writes for our launchers (rendered by submitit itself, as the Hydra plugin configures
    it): its srun line has no --cpus-per-task, so the setup lines must export SRUN_CPUS_PER_TASK before it (srun of
    Slurm 22.05-23.02 does not inherit the job's --cpus-per-task)."""
    import submitit
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf

    from scholar_agents import hydra_app

    monkeypatch.delenv("SCHOLAR_SLURM_PARTITION", raising=False)
    hydra_app._register_resolvers()
    hydra_app.register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(hydra_app.CONF_DIR)):
        cfg = compose("train_crawler_ppo", [f"hydra/launcher={launcher}", "experiment=pasa_crawler_ppo"],
                      return_hydra_config=True)
    # resolved, as the plugin's __init__ does (signal_delay_s and the lead's export read cluster.shutdown_grace_s)
    params = {k: v for k, v in OmegaConf.to_container(cfg.hydra.launcher, resolve=True).items()
              if k not in {"_target_", "submitit_folder"}}
    # what hydra_submitit_launcher's BaseSubmititLauncher.launch does with them
    executor = submitit.AutoExecutor(cluster="slurm", folder=tmp_path,
                                     slurm_max_num_timeout=params.pop("max_num_timeout"))
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"slurm_{k}": v for k, v in params.items()})
    text = executor._executor._make_submission_file_text("python -u -m submitit.core._submit", "uid")
    assert f"#SBATCH --cpus-per-task={cpus}" in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    assert "--cpus-per-task" not in srun  # submitit's own line: hence the export
    export = "export SRUN_CPUS_PER_TASK=$SLURM_CPUS_PER_TASK"
    assert export in text and text.index(export) < text.index(srun)
    assert cfg.hydra.runtime.choices.experiment == "pasa_crawler_ppo"
    # the preemption window: the experiment's cluster.shutdown_grace_s (h100_80gb), whichever launcher
    grace = cfg.cluster.shutdown_grace_s
    assert grace == 600 and f"#SBATCH --signal=USR2@{grace}" in text
    assert f"export SCHOLAR_SIGNAL_LEAD_S={grace}" in text
