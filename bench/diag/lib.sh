# Shared by the GPU diagnostics of this folder (sourced): where the build
# and the results are, the machine's GPUs, packing the results for the
# device tool, a header naming machine, commit and command, and mpirun
# with the settings every GPU run here uses.
B=${B:-/tmp/build-gpu}; R=${R:-/tmp/res}; OUT=${OUT:-/tmp/out}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
mkdir -p "$R" "$OUT"
NG=$(nvidia-smi -L | wc -l)
pack() { tar -C "$R" -czf "$OUT/results.tgz" .; }
hdr() { echo "# machine: ${NG}x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores; commit ${COMMIT:-?}; $*"; }
MPI="mpirun --bind-to none -x CUDA_MODULE_LOADING=EAGER -x NCCL_NVLS_ENABLE=0"
AR="$B/apps/allreduce/xtq_allreduce"
# Fig. 9c (4 MiB on 2, 3 and every GPU; the sweep on every GPU) into
# folder $1 (its strong.txt beside it), `timeout` $2 seconds, more mpirun
# arguments in $3; skipped with fewer than 3 GPUs or STRONG=0.
strong() {
  [ "$NG" -ge 3 ] && [ "${STRONG:-1}" = 1 ] || return 0
  BUILD=$B OUT=$1 RANKS="2 3 $NG" SWEEP_NP=$NG SWEEP_SIZES=64K-4M \
    MODES=mpi,xtq,staged,hsa,xtqgpu,nccl ITERS=10 COMMIT=${COMMIT:-} \
    MPIRUN_ARGS="-x CUDA_MODULE_LOADING=EAGER -x NCCL_NVLS_ENABLE=0 ${3:-}" \
    timeout "$2" bash "$ROOT/apps/allreduce/strong_scaling.sh" > "$(dirname "$1")/strong.txt" 2>&1
  echo "rc=$?" >> "$(dirname "$1")/strong.txt"; pack
}
