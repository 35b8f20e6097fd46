#!/usr/bin/env bash
# A real single-node Slurm cluster on localhost, for tests and for trying the sbatch templates / Hydra launcher
# on a laptop. Debian's slurmctld + slurmd + munge, plus slurmdbd + MariaDB for accounting (without it, submitit
# never sees a hard-killed job finish and `sacct` knows nothing).
#
#   slurm/local_cluster.sh start    install the packages if missing (apt, as root), write configs, start daemons
#   slurm/local_cluster.sh stop     stop what `start` started (pid files under the prefix)
#   slurm/local_cluster.sh status   daemons, node and partition state; exit 0 only when the cluster takes jobs
#   slurm/local_cluster.sh env      print `export SLURM_CONF=...` (eval "$(slurm/local_cluster.sh env)")
#   slurm/local_cluster.sh purge    stop, then delete the prefix (accounting database included)
#
# `start` on a running cluster only starts what is missing; after changing a setting below, `stop` then `start`.
# Everything (configs, keys, sockets, pid files, logs, spool, database) lives under one prefix:
# $SCHOLAR_SLURM_PREFIX, default /tmp/scholar-slurm. Nothing under /etc is written, so clients must be pointed
# at the config: `export SLURM_CONF=$PREFIX/etc/slurm.conf` (the `env` command prints it).
#
# Measured on a 2-core Debian 12 VM: ~20 s cold start (first database init), ~3 s warm; no systemd needed:
# ProctrackType=proctrack/linuxproc, TaskPlugin=task/none, `slurmd -N localhost`, munge's key/socket dirs
# world-executable, and AccountingStoragePass = our munge socket (a second munged, Slurm's documented way).
set -euo pipefail

PREFIX="${SCHOLAR_SLURM_PREFIX:-/tmp/scholar-slurm}"
CLUSTER_NAME="${SCHOLAR_SLURM_CLUSTER:-scholar}"
PARTITION="${SCHOLAR_SLURM_PARTITION:-test}"
# Non-default ports so a site's own Slurm or MariaDB on this machine is left alone.
PORT_BASE="${SCHOLAR_SLURM_PORT_BASE:-16817}"
CTLD_PORT=$((PORT_BASE))
SLURMD_PORT=$((PORT_BASE + 1))
DBD_PORT=$((PORT_BASE + 2))
DB_PORT=$((PORT_BASE + 3))
# The test node: 2 CPUs, ~20 GB (capped by what the machine has, or slurmd would drain the node).
NODE_CPUS="${SCHOLAR_SLURM_CPUS:-2}"
NODE_MEM_MB="${SCHOLAR_SLURM_MEM_MB:-20000}"

ETC="$PREFIX/etc"
RUN="$PREFIX/run"
LOG="$PREFIX/log"
SPOOL="$PREFIX/spool"
DB_DIR="$PREFIX/mariadb"
MUNGE_SOCKET="$RUN/munge/munge.socket.2"
export SLURM_CONF="$ETC/slurm.conf"

PACKAGES=(munge slurmctld slurmd slurmdbd slurm-client mariadb-server)
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)   # start order; stop goes in reverse

trap 'say "failed at line $LINENO (logs: $LOG)"' ERR
say() { echo "[local_cluster] $*" >&2; }
die() { say "error: $*"; exit 1; }

pid_file() { echo "$RUN/$1.pid"; }

alive() {  # alive <pid>: exists and is not a zombie waiting for init to reap it
    local state
    kill -0 "$1" 2>/dev/null || return 1
    state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
    [[ -n "$state" && "$state" != Z ]]
}

running() {  # running <daemon>: its pid file names a live process
    local f pid
    f="$(pid_file "$1")"
    [[ -s "$f" ]] || return 1
    pid="$(cat "$f")"
    [[ -n "$pid" ]] && alive "$pid"
}

wait_for() {  # wait_for <seconds> <description> <command...>
    local deadline=$((SECONDS + $1)) what="$2"
    shift 2
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out waiting for $what (logs: $LOG)"
        sleep 0.2
    done
}

