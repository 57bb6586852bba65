#!/usr/bin/env bash
# A single-node Slurm owned by the tests: a private munged (its own key and
# socket), slurmctld and slurmd on free ports, state and logs in one
# directory; jobs launched with `srun --mpi=pmix`. Root only (slurmd starts
# the tasks); exits 77 (skipped) with the reason where it cannot run.
#
#   slurm.sh run [-n N] [--timeout S] -- PROGRAM ARGS...
#       start, srun --mpi=pmix -n N PROGRAM ARGS (environment passed on),
#       stop; exit with srun's status
#   slurm.sh start DIR      start one in DIR (new), print SLURM_CONF for it
#   slurm.sh stop DIR       cancel its jobs, stop its daemons, keep DIR
#
# The node declares 8 CPUs whatever the machine has
# (SlurmdParameters=config_overrides), so 4-8 ranks fit on 2 cores.
set -u

die_skip() {
    echo "SKIP: $*"
    exit 77
}

require() {
    [ "$(id -u)" = 0 ] || die_skip "a private Slurm needs root (slurmd starts the tasks)"
    local t
    for t in slurmctld slurmd srun sinfo scancel munged munge; do
        command -v "$t" >/dev/null ||
            die_skip "$t not found (scripts/deps.sh installs slurmctld, slurmd, slurm-client, munge)"
    done
}

free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 30000))
        if ! ss -Htan "sport = :$p or sport = :$((p + 1))" | grep -q .; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

start() {
    local d=$1 host port
    mkdir -p "$d/munge" "$d/state" "$d/spool" "$d/log" || return 1
    chmod 700 "$d" && chmod 711 "$d/munge"
    # munged refuses keys others can read.
    head -c 1024 /dev/urandom >"$d/munge/munge.key" && chmod 400 "$d/munge/munge.key"
    munged -F --force --socket="$d/munge/socket" --key-file="$d/munge/munge.key" \
        --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/seed" \
        --log-file="$d/log/munged.log" >"$d/log/munged.out" 2>&1 &
    echo $! >"$d/munged.pid"
    host=$(hostname)
    port=$(free_port) || { echo "slurm.sh: no free port" >&2; return 1; }
    cat >"$d/slurm.conf" <<CONF
ClusterName=xtqtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/socket
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pidfile
SlurmdPidFile=$d/slurmd.pidfile
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=xtq Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
    export SLURM_CONF=$d/slurm.conf
    for _ in $(seq 1 50); do # munged's socket first
        [ -S "$d/munge/socket" ] && break
        sleep 0.1
    done
    slurmctld -D -i >"$d/log/slurmctld.out" 2>&1 &
    echo $! >"$d/slurmctld.pid"
    slurmd -D >"$d/log/slurmd.out" 2>&1 &
    echo $! >"$d/slurmd.pid"
    for _ in $(seq 1 300); do
        [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && return 0
        sleep 0.1
    done
    echo "slurm.sh: the node never became idle; logs:" >&2
    tail -n 5 "$d"/log/* >&2
    return 1
}

stop() {
    local d=$1 f pid
    [ -f "$d/slurm.conf" ] && SLURM_CONF=$d/slurm.conf scancel --full --quiet --user=root 2>/dev/null
    for f in slurmd slurmctld munged; do
        [ -f "$d/$f.pid" ] || continue
        pid=$(cat "$d/$f.pid")
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null
        rm -f "$d/$f.pid"
    done
}

cmd=${1:-}
shift || true
case $cmd in
start)
    require
    [ $# -eq 1 ] || { echo "usage: slurm.sh start DIR" >&2; exit 2; }
    start "$1" || { stop "$1"; exit 1; }
    echo "export SLURM_CONF=$1/slurm.conf"
    ;;
stop)
    [ $# -eq 1 ] || { echo "usage: slurm.sh stop DIR" >&2; exit 2; }
    stop "$1"
    ;;
run)
    n=4 tmo=300
    while [ $# -gt 0 ]; do
        case $1 in
        -n) n=$2; shift 2 ;;
        --timeout) tmo=$2; shift 2 ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    [ $# -gt 0 ] || { echo "usage: slurm.sh run [-n N] -- PROGRAM ARGS" >&2; exit 2; }
    require
    dir=$(mktemp -d /tmp/xtq-slurm.XXXXXX)
    trap 'stop "$dir"; rm -rf "$dir"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    start "$dir" || exit 1
    srun --mpi=list 2>&1 | grep -qw pmix || die_skip "this Slurm has no mpi/pmix plugin"
    echo "slurm: private cluster up ($SLURM_CONF); srun --mpi=pmix -n $n $*"
    # A rank that fails ends the step at once (as under mpirun), not at the
    # timeout while the others wait for it in a fence.
    timeout -k 10 "$tmo" srun --mpi=pmix --kill-on-bad-exit=1 -n "$n" --time=$(((tmo + 59) / 60)) "$@"
    rc=$?
    echo "slurm: srun exit $rc"
    exit $rc
    ;;
*)
    echo "usage: slurm.sh run|start|stop ..." >&2
    exit 2
    ;;
esac
