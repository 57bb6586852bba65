#!/usr/bin/env bash
# Launched grids for CUDA teams (XTQ_COLL_GPU_GRID=1) on a machine of 2-4
# GPUs, after the processor's grid-tag fix (549c5d7): the tag test, the
# collectives' GPU cases with grids, the 4-rank run that hung in session 10,
# xtq_allreduce on 2 ranks with and without grids, and Fig. 9c with grids.
# Usage (after STAGES=build bash bench/gpu_device_run.sh):
#   COMMIT=<hash> bash bench/diag/grid_check.sh   -> $OUT/results.tgz
set -uo pipefail
. "$(dirname "$0")/lib.sh"
mkdir -p "$R/grid"
{ hdr "ctest -R grid_tags; coll.gpu/shim.device with XTQ_COLL_GPU_GRID=1"
  (cd "$B" && timeout 120 ctest -R 'grid_tags' --output-on-failure)
  (cd "$B" && XTQ_COLL_GPU_GRID=1 timeout 200 ctest -R 'coll.gpu|shim.device' --output-on-failure)
} > "$R/grid/ctest.txt" 2>&1; pack
for rep in 1 2; do
  { hdr "$MPI -np 4 -x XTQ_COLL_GPU_GRID=1 xtq_allreduce --modes xtqgpu --sizes 1M,2M,4M --iters 30 (rep $rep)"
    timeout 120 $MPI -np 4 -x XTQ_COLL_GPU_GRID=1 -x XTQ_COLL_TIMEOUT_MS=15000 \
      "$B/apps/allreduce/xtq_allreduce" --modes xtqgpu --sizes 1M,2M,4M --iters 30; echo "rc=$?"
  } > "$R/grid/np4_rep$rep.txt" 2>&1; pack
done
for g in 1 0; do
  { hdr "$MPI -np 2 -x XTQ_COLL_GPU_GRID=$g xtq_allreduce --modes staged,hsa,xtqgpu,nccl --sizes 8-64M --iters 10"
    timeout 150 $MPI -np 2 -x XTQ_COLL_GPU_GRID=$g "$B/apps/allreduce/xtq_allreduce" \
      --modes staged,hsa,xtqgpu,nccl --sizes 8-64M --iters 10; echo "rc=$?"
  } > "$R/grid/ar2_grid$g.txt" 2>&1; pack
done
strong "$R/grid/strong" 280 "-x XTQ_COLL_GPU_GRID=1"
