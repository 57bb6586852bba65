#!/usr/bin/env bash
# The data-path locks, XTQ_MUTEX=spin (polls, then sleeps) against adaptive
# (glibc's PTHREAD_MUTEX_ADAPTIVE_NP): the XTQ round trip of
# xtq_bench_rtt (median, us) and, with RATE=1, the XTQ message rate of
# xtq_bench_msgrate (tasks/s into one target from 1, 2, 4 initiators), the
# same binaries, the two kinds alternating round by round so that both see
# the same machine. Prints every run and the median per kind, and writes
# them with the machine, commit and command to
# bench/results/<machine>/mutex.txt.
#   bench/mutex_compare.sh [BUILD_DIR]
# Environment: ROUNDS (default 5), ITERS (5000), SIZES (64,4K), RATE (0),
# NP_RATE (5), RATE_ITERS (20000), MACHINE, MPIRUN, BUILD=0 to skip the
# build, and the usual XTQ_* settings.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${1:-$src/build-bench}"
cores="$(nproc)"
machine="${MACHINE:-$(hostname -s)-${cores}c}"
out="$src/bench/results/$machine"
rounds="${ROUNDS:-5}"
iters="${ITERS:-5000}"
sizes="${SIZES:-64,4K}"
rate="${RATE:-0}"
np_rate="${NP_RATE:-5}"
rate_iters="${RATE_ITERS:-20000}"
mpirun_cmd=(${MPIRUN:-mpirun})
mpirun_cmd+=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)

if [ "${BUILD:-1}" != 0 ]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DXTQ_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j"$cores" --target xtq_bench_rtt xtq_bench_msgrate
fi
mkdir -p "$out"
# As bench/run.sh: one worker per agent on a small host.
if [ "$cores" -le 4 ]; then export XTQ_CPU_WORKERS="${XTQ_CPU_WORKERS:-1}"; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for r in $(seq 1 "$rounds"); do
  for kind in spin adaptive; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    XTQ_MUTEX=$kind "${mpirun_cmd[@]}" -np 2 -x XTQ_MUTEX "$build/bench/xtq_bench_rtt" \
      --modes xtq --sizes "$sizes" --iters "$iters" --warmup $((iters / 10)) >"$tmp/run.txt"
    # Table rows: size mode median_us p99_us min_us mean_us iters cpu agent
    awk -v k="$kind" -v r="$r" -v load="$load" \
      '$2 == "xtq" && NF == 9 && $3 ~ /^[0-9.]+$/ { print k, r, "rtt_" $1, $3, "us", load }' \
      "$tmp/run.txt" | tee -a "$tmp/all.txt"
    if [ "$rate" = 1 ]; then
      XTQ_MUTEX=$kind "${mpirun_cmd[@]}" -np "$np_rate" -x XTQ_MUTEX \
        "$build/bench/xtq_bench_msgrate" --modes xtq --iters "$rate_iters" >"$tmp/rate.txt"
      # Table rows: mode batching initiators tasks seconds tasks_per_s cpu
      awk -v k="$kind" -v r="$r" -v load="$load" \
        '$1 == "xtq" && NF == 7 && $6 ~ /^[0-9]+$/ { print k, r, "rate_" $2 "_" $3, $6, "tasks/s", load }' \
        "$tmp/rate.txt" | tee -a "$tmp/all.txt"
    fi
  done
done

{
  echo "# XTQ_MUTEX spin vs adaptive, $rounds alternating rounds"
  echo "# machine: $machine ($cores cores), commit: $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# command: ROUNDS=$rounds ITERS=$iters SIZES=$sizes RATE=$rate NP_RATE=$np_rate RATE_ITERS=$rate_iters bench/mutex_compare.sh $*"
  echo "# kind round metric value unit loadavg"
  cat "$tmp/all.txt"
  echo "# median per kind, and adaptive/spin (round trip: lower is better; rate: higher)"
  awk '{ v[$3 " " $1] = v[$3 " " $1] " " $4; unit[$3] = $5 }
       function med(s,   a, n, i, j, t) {
         n = split(s, a, " ")
         for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
         return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
       }
       END { for (m in unit) { sp = med(v[m " spin"]); ad = med(v[m " adaptive"])
             printf "%-22s spin %12.2f  adaptive %12.2f %s  adaptive/spin %.3f\n", m, sp, ad, unit[m], ad / sp } }' \
    "$tmp/all.txt" | sort
} | tee "$out/mutex.txt"
