#!/usr/bin/env bash
# Fig. 9c: strong scaling of a 4 MiB allreduce over RANKS, every path of
# xtq_allreduce, a size sweep at SWEEP_NP ranks to fit the model on, the
# model checked against the strong-scaling points it did not see and
# projected to 64, 256 and 1024 nodes on a 100 Gb/s, 1.5 us network, and
# the PNG (gnuplot) with measurements and projection together.
#
#   BUILD=build OUT=bench/results/vm-2c/allreduce RANKS="2 3 4 6 8" \
#     apps/allreduce/strong_scaling.sh
#
# MODES picks paths (default: all; GPU paths skip where there is no GPU),
# MPIRUN_ARGS goes to mpirun (e.g. "-x XTQ_CPU_WORKERS=1").
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/bench/results/allreduce}
RANKS=${RANKS:-"2 4 8 16"}
SWEEP_NP=${SWEEP_NP:-4}
SWEEP_SIZES=${SWEEP_SIZES:-8-64M}
MODES=${MODES:-all}
ITERS=${ITERS:-20}
MPIRUN=${MPIRUN:-mpirun}
MPIRUN_ARGS=${MPIRUN_ARGS:-}
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)}
MACHINE=${MACHINE:-"$(hostname), $(nproc) cores"}
APP=$BUILD/apps/allreduce/xtq_allreduce
MODEL=$BUILD/apps/allreduce/xtq_allreduce_model
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() { # np args...
  local np=$1; shift
  # shellcheck disable=SC2086
  $MPIRUN --oversubscribe --allow-run-as-root --bind-to none -np "$np" $MPIRUN_ARGS \
    "$APP" --modes "$MODES" --iters "$ITERS" --warmup 3 --commit "$COMMIT" \
    --machine "$MACHINE" "$@"
}

echo "# $(date -u +%FT%TZ) commit $COMMIT machine $MACHINE" | tee "$OUT/command.txt"
echo "# RANKS=\"$RANKS\" SWEEP_NP=$SWEEP_NP SWEEP_SIZES=$SWEEP_SIZES MODES=$MODES ITERS=$ITERS MPIRUN_ARGS=\"$MPIRUN_ARGS\"" | tee -a "$OUT/command.txt"

if [ "${SKIP_SWEEP:-0}" != 1 ]; then
  run "$SWEEP_NP" --sizes "$SWEEP_SIZES" --csv "$OUT/sweep.np$SWEEP_NP.csv" | tee "$OUT/sweep.np$SWEEP_NP.txt"
fi
rm -f "$OUT/strong.csv"
for np in $RANKS; do
  run "$np" --strong --csv "$OUT/strong.np$np.csv" | tee "$OUT/strong.np$np.txt"
  if [ -f "$OUT/strong.csv" ]; then grep -v '^#' "$OUT/strong.np$np.csv" | tail -n +2 >> "$OUT/strong.csv"
  else cp "$OUT/strong.np$np.csv" "$OUT/strong.csv"; fi
done

"$MODEL" --fit "$OUT/sweep.np$SWEEP_NP.csv" --check "$OUT/strong.csv" --size 4M \
  --project "$(echo $RANKS | tr ' ' ','),64,256,1024" --latency-us 1.5 --gbits 100 \
  --out "$OUT/model.dat" | tee "$OUT/model.txt"

modes=$(awk '!/^#/ && NF {print $1}' "$OUT/model.dat" | uniq | tr '\n' ' ')
if ! command -v gnuplot >/dev/null; then
  echo "gnuplot not found: plot later with gnuplot -e \"datafile='model.dat'; outfile='strong_scaling.png'; modes='$modes'; subtitle='$MACHINE'\" apps/allreduce/strong_scaling.gp"
  exit 0
fi
gnuplot -e "datafile='$OUT/model.dat'; outfile='$OUT/strong_scaling.png'; modes='$modes'; subtitle='$MACHINE, commit $COMMIT'" \
  "$ROOT/apps/allreduce/strong_scaling.gp"
echo "wrote $OUT/strong_scaling.png"
