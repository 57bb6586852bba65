#!/usr/bin/env bash
# Aggregation alone (xtq_shim_bench: every rank enters each aggregate
# together), mpi and xtq in one process per run, REPEATS runs per rank
# count; the summary gives each list's median over runs of the per-run
# medians and the ratio xtq/mpi. Every file names machine, commit, command.
#   NPS="2 4" REPEATS=3 ITERS=300 apps/cntk-shim/bench_shim.sh
# OUT (default bench/results/<host>/train), BUILD_DIR, DEVICE (cpu|cuda),
# SIZES (single buffers besides the MLP's list), MPIRUN.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUILD_DIR:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/$(hostname -s)/train}
NPS=${NPS:-2 4}
REPEATS=${REPEATS:-3}
ITERS=${ITERS:-300}
DEVICE=${DEVICE:-cpu}
SIZES=${SIZES:-4K,64K,1M}
read -r -a MPIRUN <<<"${MPIRUN:-mpirun --oversubscribe --bind-to none}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
MACHINE="$(hostname -s), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
summary=$OUT/shim_bench_$DEVICE.txt
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
for ((rep = 1; rep <= REPEATS; rep++)); do
  for np in $NPS; do
    csv=$OUT/shim_bench_${DEVICE}_np${np}_r$rep.csv
    load=$(cut -d' ' -f1 /proc/loadavg)
    echo "== np $np run $rep (load $load)"
    "${MPIRUN[@]}" -np "$np" "$B/apps/cntk-shim/xtq_shim_bench" --modes mpi,xtq --device "$DEVICE" \
      --iters "$ITERS" --sizes "$SIZES" --csv "$csv" || { echo "np $np run $rep failed"; continue; }
    sed -i "1i # machine: $MACHINE\n# commit: $COMMIT\n# load average before: $load" "$csv"
    # backend,list,bytes,median_us,...
    grep -v '^#' "$csv" | tail -n +2 | awk -F, -v np=$np '{ print np, $1, $2, $3, $4 }' >>"$raw"
  done
done
{
  echo "# machine: $MACHINE"
  echo "# commit: $COMMIT"
  echo "# command: NPS='$NPS' REPEATS=$REPEATS ITERS=$ITERS DEVICE=$DEVICE SIZES=$SIZES apps/cntk-shim/bench_shim.sh"
  echo "# median over $REPEATS runs of each run's median aggregate time (barrier before each, not timed)"
  printf "%5s %-6s %9s %10s %10s %8s\n" ranks list bytes mpi_us xtq_us xtq/mpi
  awk '{ k = $1 " " $3 " " $4; if (!(k in seen)) { seen[k] = 1; keys[++n] = k }
         v[k, $2, ++c[k, $2]] = $5 }
    function med(k, b,   m, i, j, t, a) { m = c[k, b]; for (i = 1; i <= m; i++) a[i] = v[k, b, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
    END { for (i = 1; i <= n; i++) { split(keys[i], p, " "); x = med(keys[i], "mpi"); y = med(keys[i], "xtq")
            printf "%5d %-6s %9d %10.1f %10.1f %8.3f\n", p[1], p[2], p[3], x, y, (x > 0 ? y / x : 0) } }' "$raw"
} >"$summary"
cat "$summary"
