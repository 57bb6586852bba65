#!/usr/bin/env bash
# Small accumulates, A/B interleaved: the MPI's own lock/acc/unlock against
# the layer's lock/acc/unlock, the layer's acc+flush inside lock_all, and
# a bare XtqPut round trip of 64 B through the engine (xtq_bench_rtt, mode
# xtq: the floor of any design that waits for the target's agent). REPS
# repetitions, each running everything back to back, so that the
# machine's load moves all of them alike.
#
#   mpi-ext/bench/small_ab.sh        # results in bench/results/$MACHINE/mpi/small_ab.txt
#
# Environment: BUILD_DIR (build), MACHINE (hostname), OUT
# (bench/results/$MACHINE/mpi), MPIS ("openmpi mpich"), REPS (5), ITERS
# (1000), MAX (16 bytes: rows 8 and 16 B), LOAD_MAX (if set, each run
# first waits, up to LOAD_WAIT seconds (600), until the 1-minute load
# average is below it; the CSV's last column is the load each run
# started at).
#
# Two builds of the layer against each other instead (two commits, same
# script, alternating run by run): name their build directories, already
# built, in BUILD_A and BUILD_B; A and B label them; MODES (lock,flush)
# picks the layer's modes. Results in $OUT/$NAME.txt (NAME: small_ab_build).
#   BUILD_A=/tmp/old/build BUILD_B=build A=4355b19 B=9959eb1 mpi-ext/bench/small_ab.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -n "${BUILD_A:-}${BUILD_B:-}" ]; then
    [ -n "${BUILD_A:-}" ] && [ -n "${BUILD_B:-}" ] || { echo "BUILD_A and BUILD_B go together" >&2; exit 2; }
    BUILD_DIR=$BUILD_A
fi
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
MACHINE=${MACHINE:-$(hostname -s)}
OUT=${OUT:-bench/results/$MACHINE/mpi}
MPIS=${MPIS:-"openmpi mpich"}
REPS=${REPS:-5}
ITERS=${ITERS:-1000}
MAX=${MAX:-16}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"

# Before each run: wait for a quiet machine (LOAD_MAX), then the load.
quiet_load() {
    local waited=0
    if [ -n "${LOAD_MAX:-}" ]; then
        while awk -v m="$LOAD_MAX" '{ exit !($1 >= m) }' /proc/loadavg &&
            [ "$waited" -lt "${LOAD_WAIT:-600}" ]; do
            sleep 5
            waited=$((waited + 5))
        done
    fi
    cut -d' ' -f1 /proc/loadavg
}

one() { # MPI LAYER(no|yes) MODES
    local mpi=$1 layer=$2 modes=$3 exe lib
    if [ "$mpi" = openmpi ]; then
        exe=$BUILD_DIR/mpi-ext/xtq_mpi_acc_latency
        lib=$BUILD_DIR/mpi-ext/libxtq_mpi.so
        local env=()
        [ "$layer" = yes ] && env+=(-x "LD_PRELOAD=$lib")
        mpirun --oversubscribe --bind-to none -np 2 "${env[@]}" "$exe" latency --window create \
            --max "$MAX" --iters "$ITERS" --modes "$modes"
    else
        exe=$BUILD_DIR/mpi-ext/xtq_mpi_acc_latency_mpich
        lib=$BUILD_DIR/mpi-ext/libxtq_mpi_mpich.so
        local env=()
        [ "$layer" = yes ] && env+=(-genv LD_PRELOAD "$lib")
        mpiexec.mpich -n 2 "${env[@]}" "$exe" latency --window create --max "$MAX" \
            --iters "$ITERS" --modes "$modes"
    fi
}

