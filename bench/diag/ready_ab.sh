#!/usr/bin/env bash
# One parameter's values on a machine of 2-4 GPUs: VAR (default
# XTQ_COLL_GPU_READY) at VARIANTS (default off copy stream). The tests of
# the ready word and the collectives' GPU cases (CTEST_RE), then
# xtq_allreduce on 2 ranks alternating the variants (ROUNDS rounds,
# 8 B - 4 MiB), with PROFILE=1 one XTQ_COLL_PROFILE run per variant, 3 and
# 4 ranks checked with the last variant, and Fig. 9c with it (STRONG=0:
# not). After STAGES=build bash bench/gpu_device_run.sh:
#   COMMIT=<hash> bash bench/diag/ready_ab.sh   -> $OUT/results.tgz
#   COMMIT=<hash> VAR=XTQ_COLL_GPU_EARLY_US VARIANTS="0 200" bash bench/diag/ready_ab.sh
set -uo pipefail
. "$(dirname "$0")/lib.sh"
D=$R/ready_ab; mkdir -p "$D"
RE=${CTEST_RE:-ready|coll.gpu|grid_tags}
VAR=${VAR:-XTQ_COLL_GPU_READY}
VARIANTS=${VARIANTS:-off copy stream}
LAST=${VARIANTS##* }
{ hdr "ctest -R '$RE'"
  (cd "$B" && timeout 200 ctest -R "$RE" --output-on-failure)
} > "$D/ctest.txt" 2>&1; pack
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in $VARIANTS; do
    { hdr "$MPI -np 2 -x $VAR=$v xtq_allreduce --modes staged,hsa,xtqgpu,nccl --sizes 8-4M --iters 20"
      timeout 60 $MPI -np 2 -x $VAR=$v "$AR" --modes staged,hsa,xtqgpu,nccl \
        --sizes 8-4M --iters 20; echo "rc=$?"
    } > "$D/ar2_$v.r$r.txt" 2>&1; pack
  done
done
if [ "${PROFILE:-0}" = 1 ]; then
  for v in $VARIANTS; do
    { hdr "$MPI -np 2 -x $VAR=$v -x XTQ_COLL_PROFILE=1 xtq_allreduce --modes xtqgpu --sizes 8,4K,64K --iters 50"
      timeout 60 $MPI -np 2 -x $VAR=$v -x XTQ_COLL_PROFILE=1 "$AR" --modes xtqgpu \
        --sizes 8,4K,64K --iters 50; echo "rc=$?"
    } > "$D/prof2_$v.txt" 2>&1; pack
  done
fi
for np in 3 4; do
  [ "$np" -le "$NG" ] || continue
  { hdr "$MPI -np $np -x $VAR=$LAST xtq_allreduce --modes hsa,xtqgpu --sizes 8-4M --iters 5"
    timeout 60 $MPI -np $np -x $VAR=$LAST "$AR" --modes hsa,xtqgpu --sizes 8-4M --iters 5; echo "rc=$?"
  } > "$D/ar${np}_$LAST.txt" 2>&1; pack
done
strong "$D/strong" 150 "-x $VAR=$LAST"
