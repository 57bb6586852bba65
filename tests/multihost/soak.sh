#!/usr/bin/env bash
# The soak: mixed puts (0 B to 1 MiB, all ranks to all, kernel and function
# commands, registrations changing under load) across hosts in network
# namespaces (lib.sh; test_multihost.c, case soak) for SECONDS, each rank's
# RSS and open file descriptors sampled every second. Passes when the
# ranks check out and, after the warm-up (the first minute, or the first
# third of a shorter run), no rank's RSS grew by 1% or more and its fd
# count stayed flat.
# Usage: soak.sh EXE SECONDS [CSV]   (CSV: where the samples go)
set -u
. "$(dirname "$0")/lib.sh"
exe=$1 secs=$2 csv=${3:-}
hosts=${SOAK_HOSTS:-3} np=${SOAK_NP:-3}
mh_require
MH_TMP=$(mktemp -d)
[ -n "$csv" ] || csv=$MH_TMP/samples.csv
mh_setup "$hosts" || { mh_log "namespace setup failed"; exit 1; }
MH_TIMEOUT=$((secs + 300))
mh_mpirun -np "$np" "$exe" soak "$MH_TMP" "$secs" >"$MH_TMP/job.log" 2>&1 &
job=$!
for ((i = 0; i < 1800; i++)); do
    n=$(ls "$MH_TMP"/ready.* 2>/dev/null | wc -l)
    [ "$n" -eq "$np" ] && break
    kill -0 $job 2>/dev/null || break
    sleep 0.1
done
pids=()
for h in "${MH_HOSTS[@]}"; do
    for p in $(ip netns pids "$h"); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = test_multihost ] && pids+=("$p")
    done
done
mh_log "soak: $np ranks (pids ${pids[*]}) for $secs s; sampling every second into $csv"
echo "t_s,pid,rss_kib,fds" >"$csv"
# Builtins only (no forks), so that a loaded machine still samples each second.
t0=$SECONDS
next=$t0
# Until the first rank's puts stop (drain.RANK): after that a rank drains
# and tears down, and its RSS and fds fall.
drained() { compgen -G "$MH_TMP/drain.*" >/dev/null; }
while kill -0 $job 2>/dev/null && ! drained; do
    t=$((SECONDS - t0))
    for p in "${pids[@]}"; do
        rss=
        while read -r k v _; do
            [ "$k" = VmRSS: ] && { rss=$v; break; }
        done 2>/dev/null <"/proc/$p/status"
        [ -n "$rss" ] || continue
        fds=(/proc/$p/fd/*)
        echo "$t,$p,$rss,${#fds[@]}" >>"$csv"
    done
    next=$((next + 1))
    while [ $SECONDS -lt $next ]; do sleep 0.2; done
done
wait $job
rc=$?
cat "$MH_TMP/job.log"
warm=60
[ "$secs" -lt 180 ] && warm=$((secs / 2))
# Per rank: RSS and fds at the end of the warm-up, then the largest and
# smallest after it, up to the first rank's drain.
if ! awk -F, -v warm="$warm" -v np="$np" '
    NR == 1 { next }
    $1 >= warm && !($2 in base) { base[$2] = $3; fbase[$2] = $4 }
    $1 >= warm && ($2 in base) {
        if ($3 > peak[$2]) peak[$2] = $3
        if ($4 > fpeak[$2]) fpeak[$2] = $4
        if (!($2 in fmin) || $4 < fmin[$2]) fmin[$2] = $4
        last[$2] = $3; n[$2]++
    }
    END {
        bad = 0
        for (p in base) ranks++
        if (ranks != np) {
            printf "soak: %d of %d ranks sampled after the warm-up\n", ranks, np
            bad = 1
        }
        for (p in base) {
            if (n[p] < 5) {
                printf "soak: pid %s: %d samples after the warm-up, too few to judge\n", p, n[p]
                bad = 1
            }
            g = 100.0 * (peak[p] - base[p]) / base[p]
            printf "soak: pid %s: RSS %d KiB at %d s, peak %d KiB after (%+.2f%%), last %d KiB; fds %d at %d s, %d-%d after (%d samples)\n", p, base[p], warm, peak[p], g, last[p], fbase[p], warm, fmin[p], fpeak[p], n[p]
            if (g >= 1.0 || fpeak[p] != fbase[p] || fmin[p] != fbase[p]) bad = 1
        }
        exit bad
    }' "$csv"; then
    mh_log "FAIL: too few samples, or RSS grew by 1% or more, or the fd count moved, after the warm-up"
    rc=1
fi
mh_log "soak exit $rc"
exit $rc
