#!/usr/bin/env bash
# One environment variable, two values, alternating round by round, under
# the allreduce benchmark (apps/allreduce's xtq_allreduce) on the GPU
# machine after `STAGES=build bash bench/gpu_device_run.sh`:
#   VAR=XTQ_DIRECT_COMPLETION A=0 B=-1 bash bench/diag/ar_env_ab.sh
# MODES (xtq,xtqgpu), SIZES (8,1K,64K,1M), ITERS (50), ROUNDS (2), NP (2),
# BUILD (/tmp/build-gpu). Results under $W (/tmp/res/ar_<VAR>):
# ar_<value>.r<round>.txt; one line per run and mode on stdout with the
# out-of-place time (us) at each size.
set -uo pipefail
BLD=${BUILD:-/tmp/build-gpu}
var=${VAR:?VAR: the variable}
a=${A:?A: its first value}
b=${B:?B: its second value}
W=${W:-/tmp/res/ar_$var}
mkdir -p "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "$a" "$b"; do
    f=$W/ar_$v.r$r.txt
    timeout 150 mpirun --bind-to none -np "${NP:-2}" -x CUDA_MODULE_LOADING=EAGER -x "$var=$v" \
      "$BLD/apps/allreduce/xtq_allreduce" --modes "${MODES:-xtq,xtqgpu}" \
      --sizes "${SIZES:-8,1K,64K,1M}" --iters "${ITERS:-50}" >"$f" 2>&1
    rc=$?
    awk -v tag="$var=$v r$r rc=$rc" '/^# mode / {if (m) print tag, m ":" t; m=$3; sub(":", "", m); t=""}
      /^ +[0-9]+ +[0-9]+ / {t = t " " $1 "B=" $5} END {if (m) print tag, m ":" t}' "$f"
  done
done
