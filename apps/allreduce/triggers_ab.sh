#!/usr/bin/env bash
# A/B of two settings of one libxtq_coll parameter, by default the trigger
# modes (XTQ_COLL_TRIGGERS=task vs engine): the paths of xtq_allreduce,
# both settings alternating in one script (the order flips every round,
# so drift in the machine's load hits both), at each rank count; medians
# over the rounds, B/A per size. With mpi among MODES its rows are the
# control (the MPI does not read the parameter: their B/A is the noise),
# and summary.txt also gives xtq/mpi for each setting.
#
#   apps/allreduce/triggers_ab.sh [OUTDIR]
#   AB_VAR=XTQ_COLL_CMA AB_A=off AB_B=auto MODES=mpi,xtq apps/allreduce/triggers_ab.sh OUTDIR
#   SUMMARY_ONLY=1 apps/allreduce/triggers_ab.sh OUTDIR   (medians again from OUTDIR/raw.csv)
#
# Environment: AB_VAR (XTQ_COLL_TRIGGERS), AB_A (task), AB_B (engine),
# BUILD_DIR (build), RANKS ("2 4"), ROUNDS (5),
# SIZES (8,64,512,4K,16K,64K,256K,1M,4M,16M), ITERS (20), WARMUP (3),
# MODES (xtq; xtq,xtqgpu on a GPU host: both use libxtq_coll), MPIRUN_ARGS,
# MACHINE (a line naming the machine).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
out=${1:-$root/bench/results/vm-2c/allreduce/triggers}
ranks=${RANKS:-2 4}
rounds=${ROUNDS:-5}
sizes=${SIZES:-8,64,512,4K,16K,64K,256K,1M,4M,16M}
iters=${ITERS:-20}
warmup=${WARMUP:-3}
modes=${MODES:-xtq}
machine=${MACHINE:-$(uname -n)}
var=${AB_VAR:-XTQ_COLL_TRIGGERS}
va=${AB_A:-task}
vb=${AB_B:-engine}
commit=$(git -C "$root" describe --always --dirty --abbrev=7)
bin=$build/apps/allreduce/xtq_allreduce
raw=$out/raw.csv
if [ -z "${SUMMARY_ONLY:-}" ]; then
    [ -x "$bin" ] || { echo "triggers_ab.sh: $bin not built" >&2; exit 1; }

    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mkdir -p "$out"
    {
        echo "# $(date -u +%FT%TZ) commit $commit machine $machine"
        echo "# A/B: $var=$va (A) against $var=$vb (B)"
        echo "# RANKS=\"$ranks\" ROUNDS=$rounds SIZES=$sizes ITERS=$iters WARMUP=$warmup MODES=$modes" \
            "MPIRUN_ARGS=\"${MPIRUN_ARGS:-}\""
        echo "# $0 $*"
        echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    } >"$out/command.txt"
    echo "round,setting,mode,ranks,size,count,type,redop,placement,time_us,algbw_GBs,busbw_GBs,wrong,algorithm" >"$raw"

    loads=()
    for ((r = 0; r < rounds; r++)); do
        for np in $ranks; do
            if ((r % 2)); then order="$vb $va"; else order="$va $vb"; fi
            for val in $order; do
                csv=$out/r$r.np$np.$val.csv
                env "$var=$val" mpirun --oversubscribe --bind-to none ${MPIRUN_ARGS:-} \
                    -x "$var" -np "$np" "$bin" --modes "$modes" --sizes "$sizes" \
                    --iters "$iters" --warmup "$warmup" --csv "$csv" >/dev/null ||
                    echo "# round $r, $np ranks, $var=$val: xtq_allreduce failed (rc $?)" >>"$out/command.txt"
                [ -f "$csv" ] || continue
                grep -v '^#' "$csv" | tail -n +2 | sed "s/^/$r,$val,/" >>"$raw"
                rm -f "$csv"
            done
            loads+=("$(cut -d' ' -f1 /proc/loadavg)")
        done
    done
    echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg); 1-min load after each round and rank count: ${loads[*]}" >>"$out/command.txt"
fi

# Medians per (ranks, size, placement, mode); B/A of the medians.
awk -F, -v A="$va" -v B="$vb" 'NR > 1 && $13 != 0 { bad++ }
NR > 1 { k = $3 "," $4 "," $5 "," $9 "," $2; v[k] = v[k] " " $10; alg[$3 "," $4 "," $5] = $14 }
function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
    print "mode,ranks,size,algorithm,placement," A "_us," B "_us," B "/" A
    for (k in v) {
        split(k, f, ",")
        if (f[5] != A) continue
        e = f[1] "," f[2] "," f[3] "," f[4] "," B
        if (!(e in v)) continue
        mt = median(v[k]); me = median(v[e])
        printf "%s,%s,%s,%s,%s,%.1f,%.1f,%.2f\n", f[1], f[2], f[3], alg[f[1] "," f[2] "," f[3]], f[4], mt, me, me / mt
    }
    if (bad) print "# WRONG RESULTS in " bad " rows" > "/dev/stderr"
}' "$raw" | { read -r hdr; echo "$hdr"; sort -t, -k1,1 -k2,2n -k3,3n -k5,5r; } >"$out/medians.csv"
# Per mode and rank count: the geometric mean of B/A over sizes and
# placements (below 1: B faster). With mpi rows: xtq/mpi per size and
# placement for each setting, each against the MPI of the same runs.
awk -F, -v A="$va" -v B="$vb" 'NR > 1 { k = $1 ", " $2 " ranks"; l[k] += log($8); n[k]++; r[$1 "," $2 "," $3 "," $5] = $0 }
END {
    for (k in n) printf "# geometric mean of %s/%s, %s: %.2f over %d points\n", B, A, k, exp(l[k] / n[k]), n[k]
    for (q in r) {
        split(r[q], f, ",")
        if (f[1] != "xtq" || !(("mpi," f[2] "," f[3] "," f[5]) in r)) continue
        split(r["mpi," f[2] "," f[3] "," f[5]], g, ",")
        printf "xtq/mpi,%s,%s,%s,%.2f,%.2f\n", f[2], f[3], f[5], f[6] / g[6], f[7] / g[7]
    }
}' "$out/medians.csv" | sort -t, -k2,2n -k3,3n -k4,4r | sed "1i # xtq/mpi,ranks,size,placement,$va,$vb" >"$out/summary.txt"
column -s, -t "$out/medians.csv" 2>/dev/null || cat "$out/medians.csv"
cat "$out/summary.txt"
