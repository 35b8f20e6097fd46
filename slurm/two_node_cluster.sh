#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine: each node a network namespace with its own address, hostname and
# /etc/hosts, so that a `--nodes=2` job meets what a real multi-node job meets (a rendezvous by node name, gloo
# and NCCL choosing a network interface, a hostname that resolves to loopback). For tests and for trying
# multi-node glue without a cluster; nothing leaves the machine (the namespaces have no route but their bridge).
#
#   slurm/two_node_cluster.sh start    write configs, create the bridge + namespaces, start munged, slurmctld, 2 slurmd
#   slurm/two_node_cluster.sh stop     stop the daemons, delete the namespaces, links and /etc/netns/<ns> hosts files
#   slurm/two_node_cluster.sh status   exit 0 only when both nodes take jobs
#   slurm/two_node_cluster.sh env      print `export SLURM_CONF=...`
#   slurm/two_node_cluster.sh purge    stop, then delete the prefix
#
# Its own cluster beside slurm/local_cluster.sh's one-node `test` cluster (which keeps running, untouched): its own
# prefix ($SCHOLAR_SLURM2_PREFIX, default /tmp/scholar-slurm2), ports, munged and key; no accounting (sacct knows
# nothing of its jobs: `sbatch --wait` and the job's output tell how it ended). Root, Debian's slurm 22.05 + munge
# (installed by local_cluster.sh's install step when missing).
#
# The network (ARCHITECTURE.md "GPU facts", verified here before):
#   root namespace   bridge sa2br0 10.77.0.1/24; slurmctld (SlurmctldHost=<host>(10.77.0.1)), munged, the clients
#   sa2n1 / sa2n2    eth0 (a veth leg on the bridge) 10.77.0.11 / .12, hostname node1 / node2, one slurmd each
# /etc/netns/<ns>/hosts maps the node names to their addresses, except that a node's own name is 127.0.1.1, as
# Debian's installer writes it: gloo without GLOO_SOCKET_IFNAME then advertises loopback to the other node and the
# first collective hangs (the multi-node loopback trap); with cluster.socket_ifname=eth0 it works.
# slurmd is started with `nsenter --net=...` plus its own UTS and mount namespaces (for the hostname and the hosts
# file), not `ip netns exec`: that remounts /sys and slurmd 22.05 dies ("No filesystem mounted on /sys/fs/cgroup").
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export SCHOLAR_SLURM_PREFIX="${SCHOLAR_SLURM2_PREFIX:-/tmp/scholar-slurm2}"
# Ports above local_cluster.sh's (16817-16820), so both clusters run at once.
export SCHOLAR_SLURM_PORT_BASE="${SCHOLAR_SLURM2_PORT_BASE:-16827}"
export SCHOLAR_SLURM_CLUSTER="${SCHOLAR_SLURM2_CLUSTER:-scholar2}"
export SCHOLAR_SLURM_PARTITION="${SCHOLAR_SLURM2_PARTITION:-two}"
# shellcheck source=local_cluster.sh
source "$HERE/local_cluster.sh"   # PREFIX, ETC, RUN, LOG, SPOOL, ports and the helpers (say, wait_for, stop_daemon...)
say() { echo "[two_node_cluster] $*" >&2; }
trap 'say "failed at line $LINENO (logs: $LOG)"' ERR

BRIDGE="${SCHOLAR_SLURM2_BRIDGE:-sa2br0}"
SUBNET="${SCHOLAR_SLURM2_SUBNET:-10.77.0}"   # /24: .1 the bridge (controller), .11 and .12 the nodes
NODES=(node1 node2)
NETNS=(sa2n1 sa2n2)
IFNAME=eth0   # inside each namespace: the name a job passes as cluster.socket_ifname
# Each node: 2 CPUs (declared; the machine's cores are shared, SlurmdParameters=config_overrides accepts it) and
# half of what the one-node cluster gives its node.
NODE_CPUS="${SCHOLAR_SLURM2_CPUS:-2}"
DAEMONS=(munged slurmctld)