install_packages() {
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    [[ $EUID -eq 0 ]] || die "missing Debian packages (${missing[*]}); install them as root: apt-get install ${missing[*]}"
    say "installing ${missing[*]} (apt)"
    export DEBIAN_FRONTEND=noninteractive
    # policy-rc.d keeps the packages' own init scripts from starting system-wide daemons on the default ports.
    local policy=/usr/sbin/policy-rc.d had_policy=1
    if [[ ! -e $policy ]]; then had_policy=0; printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; fi
    apt-get update -q >"$PREFIX/apt.log" 2>&1 || true
    apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$PREFIX/apt.log" 2>&1 \
        || { ((had_policy)) || rm -f "$policy"; die "apt-get install failed, see $PREFIX/apt.log"; }
    ((had_policy)) || rm -f "$policy"
}

write_configs() {
    local user mem cpus
    user="$(id -un)"
    cpus="$NODE_CPUS"
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 85 / 100 ))
    ((mem < NODE_MEM_MB)) || mem="$NODE_MEM_MB"

    # munged refuses keys/sockets in group- or world-writable dirs; the dirs must stay world-executable so
    # that job processes (any user) can reach the socket.
    mkdir -p "$ETC" "$RUN/munge" "$LOG" "$SPOOL/slurmctld" "$SPOOL/slurmd" "$PREFIX/lib/munge"
    chmod 0755 "$PREFIX" "$ETC" "$RUN" "$RUN/munge" "$LOG" "$SPOOL" "$PREFIX/lib" "$PREFIX/lib/munge"
    if [[ ! -s "$ETC/munge.key" ]]; then
        dd if=/dev/urandom of="$ETC/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0600 "$ETC/munge.key"

    cat >"$ETC/slurm.conf" <<EOF
# Written by slurm/local_cluster.sh: a single-node test cluster; all state under $PREFIX.
ClusterName=$CLUSTER_NAME
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
# cred_expire also sets how long a requeued job waits before it may start again (default 120 s): short here so
# preemption tests see the job resume in ~12 s. Not lower: it is also the lifetime of a step's launch credential,
# which a heavily loaded CI machine needs a few seconds of.
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
CryptoType=crypto/munge
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$(pid_file slurmd)
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No systemd / cgroups in containers and CI VMs: track job processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
# Scan pending jobs every 2 s (default 60/30 s) so a requeued job restarts as soon as it is eligible.
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# Without a default, a job that asks for no memory gets the whole node and jobs run one at a time.
DefMemPerCPU=1024
# Accept the node even if the machine differs from the declared CPUs/memory (CI runners vary).
SlurmdParameters=config_overrides
# Requeue: allowed by default for batch jobs (preemption tests requeue jobs with scontrol).
JobRequeue=1
# Keep finished jobs visible to scontrol for a while; sacct keeps them for good.
MinJobAge=600
KillWait=30
InactiveLimit=0
# Accounting through slurmdbd: AccountingStoragePass names the munge socket slurmdbd shares with us.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$MUNGE_SOCKET
JobCompType=jobcomp/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF

    if [[ ! -s "$ETC/db.pass" ]]; then
        head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ETC/db.pass"
    fi
    chmod 0600 "$ETC/db.pass"
    cat >"$ETC/slurmdbd.conf" <<EOF
# Written by slurm/local_cluster.sh.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD_PORT
SlurmUser=$user
PidFile=$(pid_file slurmdbd)
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/db.pass")
StorageLoc=slurm_acct_db
EOF
    chmod 0600 "$ETC/slurmdbd.conf"   # slurmdbd refuses a config readable by others (it holds the DB password)
    # sbatch and friends read plugstack.conf next to slurm.conf; an empty one keeps Debian's /etc one out.
    : >"$ETC/plugstack.conf"
}

sql() { mariadb --no-defaults --protocol=socket --socket="$RUN/mariadb.sock" -uroot "$@"; }

start_munged() {
    running munged && return 0
    munged --force --key-file="$ETC/munge.key" --socket="$MUNGE_SOCKET" --pid-file="$(pid_file munged)" \
        --log-file="$LOG/munged.log" --seed-file="$PREFIX/lib/munge/munged.seed" 2>>"$LOG/munged.log"
    wait_for 10 munged test -S "$MUNGE_SOCKET"
}

