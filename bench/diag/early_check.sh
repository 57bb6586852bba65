#!/usr/bin/env bash
# Early reductions (XTQ_COLL_GPU_EARLY_US) on a machine of 2-4 GPUs: the
# GPU tests of the collectives (CTEST_RE), test_coll gpu_early with the
# profile (what a contradicted early reduction waited for), then 2 ranks
# with XTQ_COLL_PROFILE=1 at one size at a time, early off (0) against on
# (200 us), and xtq_allreduce 8 B - 64 KiB alternating them (ROUNDS).
# After STAGES=build bash bench/gpu_device_run.sh:
#   COMMIT=<hash> bash bench/diag/early_check.sh   -> $OUT/results.tgz
set -uo pipefail
. "$(dirname "$0")/lib.sh"
D=$R/early; mkdir -p "$D"
RE=${CTEST_RE:-ready|soft_wait|coll.gpu|grid_tags|shim.device}
{ hdr "ctest -R '$RE'"
  (cd "$B" && timeout 200 ctest -R "$RE" --output-on-failure)
} > "$D/ctest.txt" 2>&1; pack
{ hdr "$MPI -np 2 -x XTQ_COLL_PROFILE=1 -x XTQ_COLL_GPU_EARLY_US=1000000 test_coll gpu_early"
  timeout 60 $MPI -np 2 -x XTQ_COLL_PROFILE=1 -x XTQ_COLL_GPU_EARLY_US=1000000 \
    -x XTQ_COLL_TIMEOUT_MS=20000 "$B/apps/allreduce/tests/test_coll" gpu_early; echo "rc=$?"
} > "$D/gpu_early_prof.txt" 2>&1; pack
for size in ${PROF_SIZES:-8 4K}; do
  for v in 0 200; do
    { hdr "$MPI -np 2 -x XTQ_COLL_GPU_EARLY_US=$v -x XTQ_COLL_PROFILE=1 xtq_allreduce --modes xtqgpu --sizes $size --iters 200"
      timeout 60 $MPI -np 2 -x XTQ_COLL_GPU_EARLY_US=$v -x XTQ_COLL_PROFILE=1 "$AR" --modes xtqgpu \
        --sizes "$size" --iters 200; echo "rc=$?"
    } > "$D/prof_${size}_$v.txt" 2>&1; pack
  done
done
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in 0 200; do
    { hdr "$MPI -np 2 -x XTQ_COLL_GPU_EARLY_US=$v xtq_allreduce --modes staged,hsa,xtqgpu,nccl --sizes 8-64K --iters 20"
      timeout 60 $MPI -np 2 -x XTQ_COLL_GPU_EARLY_US=$v "$AR" --modes staged,hsa,xtqgpu,nccl \
        --sizes 8-64K --iters 20; echo "rc=$?"
    } > "$D/ar2_$v.r$r.txt" 2>&1; pack
  done
done
