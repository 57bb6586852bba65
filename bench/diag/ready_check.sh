#!/usr/bin/env bash
# The ready word of peer reads (XTQ_COLL_GPU_READY) on a machine of 2-4
# GPUs: its tests, then xtq_allreduce on 2 ranks with it on and off
# (alternating, ROUNDS rounds), with the copies on the processor up to
# 4 KiB (the default) and 64 KiB; then 3 and 4 ranks checked, and Fig. 9c
# with the defaults. After STAGES=build bash bench/gpu_device_run.sh:
#   COMMIT=<hash> bash bench/diag/ready_check.sh   -> $OUT/results.tgz
set -uo pipefail
. "$(dirname "$0")/lib.sh"
mkdir -p "$R/ready"
{ hdr "ctest -R 'ready_word|grid_tags|coll.gpu|shim.device'"
  (cd "$B" && timeout 300 ctest -R 'ready_word|grid_tags|coll.gpu|shim.device' --output-on-failure)
} > "$R/ready/ctest.txt" 2>&1; pack
for r in $(seq 1 "${ROUNDS:-2}"); do
  for v in "1 4096" "0 4096" "1 65536" "0 65536"; do
    set -- $v
    f="$R/ready/ar2_ready$1_copy$2.r$r.txt"
    { hdr "$MPI -np 2 -x XTQ_COLL_GPU_READY=$1 -x XTQ_COLL_GPU_COPY_MAX=$2 xtq_allreduce --modes staged,hsa,xtqgpu,nccl --sizes 8-64K --iters 20"
      timeout 100 $MPI -np 2 -x XTQ_COLL_GPU_READY=$1 -x XTQ_COLL_GPU_COPY_MAX=$2 -x XTQ_COLL_PROFILE=1 \
        "$AR" --modes staged,hsa,xtqgpu,nccl --sizes 8-64K --iters 20; echo "rc=$?"
    } > "$f" 2>&1; pack
  done
done
for np in 3 4; do
  [ "$np" -le "$NG" ] || continue
  { hdr "$MPI -np $np xtq_allreduce --modes staged,hsa,xtqgpu,nccl --sizes 8-4M --iters 5"
    timeout 150 $MPI -np $np "$AR" --modes staged,hsa,xtqgpu,nccl --sizes 8-4M --iters 5; echo "rc=$?"
  } > "$R/ready/ar$np.txt" 2>&1; pack
done
{ hdr "$MPI -np 2 xtq_allreduce --modes staged,hsa,xtqgpu,nccl --sizes 8-64M --iters 10 (defaults)"
  timeout 150 $MPI -np 2 "$AR" --modes staged,hsa,xtqgpu,nccl --sizes 8-64M --iters 10; echo "rc=$?"
} > "$R/ready/ar2_all.txt" 2>&1; pack
strong "$R/ready/strong" 200
