#!/usr/bin/env bash
# A/B of one parameter on the aggregation alone: bench_shim.sh (mpi and
# xtq in each run) with AB_VAR=AB_A and AB_VAR=AB_B alternating, ROUNDS
# rounds (the order flips every round). The summary gives, per setting,
# the median over rounds of xtq/mpi per list (each run's ratio is of its
# own mpi, so the MPI is the control within a run).
#   AB_VAR=XTQ_COLL_CMA AB_A=off AB_B=auto ROUNDS=3 apps/cntk-shim/bench_shim_ab.sh OUTDIR
# Environment as bench_shim.sh (NPS, ITERS, SIZES, BUILD_DIR, DEVICE).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUTDIR=${1:-$ROOT/bench/results/$(hostname -s)/train/ab}
var=${AB_VAR:-XTQ_COLL_CMA}
va=${AB_A:-off}
vb=${AB_B:-auto}
rounds=${ROUNDS:-3}
mkdir -p "$OUTDIR"
{
  echo "# $(date -u +%FT%TZ) commit $(git -C "$ROOT" describe --always --dirty --abbrev=7) machine $(hostname -s), $(nproc) cores"
  echo "# AB_VAR=$var AB_A=$va AB_B=$vb ROUNDS=$rounds NPS='${NPS:-2 4}' ITERS=${ITERS:-300} SIZES=${SIZES:-4K,64K,1M} $0 $*"
  echo "# load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUTDIR/command.txt"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order="$va $vb"; else order="$vb $va"; fi
  for val in $order; do
    env "$var=$val" OUT="$OUTDIR/$val.r$r" REPEATS=1 \
      MPIRUN="mpirun --oversubscribe --bind-to none -x $var" bash "$ROOT/apps/cntk-shim/bench_shim.sh" >/dev/null
  done
  echo "# load after round $r: $(cut -d' ' -f1 /proc/loadavg)" >>"$OUTDIR/command.txt"
done
# ranks list bytes mpi_us xtq_us xtq/mpi, per run -> median ratio per setting
for val in "$va" "$vb"; do
  cat "$OUTDIR"/"$val".r*/shim_bench_*.txt 2>/dev/null | grep -v '^#' | grep -v '^ *ranks' |
    awk -v s="$val" '{ print s, $0 }'
done | awk -v A="$va" -v B="$vb" -v var="$var" '
  { k = $2 " " $3; if (!(k in seen)) { seen[k] = 1; keys[++n] = k }; v[k, $1, ++c[k, $1]] = $7 }
  function med(k, s,   m, i, j, t, a) { m = c[k, s]; if (!m) return 0; for (i = 1; i <= m; i++) a[i] = v[k, s, i]
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
  END { printf "# median over rounds of xtq/mpi (each of its own run)\n%5s %-6s %10s %10s\n", "ranks", "list", var "=" A, var "=" B
        for (i = 1; i <= n; i++) { split(keys[i], p, " "); printf "%5s %-6s %10.3f %10.3f\n", p[1], p[2], med(keys[i], A), med(keys[i], B) } }' \
  >"$OUTDIR/summary.txt"
cat "$OUTDIR/summary.txt"
