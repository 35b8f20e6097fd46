"""Preemption glue shared by every long job: catch Slurm's warning signals, let the training loop checkpoint at a
step boundary, then leave in a way that gets the job requeued; plus where-am-I helpers (job id, restart count).

How a preemption plays out on Slurm (the sbatch templates in ``slurm/`` and the Hydra submitit launcher):

1. Slurm warns the job: ``--signal=B:USR1@120`` sends SIGUSR1 to the batch shell 120 s before the time limit
   (``slurm/requeue_glue.sh`` forwards it to the job step as SIGTERM, the one signal torchrun passes on to its
   workers); a scheduler preemption or ``scontrol requeue`` sends SIGTERM to every process; submitit sends
   SIGUSR2. Python's default for all three is to die on the spot.
2. :class:`PreemptionHandler` replaces that with "set a flag". The trainer polls :meth:`should_stop` once per step
   (agreed across ranks, so every rank stops after the same step), saves its checkpoint, and calls
   :meth:`exit_for_requeue`.
3. ``exit_for_requeue`` asks Slurm to requeue this job (``scontrol requeue``, once per job: global rank 0) and exits
   with :data:`REQUEUE_EXIT_CODE` (75, ``EX_TEMPFAIL``: "try again later"). Outside Slurm it just exits with 75,
   which a wrapper script can treat as "resume me".
4. The requeued job runs the same command again (``SLURM_RESTART_COUNT`` goes up); the trainer finds its
   checkpoint in its stable output directory and resumes.

Usage in a training loop::

    handler = PreemptionHandler.install()
    for step in range(start_step, total_steps):
        train_one_step()
        if handler.should_stop():          # a signal arrived: checkpoint at this step boundary
            save_checkpoint(step + 1)
            handler.exit_for_requeue()      # never returns

The handler never checkpoints inside the signal handler itself: a signal can land in the middle of an optimizer step
or a collective, where the state is inconsistent.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional

from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

# EX_TEMPFAIL from sysexits.h: the conventional "temporary failure, retry" status. Slurm sites can also map it to
# an automatic requeue with `RequeueExit=75` in slurm.conf.
REQUEUE_EXIT_CODE = 75
# SIGTERM: preemption / scontrol requeue / our batch-shell glue; SIGUSR1: `--signal=USR1@N` without the B: prefix;
# SIGUSR2: submitit's default warning signal (hydra/launcher=slurm*).
DEFAULT_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2")
# Set by slurm/requeue_glue.sh when the batch shell caught a warning before the step started.
PENDING_ENV = "SCHOLAR_PREEMPTION_PENDING"


def slurm_job_id() -> Optional[str]:
    """This job's id as ``scontrol`` accepts it (array tasks: ``<array job>_<task>``), or None outside Slurm."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def restart_count() -> int:
    """How many times Slurm has requeued this job (``SLURM_RESTART_COUNT``; 0 on the first run or outside Slurm)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0)
    except ValueError:
        return 0


def global_rank() -> int:
    """This process's rank in the whole job: torchrun's RANK, else srun's SLURM_PROCID, else 0."""
    for var in ("RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def slurm_info() -> dict:
    """What a run log should record about where it ran (empty values outside Slurm)."""
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NAME", "SLURM_JOB_PARTITION",
            "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_CLUSTER_NAME")
    info = {k.removeprefix("SLURM_").lower(): os.environ.get(k) for k in keys if os.environ.get(k)}
    info["restart_count"] = restart_count()
    return info