if [ -n "${BUILD_A:-}" ]; then
    A=${A:-A} B=${B:-B} MODES=${MODES:-lock,flush} NAME=${NAME:-small_ab_build}
    dirs=("$(cd "$BUILD_A" && pwd)" "$(cd "$BUILD_B" && pwd)")
    labels=("$A" "$B")
    csv=$OUT/$NAME.csv
    echo "rep,mpi,build,mode,bytes,iters,median_us,p10_us,p90_us,load1" >"$csv"
    for rep in $(seq 1 "$REPS"); do
        for mpi in $MPIS; do
            for i in 0 1; do
                BUILD_DIR=${dirs[$i]}
                load=$(quiet_load)
                one "$mpi" yes "$MODES" 2>/dev/null | sed -n 's/^csv,latency,//p' |
                    awk -F, -v rep="$rep" -v load="$load" -v b="${labels[$i]}" -v OFS=, \
                        '{ print rep, $1, b, $3, $5, $6, $7, $8, $9, load }' >>"$csv"
            done
        done
    done
    # Per (mpi, mode, bytes): the median over repetitions of each build's median.
    awk -F, -v A="$A" -v B="$B" 'NR > 1 {
        k = $2 "," $4 "," $5; v[k "," $3] = v[k "," $3] " " $7; seen[k] = 1
    } END {
        printf "%-8s %6s %6s %12s %12s %8s\n", "mpi", "mode", "bytes", A "_us", B "_us", "B/A"
        for (k in seen) {
            split(k, f, ","); a = med(v[k "," A]); b = med(v[k "," B])
            printf "%-8s %6s %6d %12.2f %12.2f %8.2f\n", f[1], f[2], f[3], a, b, (a > 0 ? b / a : 0)
        }
    }
    function med(s,   n, x, i, j, t) {
        n = split(s, x, " ")
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
        return n ? (n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2) : 0
    }' "$csv" | sort | tee "$OUT/$NAME.txt"
    {
        echo
        echo "machine: $(uname -srm), $(nproc) cores; A = $A (${dirs[0]}), B = $B (${dirs[1]})"
        echo "command: BUILD_A=$BUILD_A BUILD_B=$BUILD_B A=$A B=$B MPIS=\"$MPIS\" REPS=$REPS ITERS=$ITERS MAX=$MAX MODES=$MODES${LOAD_MAX:+ LOAD_MAX=$LOAD_MAX} mpi-ext/bench/small_ab.sh"
        echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
    } | tee -a "$OUT/$NAME.txt"
    exit 0
fi

csv=$OUT/small_ab.csv
echo "rep,mpi,path,mode,bytes,iters,median_us,p10_us,p90_us,load1" >"$csv"
for rep in $(seq 1 "$REPS"); do
    for mpi in $MPIS; do
        for layer in no yes; do
            modes=lock
            [ "$layer" = yes ] && modes=lock,flush
            load=$(quiet_load)
            # csv,latency,mpi,window,mode,variant,bytes,iters,median,p10,p90
            one "$mpi" "$layer" "$modes" 2>/dev/null | sed -n 's/^csv,latency,//p' |
                awk -F, -v rep="$rep" -v load="$load" -v OFS=, \
                    '{ print rep, $1, $4, $3, $5, $6, $7, $8, $9, load }' >>"$csv"
        done
    done
    # The bare XtqPut round trip (no MPI layer), same moment.
    load=$(quiet_load)
    mpirun --oversubscribe --bind-to none -np 2 "$BUILD_DIR/bench/xtq_bench_rtt" --sizes 64 \
        --iters "$ITERS" --warmup $((ITERS / 10)) 2>/dev/null |
        awk -v rep="$rep" -v load="$load" -v OFS=, -v iters="$ITERS" \
            '$2 == "xtq" && $3 == "median" { print rep, "xtq", "xtqput", "rtt", 64, iters, $4, "", "", load }' \
            >>"$csv"
done

# Per (mpi, bytes): the median over repetitions of each path's median.
awk -F, 'NR > 1 {
    k = $2 "," $5; key = k "," $3 "," $4
    v[key] = v[key] " " $7; seen[k] = 1
} END {
    printf "%-8s %6s %12s %14s %15s %10s %12s\n", "mpi", "bytes", "mpi_lock_us", "layer_lock_us",
           "layer_flush_us", "lock/mpi", "lock/flush"
    for (k in seen) {
        split(k, f, ",")
        if (f[1] == "xtq") {
            printf "%-8s %6d %12s %14s %15s %10s %12s  XtqPut round trip (xtq_bench_rtt): %.2f us\n",
                   "xtqput", f[2], "-", "-", "-", "-", "-", med(v[k ",xtqput,rtt"])
            continue
        }
        a = med(v[k ",mpi,lock"]); b = med(v[k ",xtq,lock"]); c = med(v[k ",xtq,flush"])
        printf "%-8s %6d %12.2f %14.2f %15.2f %10.1f %12.2f\n", f[1], f[2], a, b, c,
               (a > 0 ? b / a : 0), (c > 0 ? b / c : 0)
    }
}
function med(s,   n, x, i, j, t) {
    n = split(s, x, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
    return n ? (n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2) : 0
}' "$csv" | sort | tee "$OUT/small_ab.txt"
{
    echo
    echo "machine: $(uname -srm), $(nproc) cores; commit $(git rev-parse --short HEAD)"
    echo "command: MPIS=\"$MPIS\" REPS=$REPS ITERS=$ITERS MAX=$MAX${LOAD_MAX:+ LOAD_MAX=$LOAD_MAX} mpi-ext/bench/small_ab.sh"
    echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$OUT/small_ab.txt"
