#!/usr/bin/env bash
# Diagnosis for issue 11's CPU round trip: what the initiator's progress
# thread costs the waiter. Rank 0 (the initiator of xtq_bench_rtt) runs
# with its defaults (A), with no progress thread at all (XTQ_PROGRESS=manual:
# its waits progress the engine, so the put path and the ack stay on one
# thread and core: M), and with a progress thread that blocks at once
# (XTQ_PROGRESS_SPIN_US=0: S). Rank 1, the target, keeps its defaults.
# Since session 15 the defaults back the thread off while the waits take
# turns (XTQ_PROGRESS_BACKOFF_US, auto 10 us on such a host): N runs rank
# 0 without the back-off (the earlier default), W with 30 us.
# Results: bench/results/h100-16c/session14/initiator-turns/ (A M S),
# session15/backoff/ (A N M W).
# ROUNDS alternating rounds, then the stage breakdown for A and M
# (BREAKDOWN="A N" picks others). RATE=1 adds, per round and variant, the
# batched message rate from 1, 2 and 4 initiators into one target, the
# variant's setting on every rank, hsa_db in the same run.
#   B=build-dir OUT=dir bench/diag/initiator_turns.sh
set -uo pipefail
B=${B:?B: the build directory}
OUT=${OUT:?OUT: where the results go}
ROUNDS=${ROUNDS:-3}
MPI=(mpirun --bind-to none)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
mkdir -p "$OUT"
{ echo "# machine: $(hostname), $(nproc) cores; commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
  echo "# command: ROUNDS=$ROUNDS VARIANTS=\"${VARIANTS:-A M S}\" RATE=${RATE:-0} bench/diag/initiator_turns.sh"; } >"$OUT/summary.txt"
run() { # name env...
  local name=$1; shift
  "${MPI[@]}" -np 1 "$@" $B/bench/xtq_bench_rtt --sizes 64,4K --modes raw,hsa,xtq --iters 5000 \
    --csv "$OUT/$name.csv" : -np 1 $B/bench/xtq_bench_rtt --sizes 64,4K --modes raw,hsa,xtq \
    --iters 5000 >"$OUT/$name.txt" 2>&1
  echo "$name rc=$? $(grep -E '^ratios 64B' "$OUT/$name.txt") | $(grep -E '^ +64B +xtq +median' "$OUT/$name.txt" | awk '{print "xtq64", $4}')" |
    tee -a "$OUT/summary.txt"
}
# A variant's settings for mpirun (-x NAME=VALUE ...).
venv() {
  case $1 in
    A) ;;
    M) echo "-x XTQ_PROGRESS=manual" ;;
    S) echo "-x XTQ_PROGRESS_SPIN_US=0" ;;
    N) echo "-x XTQ_PROGRESS_BACKOFF_US=0" ;;
    W) echo "-x XTQ_PROGRESS_BACKOFF_US=30" ;;
    *) echo "unknown variant $1" >&2; exit 2 ;;
  esac
}
rate() { # name env...
  local name=$1; shift
  timeout 120 "${MPI[@]}" -np 5 "$@" $B/bench/xtq_bench_msgrate --iters ${RATE_ITERS:-100000} \
    --modes hsa_db,xtq --csv "$OUT/$name.csv" >"$OUT/$name.txt" 2>&1
  echo "$name rc=$? $(grep "initiator(s)" "$OUT/$name.txt" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
}
# VARIANTS picks among A, M, S, N and W (L ran an experiment since reverted).
for r in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-A M S}; do
    # shellcheck disable=SC2046
    run $v.$r $(venv $v)
    # shellcheck disable=SC2046
    [ "${RATE:-0}" = 1 ] && rate rate_$v.$r $(venv $v)
  done
done
[ -n "${NO_BREAKDOWN:-}" ] && exit 0
for v in ${BREAKDOWN:-A M}; do
  rm -rf /tmp/itb && mkdir -p /tmp/itb
  # shellcheck disable=SC2207
  env=($(venv $v))
  args=(--sizes 64,4K --modes hsa,xtq --iters 2000 --warmup 200 --breakdown /tmp/itb/stages.csv)
  "${MPI[@]}" -x XTQ_TRACE=csv:/tmp/itb/trace.%r.csv -np 1 "${env[@]}" $B/bench/xtq_bench_rtt \
    "${args[@]}" : -np 1 $B/bench/xtq_bench_rtt "${args[@]}" >/dev/null 2>&1
  echo "breakdown $v:" | tee -a "$OUT/summary.txt"
  $B/bench/xtq_bench_breakdown /tmp/itb/stages.csv "$OUT/breakdown_$v.dat" /tmp/itb/trace.*.csv |
    tee -a "$OUT/summary.txt"
done
