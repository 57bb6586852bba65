#!/usr/bin/env bash
# xtq_train on small IDX sets written here (xtq_train_mkdata):
#  1. 1 rank and 2 ranks follow the same math: per-epoch training losses
#     agree to float summation order, also when each layer aggregates
#     asynchronously during backward (--overlap), and on a back-end other
#     than mpi, 2 ranks on it agree with 2 ranks on mpi. The model learns:
#     the loss starts below chance (ln 10), falls every epoch, and the
#     test accuracy reaches 70%.
#  2. Bad data stops every rank with the file's name and the package to
#     install, exit code 2, never a crash or a hang: missing, truncated,
#     garbage, wrong magic, label out of range, count mismatch, absurd
#     header, missing folder, and one rank alone seeing a bad folder.
# usage: train_ci.sh BIN_DIR   (XTQ_MPIRUN: mpirun prefix)
set -uo pipefail
BIN=$1
MPIRUN=${XTQ_MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}
W=$(mktemp -d /tmp/xtq_train_ci.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }

"$BIN/xtq_train_mkdata" "$W/good" --train 1920 --test 480 || { echo "mkdata failed"; exit 1; }
ARGS=(--data "$W/good" --epochs 3 --batch 60 --lr 0.01 --progress off)
BACKEND=${XTQ_SHIM_BACKEND:-mpi}

# 1. 1 rank vs 2 ranks.
timeout 120 $MPIRUN -np 1 "$BIN/xtq_train" "${ARGS[@]}" --csv "$W/np1.csv" >"$W/np1.txt" 2>&1 ||
  bad "1 rank: rc=$? $(tail -3 "$W/np1.txt")"
timeout 120 $MPIRUN -np 2 "$BIN/xtq_train" "${ARGS[@]}" --csv "$W/np2.csv" >"$W/np2.txt" 2>&1 ||
  bad "2 ranks: rc=$? $(tail -3 "$W/np2.txt")"
timeout 120 $MPIRUN -np 2 "$BIN/xtq_train" "${ARGS[@]}" --overlap --csv "$W/ov2.csv" \
  >"$W/ov2.txt" 2>&1 || bad "2 ranks --overlap: rc=$? $(tail -3 "$W/ov2.txt")"
others="np2 ov2"
if [ "$BACKEND" != mpi ]; then
  timeout 120 $MPIRUN -np 2 "$BIN/xtq_train" "${ARGS[@]}" --backend mpi --csv "$W/mpi2.csv" \
    >"$W/mpi2.txt" 2>&1 || bad "2 ranks on mpi: rc=$? $(tail -3 "$W/mpi2.txt")"
  others="$others mpi2"
  grep -q "backend $BACKEND" "$W/np2.txt" && ok "ran on back-end $BACKEND" ||
    bad "did not run on back-end $BACKEND: $(head -2 "$W/np2.txt")"
fi
cat "$W/np2.txt"
if [ -s "$W/np1.csv" ] && [ -s "$W/np2.csv" ] && [ -s "$W/ov2.csv" ]; then
  # columns: backend,ranks,device,epoch,steps,train_loss,train_acc,test_loss,test_acc,...
  for other in $others; do
    [ -s "$W/$other.csv" ] || { bad "no CSV from $other"; continue; }
    paste -d, <(grep -v '^#' "$W/np1.csv" | tail -n +2) <(grep -v '^#' "$W/$other.csv" | tail -n +2) |
      awk -F, -v o=$other '{ d = $6 - $19; if (d < 0) d = -d;
               if (d > 1e-3 * $6) { printf "epoch %s: loss %s (1 rank) vs %s (%s)\n", $4, $6, $19, o; bad = 1 }
               else printf "epoch %s: loss %s (1 rank) vs %s (%s): same\n", $4, $6, $19, o }
               END { exit bad }' && ok "1 rank and $other agree" || bad "1 rank and $other differ"
  done
  grep -v '^#' "$W/np2.csv" | tail -n +2 | cut -d, -f6 | awk '
    NR == 1 && $1 >= log(10) { printf "epoch 1 loss %s is not below chance (%.4f)\n", $1, log(10); bad = 1 }
    NR > 1 && $1 >= prev { printf "epoch %d loss %s did not fall (epoch %d: %s)\n", NR, $1, NR - 1, prev; bad = 1 }
    { prev = $1; l = l " " $1 } END { if (!bad) print "losses" l; exit bad }' &&
    ok "loss falls every epoch" || bad "loss does not fall"
  acc=$(grep -v '^#' "$W/np2.csv" | tail -1 | cut -d, -f9)
  awk -v a="$acc" 'BEGIN { exit !(a >= 70) }' && ok "learns: $acc% test accuracy" ||
    bad "does not learn: $acc% test accuracy"
  grep -q "aggr" "$W/np2.txt" && ok "epoch table printed" || bad "no epoch table"