node_addr() { echo "$SUBNET.$((11 + $1))"; }
hosts_file() { echo "/etc/netns/${NETNS[$1]}/hosts"; }
slurmd_pid_file() { echo "$RUN/slurmd.${NODES[$1]}.pid"; }

write_configs2() {
    local user mem i
    user="$(id -un)"
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 85 / 100 ))
    ((mem < NODE_MEM_MB)) || mem="$NODE_MEM_MB"
    mem=$((mem / 2))
    mkdir -p "$ETC" "$RUN/munge" "$LOG" "$SPOOL/slurmctld" "$PREFIX/lib/munge"
    chmod 0755 "$PREFIX" "$ETC" "$RUN" "$RUN/munge" "$LOG" "$SPOOL" "$PREFIX/lib" "$PREFIX/lib/munge"
    for i in 0 1; do mkdir -p "$SPOOL/slurmd.${NODES[i]}"; done
    if [[ ! -s "$ETC/munge.key" ]]; then
        dd if=/dev/urandom of="$ETC/munge.key" bs=1024 count=1 status=none
    fi
    chmod 0600 "$ETC/munge.key"
    cat >"$ETC/slurm.conf" <<EOF
# Written by slurm/two_node_cluster.sh: two nodes in network namespaces, the controller on the bridge; all state
# under $PREFIX. %n = the node's name (two slurmd on one machine).
ClusterName=$CLUSTER_NAME
SlurmctldHost=$(hostname -s)($SUBNET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
CryptoType=crypto/munge
StateSaveLocation=$SPOOL/slurmctld
SlurmdSpoolDir=$SPOOL/slurmd.%n
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$RUN/slurmd.%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=30
InactiveLimit=0
NodeName=${NODES[0]} NodeAddr=$(node_addr 0) CPUs=$NODE_CPUS RealMemory=$mem State=UNKNOWN
NodeName=${NODES[1]} NodeAddr=$(node_addr 1) CPUs=$NODE_CPUS RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=${NODES[0]},${NODES[1]} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
    : >"$ETC/plugstack.conf"
}

create_network() {
    local i ns leg
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$SUBNET.1/24" dev "$BRIDGE"
    fi
    ip link set "$BRIDGE" up
    for i in 0 1; do
        ns="${NETNS[i]}" leg="sa2v$((i + 1))"
        [[ -e "/var/run/netns/$ns" ]] || ip netns add "$ns"
        if ! ip -n "$ns" link show "$IFNAME" >/dev/null 2>&1; then
            ip link del "$leg" >/dev/null 2>&1 || true   # a leg left over from a namespace deleted by hand
            ip link add "$leg" type veth peer name "${leg}p"
            ip link set "${leg}p" netns "$ns"
            ip -n "$ns" link set "${leg}p" name "$IFNAME"
            ip -n "$ns" addr add "$(node_addr "$i")/24" dev "$IFNAME"
            ip link set "$leg" master "$BRIDGE"
        fi
        ip link set "$leg" up
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$IFNAME" up
        mkdir -p "/etc/netns/$ns"
        {
            echo "127.0.0.1 localhost"
            echo "127.0.1.1 ${NODES[i]}"   # its own name on loopback, as Debian writes it: the trap
            echo "$(node_addr $((1 - i))) ${NODES[1 - i]}"
        } >"$(hosts_file "$i")"
    done
}

delete_network() {
    local i
    for i in 0 1; do
        ip netns del "${NETNS[i]}" >/dev/null 2>&1 || true   # takes its veth pair with it
        ip link del "sa2v$((i + 1))" >/dev/null 2>&1 || true
        rm -f "$(hosts_file "$i")"
        rmdir "/etc/netns/${NETNS[i]}" 2>/dev/null || true
    done
    ip link del "$BRIDGE" >/dev/null 2>&1 || true
    rmdir /etc/netns 2>/dev/null || true
}

slurmd_running() {  # slurmd_running <i>
    local f
    f="$(slurmd_pid_file "$1")"
    [[ -s "$f" ]] && alive "$(cat "$f")"
}

