#!/usr/bin/env bash
# One environment variable, two values, alternating round by round on the
# GPU machine after `STAGES=build bash bench/gpu_device_run.sh` (any
# variable: XTQ_*, or the provider's own, e.g. FI_SHM_DISABLE_CMA, which
# applies to every libfabric endpoint of the process, so to the benchmark's
# raw and hsa endpoints as much as to XTQ's):
#   VAR=FI_SHM_DISABLE_CMA A=0 B=1 bash bench/diag/env_ab.sh
# Per round and value:
#   the CUDA agent's 2-rank round trip (hsa, xtq) at SIZES (64,4K,64K,1M),
#   the CPU agent's (raw, hsa, xtq) at CPU_SIZES (the same sizes);
# then the stage breakdown (XTQ_TRACE) of each value, CUDA agent, at
# BD_SIZES (4K,64K). ROUNDS (3), ITERS (4000; the benchmark runs a
# twentieth of it from 256 KiB), AGENTS ("cuda cpu"), BUILD (/tmp/build-gpu).
# Results under $W (/tmp/res/env_<VAR>): <agent>_<value>.r<round>.{txt,csv},
# bd_<value>.txt; one summary line per run on stdout, with xtq/hsa per size.
set -uo pipefail
BLD=${BUILD:-/tmp/build-gpu}
var=${VAR:?VAR: the variable}
a=${A:?A: its first value}
b=${B:?B: its second value}
W=${W:-/tmp/res/env_$var}
mkdir -p "$W"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
MPI=(mpirun --bind-to none -np 2 -x CUDA_MODULE_LOADING=EAGER)
sizes=${SIZES:-64,4K,64K,1M}
summary() {
  grep -E '^ +[0-9]+[KM]?i?B +(raw|hsa|xtq) +median' "$1" |
    awk '{printf "%s/%s %s  ", $1, $2, $4}'
  grep -E '^ratios' "$1" | tr '\n' ' '
}
for r in $(seq 1 "${ROUNDS:-3}"); do
  for v in "$a" "$b"; do
    for ag in ${AGENTS:-cuda cpu}; do
      f=$W/${ag}_$v.r$r
      if [ "$ag" = cuda ]; then
        timeout 120 "${MPI[@]}" -x "$var=$v" "$BLD/bench/xtq_bench_rtt" --agent cuda \
          --sizes "$sizes" --modes hsa,xtq --iters "${ITERS:-4000}" --warmup 200 \
          --csv "$f.csv" >"$f.txt" 2>&1
      else
        timeout 120 "${MPI[@]}" -x "$var=$v" "$BLD/bench/xtq_bench_rtt" \
          --sizes "${CPU_SIZES:-$sizes}" --modes raw,hsa,xtq --iters "${ITERS:-4000}" \
          --warmup 200 --csv "$f.csv" >"$f.txt" 2>&1
      fi
      echo "$ag $var=$v r$r rc=$? $(summary "$f.txt")"
    done
  done
done
for v in "$a" "$b"; do
  rm -rf /tmp/ebd && mkdir -p /tmp/ebd
  timeout 120 "${MPI[@]}" -x "$var=$v" -x XTQ_TRACE=csv:/tmp/ebd/trace.%r.csv \
    "$BLD/bench/xtq_bench_rtt" --agent cuda --sizes "${BD_SIZES:-4K,64K}" --modes hsa,xtq \
    --iters 2000 --warmup 200 --breakdown /tmp/ebd/stages.csv >"$W/bd_rtt_$v.txt" 2>&1
  echo "breakdown $var=$v rc=$?"
  "$BLD/bench/xtq_bench_breakdown" /tmp/ebd/stages.csv "$W/bd_$v.dat" /tmp/ebd/trace.*.csv |
    tee "$W/bd_$v.txt"
done
