#!/usr/bin/env bash
# acc_latency.png from OUT/acc_latency.csv (mpi-ext/bench/run.sh calls it):
# lock/acc/unlock median against size, the MPI's own path and the layer's
# (labelled with the path it took: XTQ, or pass-through when the layer
# left the window to the MPI) for each MPI and window kind.
set -euo pipefail
OUT=$1
MACHINE=${MACHINE:-$(basename "$(dirname "$OUT")")}
command -v gnuplot >/dev/null || { echo "plot: no gnuplot"; exit 0; }
csv=$OUT/acc_latency.csv
plots=()
for key in $(awk -F, 'NR > 1 && $3 == "lock" { print $1 "," $2 }' "$csv" | sort -u); do
    mpi=${key%,*} window=${key#*,}
    for row in 1 2; do
        f=$OUT/.plot.$mpi.$window.$row
        awk -F, -v m="$mpi" -v w="$window" -v r="$row" '
            NR > 1 && $1 == m && $2 == w && $3 == "lock" { c[$5]++; if (c[$5] == r) print $5, $7, $4 }' \
            "$csv" >"$f"
        [ -s "$f" ] || continue
        var=$(awk 'NR == 1 { print $3 }' "$f")
        case "$row:$var" in
        1:staged) label="host-staged (send, D2H, add, H2D)" ;;
        1:*) label="the MPI itself" ;;
        2:xtq) label="libxtq_mpi (XTQ)" ;;
        2:*) label="libxtq_mpi (pass-through)" ;;
        esac
        plots+=("'$f' u 1:2 w lp t '$mpi $window: $label'")
    done
done
{
    echo "set terminal pngcairo size 1000,600 noenhanced"
    echo "set output '$OUT/acc_latency.png'"
    echo "set logscale xy; set grid"
    echo "set xlabel 'bytes (MPI_DOUBLE, MPI_SUM)'; set ylabel 'lock/acc/unlock median (us)'"
    echo "set title 'MPI_Accumulate latency, $MACHINE'"
    echo "set key left top"
    (IFS=,; echo "plot ${plots[*]}")
} >"$OUT/.plot.gp"
gnuplot "$OUT/.plot.gp"
rm -f "$OUT"/.plot.*
