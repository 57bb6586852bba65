#!/usr/bin/env bash
# Where the CPU round trip's time goes with and without the progress
# thread's back-off (XTQ_PROGRESS_BACKOFF_US, issue 11): xtq_bench_rtt
# (2 ranks, CPU agent, raw, hsa and xtq at 64 B and 4 KiB) with per-iteration
# stage stamps (--breakdown), the initiator in one of these settings,
# alternating round by round (the target keeps its defaults):
#   A: the defaults (auto: 10 us where each rank has 3 cores)
#   N: XTQ_PROGRESS_BACKOFF_US=0 (no back-off: the default before session 15)
#   W: XTQ_PROGRESS_BACKOFF_US=30
# Per run: the medians and ratios, then for xtq at 64 B the median, p99 and
# maximum of put -> task start (the put path, the target's receive) and
# task end -> completion (the ack, the initiator seeing it).
# Results: bench/results/h100-16c/session15/backoff/.
#   B=build-dir OUT=dir [ROUNDS=3] [VARIANTS="A N W"] bench/diag/backoff_stages.sh
set -uo pipefail
B=${B:?B: the build directory}
OUT=${OUT:?OUT: where the results go}
ROUNDS=${ROUNDS:-3}
MPI=(mpirun --bind-to none)
[ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
mkdir -p "$OUT"
{ echo "# machine: $(hostname), $(nproc) cores; commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}"
  echo "# command: ROUNDS=$ROUNDS VARIANTS=\"${VARIANTS:-A N W}\" bench/diag/backoff_stages.sh"; } >"$OUT/summary.txt"
segments() { # stages.csv: xtq 64 B, iterations after the warm-up
  python3 - "$1" <<'PY'
import csv, sys, collections
it = collections.defaultdict(dict)
for row in csv.DictReader(open(sys.argv[1])):
    if row['mode'] == 'xtq' and row['size'] == '64':
        it[int(row['iter'])][row['stage']] = int(row['ns'])
seg = collections.defaultdict(list)
for i, d in it.items():
    if i < 1000 or not all(k in d for k in ('put_issued', 'task_start', 'task_end', 'completion')):
        continue
    seg['put->start'].append((d['task_start'] - d['put_issued']) / 1e3)
    seg['end->completion'].append((d['completion'] - d['task_end']) / 1e3)
out = []
for k, v in seg.items():
    v.sort()
    out.append('%s med %.2f p99 %.2f max %.1f' % (k, v[len(v) // 2], v[int(len(v) * .99)], v[-1]))
print('  xtq 64B: ' + ' | '.join(out))
PY
}
for r in $(seq "$ROUNDS"); do
  for v in ${VARIANTS:-A N W}; do
    env=()
    case $v in
      A) ;;
      N) env=(-x XTQ_PROGRESS_BACKOFF_US=0) ;;
      W) env=(-x XTQ_PROGRESS_BACKOFF_US=30) ;;
      *) echo "unknown variant $v" >&2; exit 2 ;;
    esac
    args=(--sizes 64,4K --modes raw,hsa,xtq --iters 5000 --breakdown "$OUT/stages_$v.$r.csv")
    "${MPI[@]}" -np 1 "${env[@]}" $B/bench/xtq_bench_rtt "${args[@]}" : \
      -np 1 $B/bench/xtq_bench_rtt "${args[@]}" >"$OUT/$v.$r.txt" 2>&1
    { echo "$v.$r rc=$? $(grep -E '^ratios' "$OUT/$v.$r.txt" | tr '\n' ' ')"
      grep -E '^ +(64B|4KiB) +(raw|hsa|xtq) +median' "$OUT/$v.$r.txt"
      segments "$OUT/stages_$v.$r.csv"; } | tee -a "$OUT/summary.txt"
  done
done