# What torch.distributed's env:// rendezvous, accelerate and DeepSpeed read. Without RANK / WORLD_SIZE, DeepSpeed
# falls back to MPI discovery and stops with `ModuleNotFoundError: mpi4py`.
TORCH_DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _srun_job_environment():
    """submitit's view of this Slurm task when srun started several tasks (the Hydra submitit launcher with
    ``tasks_per_node > 1``, or ``srun python -m scholar_agents ...``), else None. ``SLURM_STEP_ID`` is set only in
    srun steps: a batch script that runs one process with ``--ntasks 16`` in its allocation is not 16 ranks."""
    if "SLURM_STEP_ID" not in os.environ or int(os.environ.get("SLURM_NTASKS", "1") or 1) <= 1:
        return None
    from submitit import JobEnvironment
    from submitit.slurm.slurm import SlurmJobEnvironment

    # Under submitit (SUBMITIT_EXECUTOR=slurm) JobEnvironment() is the Slurm one; a plain srun step is not a
    # submitit job, and JobEnvironment() refuses it, so ask the Slurm plugin directly (same SLURM_* parsing).
    return JobEnvironment() if os.environ.get("SUBMITIT_EXECUTOR") == "slurm" else SlurmJobEnvironment()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def export_torch_distributed_env(port_base: int = 20000) -> str:
    """Set RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT for this process, once for every
    entry point (``hydra_app.run_task`` calls it before the task). Returns how they were decided:

    - ``torchrun``: torchrun / ``accelerate launch`` started this process (``TORCHELASTIC_RUN_ID``): left alone.
    - ``slurm``: one of several srun tasks (submitit launcher): rank / world from submitit's ``JobEnvironment``
      (Slurm's task ids and node list); MASTER_ADDR = the allocation's first node; MASTER_PORT as
      ``slurm/job_env.sh`` derives it (20000 + job id mod 20000), unless exported. Overwrites stale values
      inherited from the submitting shell: Slurm knows better.
    - ``preset``: another launcher already set RANK (e.g. the ``deepspeed`` launcher): left alone.
    - ``single``: one process (a laptop, ``sbatch`` without srun, a 1-task srun): WORLD_SIZE=1, RANK=0,
      LOCAL_RANK=0, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (only where unset), so DeepSpeed initialises a
      one-process group instead of looking for MPI.
    """
    if os.environ.get("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    job_env = _srun_job_environment()
    if job_env is not None:
        port = os.environ.get("MASTER_PORT") or str(port_base + int(os.environ.get("SLURM_JOB_ID", "0") or 0) % 20000)
        os.environ.update({
            "RANK": str(job_env.global_rank),
            "LOCAL_RANK": str(job_env.local_rank),
            "WORLD_SIZE": str(job_env.num_tasks),
            "LOCAL_WORLD_SIZE": str(job_env.num_tasks // max(1, job_env.num_nodes)),
            "MASTER_ADDR": job_env.hostnames[0],
            "MASTER_PORT": port,
        })
        return "slurm"
    if "RANK" in os.environ:
        return "preset"
    for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_WORLD_SIZE", "1"),
                       ("MASTER_ADDR", "127.0.0.1")):
        os.environ.setdefault(key, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port())
    return "single"


# What NCCL and gloo read to choose their network interface, and NCCL's log level (docs/cluster.md, "When a job
# hangs"). export_network_env sets them; hydra_app.task_environment restores them after an in-process task.
NETWORK_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_DEBUG")


def export_network_env(socket_ifname: Optional[str] = None) -> dict[str, str]:
    """Export ``cluster.socket_ifname`` as ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME``, and set
    ``NCCL_DEBUG=WARN``, so that NCCL prints why a connection or a collective failed. A variable the user has
    already exported (non-empty) is never overridden. A value in NCCL's own syntax (``^docker0``: all but that one;
    ``=eth0``: exactly that one) goes to NCCL only, because gloo looks up each comma-separated name as an interface
    (torch 2.13 with ``GLOO_SOCKET_IFNAME=^docker0``: "Unable to find address for: ^docker0"). Returns the
    variables it set. Raises :class:`~scholar_agents.validation.UsageError` on the multi-node loopback trap
    (:func:`loopback_refusal`), before any process group exists."""
    wanted = {"NCCL_DEBUG": "WARN"}
    if socket_ifname:
        wanted["NCCL_SOCKET_IFNAME"] = str(socket_ifname)
        if str(socket_ifname).startswith(("^", "=")):
            log.warning("cluster.socket_ifname=%s is NCCL's syntax; gloo takes interface names only: "
                        "GLOO_SOCKET_IFNAME left as it is", socket_ifname)
        else:
            wanted["GLOO_SOCKET_IFNAME"] = str(socket_ifname)
    exported = {k: v for k, v in wanted.items() if not os.environ.get(k)}
    os.environ.update(exported)
    refusal = loopback_refusal()
    if refusal:
        raise UsageError(refusal)
    return exported


def loopback_refusal() -> Optional[str]:
    """Why this process must not start (None when it may): its world spans several nodes (WORLD_SIZE >
    LOCAL_WORLD_SIZE, as torchrun and export_torch_distributed_env set them), gloo has no interface named
    (GLOO_SOCKET_IFNAME, i.e. cluster.socket_ifname) and the hostname resolves to loopback. gloo then advertises
    that address to the other nodes, which cannot reach it: the first collective (vLLM's colocated engines build
    with one over the world group) hangs until the process-group timeout, hours later. Debian writes
    ``127.0.1.1 <hostname>`` into /etc/hosts; the two-node test cluster (slurm/two_node_cluster.sh) does too."""
    import socket

    try:
        world, local = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    except ValueError:
        return None
    if local < 1 or world <= local or os.environ.get("GLOO_SOCKET_IFNAME"):
        return None
    host = socket.gethostname()
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        return None  # unresolvable: gloo fails at once with its own error, it does not hang
    if not addr.startswith("127."):
        return None
    return (f"this world spans {world // local} nodes ({world} processes) and the hostname {host} resolves to "
            f"{addr} (loopback): gloo would advertise it to the other nodes and hang at the first collective; "
            f"set cluster.socket_ifname=<the interface between the nodes, `ip -br addr`, e.g. eth0 or ib0>")


# The preemption window (docs/cluster.md "Preemption, time limits and requeue"). Slurm's signal lead is not in a job's
# environment (and `scontrol show job` does not print it): slurm/job_env.sh exports it from SBATCH_SIGNAL or the batch
# script's `#SBATCH --signal=` line, the submitit launchers from their signal_delay_s. slurm/job_env.sh's
# `scholar_torchrun` exports the shutdown window it passed to torchrun (--shutdown-timeout, cluster.shutdown_grace_s).
SIGNAL_LEAD_VAR = "SCHOLAR_SIGNAL_LEAD_S"
SHUTDOWN_GRACE_VAR = "SCHOLAR_SHUTDOWN_GRACE_S"
# torch 2.13's torchrun: --shutdown-timeout (PET_SHUTDOWN_TIMEOUT), else TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30 s
# (torch/distributed/launcher/api.py LaunchConfig.shutdown_timeout): then the workers get SIGKILL.
TORCHRUN_SHUTDOWN_VARS = (SHUTDOWN_GRACE_VAR, "PET_SHUTDOWN_TIMEOUT", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT")
TORCHRUN_DEFAULT_SHUTDOWN_S = 30
# Set by `scholar_torchrun` when the installed torchrun has no --shutdown-timeout (torch 2.10, the CUDA 12 lock): the
# window is then torch's fixed 30 s, and cluster.shutdown_grace_s cannot lengthen it.
SHUTDOWN_FIXED_VAR = "SCHOLAR_SHUTDOWN_GRACE_FIXED"


def _seconds(var: str) -> Optional[float]:
    raw = os.environ.get(var, "").strip()
    try:
        return float(raw) if raw else None
    except ValueError:
        log.warning("%s=%r is not a number of seconds: ignored", var, raw)
        return None


def signal_lead_s() -> Optional[float]:
    """How long before its time limit Slurm warns this job (seconds), as the launchers export it
    (``SCHOLAR_SIGNAL_LEAD_S``); None when unknown (not under our sbatch templates or submitit launchers)."""
    return _seconds(SIGNAL_LEAD_VAR)


def torchrun_shutdown_s() -> Optional[float]:
    """Under torchrun: the seconds between torchrun forwarding a signal to its workers and SIGKILLing them; None
    when this process was not started by torchrun."""
    if not os.environ.get("TORCHELASTIC_RUN_ID"):
        return None
    for var in TORCHRUN_SHUTDOWN_VARS:
        value = _seconds(var)
        if value is not None:
            return value
    return float(TORCHRUN_DEFAULT_SHUTDOWN_S)


def preemption_window_warnings(lead_s: Optional[float], needed_s: Optional[float] = None,
                               needed_what: str = "one step + one checkpoint",
                               shutdown_s: Optional[float] = None, shutdown_fixed: bool = False) -> list[str]:
    """One line per problem with the preemption window: a Slurm signal lead (``lead_s``) shorter than what the job
    needs to finish its step and checkpoint (``needed_s``), and a torchrun shutdown window (``shutdown_s``) shorter
    than the lead (``shutdown_fixed``: a torchrun that cannot be given another). Nothing to say without a lead."""
    out = []
    if lead_s is None:
        return out
    if needed_s is not None and lead_s < needed_s:
        out.append(f"preemption window: Slurm warns this job {lead_s:.0f} s before its time limit, but {needed_what} "
                   f"needs ~{needed_s:.0f} s: the step in flight or its checkpoint may be lost. Raise the lead "
                   f"(SBATCH_SIGNAL=B:USR1@<s> sbatch ..., hydra.launcher.signal_delay_s) and cluster.shutdown_grace_s")
    if shutdown_s is not None and shutdown_s < lead_s and shutdown_fixed:
        out.append(f"preemption window: this torchrun has no --shutdown-timeout (torch 2.10 and older) and SIGKILLs "
                   f"its workers {shutdown_s:.0f} s after passing on the warning, less than Slurm's {lead_s:.0f} s "
                   f"signal lead: only a step + checkpoint within {shutdown_s:.0f} s survives; a torchrun with "
                   f"--shutdown-timeout (after torch 2.10) takes cluster.shutdown_grace_s")
    elif shutdown_s is not None and shutdown_s < lead_s:
        out.append(f"preemption window: torchrun SIGKILLs its workers {shutdown_s:.0f} s after passing on the warning "
                   f"(--shutdown-timeout = cluster.shutdown_grace_s), less than Slurm's {lead_s:.0f} s signal lead: "
                   f"set cluster.shutdown_grace_s={lead_s:.0f} or more")
    return out


def check_preemption_window(needed_s: Optional[float] = None,
                            needed_what: str = "one step + one checkpoint") -> list[str]:
    """At the start of a training job: log (global rank 0) each :func:`preemption_window_warnings` line for this
    process's lead and torchrun window, or one line saying the window is covered. Returns the warnings."""
    lead, shutdown = signal_lead_s(), torchrun_shutdown_s()
    fixed = shutdown is not None and os.environ.get(SHUTDOWN_FIXED_VAR) == "1"
    warnings = preemption_window_warnings(lead, needed_s, needed_what, shutdown, shutdown_fixed=fixed)
    if global_rank() == 0 and lead is not None:
        for line in warnings:
            log.warning(line)
        if not warnings:
            log.info("preemption window: Slurm signal lead %.0f s%s%s", lead,
                     f", torchrun shutdown window {shutdown:.0f} s" if shutdown is not None else "",
                     f", {needed_what} ~{needed_s:.0f} s" if needed_s is not None else "")
    return warnings


def requeue_slurm_job(job_id: Optional[str] = None, timeout_s: float = 60.0) -> bool:
    """``scontrol requeue <job>``; True when Slurm accepted it. A job already being requeued by the scheduler
    (preemption, an admin's ``scontrol requeue``) rejects a second request: logged, not raised."""
    job_id = job_id or slurm_job_id()
    if job_id is None:
        return False
    try:
        out = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.error("scontrol requeue %s failed: %s", job_id, e)
        return False
    if out.returncode != 0:
        log.warning("scontrol requeue %s: %s (already being requeued by Slurm?)", job_id,
                    (out.stderr or out.stdout).strip())
        return False
    log.info("requeued Slurm job %s", job_id)
    return True


@dataclass
class PreemptionHandler:
    """A flag set by preemption signals and polled by training loops. Create it with :meth:`install`."""

    signals: tuple[str, ...] = DEFAULT_SIGNALS
    requeue: bool = True  # exit_for_requeue() asks Slurm to requeue the job (rank 0 only)
    received: list[str] = field(default_factory=list)  # names of the signals caught, in order
    received_at: Optional[float] = None
    _event: threading.Event = field(default_factory=threading.Event, repr=False)
    _previous: dict = field(default_factory=dict, repr=False)

    @classmethod
    def install(cls, signals: Iterable[str] = DEFAULT_SIGNALS, requeue: bool = True) -> "PreemptionHandler":
        """Install the handler for ``signals`` (names like ``"SIGTERM"``) in this process. Must be called from the
        main thread (a Python rule for signal handlers). A command installs it at its entry, before any model is
        built (a warning during set-up would otherwise kill the process); its loop then takes :func:`active`."""
        global _ACTIVE
        handler = cls(signals=tuple(signals), requeue=requeue)
        _ACTIVE = handler
        for name in handler.signals:
            signum = getattr(signal, name, None)
            if signum is None:
                raise ValueError(f"unknown signal {name!r}; use names like SIGTERM, SIGUSR1")
            handler._previous[name] = signal.signal(signum, handler._on_signal)
        log.info("preemption handler on %s (restart %d)", ", ".join(handler.signals), restart_count())
        # The batch shell caught the warning before this step started (slurm/requeue_glue.sh): as if it came now.
        # Popped, so that a later step of this process (an in-process sweep) is not told again.
        pending = os.environ.pop(PENDING_ENV, "")
        if pending:
            log.warning("the batch shell caught %s before this step started: checkpoint at the first step boundary",
                        pending)
            handler.request(f"{pending} (before start)")
        return handler

    def uninstall(self) -> None:
        """Put back the handlers that were there before (tests, or a loop that ends before the process does)."""
        global _ACTIVE
        for name, previous in self._previous.items():
            signal.signal(getattr(signal, name), previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
        if _ACTIVE is self:
            _ACTIVE = None

    def _on_signal(self, signum: int, frame) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if not self._event.is_set():
            self.received_at = time.time()
            self._event.set()
            # Only an async-signal-safe write here; the trainer logs properly when it sees the flag.
            os.write(2, f"[preemption] caught {name}: will checkpoint at the next step boundary\n".encode())

    @property
    def requested(self) -> bool:
        """A preemption signal arrived in THIS process."""
        return self._event.is_set()

    def request(self, reason: str = "manual") -> None:
        """Set the flag without a signal (a trainer's own wall-clock budget, or tests)."""
        self.received.append(reason)
        self.received_at = self.received_at or time.time()
        self._event.set()

    def should_stop(self, sync: bool = True) -> bool:
        """True when this process or, with ``sync`` under ``torch.distributed``, ANY rank caught a signal: the
        ranks must agree, or one rank leaves a collective the others are waiting in. Call it at the same point of
        every step on every rank (it is a collective itself when the world has more than one process)."""
        flag = self.requested
        if not sync:
            return flag
        try:
            # lazy: imports torch (hydra_app imports this module at start-up); no torch: the flag stays local
            from scholar_agents.runtime import collectives
        except ImportError:
            return flag
        return collectives.any_process(flag)

    def exit_for_requeue(self, code: int = REQUEUE_EXIT_CODE) -> None:
        """Leave after the checkpoint is on disk: requeue the Slurm job (global rank 0, when ``requeue``), flush
        logs, exit with ``code``. Never returns."""
        job = slurm_job_id()
        if self.requeue and job is not None and global_rank() == 0:
            requeue_slurm_job(job)
        log.warning("exiting for requeue (signals: %s, job %s, restart %d, code %d)",
                    ",".join(self.received) or "none", job or "-", restart_count(), code)
        for h in logging.getLogger().handlers:
            h.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        raise SystemExit(code)


_ACTIVE: Optional[PreemptionHandler] = None


def active() -> Optional[PreemptionHandler]:
    """The handler installed in this process (by the command's entry), or None."""
    return _ACTIVE


def trainer_callback(handler: PreemptionHandler):
    """A ``transformers.TrainerCallback`` for HF/TRL trainers (SFT): on a preemption signal, save a checkpoint at
    the end of the current step and stop training. After ``trainer.train()`` returns, the caller checks the
    callback's ``stopped_at`` (the step it stopped at, agreed by every rank; None = never) and calls
    ``handler.exit_for_requeue()`` instead of writing the final model; the requeued run resumes from that
    checkpoint (``resume_from_checkpoint``)."""
    from transformers import TrainerCallback

    class PreemptionCallback(TrainerCallback):
        stopped_at: Optional[int] = None

        def on_step_end(self, args, state, control, **kwargs):
            if handler.should_stop():  # a collective under torch.distributed: every rank calls it every step
                control.should_save = True
                control.should_training_stop = True
                self.stopped_at = state.global_step
            return control

    return PreemptionCallback()
