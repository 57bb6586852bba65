#!/usr/bin/env bash
# MPI accumulate latency and overlap: the MPI's own one-sided layer against
# libxtq_mpi, in one script, same binary, same machine. GPU windows
# (WINDOWS=device, CUDA builds) compare against the host-staged round trip.
#
#   mpi-ext/bench/run.sh                      # Open MPI and MPICH, host windows
#   MPIS=openmpi WINDOWS="create device" mpi-ext/bench/run.sh   # GPU machine
#
# Environment: BUILD_DIR (build), MACHINE (hostname), OUT
# (bench/results/$MACHINE/mpi), MPIS ("openmpi mpich"), WINDOWS ("create
# allocate"), MODES (lock,fence,flush), MAX (4194304 bytes), ITERS (200),
# OVERLAP_MS (400), OVERLAP_BYTES ("8 1048576"), NP_FLAGS (extra launcher
# flags), COLL (1: also MPI_Allreduce, the MPI's own against the layer's
# routing to libxtq_coll), COLL_MAX (4194304), COLL_ITERS (100), COLL_MIN
# (XTQ_MPI_COLL_MIN for the layer's run: 0, every size routed). Writes
# acc_latency.txt / .csv, overlap.txt / .csv, ratios.txt, allreduce.txt /
# .csv / _ratios.txt, acc_latency.png and a README naming the machine,
# commit and command.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
MACHINE=${MACHINE:-$(hostname -s)}
OUT=${OUT:-bench/results/$MACHINE/mpi}
MPIS=${MPIS:-"openmpi mpich"}
WINDOWS=${WINDOWS:-"create allocate"}
MODES=${MODES:-lock,fence,flush}
MAX=${MAX:-4194304}
ITERS=${ITERS:-200}
OVERLAP_MS=${OVERLAP_MS:-400}
OVERLAP_BYTES=${OVERLAP_BYTES:-"8 1048576"}
COLL=${COLL:-1}
COLL_MAX=${COLL_MAX:-4194304}
COLL_ITERS=${COLL_ITERS:-100}
COLL_MIN=${COLL_MIN:-0}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
: >"$OUT/acc_latency.txt"
: >"$OUT/overlap.txt"
echo "mpi,window,mode,variant,bytes,iters,median_us,p10_us,p90_us" >"$OUT/acc_latency.csv"
echo "mpi,variant,bytes,iters,median_us,p10_us,p90_us" >"$OUT/allreduce.csv"
: >"$OUT/allreduce.txt"
echo "mpi,variant,bytes,work_ms,idle_ops,idle_median_us,idle_p90_us,idle_max_us,busy_ops,busy_median_us,busy_p90_us,busy_max_us,target_alone_ms,target_busy_ms" >"$OUT/overlap.csv"

# A run that fails (a wrong sum, a crash) is recorded and the others still
# run; the script exits 1 at the end if any failed.
nfailed=0
failed() {
    echo "FAILED: $1" | tee -a "$2" >&2
    nfailed=$((nfailed + 1))
}

# run MPI LAYER ARGS...: the benchmark under one MPI, with the layer
# preloaded or not.
run() {
    local mpi=$1 layer=$2
    shift 2
    local exe lib
    if [ "$mpi" = openmpi ]; then
        exe=$BUILD_DIR/mpi-ext/xtq_mpi_acc_latency
        lib=$BUILD_DIR/mpi-ext/libxtq_mpi.so
        local env=(-x XTQ_MPI_STATS=1)
        [ "$layer" = yes ] && env+=(-x "LD_PRELOAD=$lib")
        [ -n "${ACC_ALLOCATE_XTQ:-}" ] && env+=(-x ACC_ALLOCATE_XTQ=1)
        [ "$layer" = yes ] && env+=(-x "XTQ_MPI_COLL_MIN=$COLL_MIN")
        mpirun --oversubscribe --bind-to none -np 2 ${NP_FLAGS:-} "${env[@]}" "$exe" "$@"
    else
        exe=$BUILD_DIR/mpi-ext/xtq_mpi_acc_latency_mpich
        lib=$BUILD_DIR/mpi-ext/libxtq_mpi_mpich.so
        local env=(-genv XTQ_MPI_STATS 1)
        [ "$layer" = yes ] && env+=(-genv LD_PRELOAD "$lib")
        [ -n "${ACC_ALLOCATE_XTQ:-}" ] && env+=(-genv ACC_ALLOCATE_XTQ 1)
        [ "$layer" = yes ] && env+=(-genv XTQ_MPI_COLL_MIN "$COLL_MIN")
        mpiexec.mpich -n 2 ${NP_FLAGS:-} "${env[@]}" "$exe" "$@"
    fi
}

