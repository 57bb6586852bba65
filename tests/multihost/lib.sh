# Hosts in network namespaces (sourced by the scripts beside it).
#
# mh_setup N creates N "hosts": network namespaces xtqmh-<pid>-<tag>-h0 ..
# h<N-1>, each with one interface eth0 (10.99.0.<i+1>/24, up) on a veth
# whose other end is a port of bridge br0 in a switch namespace
# xtqmh-<pid>-<tag>-sw. Nothing is created in the caller's namespace: the
# addresses exist only inside the namespaces, so concurrent runs (unique
# names) never collide. mh_teardown kills what runs in them and deletes
# them; mh_setup installs it as an EXIT/INT/TERM trap, and removes
# namespaces left by runs whose creator died (SIGKILL skips traps).
#
# mh_mpirun runs mpirun on h0 (the "login node") with an rsh agent
# (nsrsh.sh) that starts one orted per host inside its namespace, as on a
# cluster; ranks reach the PMIx server of their own host's orted.

MH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MH_HOSTS=()
MH_SW=
MH_PREFIX=

mh_log() { echo "multihost: $*" >&2; }

# Exit 77 (CTest: skipped) with the reason unless namespaces can be made.
mh_require() {
    if [ "$(id -u)" != 0 ]; then
        echo "SKIP: network namespaces need root (run as root)"
        exit 77
    fi
    local t
    for t in ip mpirun; do
        if ! command -v "$t" >/dev/null; then
            echo "SKIP: $t not found (scripts/deps.sh installs it)"
            exit 77
        fi
    done
    local probe=xtqmh-$$-probe
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "SKIP: cannot create network namespaces here (no CAP_SYS_ADMIN?)"
        exit 77
    fi
    if ! ip -n "$probe" link add br0 type bridge 2>/dev/null ||
        ! ip -n "$probe" link add v0 type veth peer name v1 2>/dev/null; then
        ip netns del "$probe"
        echo "SKIP: the kernel lacks veth or bridge support"
        exit 77
    fi
    ip netns del "$probe"
}

# Remove namespaces whose creating script is gone.
mh_gc() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^xtqmh-[0-9]*-'); do
        pid=${ns#xtqmh-}
        pid=${pid%%-*}
        if ! kill -0 "$pid" 2>/dev/null; then
            mh_log "removing stale namespace $ns (creator $pid gone)"
            mh_ns_kill "$ns"
            ip netns del "$ns" 2>/dev/null || true
            rm -rf "/tmp/$ns"
        fi
    done
}

# SIGKILL every process inside namespace $1 (ours: orteds and ranks).
mh_ns_kill() {
    local pids
    pids=$(ip netns pids "$1" 2>/dev/null | tr '\n' ' ')
    if [ -n "${pids// /}" ]; then
        # SIGCONT too: a rank a fault test stopped must be able to die.
        kill -CONT $pids 2>/dev/null || true
        kill -KILL $pids 2>/dev/null || true
    fi
}

mh_teardown() {
    local ns
    for ns in "${MH_HOSTS[@]}" $MH_SW; do
        mh_ns_kill "$ns"
    done
    sleep 0.2
    for ns in "${MH_HOSTS[@]}" $MH_SW; do
        ip netns del "$ns" 2>/dev/null || true
        rm -rf "/tmp/$ns" # its temporary directory (nsrsh.sh)
    done
    [ -n "$MH_PREFIX" ] && mh_log "removed ${#MH_HOSTS[@]} host namespaces ($MH_PREFIX-*)"
    MH_HOSTS=()
    MH_SW=
    MH_PREFIX=
}

mh_on_exit() {
    local rc=$?
    mh_teardown
    [ -n "${MH_TMP:-}" ] && [ -z "${MH_KEEP_TMP:-}" ] && rm -rf "$MH_TMP"
    exit $rc
}

# mh_addr I: host I's address.
mh_addr() { echo "10.99.0.$(($1 + 1))"; }

# mh_setup N: N hosts on one bridge.
mh_setup() {
    local n=$1 i h
    mh_gc
    MH_PREFIX=xtqmh-$$-$RANDOM
    MH_SW=$MH_PREFIX-sw
    trap mh_on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    ip netns add "$MH_SW" || return 1
    ip -n "$MH_SW" link add br0 type bridge || return 1
    ip -n "$MH_SW" link set br0 up || return 1
    for ((i = 0; i < n; i++)); do
        h=$MH_PREFIX-h$i
        ip netns add "$h" || return 1
        MH_HOSTS+=("$h")
        ip link add eth0 netns "$h" type veth peer name h$i netns "$MH_SW" || return 1
        ip -n "$MH_SW" link set h$i master br0 up || return 1
        ip -n "$h" link set lo up || return 1
        ip -n "$h" addr add "$(mh_addr $i)/24" dev eth0 || return 1
        ip -n "$h" link set eth0 up || return 1
    done
    # The bridge learns and forwards once the ports are up.
    for ((i = 0; i < 50; i++)); do
        [ "$(ip -n "$MH_SW" -br link show br0 | awk '{print $2}')" = UP ] && break
        sleep 0.1
    done
    mh_log "$n hosts: ${MH_HOSTS[*]} on bridge br0 in $MH_SW (10.99.0.0/24)"
}

# mh_link I down|up: pull or plug host I's cable (its port on the switch;
# the host keeps its address and route, its packets go nowhere).
mh_link() { ip -n "$MH_SW" link set "h$1" "$2"; }

# mh_mpirun MPIRUN-ARGS...: mpirun on h0, ranks mapped round robin over
# the hosts (rank r on host r mod N, whatever -np says). Every XTQ_* and
# FI_* variable of the caller is passed on. MH_TIMEOUT (s, default 600)
# bounds the job.
mh_mpirun() {
    local hostlist="" h v xs=()
    for h in "${MH_HOSTS[@]}"; do hostlist+="${hostlist:+,}$h:64"; done
    for v in $(env | grep -o '^\(XTQ\|FI\)_[A-Z0-9_]*'); do xs+=(-x "$v"); done
    timeout -k 10 "${MH_TIMEOUT:-600}" ip netns exec "${MH_HOSTS[0]}" \
        mpirun --allow-run-as-root --oversubscribe --bind-to none \
        --mca plm_rsh_agent "$MH_DIR/nsrsh.sh" --mca plm_rsh_no_tree_spawn 1 \
        --host "$hostlist" --map-by node "${xs[@]}" "$@"
}

# mh_check_tcp LOG NP: every rank opened tcp on its namespace's eth0 (a
# rank with several engine planes, XTQ_PROGRESS_THREADS, opens one endpoint
# per plane: ranks are counted by process id).
mh_check_tcp() {
    local log=$1 np=$2 got dev
    got=$(grep -c 'engine on tcp' "$log" || true)
    dev=$(grep 'opened tcp.*domain eth0)' "$log" | grep -o '^xtq\[[0-9]*\]' | sort -u | wc -l)
    if grep -q 'engine on shm' "$log" || [ "$got" -ne "$np" ] || [ "$dev" -ne "$np" ]; then
        mh_log "FAIL: expected $np ranks on tcp over eth0; found $got on tcp, $dev on eth0:"
        grep -E 'engine on|opened' "$log" >&2
        return 1
    fi
    mh_log "all $np ranks chose tcp on their namespace's eth0 (auto provider)"
}
