#!/usr/bin/env bash
# EXPERIMENT: rdtsc profile of the CUDA agent's enqueue and retire paths.
B=/tmp/build-gpu
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for r in 1 2 3; do
  echo "== round $r"
  timeout 40 mpirun --bind-to none -np 2 -x XTQ_DIAG=1 -x CUDA_MODULE_LOADING=EAGER \
    $B/bench/xtq_bench_rtt --agent cuda --sizes 64 --modes hsa,xtq --iters 3000 --warmup 200 2>&1 |
    grep -E "diag|^ +64B +(hsa|xtq) |ratios"
done
