#!/usr/bin/env bash
# The one command that runs the benchmarks and writes the table, CSV and PNG:
#   bench/run.sh [BUILD_DIR]
# into bench/results/<machine>/ with the machine, commit and command recorded
# there (README.md). Environment:
#   MACHINE   results folder name (default: hostname-Ncores)
#   NP_RATE   ranks for the message-rate run (1 target + initiators; default 5)
#   RATE_ITERS tasks per initiator per message-rate phase (default 20000)
#   ITERS     round-trip iterations per (mode, size) (default 10000)
#   SIZES     round-trip sizes (default 0-1M: 0, 1, 2, 4 .. 1 MiB)
#   MPIRUN    launcher (default: mpirun, with --oversubscribe --bind-to none)
#   BUILD=0   skip the build
#   AGENT=cuda also the round trip with GPU tasks (--agent cuda, 64 B .. 1 MiB)
#             into rtt_cuda.txt / rtt_cuda.csv; skipped, with the reason,
#             where no CUDA agent is usable
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/.." && pwd)"
build="${1:-$src/build-bench}"
cores="$(nproc)"
machine="${MACHINE:-$(hostname -s)-${cores}c}"
out="$src/bench/results/$machine"
iters="${ITERS:-10000}"
sizes="${SIZES:-0-1M}"
np_rate="${NP_RATE:-5}"
agent="${AGENT:-cpu}"
rate_iters="${RATE_ITERS:-20000}"
mpirun_cmd=(${MPIRUN:-mpirun})
mpirun_cmd+=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpirun_cmd+=(--allow-run-as-root)

if [ "${BUILD:-1}" != 0 ]; then
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DXTQ_BUILD_TESTS=OFF >/dev/null
  cmake --build "$build" -j"$cores" --target xtq_bench_rtt xtq_bench_msgrate xtq_bench_breakdown
fi
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# Threads per process: progress thread + agent workers + application
# thread. On a small host, one worker per agent keeps the oversubscription
# down; on 16 cores keep the default.
if [ "$cores" -le 4 ]; then export XTQ_CPU_WORKERS="${XTQ_CPU_WORKERS:-1}"; fi
env_note="$(env | grep '^XTQ_' | sort | tr '\n' ' ' || true)" # none set: grep fails

echo "== round trip ($sizes, $iters iterations) =="
"${mpirun_cmd[@]}" -np 2 "$build/bench/xtq_bench_rtt" --sizes "$sizes" --iters "$iters" \
  --warmup $((iters / 10)) --csv "$out/rtt.csv" | tee "$out/rtt.txt"

if [ "$agent" = cuda ]; then
  echo "== round trip, GPU tasks (--agent cuda, 64-1M, $iters iterations) =="
  rc=0
  # EAGER even if MPI_Init initialises CUDA before the benchmark can ask
  # (modules loaded lazily can deadlock against the agent; docs/cuda.md).
  CUDA_MODULE_LOADING="${CUDA_MODULE_LOADING:-EAGER}" \
    "${mpirun_cmd[@]}" -np 2 "$build/bench/xtq_bench_rtt" --agent cuda --sizes 64-1M \
    --iters "$iters" --warmup $((iters / 10)) --csv "$out/rtt_cuda.csv" 2>&1 \
    | tee "$out/rtt_cuda.txt" || rc=$?
  if grep -q '^SKIP:' "$out/rtt_cuda.txt"; then
    echo "GPU round trip skipped: $(grep -m1 '^SKIP:' "$out/rtt_cuda.txt")" >&2
    rm -f "$out/rtt_cuda.csv"
  elif [ "$rc" != 0 ]; then
    echo "GPU round trip failed (exit $rc, see $out/rtt_cuda.txt)" >&2
  fi
fi

echo "== stage breakdown (64 B, 4 KiB; XTQ_TRACE on) =="
"${mpirun_cmd[@]}" -np 2 \
  -x XTQ_TRACE="csv:$tmp/trace.%r.csv" \
  "$build/bench/xtq_bench_rtt" --sizes 64,4K --modes hsa,xtq --iters 2000 --warmup 200 \
  --breakdown "$tmp/stages.csv" >"$tmp/bd-run.txt"
"$build/bench/xtq_bench_breakdown" "$tmp/stages.csv" "$out/breakdown.dat" "$tmp"/trace.*.csv \
  | tee "$out/breakdown.txt"
# One Chrome/Perfetto trace of a short run, for people who want to look.
"${mpirun_cmd[@]}" -np 2 -x XTQ_TRACE="chrome:$out/trace.%r.json" \
  "$build/bench/xtq_bench_rtt" --sizes 64 --modes xtq --iters 200 --warmup 20 >/dev/null
if command -v gnuplot >/dev/null; then
  gnuplot -e "in='$out/breakdown.dat'; out='$out/breakdown.png'; title='Remote task time per stage, median ($machine)'" \
    "$here/plot_breakdown.gp"
else
  echo "gnuplot not found: $out/breakdown.dat written, no PNG" >&2
fi

echo "== message rate (1, 2, 4 initiators) =="
"${mpirun_cmd[@]}" -np "$np_rate" "$build/bench/xtq_bench_msgrate" --iters "$rate_iters" \
  --csv "$out/msgrate.csv" | tee "$out/msgrate.txt" || echo "msgrate failed (see above)" >&2

commit="$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty="$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
cat >"$out/README.md" <<EOT
# Benchmark results: $machine

- machine: $(hostname -s), $cores cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
- OS: $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r)
- libfabric $(pkg-config --modversion libfabric 2>/dev/null), $(mpirun --version 2>/dev/null | head -1)
- commit: $commit$([ "$dirty" != 0 ] && echo " (with $dirty modified tracked files)")
- date: $(date -u +%Y-%m-%dT%H:%MZ)
- command: \`bench/run.sh${1:+ $1}\` (ITERS=$iters SIZES=$sizes NP_RATE=$np_rate RATE_ITERS=$rate_iters AGENT=$agent)
- XTQ environment: ${env_note:-none}

Files: rtt.txt / rtt.csv (round trip per mode and size, target CPU per
task), breakdown.txt / breakdown.dat / breakdown.png (median time per stage,
Fig. 7), trace.*.json (Chrome trace of 200 XTQ tasks, open in Perfetto),
msgrate.txt / msgrate.csv (tasks per second into one CPU agent).

\`\`\`
$(grep '^ratios' "$out/rtt.txt")
\`\`\`
$([ "$agent" = cuda ] && printf '\nGPU tasks (AGENT=cuda): rtt_cuda.txt / rtt_cuda.csv\n\n    %s\n' \
  "$(grep -E '^(ratios 64B|SKIP)' "$out/rtt_cuda.txt" 2>/dev/null || echo 'no result')")
EOT
echo "results in $out"
grep '^ratios' "$out/rtt.txt"
