#!/usr/bin/env bash
# Diagnosis for issue 11's CPU round trip: what the initiator's progress
# thread costs the waiter. Rank 0 (the initiator of xtq_bench_rtt) runs
# with its defaults (A), with no progress thread at all (XTQ_PROGRESS=manual:
# its waits progress the engine, so the put path and the ack stay on one
# thread and core: M), and with a progress thread that blocks at once
# (XTQ_PROGRESS_SPIN_US=0: S). Rank 1, the target, keeps its defaults.
# Results: bench/results/h100-16c/session14/initiator-turns/.
# ROUNDS alternating rounds, then the stage breakdown for A and M.
#   B=build-dir OUT=dir bench/diag/initiator_turns.sh
set -uo pipefail
B=${B:?B: the build directory}
OUT=${OUT:?OUT: where the results go}
ROUNDS=${ROUNDS:-3}
MPI=(mpirun --bind-to none)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
mkdir -p "$OUT"
{ echo "# machine: $(hostname), $(nproc) cores; commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
  echo "# command: ROUNDS=$ROUNDS bench/diag/initiator_turns.sh"; } >"$OUT/summary.txt"
run() { # name env...
  local name=$1; shift
  "${MPI[@]}" -np 1 "$@" $B/bench/xtq_bench_rtt --sizes 64,4K --modes raw,hsa,xtq --iters 5000 \
    --csv "$OUT/$name.csv" : -np 1 $B/bench/xtq_bench_rtt --sizes 64,4K --modes raw,hsa,xtq \
    --iters 5000 >"$OUT/$name.txt" 2>&1
  echo "$name rc=$? $(grep -E '^ratios 64B' "$OUT/$name.txt") | $(grep -E '^ +64B +xtq +median' "$OUT/$name.txt" | awk '{print "xtq64", $4}')" |
    tee -a "$OUT/summary.txt"
}
# VARIANTS picks among A, M and S (L ran an experiment since reverted).
for r in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-A M S}; do
    case $v in
      A) run A.$r ;;
      M) run M.$r -x XTQ_PROGRESS=manual ;;
      S) run S.$r -x XTQ_PROGRESS_SPIN_US=0 ;;
    esac
  done
done
[ -n "${NO_BREAKDOWN:-}" ] && exit 0
for v in A M; do
  rm -rf /tmp/itb && mkdir -p /tmp/itb
  env=(); [ $v = M ] && env=(-x XTQ_PROGRESS=manual)
  args=(--sizes 64,4K --modes hsa,xtq --iters 2000 --warmup 200 --breakdown /tmp/itb/stages.csv)
  "${MPI[@]}" -x XTQ_TRACE=csv:/tmp/itb/trace.%r.csv -np 1 "${env[@]}" $B/bench/xtq_bench_rtt \
    "${args[@]}" : -np 1 $B/bench/xtq_bench_rtt "${args[@]}" >/dev/null 2>&1
  echo "breakdown $v:" | tee -a "$OUT/summary.txt"
  $B/bench/xtq_bench_breakdown /tmp/itb/stages.csv "$OUT/breakdown_$v.dat" /tmp/itb/trace.*.csv |
    tee -a "$OUT/summary.txt"
done
