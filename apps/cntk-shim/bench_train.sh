#!/usr/bin/env bash
# xtq_train per shim back-end and rank count on the real Fashion-MNIST,
# side by side: CSV per run, a summary (accuracy, epoch time, aggregation
# time per step, medians over repeats, ratios xtq/mpi) and a plot of loss
# and accuracy per epoch. Every file names its machine, commit and command.
#   BACKENDS="mpi xtq" NPS="1 2 4" EPOCHS=10 REPEATS=3 EPOCHS_REPEAT=3 \
#     apps/cntk-shim/bench_train.sh
# Repeat 1 runs EPOCHS epochs (the accuracy figures and the plot come from
# it); repeats 2.. run EPOCHS_REPEAT epochs (default EPOCHS) and only add
# timings: the math is the same for a back-end and rank count whatever the
# run, so they also check that the first epochs' losses repeat. Back-ends
# alternate (the order flips every repeat) so a noisy machine's load falls
# on all of them. Times are means over epochs 2.. of a run (epoch 1 warms
# up), then medians over repeats.
# OUT (default bench/results/<host>/train), BUILD_DIR (default build),
# DEVICE (cpu or cuda), DATA, EXTRA (more xtq_train options), MPIRUN.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${BUILD_DIR:-$ROOT/build}
BIN=$B/apps/cntk-shim/xtq_train
OUT=${OUT:-$ROOT/bench/results/$(hostname -s)/train}
BACKENDS=${BACKENDS:-mpi}
NPS=${NPS:-1 2}
EPOCHS=${EPOCHS:-10}
REPEATS=${REPEATS:-1}
EPOCHS_REPEAT=${EPOCHS_REPEAT:-$EPOCHS}
DEVICE=${DEVICE:-cpu}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
read -r -a MPIRUN <<<"${MPIRUN:-mpirun --oversubscribe --bind-to none}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
MACHINE="$(hostname -s), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
COMMAND="BACKENDS='$BACKENDS' NPS='$NPS' EPOCHS=$EPOCHS REPEATS=$REPEATS EPOCHS_REPEAT=$EPOCHS_REPEAT DEVICE=$DEVICE apps/cntk-shim/bench_train.sh"
runs=$OUT/runs.txt
summary=$OUT/summary.txt
{
  echo "# machine: $MACHINE"
  echo "# commit: $COMMIT"
  echo "# command: $COMMAND"
  echo "# one row per run; times: means over epochs 2..; load: 1-minute load average before/after"
  printf "%-7s %5s %6s %3s %6s %8s %8s %9s %9s %11s %12s %11s\n" backend ranks device rep epochs \
    test_acc loss epoch_s compute_s aggr_s/ep aggr_us/step load
} >"$runs"
plot_files=()
for ((rep = 1; rep <= REPEATS; rep++)); do
  ep=$EPOCHS
  [ $rep -gt 1 ] && ep=$EPOCHS_REPEAT
  order=$BACKENDS
  [ $((rep % 2)) -eq 0 ] && order=$(echo $BACKENDS | tr ' ' '\n' | tac | tr '\n' ' ')
  for np in $NPS; do
    for be in $order; do
      tag=${be}_${DEVICE}_np$np
      [ "$REPEATS" -gt 1 ] && tag=${tag}_r$rep
      load0=$(cut -d' ' -f1 /proc/loadavg)
      cmd=("${MPIRUN[@]}" -np "$np" -x XTQ_SHIM_BACKEND="$be" "$BIN" --data "$DATA"
           --device "$DEVICE" --epochs "$ep" --progress off --csv "$OUT/$tag.csv" ${EXTRA:-})
      echo "== $tag (load $load0): ${cmd[*]}"
      "${cmd[@]}" | tee "$OUT/$tag.txt"
      rc=${PIPESTATUS[0]}
      load1=$(cut -d' ' -f1 /proc/loadavg)
      [ "$rc" -eq 0 ] || { echo "$tag: rc=$rc (left out of the summary)"; continue; }
      sed -i "1i # machine: $MACHINE\n# commit: $COMMIT\n# load average before/after: $load0/$load1" \
        "$OUT/$tag.csv"
      [ $rep -eq 1 ] && plot_files+=("$OUT/$tag.csv")
      grep -v '^#' "$OUT/$tag.csv" | tail -n +2 | awk -F, -v be=$be -v np=$np -v dev=$DEVICE \
        -v rep=$rep -v load="$load0/$load1" '
        { n++; e1 = $10; c1 = $11; s1 = $12; a1 = $13; acc = $9; loss = $6
          if (n > 1) { k++; e += $10; c += $11; s += $12; a += $13 } }
        END { if (!k) { k = 1; e = e1; c = c1; s = s1; a = a1 }
              printf "%-7s %5d %6s %3d %6d %8.2f %8.4f %9.3f %9.3f %11.3f %12.1f %11s\n",
                     be, np, dev, rep, n, acc, loss, e / k, c / k, s / k, a / k, load }' >>"$runs"
    done
  done
