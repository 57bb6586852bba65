#!/usr/bin/env bash
# xtq_gpu_rtt (in process, one GPU) under several builds and settings,
# alternating round by round, on the GPU machine:
#   RUNS="old=/tmp/build-old,XTQ_CUDA_BLOCKS=2 new=/tmp/build-gpu,XTQ_CUDA_BLOCKS=2" \
#     bash bench/diag/gpu_rtt_ab.sh
# RUNS: label=build_dir[,VAR=value...] each; an older commit's tree is
# built first with OLD=<its source dir> (into /tmp/build-old, target
# xtq_gpu_rtt). ROUNDS (2), MODES (xtq,xtq_proc,hsa_sync), ITERS (500).
# Results under $W (/tmp/res/gpurtt_ab): <label>.r<round>.{txt,csv}; the
# medians per size and mode on stdout, one line per run.
set -uo pipefail
W=${W:-/tmp/res/gpurtt_ab}
mkdir -p "$W"
if [ -n "${OLD:-}" ]; then
  # libfabric's carried headers, as gpu_device_run.sh found them (/tmp/pc).
  [ -d /tmp/pc ] && export PKG_CONFIG_PATH=/tmp/pc:${PKG_CONFIG_PATH:-}
  timeout 200 cmake -S "$OLD" -B /tmp/build-old -DCMAKE_BUILD_TYPE=Release -DXTQ_ENABLE_CUDA=ON \
    -DXTQ_ENABLE_ROCR=OFF -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null 2>&1
  timeout 240 cmake --build /tmp/build-old -j16 --target xtq_gpu_rtt >"$W/build_old.txt" 2>&1
  echo "old build ($OLD) rc=$?"
fi
for r in $(seq 1 "${ROUNDS:-2}"); do
  for run in ${RUNS:?RUNS: label=build_dir[,VAR=value...] ...}; do
    label=${run%%=*}
    IFS=, read -r -a parts <<<"${run#*=}"
    bin=$(find "${parts[0]}" -name xtq_gpu_rtt -type f | head -1)
    f=$W/$label.r$r
    env "${parts[@]:1}" timeout 120 "$bin" -n "${ITERS:-500}" -c "$label" \
      -m "${MODES:-xtq,xtq_proc,hsa_sync}" -t 110 -o "$f.csv" >"$f.txt" 2>&1
    echo "$label r$r rc=$? $(awk -F, 'NR > 2 {printf "%s/%s %s  ", $1, $2, $3}' "$f.csv")"
  done
done
