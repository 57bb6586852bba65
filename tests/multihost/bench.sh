#!/usr/bin/env bash
# Round trip and message rate across hosts in network namespaces (tcp over
# veth and a bridge, lib.sh) next to the same benchmarks on this host's
# loopback tcp and shm, in one script on one machine, so the rows compare.
#   tests/multihost/bench.sh [BUILD_DIR]   (default: build)
# Writes bench/results/$MACHINE/ (default vm-2c-multihost): rtt-*.txt/csv,
# msgrate-*.txt/csv and README.md (machine, commit, command, summary).
# ITERS (round-trip iterations, default 2000), SIZES (default
# 0,64,4K,64K,1M), RATE_ITERS (tasks per initiator, default 5000), REPEAT
# (runs of each, default 3, interleaved: shm, tcp, veth, shm, ...; the
# summary takes the median of the runs, as the machine is shared).
set -u
. "$(dirname "$0")/lib.sh"
src=$(cd "$MH_DIR/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
machine=${MACHINE:-vm-$(nproc)c-multihost}
out=$src/bench/results/$machine
iters=${ITERS:-2000}
sizes=${SIZES:-0,64,4K,64K,1M}
rate_iters=${RATE_ITERS:-5000}
repeat=${REPEAT:-3}
rtt=$build/bench/xtq_bench_rtt
rate=$build/bench/xtq_bench_msgrate
[ -x "$rtt" ] && [ -x "$rate" ] || { echo "bench.sh: build $build first" >&2; exit 2; }
mh_require
mkdir -p "$out"
# As bench/run.sh on a small host: one worker per CPU agent.
export XTQ_CPU_WORKERS=${XTQ_CPU_WORKERS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
local_mpirun=(mpirun --oversubscribe --bind-to none --allow-run-as-root)
rtt_args=(--sizes "$sizes" --iters "$iters" --warmup $((iters / 10)))
load0=$(cut -d' ' -f1-3 /proc/loadavg)

export XTQ_PROVIDER=auto
mh_setup 3 || { mh_log "namespace setup failed"; exit 1; }
for ((k = 1; k <= repeat; k++)); do
    for where in shm tcp; do
        echo "== run $k: $where on this host: round trip, message rate =="
        "${local_mpirun[@]}" -np 2 -x XTQ_PROVIDER=$where "$rtt" "${rtt_args[@]}" \
            --csv "$out/rtt-$where.$k.csv" | tee "$out/rtt-$where.$k.txt"
        "${local_mpirun[@]}" -np 3 -x XTQ_PROVIDER=$where "$rate" --iters "$rate_iters" \
            --csv "$out/msgrate-$where.$k.csv" | tee "$out/msgrate-$where.$k.txt"
    done
    echo "== run $k: tcp across veth (one rank per host): round trip, message rate =="
    mh_mpirun -np 2 "$rtt" "${rtt_args[@]}" --csv "$out/rtt-veth.$k.csv" |
        tee "$out/rtt-veth.$k.txt"
    mh_mpirun -np 3 "$rate" --iters "$rate_iters" --csv "$out/msgrate-veth.$k.csv" |
        tee "$out/msgrate-veth.$k.txt"
done
mh_teardown
load1=$(cut -d' ' -f1-3 /proc/loadavg)

# Summary: per (mode, size) the median over the runs of each run's median
# round trip; per phase the median tasks/s.
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }
med() {
    for f in "$out"/rtt-$1.*.txt; do
        awk -v m="$2" -v s="$3" '$2 == m && $1 == s {print $4; exit}' "$f"
    done | median
}
rows=""
for s in $(tr ',' ' ' <<<"$sizes"); do
    label=$(awk -v want="$s" 'BEGIN{u=toupper(want); n=u+0; if (u ~ /K$/) n*=1024; if (u ~ /M$/) n*=1048576;
        if (n >= 1048576) printf "%dMiB", n/1048576; else if (n >= 1024) printf "%dKiB", n/1024; else printf "%dB", n}')
    for m in raw xtq; do
        a=$(med veth $m "$label") b=$(med tcp $m "$label") c=$(med shm $m "$label")
        rows+="| $label | $m | ${a:-?} | ${b:-?} | ${c:-?} | $(awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN{ if (b > 0) printf "%.2f", a/b; else print "?" }') |"$'\n'
    done
done
rate_rows=""
for ph in "xtq nobatch 1" "xtq batch   1" "xtq nobatch 2" "xtq batch   2"; do
    r() {
        for f in "$out"/msgrate-$1.*.txt; do
            awk -v p="$ph" 'index($0, p) {for (i = 1; i <= NF; i++) if ($i == "tasks/s") print $(i-1); exit}' "$f"
        done | median
    }
    rate_rows+="| $ph initiator(s) | $(r veth) | $(r tcp) | $(r shm) |"$'\n'
done
commit=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$src" status --porcelain --untracked-files=no 2>/dev/null | wc -l)
cat >"$out/README.md" <<EOT
# Across hosts (network namespaces) vs this host's tcp and shm: $machine

- machine: $(hostname -s), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), shared with other work (load average $load0 before, $load1 after)
- OS: $(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r); libfabric $(pkg-config --modversion libfabric 2>/dev/null), $(mpirun --version 2>/dev/null | head -1)
- commit: $commit$([ "$dirty" != 0 ] && echo " (with $dirty modified tracked files)")
- date: $(date -u +%Y-%m-%dT%H:%MZ)
- command: \`tests/multihost/bench.sh${1:+ $1}\` (ITERS=$iters SIZES=$sizes RATE_ITERS=$rate_iters REPEAT=$repeat XTQ_CPU_WORKERS=$XTQ_CPU_WORKERS)
- veth: 3 network namespaces on one bridge (tests/multihost/lib.sh), one rank
  per namespace, provider chosen by the ranks (tcp;ofi_rxm on eth0); tcp:
  XTQ_PROVIDER=tcp, all ranks in this namespace (loopback); shm:
  XTQ_PROVIDER=shm.

Median round trip (us; raw: libfabric send + reply, xtq: XtqPut, task on
the target's CPU agent, remote completion), 2 ranks; each cell is the
median over $repeat interleaved runs of the run's median:

| size | mode | veth | tcp (this host) | shm | veth / tcp |
| --- | --- | --- | --- | --- | --- |
$rows
Message rate into one CPU agent (tasks/s, 8-byte payloads; 3 ranks: one
target, 1 or 2 initiators; veth: each on its own host):

| phase | veth | tcp (this host) | shm |
| --- | --- | --- | --- |
$rate_rows
Files: rtt-{veth,tcp,shm}.N.txt/.csv and msgrate-{veth,tcp,shm}.N.txt/.csv
for run N (every mode: raw, cpu, hsa, xtq; p99 and target CPU per task).
EOT
echo "results in $out"
cat "$out/README.md"
