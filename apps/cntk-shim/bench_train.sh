#!/usr/bin/env bash
# xtq_train per shim back-end and rank count on the real Fashion-MNIST,
# side by side: CSV per run, a summary table (accuracy, epoch time,
# aggregation time per step) and a plot of loss and accuracy per epoch.
# Every file names its machine, commit and command.
#   apps/cntk-shim/bench_train.sh            # BACKENDS="mpi" NPS="1 2" EPOCHS=10
# OUT (default bench/results/<host>/train), BUILD_DIR (default build),
# DEVICE (cpu or cuda), DATA, EXTRA (more xtq_train options).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUILD_DIR:-$ROOT/build}
BIN=$B/apps/cntk-shim/xtq_train
OUT=${OUT:-$ROOT/bench/results/$(hostname -s)/train}
BACKENDS=${BACKENDS:-mpi}
NPS=${NPS:-1 2}
EPOCHS=${EPOCHS:-10}
DEVICE=${DEVICE:-cpu}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
MACHINE="$(hostname -s), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
files=()
summary=$OUT/summary.txt
{
  echo "# machine: $MACHINE"
  echo "# commit: $COMMIT"
  echo "# command: BACKENDS='$BACKENDS' NPS='$NPS' EPOCHS=$EPOCHS DEVICE=$DEVICE apps/cntk-shim/bench_train.sh"
  printf "%-8s %5s %6s %9s %9s %10s %10s %12s\n" backend ranks device test_acc loss epoch_s compute_s aggr_us/step
} >"$summary"
for be in $BACKENDS; do
  for np in $NPS; do
    tag=${be}_${DEVICE}_np$np
    cmd=(mpirun --oversubscribe --bind-to none -np "$np" -x XTQ_SHIM_BACKEND="$be" "$BIN"
         --data "$DATA" --device "$DEVICE" --epochs "$EPOCHS" --progress off
         --csv "$OUT/$tag.csv" ${EXTRA:-})
    echo "== $tag: ${cmd[*]}"
    "${cmd[@]}" | tee "$OUT/$tag.txt"
    rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "$tag: rc=$rc (skipped in the summary)"; continue; }
    sed -i "1i # machine: $MACHINE\n# commit: $COMMIT" "$OUT/$tag.csv"
    files+=("$OUT/$tag.csv")
    # Mean epoch, compute and aggregation time over epochs 2.. (epoch 1 warms up).
    grep -v '^#' "$OUT/$tag.csv" | tail -n +2 | awk -F, -v be=$be -v np=$np -v dev=$DEVICE '
      { n++; e1 = $10; c1 = $11; a1 = $13; acc = $9; loss = $6
        if (n > 1) { k++; e += $10; c += $11; a += $13 } }
      END { if (!k) { k = 1; e = e1; c = c1; a = a1 }
            printf "%-8s %5d %6s %9.2f %9.4f %10.3f %10.3f %12.1f\n", be, np, dev, acc, loss, e / k, c / k, a / k }' \
      >>"$summary"
  done
done
cat "$summary"
if [ ${#files[@]} -gt 0 ] && command -v gnuplot >/dev/null; then
  gnuplot -e "files='${files[*]}'; out='$OUT/training.png'; title='xtq_train, MLP 784-256-128-10, Fashion-MNIST, $(hostname -s) at $COMMIT'" \
    "$ROOT/apps/cntk-shim/plot_train.gp" && echo "plot: $OUT/training.png"
fi