else
  bad "no CSV written"
fi

# 2. Bad data: every rank reports, exit 2, within the timeout.
expect_fail() { # name dir pattern [mpirun args...]
  local name=$1 dir=$2 pattern=$3
  shift 3
  local out="$W/$name.txt" rc
  if [ $# -gt 0 ]; then
    timeout 60 $MPIRUN "$@" >"$out" 2>&1
  else
    timeout 60 $MPIRUN -np 2 "$BIN/xtq_train" --data "$dir" --epochs 1 --progress off >"$out" 2>&1
  fi
  rc=$?
  if [ $rc -eq 124 ]; then bad "$name: hung (killed after 60 s)"; return; fi
  if [ $rc -ne 2 ]; then bad "$name: exit code $rc, expected 2: $(tail -3 "$out")"; return; fi
  for r in 0 1; do
    if ! grep -q "xtq_train: rank $r: .*$pattern" "$out"; then
      bad "$name: rank $r did not report '$pattern': $(cat "$out")"
      return
    fi
  done
  grep -q "apt-get install dataset-fashion-mnist" "$out" || { bad "$name: no install hint"; return; }
  grep -qiE "segmentation|core dumped|signal" "$out" && { bad "$name: crashed"; return; }
  ok "$name: $(grep -m1 'rank 0' "$out" | cut -c1-160)"
}
for mode in missing truncated garbage magic label count huge; do
  "$BIN/xtq_train_mkdata" "$W/$mode" --train 64 --test 32 --corrupt $mode || bad "mkdata $mode"
done
expect_fail missing "$W/missing" "train-labels-idx1-ubyte.gz: cannot open"
expect_fail truncated "$W/truncated" "train-images-idx3-ubyte.gz: truncated"
expect_fail garbage "$W/garbage" "train-images-idx3-ubyte.gz: .*magic"
expect_fail magic "$W/magic" "train-labels-idx1-ubyte.gz: not an IDX label file"
expect_fail label "$W/label" "t10k-labels-idx1-ubyte.gz: label 12 of item 16 is out of range"
expect_fail count "$W/count" "t10k-labels-idx1-ubyte.gz: holds 31 labels"
expect_fail huge "$W/huge" "train-images-idx3-ubyte.gz: dimension 0 is 2147483648"
expect_fail nofolder "$W/nowhere" "nowhere/train-images-idx3-ubyte.gz: cannot open"
# Only rank 1 sees bad data: rank 0 learns it from rank 1 and stops too.
expect_fail one_rank "" "truncated" -np 1 "$BIN/xtq_train" --data "$W/good" --epochs 1 \
  --progress off : -np 1 "$BIN/xtq_train" --data "$W/truncated" --epochs 1 --progress off

# 3. No GPU: --device cuda is refused by every rank with the reason, as a
#    SKIP (77), never a crash. (Where a GPU exists this is not a fault.)
if ! nvidia-smi -L >/dev/null 2>&1; then
  timeout 60 $MPIRUN -np 2 "$BIN/xtq_train" "${ARGS[@]}" --device cuda >"$W/cuda.txt" 2>&1
  rc=$?
  if [ $rc -eq 77 ] && [ "$(grep -c 'rank [01]: .*SKIP: device unavailable' "$W/cuda.txt")" -eq 2 ]; then
    ok "no GPU: $(grep -m1 SKIP "$W/cuda.txt" | cut -c1-120)"
  else
    bad "no GPU: exit code $rc, expected 77 and a SKIP line per rank: $(cat "$W/cuda.txt")"
  fi
fi

if [ $fails -eq 0 ]; then echo "train_ci: all checks passed"; else echo "train_ci: $fails checks failed"; fi
[ $fails -eq 0 ]
