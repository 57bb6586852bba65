#!/usr/bin/env bash
# The PyTorch DDP communication hook (python/xtq_shim.py) against DDP's own
# gloo allreduce: same seed, same batches, 2 ranks; the per-epoch losses
# agree to float summation order and the test accuracies within 0.3
# points; the hook really ran (shim collectives > 0); bad data stops both
# ranks. The shim's back-end is XTQ_SHIM_BACKEND's (mpi by default; the
# test checks the hook ran on it). SKIPs (77) where python3-torch is missing.
# usage: ddp_ci.sh BIN_DIR   (PYTHON3: interpreter with torch; XTQ_MPIRUN)
set -uo pipefail
BIN=$1
PY=${PYTHON3:-/usr/bin/python3}
MPIRUN=${XTQ_MPIRUN:-mpirun --oversubscribe --allow-run-as-root --bind-to none}
if ! "$PY" -c "import torch, torch.distributed as d; assert d.is_available()" 2>/dev/null; then
  echo "SKIP: $PY cannot import torch with torch.distributed (apt-get install python3-torch)"
  exit 77
fi
W=$(mktemp -d /tmp/xtq_ddp_ci.XXXXXX)
trap 'rm -rf "$W"' EXIT
fails=0
bad() { echo "FAIL: $*"; fails=$((fails + 1)); }
"$BIN/xtq_train_mkdata" "$W/good" --train 1280 --test 400 || exit 1
"$BIN/xtq_train_mkdata" "$W/trunc" --train 64 --test 32 --corrupt truncated || exit 1
port=$((29600 + RANDOM % 300))
run() { # comm csv [extra]
  local comm=$1 csv=$2
  shift 2
  timeout 240 $MPIRUN -np 2 -x PYTHONPATH="$BIN" -x OMP_NUM_THREADS=1 "$PY" "$BIN/train_ddp.py" \
    --data "$W/good" --comm "$comm" --epochs 3 --batch 64 --lr 0.1 --port $((port++)) \
    --csv "$csv" "$@"
}
run gloo "$W/gloo.csv" >"$W/gloo.txt" 2>&1 || bad "gloo run: rc=$? $(tail -5 "$W/gloo.txt")"
run shim "$W/shim.csv" >"$W/shim.txt" 2>&1 || bad "shim run: rc=$? $(tail -5 "$W/shim.txt")"
cat "$W/gloo.txt" "$W/shim.txt"
if [ -s "$W/gloo.csv" ] && [ -s "$W/shim.csv" ]; then
  # comm,ranks,device,epoch,steps,train_loss,test_acc,epoch_s,comm_s
  paste -d, <(grep -v '^#' "$W/gloo.csv" | tail -n +2) <(grep -v '^#' "$W/shim.csv" | tail -n +2) |
    awk -F, '{ d = $6 - $15; if (d < 0) d = -d; a = $7 - $16; if (a < 0) a = -a;
               printf "epoch %s: loss %s vs %s, accuracy %s vs %s\n", $4, $6, $15, $7, $16;
               if (d > 1e-3 * $6 || a > 0.3) bad = 1 } END { exit bad }' ||
    bad "gloo and the shim hook differ"
  grep -q "shim collectives [1-9]" "$W/shim.txt" || bad "the hook did not run"
  be=${XTQ_SHIM_BACKEND:-mpi}
  grep -q "comm shim/$be," "$W/shim.txt" || bad "the hook did not run on back-end $be"
else
  bad "no CSV"
fi
timeout 120 $MPIRUN -np 2 -x PYTHONPATH="$BIN" "$PY" "$BIN/train_ddp.py" --data "$W/trunc" \
  --comm shim --epochs 1 --port $((port++)) >"$W/bad.txt" 2>&1
rc=$?
[ $rc -eq 2 ] || bad "truncated data: exit code $rc, expected 2: $(tail -5 "$W/bad.txt")"
for r in 0 1; do
  grep -q "rank $r: .*train-images-idx3-ubyte.gz.*apt-get install dataset-fashion-mnist" \
    "$W/bad.txt" || bad "truncated data: rank $r did not name the file: $(cat "$W/bad.txt")"
done
if [ $fails -eq 0 ]; then echo "ddp_ci: all checks passed"; else echo "ddp_ci: $fails checks failed"; fi
[ $fails -eq 0 ]
