#!/usr/bin/env bash
# Two settings of one XTQ_* variable against each other, same binaries, the
# two alternating round by round so that both see the same machine: the XTQ
# round trip of xtq_bench_rtt (median, us; and the target's whole-process
# CPU per task) and, with RATE=1, the XTQ message rate of xtq_bench_msgrate
# (tasks/s into one target from 1, 2, 4 initiators, windows 1 and W; and
# the target's process CPU per task). Prints every run and the median per
# setting with the ratio B/A, and writes them with the machine, commit and
# command to bench/results/<machine>/<NAME>.txt.
#   VAR=XTQ_MUTEX A=spin B=adaptive NAME=mutex bench/ab_compare.sh [BUILD_DIR]
# Two builds against each other instead (two commits, same script): name
# their build directories, already built, in BUILD_A and BUILD_B; A and B
# are then only labels and VAR is not needed:
#   BUILD_A=/tmp/old/build-bench BUILD_B=build-bench A=163184a B=main NAME=x \
#     bench/ab_compare.sh
# Environment: VAR, A, B, NAME (required), ROUNDS (default 5), ITERS (5000),
# SIZES (64,4K), MODES (xtq; e.g. hsa,xtq: the other modes' rows are
# prefixed with their name, as a reference), AGENT (cpu; cuda: the round
# trip's tasks on the GPU), RATE (0), NP_RATE (5), RATE_ITERS (20000), MACHINE,
# MPIRUN, BUILD=0 to skip the build, BUILD_A and BUILD_B, COMMIT (the
# commit the result file names; default: git's, which a copied tree such
# as the GPU machine's may have stale), and the usual XTQ_* settings.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${1:-$src/build-bench}"
build_a="${BUILD_A:-}"
build_b="${BUILD_B:-}"
if [ -n "$build_a$build_b" ]; then
  [ -n "$build_a" ] && [ -n "$build_b" ] || { echo "BUILD_A and BUILD_B go together" >&2; exit 2; }
  var="${VAR:-}"
else
  var="${VAR:?VAR: the XTQ_* variable to compare}"
fi
a="${A:?A: its first value}"
b="${B:?B: its second value}"
name="${NAME:?NAME: the name of the result file}"
cores="$(nproc)"
machine="${MACHINE:-$(hostname -s)-${cores}c}"
out="$src/bench/results/$machine"
rounds="${ROUNDS:-5}"
iters="${ITERS:-5000}"
sizes="${SIZES:-64,4K}"
modes="${MODES:-xtq}"
agent="${AGENT:-}"
rate="${RATE:-0}"
np_rate="${NP_RATE:-5}"
rate_iters="${RATE_ITERS:-20000}"
mpirun_cmd=(${MPIRUN:-mpirun})
mpirun_cmd+=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)

if [ "${BUILD:-1}" != 0 ] && [ -z "$build_a" ]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DXTQ_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j"$cores" --target xtq_bench_rtt xtq_bench_msgrate
fi
mkdir -p "$out"
# As bench/run.sh: one worker per agent on a small host.
if [ "$cores" -le 4 ]; then export XTQ_CPU_WORKERS="${XTQ_CPU_WORKERS:-1}"; fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

for r in $(seq 1 "$rounds"); do
  for val in "$a" "$b"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    bin="$build"
    xvar=()
    if [ -n "$build_a" ]; then
      if [ "$val" = "$a" ]; then bin="$build_a"; else bin="$build_b"; fi
    fi
    if [ -n "$var" ]; then
      export "$var=$val"
      xvar=(-x "$var")
    fi
    "${mpirun_cmd[@]}" -np 2 "${xvar[@]}" "$bin/bench/xtq_bench_rtt" \
      --modes "$modes" --sizes "$sizes" --iters "$iters" --warmup $((iters / 10)) \
      ${agent:+--agent "$agent"} >"$tmp/run.txt"
    # Table rows: size mode median p99 min mean iters app nic agent proc agent
    # (builds before the CPU split, e.g. 163184a: size mode median p99 min
    # mean iters cpu agent; their round trip is compared alone).
    awk -v k="$val" -v r="$r" -v load="$load" -v modes=",$modes," \
      'index(modes, "," $2 ",") && (NF == 12 || NF == 9) && $3 ~ /^[0-9.]+$/ {
         m = ($2 == "xtq" ? "" : $2 "_")
         print k, r, m "rtt_" $1, $3, "us", load
         if (NF == 12) print k, r, m "rtt_" $1 "_proc_cpu", $11, "us/task", load }' \
      "$tmp/run.txt" | tee -a "$tmp/all.txt"
    if [ "$rate" = 1 ]; then
      "${mpirun_cmd[@]}" -np "$np_rate" "${xvar[@]}" \
        "$bin/bench/xtq_bench_msgrate" --modes xtq --iters "$rate_iters" >"$tmp/rate.txt"
      # Table rows: mode window done_at initiators tasks seconds tasks_per_s app nic agent proc
      awk -v k="$val" -v r="$r" -v load="$load" \
        '$1 == "xtq" && NF == 11 && $7 ~ /^[0-9]+$/ {
           print k, r, "rate_w" $2 "_i" $4, $7, "tasks/s", load
           print k, r, "rate_w" $2 "_i" $4 "_proc_cpu", $11, "us/task", load }' \
        "$tmp/rate.txt" | tee -a "$tmp/all.txt"
    fi
  done
done

{
  if [ -n "$build_a" ]; then
    echo "# build $a ($build_a) against build $b ($build_b), $rounds alternating rounds"
  else
    echo "# $var=$a against $var=$b, $rounds alternating rounds"
  fi
  echo "# machine: $machine ($cores cores), commit: ${COMMIT:-$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "# command: ${build_a:+BUILD_A=$build_a BUILD_B=$build_b }VAR=$var A=$a B=$b NAME=$name ROUNDS=$rounds ITERS=$iters SIZES=$sizes MODES=$modes AGENT=${agent:-cpu} RATE=$rate NP_RATE=$np_rate RATE_ITERS=$rate_iters bench/ab_compare.sh $*"
  echo "# value round metric figure unit loadavg"
  cat "$tmp/all.txt"
  echo "# median per value, and B/A (round trip and CPU: lower is better; rate: higher)"
  awk -v A="$a" -v B="$b" '{ v[$3 " " $1] = v[$3 " " $1] " " $4; unit[$3] = $5 }
       function med(s,   x, n, i, j, t) {
         n = split(s, x, " ")
         for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (x[j] + 0 < x[i] + 0) { t = x[i]; x[i] = x[j]; x[j] = t }
         return n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
       }
       END { for (m in unit) {
             # A metric one build does not report (older builds: no CPU
             # figures) is left out rather than printed as 0.
             if (v[m " " A] == "" || v[m " " B] == "") continue
             va = med(v[m " " A]); vb = med(v[m " " B])
             printf "%-26s %s %12.3f  %s %12.3f %-8s  B/A %.3f\n", m, A, va, B, vb, unit[m], (va > 0 ? vb / va : 0) } }' \
    "$tmp/all.txt" | sort
} | tee "$out/$name.txt"