for mpi in $MPIS; do
    for window in $WINDOWS; do
        for layer in no yes; do
            echo "== $mpi, $window window, layer $layer" | tee -a "$OUT/acc_latency.txt"
            what=(latency --window "$window" --max "$MAX" --iters "$ITERS" --modes "$MODES")
            # GPU memory: the MPI's own one-sided calls cannot reach it; the
            # baseline is the host-staged round trip (send, D2H, add, H2D).
            if [ "$window" = device ] && [ "$layer" = no ]; then
                what=(staged --max "$MAX" --iters "$ITERS")
            fi
            ACC_ALLOCATE_XTQ=$([ "$window" = allocate ] && [ "$layer" = yes ] && echo 1 || true) \
                run "$mpi" "$layer" "${what[@]}" 2>&1 | tee -a "$OUT/acc_latency.txt" |
                sed -n 's/^csv,latency,//p' >>"$OUT/acc_latency.csv" ||
                failed "$mpi, $window window, layer $layer" "$OUT/acc_latency.txt"
        done
    done
    for bytes in $OVERLAP_BYTES; do
        for layer in no yes; do
            echo "== $mpi overlap, $bytes B, layer $layer" | tee -a "$OUT/overlap.txt"
            run "$mpi" "$layer" overlap --bytes "$bytes" --work-ms "$OVERLAP_MS" 2>&1 |
                tee -a "$OUT/overlap.txt" | sed -n 's/^csv,overlap,//p' >>"$OUT/overlap.csv" ||
                failed "$mpi overlap, $bytes B, layer $layer" "$OUT/overlap.txt"
        done
    done
done

# MPI_Allreduce: the MPI's own, then through the layer (routed to
# libxtq_coll from COLL_MIN bytes).
if [ "$COLL" = 1 ]; then
    for mpi in $MPIS; do
        for layer in no yes; do
            echo "== $mpi MPI_Allreduce, layer $layer" | tee -a "$OUT/allreduce.txt"
            run "$mpi" "$layer" allreduce --max "$COLL_MAX" --iters "$COLL_ITERS" 2>&1 |
                tee -a "$OUT/allreduce.txt" | sed -n 's/^csv,allreduce,//p' >>"$OUT/allreduce.csv" ||
                failed "$mpi MPI_Allreduce, layer $layer" "$OUT/allreduce.txt"
        done
    done
    awk -F, 'NR > 1 {
        key = $1 "," $3
        if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        if (!(key in own)) own[key] = $5; else { lay[key] = $5; var[key] = $2 }
    } END {
        printf "%-8s %9s %12s %12s %8s  %s\n", "mpi", "bytes", "mpi_us", "layer_us", "speedup",
               "layer path"
        for (i = 1; i <= n; i++) {
            k = order[i]; split(k, f, ",")
            if (!(k in lay)) continue
            printf "%-8s %9d %12.2f %12.2f %8.2f  %s\n", f[1], f[2], own[k], lay[k],
                   own[k] / lay[k], var[k] == "xtq" ? "libxtq_coll" : "pass-through"
        }
    }' "$OUT/allreduce.csv" | tee "$OUT/allreduce_ratios.txt"
fi

# Ratios: the MPI's own median over the layer's, per (mpi, window, mode,
# bytes). "layer" rows whose variant is mpi ran through the layer's
# pass-through (the window was not accelerated).
awk -F, 'NR > 1 {
    key = $1 "," $2 "," $3 "," $5
    if (!(key in seen)) { seen[key] = 1; order[++n] = key }
    if (!(key in own)) own[key] = $7; else { lay[key] = $7; var[key] = $4 }
} END {
    printf "%-8s %-9s %-6s %9s %12s %12s %8s  %s\n", "mpi", "window", "mode", "bytes",
           "mpi_us", "layer_us", "speedup", "layer path"
    for (i = 1; i <= n; i++) {
        k = order[i]; split(k, f, ",")
        if (!(k in lay)) continue
        printf "%-8s %-9s %-6s %9d %12.2f %12.2f %8.2f  %s\n", f[1], f[2], f[3], f[4], own[k],
               lay[k], own[k] / lay[k], var[k] == "xtq" ? "XTQ" : "pass-through"
    }
}' "$OUT/acc_latency.csv" | tee "$OUT/ratios.txt"

# Figure: latency against size, lock mode, both paths.
MACHINE=$MACHINE bash "$ROOT/mpi-ext/bench/plot.sh" "$OUT"

cat >"$OUT/README.md" <<EOF
# MPI accumulate latency and overlap: $MACHINE

- machine: $(uname -srm), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
- commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}$(git diff --quiet HEAD -- mpi-ext xtq hsa-glue 2>/dev/null || echo ' (with local changes)')
- command: \`MPIS="$MPIS" WINDOWS="$WINDOWS" MODES=$MODES MAX=$MAX ITERS=$ITERS OVERLAP_MS=$OVERLAP_MS OVERLAP_BYTES="$OVERLAP_BYTES" COLL=$COLL COLL_MAX=$COLL_MAX COLL_ITERS=$COLL_ITERS COLL_MIN=$COLL_MIN mpi-ext/bench/run.sh\`
- load average at the end (1, 5, 15 min): $(cut -d' ' -f1-3 /proc/loadavg), on $(nproc) cores
- MPIs: $(mpirun --version 2>/dev/null | head -1); $(mpichversion 2>/dev/null | head -1 | tr -s '\t ' ' ')
- GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep . || echo none)
- files: acc_latency.txt/.csv (every row), ratios.txt (the MPI's own median over the layer's),
  overlap.txt/.csv, acc_latency.png (lock mode)

A row's "layer path" is "XTQ" when the layer accelerated the window and
"pass-through" when it left it to the MPI (its stats at MPI_Finalize, in
the .txt files, say why).
EOF
echo "results in $OUT"
if [ "$nfailed" -gt 0 ]; then
    echo "$nfailed run(s) failed (FAILED lines above)" >&2
    exit 1
fi
