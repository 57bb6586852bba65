#!/usr/bin/env bash
# Who retires the CUDA agent's finished packets (issue 11, session 16):
# XTQ_AGENT_RETIRE=engine (the default: the progress thread's turns) against
# thread (the agent's retire thread, the design before), alternating, on
# the GPU machine after `STAGES=build bash bench/gpu_device_run.sh`:
#   2-rank round trip, hsa and xtq modes, SIZES (64,4K,1M), ROUNDS (3)
#   rounds of each, ITERS (8000; the benchmark runs a twentieth of it from
#   256 KiB), then the stage breakdown (XTQ_TRACE) of each at BD_SIZES (1M).
# Results under $W (/tmp/res/retire): rtt_<mode>.r<round>.{txt,csv},
# bd_<mode>.txt; one summary line per run on stdout.
set -uo pipefail
B=${B:-/tmp/build-gpu}
W=${W:-/tmp/res/retire}
mkdir -p "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
MPI=(mpirun --bind-to none -np 2 -x CUDA_MODULE_LOADING=EAGER)
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in engine thread; do
    f=$W/rtt_$v.r$r
    timeout 90 "${MPI[@]}" -x XTQ_AGENT_RETIRE=$v "$B/bench/xtq_bench_rtt" --agent cuda \
      --sizes "${SIZES:-64,4K,1M}" --modes hsa,xtq --iters "${ITERS:-8000}" --warmup 200 \
      --csv "$f.csv" >"$f.txt" 2>&1
    echo "$v r$r rc=$? $(grep -E '^ +[0-9]+[KM]?i?B +(hsa|xtq) +median' "$f.txt" |
      awk '{printf "%s/%s %s  ", $1, $2, $4}')"
  done
done
for v in engine thread; do
  rm -rf /tmp/rbd && mkdir -p /tmp/rbd
  timeout 90 "${MPI[@]}" -x XTQ_AGENT_RETIRE=$v -x XTQ_TRACE=csv:/tmp/rbd/trace.%r.csv \
    "$B/bench/xtq_bench_rtt" --agent cuda --sizes "${BD_SIZES:-1M}" --modes hsa,xtq --iters 4000 \
    --warmup 200 --breakdown /tmp/rbd/stages.csv >"$W/bd_rtt_$v.txt" 2>&1
  echo "breakdown $v rc=$?"
  "$B/bench/xtq_bench_breakdown" /tmp/rbd/stages.csv "$W/bd_$v.dat" /tmp/rbd/trace.*.csv |
    tee "$W/bd_$v.txt"
done