done

# The summary: accuracy from repeat 1, medians of the times over repeats,
# then what the targets compare.
{
  echo "# machine: $MACHINE"
  echo "# commit: $COMMIT"
  echo "# command: $COMMAND"
  echo "# accuracy, loss: repeat 1 ($EPOCHS epochs; acc_last3: mean test accuracy of its last 3 epochs);"
  echo "# times: median over repeats of each run's mean over epochs 2.. (n: runs)"
  grep -v '^#' "$runs" | tail -n +2 | awk -v epochs=$EPOCHS -v csvdir="$OUT" -v dev=$DEVICE '
    function median(key,   i, j, m, t, v) {
      m = cnt[key]
      for (i = 1; i <= m; i++) v[i] = val[key, i]
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
    }
    function add(key, x) { val[key, ++cnt[key]] = x }
    { be = $1; np = $2; id = be " " np
      if (!(id in seen)) { seen[id] = 1; ids[++nid] = id; if (!(be in beseen)) { beseen[be] = 1; bes[++nbe] = be }
                           if (!(np in npseen)) { npseen[np] = 1; nps[++nnp] = np } }
      if ($4 == 1) { acc[id] = $6; loss[id] = $7 }
      add(id " e", $8); add(id " c", $9); add(id " a", $11) }
    END {
      # Mean test accuracy of the last 3 epochs of repeat 1 (its CSV).
      for (i = 1; i <= nid; i++) {
        split(ids[i], p, " ")
        f = sprintf("%s/%s_%s_np%s%s.csv", csvdir, p[1], dev, p[2], cnt[ids[i] " e"] > 1 ? "_r1" : "")
        cmd = "grep -v \"^#\" " f " | tail -n +2 | tail -3 | cut -d, -f9"
        s = 0; m = 0
        while ((cmd | getline x) > 0) { s += x; m++ }
        close(cmd)
        last3[ids[i]] = m ? s / m : 0
      }
      printf "%-7s %5s %6s %9s %9s %9s %9s %9s %12s %3s\n", "backend", "ranks", "device", "test_acc",
             "acc_last3", "loss", "epoch_s", "compute_s", "aggr_us/step", "n"
      for (i = 1; i <= nid; i++) {
        id = ids[i]; split(id, p, " ")
        ep[id] = median(id " e"); ag[id] = median(id " a")
        printf "%-7s %5d %6s %9.2f %9.2f %9.4f %9.3f %9.3f %12.1f %3d\n", p[1], p[2], dev, acc[id],
               last3[id], loss[id], ep[id], median(id " c"), ag[id], cnt[id " e"]
      }
      print ""
      print "# model quality (targets: |xtq - mpi| <= 0.3 points, |N ranks - 1 rank| <= 0.5)"
      for (j = 1; j <= nnp; j++) for (b = 2; b <= nbe; b++) {
        x = bes[b] " " nps[j]; y = bes[1] " " nps[j]
        if ((x in acc) && (y in acc))
          printf "accuracy %s - %s at %d ranks: %+.2f points (last 3 epochs: %+.2f)\n", bes[b], bes[1],
                 nps[j], acc[x] - acc[y], last3[x] - last3[y]
      }
      for (b = 1; b <= nbe; b++) for (j = 2; j <= nnp; j++) {
        x = bes[b] " " nps[j]; y = bes[b] " " nps[1]
        if ((x in acc) && (y in acc))
          printf "accuracy %s %d ranks - %d ranks: %+.2f points (last 3 epochs: %+.2f)\n", bes[b], nps[j],
                 nps[1], acc[x] - acc[y], last3[x] - last3[y]
      }
      print "# time ratios, medians (target on the 16-core host: aggregation xtq/mpi <= 0.85 at 4 ranks)"
      for (j = 1; j <= nnp; j++) for (b = 2; b <= nbe; b++) {
        x = bes[b] " " nps[j]; y = bes[1] " " nps[j]
        if ((x in ep) && (y in ep) && ag[y] > 0 && ep[y] > 0)
          printf "%s/%s at %d ranks: aggregation per step %.3f, epoch time %.3f\n", bes[b], bes[1],
                 nps[j], ag[x] / ag[y], ep[x] / ep[y]
      }
    }'
} >"$summary"
cat "$runs"
echo
cat "$summary"
if [ ${#plot_files[@]} -gt 0 ] && command -v gnuplot >/dev/null; then
  gnuplot -e "files='${plot_files[*]}'; out='$OUT/training.png'; title='xtq_train, MLP 784-256-128-10, Fashion-MNIST, $(hostname -s) at $COMMIT'" \
    "$ROOT/apps/cntk-shim/plot_train.gp" && echo "plot: $OUT/training.png"
fi
