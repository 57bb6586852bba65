#!/usr/bin/env bash
# Faults across hosts in network namespaces (lib.sh): three hosts, one
# rank each, every rank streaming puts to every other
# (test_multihost.c, case stream); the fault hits rank 2 (host h2).
#
#   faults.sh EXE link SECONDS   h2's cable pulled (its switch port down)
#   faults.sh EXE stop SECONDS   rank 2 SIGSTOPped, then SIGCONTinued
#   faults.sh EXE kill           rank 2 SIGKILLed
#   faults.sh EXE reset          rank 2's tcp connections reset (ss -K)
#
# Then `test_multihost check`: nothing acknowledged lost, nothing run
# twice, no put hung; with REQUIRE_RECOVERY=1 (default) every live pair
# must be usable again within RECOVER_MS (default 2 x XTQ_PEER_TIMEOUT_MS)
# of the fault's end; the stream goes on that long plus 3 s.
set -u
. "$(dirname "$0")/lib.sh"
exe=$1 fault=$2 secs=${3:-0}
victim=2
mh_require
MH_TMP=$(mktemp -d)
mh_setup 3 || { mh_log "namespace setup failed"; exit 1; }
export XTQ_PEER_TIMEOUT_MS=${XTQ_PEER_TIMEOUT_MS:-5000}
export XTQ_FINALIZE_TIMEOUT_MS=${XTQ_FINALIZE_TIMEOUT_MS:-5000}
tmo_s=$(((XTQ_PEER_TIMEOUT_MS + 999) / 1000))
recover_ms=${RECOVER_MS:-$((2 * XTQ_PEER_TIMEOUT_MS))}
stamp() { "$exe" clock | head -1 >"$MH_TMP/$1"; }
dir=$MH_TMP
extra=() opts=()
case $fault in
kill) extra=(dead=$victim); opts=(--enable-recovery --mca orte_abort_on_non_zero_status 0) ;;
stop) extra=(stopped=$victim) ;;
link | reset) ;;
*) echo "faults.sh: unknown fault $fault" >&2; exit 2 ;;
esac

MH_TIMEOUT=$((secs + 6 * tmo_s + recover_ms / 1000 + 200))
mh_mpirun -np 3 "${opts[@]}" "$exe" stream "$dir" "${extra[@]}" >"$MH_TMP/job.log" 2>&1 &
job=$!
for ((i = 0; i < 1800; i++)); do
    [ -e "$dir/ready.0" ] && [ -e "$dir/ready.1" ] && [ -e "$dir/ready.2" ] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
done
if [ ! -e "$dir/ready.2" ]; then
    cat "$MH_TMP/job.log"
    mh_log "FAIL: the ranks never started streaming"
    exit 1
fi
# The victim: the test process in h2's namespace (its orted is not).
vpid=
for p in $(ip netns pids "${MH_HOSTS[$victim]}"); do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = test_multihost ] && vpid=$p
done
[ -n "$vpid" ] || { mh_log "FAIL: rank $victim's process not found"; exit 1; }

sleep 3 # mid-stream
stamp fault_start
case $fault in
link)
    mh_log "h$victim link down for ${secs} s"
    mh_link $victim down
    sleep "$secs"
    # What decides when an old connection moves again: tcp's retransmission
    # timeout, doubled at each retry while the link was down.
    for h in "${!MH_HOSTS[@]}"; do
        ip netns exec "${MH_HOSTS[$h]}" ss -tinH state established 2>/dev/null |
            grep -o 'rto:[0-9.]*\|backoff:[0-9]*\|unacked:[0-9]*' | paste -sd' ' |
            sed "s/^/multihost: h$h tcp before the link returns: /"
    done
    mh_link $victim up
    ;;
stop)
    mh_log "rank $victim (pid $vpid) stopped for ${secs} s"
    kill -STOP "$vpid"
    sleep "$secs"
    kill -CONT "$vpid"
    ;;
kill)
    mh_log "rank $victim (pid $vpid) killed"
    kill -KILL "$vpid"
    ;;
reset)
    # Every established tcp connection of the rank (libfabric's), closed
    # under it: the kernel aborts the socket and resets the peer's end.
    n=0
    # `ss -tnpH state established`: Recv-Q Send-Q Local Peer Process.
    # Only libfabric's, to the other hosts: not the rank's PMIx connection
    # to its own orted (tcp too), which would fail its finalize.
    while read -r _ _ local peer rest; do
        case $rest in *"pid=$vpid,"*) ;; *) continue ;; esac
        case ${peer%:*} in 10.99.0.*) ;; *) continue ;; esac
        [ "${peer%:*}" = "$(mh_addr $victim)" ] && continue
        ip netns exec "${MH_HOSTS[$victim]}" ss -K src "${local%:*}" sport = ":${local##*:}" \
            dst "${peer%:*}" dport = ":${peer##*:}" >/dev/null && n=$((n + 1))
    done < <(ip netns exec "${MH_HOSTS[$victim]}" ss -tnpH state established)
    mh_log "rank $victim (pid $vpid): $n tcp connections reset"
    [ "$n" -gt 0 ] || { mh_log "FAIL: no connection to reset"; exit 1; }
    ;;
esac
stamp restored
# Time to come back, plus a little.
sleep $(((recover_ms + 999) / 1000 + 3))
: >"$dir/stop"
wait $job
rc=$?
cat "$MH_TMP/job.log"
mh_log "job exit $rc"
check=(dead=$victim)
[ "$fault" = kill ] || check=()
[ "$fault" = stop ] && check+=(stopped=$victim)
if [ "${REQUIRE_RECOVERY:-1}" = 1 ] && [ "$fault" != kill ]; then
    check+=(recover=$recover_ms)
fi
echo "== fault: $fault ${secs}s, XTQ_PEER_TIMEOUT_MS=$XTQ_PEER_TIMEOUT_MS, recovery bound ${recover_ms} ms"
"$exe" check "$dir" 3 "${check[@]}"
crc=$?
# The job's own status matters unless a rank was killed on purpose.
if [ "$fault" != kill ] && [ "$rc" -ne 0 ]; then crc=1; fi
exit $crc