start_mariadb() {
    running mariadbd && return 0
    if [[ ! -d "$DB_DIR/mysql" ]]; then
        say "initialising the accounting database (first start only)"
        mkdir -p "$DB_DIR"
        mariadb-install-db --no-defaults --datadir="$DB_DIR" --user="$(id -un)" --skip-test-db \
            --auth-root-authentication-method=socket >"$LOG/mariadb-install.log" 2>&1 \
            || die "mariadb-install-db failed, see $LOG/mariadb-install.log"
    fi
    # Own socket and port on 127.0.0.1 only; small buffers (a test database of a few MB).
    nohup mariadbd --no-defaults --datadir="$DB_DIR" --user="$(id -un)" --bind-address=127.0.0.1 \
        --port="$DB_PORT" --socket="$RUN/mariadb.sock" --pid-file="$(pid_file mariadbd)" \
        --log-error="$LOG/mariadb.log" --skip-name-resolve --innodb-buffer-pool-size=64M \
        --innodb-log-file-size=48M --innodb-lock-wait-timeout=900 >/dev/null 2>&1 &
    wait_for 60 mariadbd sql -e "SELECT 1"
    local pass
    pass="$(cat "$ETC/db.pass")"
    sql -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
            ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
            CREATE DATABASE IF NOT EXISTS slurm_acct_db;
            GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
    running slurmdbd && return 0
    # slurmdbd reads slurmdbd.conf from the directory of $SLURM_CONF.
    slurmdbd 2>>"$LOG/slurmdbd.log"
    wait_for 60 slurmdbd sacctmgr -i -n list cluster
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER_NAME"; then
        sacctmgr -i add cluster "$CLUSTER_NAME" >/dev/null
    fi
}

start_slurmctld() {
    running slurmctld && return 0
    slurmctld -f "$ETC/slurm.conf" 2>>"$LOG/slurmctld.log"
    wait_for 30 slurmctld scontrol ping
}

start_slurmd() {
    running slurmd && return 0
    slurmd -f "$ETC/slurm.conf" -N localhost 2>>"$LOG/slurmd.log"
    wait_for 30 "the node to come up" node_ready
}

node_ready() {
    local state
    state="$(sinfo -h -n localhost -o '%t' 2>/dev/null | head -n1)"
    [[ "$state" == idle* || "$state" == mix* || "$state" == alloc* ]]
}

cmd_start() {
    # The daemons run as root (slurmd starts jobs as their users; munge and MariaDB are configured for root).
    [[ $EUID -eq 0 ]] || die "run as root (the local cluster's daemons run as root); e.g. sudo $0 start"
    mkdir -p "$PREFIX"
    install_packages
    command -v munged >/dev/null || die "munged not found after install"
    write_configs
    local t0=$SECONDS
    start_munged
    start_mariadb
    start_slurmdbd
    start_slurmctld
    start_slurmd
    # A node that went down before (e.g. a killed slurmd) stays DOWN until told otherwise.
    if ! node_ready; then scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true; fi
    wait_for 30 "the node to be idle" node_ready
    say "up in $((SECONDS - t0)) s: partition '$PARTITION', SLURM_CONF=$SLURM_CONF"
}

stop_daemon() {  # stop_daemon <name>: SIGTERM, wait, then SIGKILL
    local f pid i t0=$SECONDS
    f="$(pid_file "$1")"
    running "$1" || { rm -f "$f"; return 0; }
    pid="$(cat "$f")"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        say "$1 ($pid) ignored SIGTERM, killing"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
    say "stopped $1 in $((SECONDS - t0)) s"
}

cmd_stop() {
    local i
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        stop_daemon "${DAEMONS[i]}"
    done
    say "stopped"
}

cmd_status() {
    local d ok=0
    for d in "${DAEMONS[@]}"; do
        if running "$d"; then echo "$d: running (pid $(cat "$(pid_file "$d")"))"; else echo "$d: stopped"; ok=1; fi
    done
    if ((ok == 0)); then
        sinfo -o '%P %a %D %t %c %m' 2>/dev/null || ok=1
        node_ready || ok=1
    fi
    echo "SLURM_CONF=$SLURM_CONF"
    return $ok
}

# Sourced (slurm/two_node_cluster.sh reuses the helpers above): define, run nothing.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) if cmd_status; then exit 0; else exit 1; fi ;;
    env) echo "export SLURM_CONF=$SLURM_CONF" ;;
    purge) cmd_stop; rm -rf "$PREFIX"; say "removed $PREFIX" ;;
    *) echo "usage: $0 start|stop|status|env|purge   (prefix: $PREFIX)" >&2; exit 2 ;;
esac