start_slurmd2() {  # start_slurmd2 <i>
    local i="$1"
    slurmd_running "$i" && return 0
    # The namespace's network; a UTS namespace for the node's hostname and a mount namespace whose /etc/hosts is
    # the node's (private propagation: the bind mount stays in it). slurmd daemonizes; its jobs inherit all three.
    nsenter --net="/var/run/netns/${NETNS[i]}" unshare --uts --mount --propagation private \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmd -f "$3" -N "$1"' \
        slurmd "${NODES[i]}" "$(hosts_file "$i")" "$ETC/slurm.conf" 2>>"$LOG/slurmd.${NODES[i]}.log"
}

nodes_ready() {
    local states
    states="$(sinfo -h -N -p "$PARTITION" -o '%t' 2>/dev/null | grep -cE '^(idle|mix|alloc)' || true)"
    [[ "$states" == 2 ]]
}

cmd_start2() {
    [[ $EUID -eq 0 ]] || die "run as root (namespaces, bridge and daemons); e.g. sudo $0 start"
    mkdir -p "$PREFIX"
    install_packages
    write_configs2
    local t0=$SECONDS i
    create_network
    start_munged
    if ! running slurmctld; then
        slurmctld -f "$ETC/slurm.conf" 2>>"$LOG/slurmctld.log"
        wait_for 30 slurmctld scontrol ping
    fi
    for i in 0 1; do start_slurmd2 "$i"; done
    wait_for 30 "both nodes to register" sinfo -h -n "${NODES[0]},${NODES[1]}"
    if ! nodes_ready; then
        scontrol update nodename="${NODES[0]},${NODES[1]}" state=resume >/dev/null 2>&1 || true
    fi
    wait_for 60 "both nodes to be idle" nodes_ready
    say "up in $((SECONDS - t0)) s: partition '$PARTITION' = ${NODES[*]} ($(node_addr 0), $(node_addr 1) via" \
        "$BRIDGE), SLURM_CONF=$SLURM_CONF"
}

stop_slurmd2() {  # stop_slurmd2 <i>: SIGTERM, wait, SIGKILL
    local f pid n
    f="$(slurmd_pid_file "$1")"
    if slurmd_running "$1"; then
        pid="$(cat "$f")"
        kill -TERM "$pid" 2>/dev/null || true
        for ((n = 0; n < 150; n++)); do alive "$pid" || break; sleep 0.1; done
        alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
        say "stopped slurmd ${NODES[$1]}"
    fi
    rm -f "$f"
}

cmd_stop2() {
    local i
    for i in 0 1; do stop_slurmd2 "$i"; done
    stop_daemon slurmctld
    stop_daemon munged
    delete_network
    say "stopped; namespaces ${NETNS[*]}, bridge $BRIDGE and their hosts files removed"
}

cmd_status2() {
    local d i ok=0
    for d in "${DAEMONS[@]}"; do
        if running "$d"; then echo "$d: running"; else echo "$d: stopped"; ok=1; fi
    done
    for i in 0 1; do
        if slurmd_running "$i"; then echo "slurmd ${NODES[i]} (${NETNS[i]}): running"; else
            echo "slurmd ${NODES[i]} (${NETNS[i]}): stopped"; ok=1; fi
    done
    if ((ok == 0)); then
        sinfo -N -o '%N %P %t %c %m' 2>/dev/null || ok=1
        nodes_ready || ok=1
    fi
    echo "SLURM_CONF=$SLURM_CONF"
    return $ok
}

case "${1:-}" in
    start) cmd_start2 ;;
    stop) cmd_stop2 ;;
    status) if cmd_status2; then exit 0; else exit 1; fi ;;
    env) echo "export SLURM_CONF=$SLURM_CONF" ;;
    purge) cmd_stop2; rm -rf "$PREFIX"; say "removed $PREFIX" ;;
    *) echo "usage: $0 start|stop|status|env|purge   (prefix: $PREFIX)" >&2; exit 2 ;;
esac
