# Sourced by the sbatch templates: run the job step so that Slurm's warning signals reach its Python processes.
#
# Why this is needed: `#SBATCH --signal=B:USR1@120` signals ONLY the batch shell, 120 s before the time limit, and
# a shell does not run its traps while a foreground command runs. So the step runs in the background, the shell
# `wait`s (which a trapped signal interrupts), and passes the warning on to the step: as SIGTERM to a process it
# started itself (`scholar_single`), as SIGUSR1 to srun (`scholar_torchrun`). srun turns a SIGTERM of its own into
# "forcing job termination": SIGKILL for its tasks at once, the step in flight lost (checked on Slurm 22.05); any other
# signal it passes on to its tasks. torchrun (--signals-to-handle with SIGUSR1, slurm/job_env.sh) passes it on to its
# workers and SIGKILLs them --shutdown-timeout (cluster.shutdown_grace_s) later. In the workers
# scholar_agents/runtime/preemption.py turns SIGTERM / SIGUSR1 into "checkpoint at the next step boundary,
# `scontrol requeue`, exit 75". A scheduler preemption or `scontrol requeue` sends SIGTERM to every process of the job
# (the workers included) and SIGKILL after the site's KillWait (or the partition's GraceTime).
#
# PPO and SFT (HF Trainer + preemption.trainer_callback) checkpoint at the end of the current step, requeue and exit
# 75. A step that does not use preemption.py (vLLM batch generation) just dies of the SIGTERM; then the shell
# requeues the job itself, and the step resumes from whatever it had written (done-markers, shard files).
#
#   source slurm/requeue_glue.sh
#   run_preemptible srun ... torchrun ... -m scholar_agents train crawler_ppo ...
#   exit $?

_scholar_forward_preemption() {  # <child pid> <signal name caught> <signal name to send>
    _SCHOLAR_PREEMPTED=1
    _SCHOLAR_TRAPPED=1
    echo "[requeue_glue] $(date +%T) caught SIG$2 in the batch shell of job ${SLURM_JOB_ID:-?}: SIG$3 -> pid $1" >&2
    kill "-$3" "$1" 2>/dev/null || true
}

# A warning that comes before a step has started (a lead close to the time limit, a busy node slow to compose the
# config) would end the batch shell: bash's default for USR1 and USR2 is to die. From the moment this file is sourced
# it is recorded instead, and the next step is told as it starts (SCHOLAR_PREEMPTION_PENDING, which
# preemption.PreemptionHandler.install reads as a signal caught): it checkpoints at its first step boundary.
_scholar_early_warning() {  # <signal name caught>
    export SCHOLAR_PREEMPTION_PENDING="SIG$1"
    echo "[requeue_glue] $(date +%T) caught SIG$1 in the batch shell of job ${SLURM_JOB_ID:-?} before the step" \
         "started: the step is told as it starts (SCHOLAR_PREEMPTION_PENDING=SIG$1)" >&2
}
_scholar_trap_early_warnings() {
    trap '_scholar_early_warning USR1' USR1
    trap '_scholar_early_warning USR2' USR2
    trap '_scholar_early_warning TERM' TERM
}
_scholar_trap_early_warnings

run_preemptible() {  # run_preemptible <command...>: run it, pass USR1/USR2/TERM on (module comment), return its code
    local child rc job send=TERM
    _SCHOLAR_PREEMPTED=0
    [[ "$(basename "$1")" == srun ]] && send=USR1  # srun SIGKILLs its tasks on a SIGTERM of its own
    [[ -n "${SCHOLAR_PREEMPTION_PENDING:-}" ]] && _SCHOLAR_PREEMPTED=1
    "$@" &
    child=$!
    unset SCHOLAR_PREEMPTION_PENDING  # the step has it; the next one is told only of a warning that comes later
    # shellcheck disable=SC2064  # expand $child now
    trap "_scholar_forward_preemption $child USR1 $send" USR1
    trap "_scholar_forward_preemption $child USR2 $send" USR2
    trap "_scholar_forward_preemption $child TERM $send" TERM
    while :; do
        rc=0
        _SCHOLAR_TRAPPED=0
        wait "$child" || rc=$?   # (`|| rc=$?` also keeps `set -e` from ending the script here)
        # `wait` returns 128+N at once when a trapped signal interrupts it; the child may still be running then.
        kill -0 "$child" 2>/dev/null && continue
        # If it died meanwhile, reap it again so the status is the child's own (75 = checkpointed), not the
        # signal that interrupted the wait.
        if [[ $_SCHOLAR_TRAPPED -eq 1 ]]; then
            local real=0
            wait "$child" 2>/dev/null || real=$?
            [[ $real -ne 127 ]] && rc=$real
        fi
        break
    done
    _scholar_trap_early_warnings
    job="${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}"
    job="${job:-${SLURM_JOB_ID:-}}"
    if [[ $rc -eq 75 ]]; then
        echo "[requeue_glue] step exited 75 (checkpointed for requeue; restart ${SLURM_RESTART_COUNT:-0})" >&2
    elif [[ $_SCHOLAR_PREEMPTED -eq 1 && $rc -ne 0 ]]; then
        # The step did not handle the signal itself (no preemption.py): requeue from here. (torchrun exits 1 after
        # passing a signal on, even when its workers checkpointed and exited 75; rank 0 has requeued the job then,
        # and this second request is refused harmlessly.)
        if [[ -n "$job" ]]; then
            echo "[requeue_glue] step died (exit $rc) after a preemption signal: scontrol requeue $job" >&2
            scontrol requeue "$job" || true
        else
            echo "[requeue_glue] step died (exit $rc) after a preemption signal; not a Slurm job, nothing to requeue" >&2
        fi
    fi
    return "$rc"
}
