#!/usr/bin/env bash
# acc_latency.png from OUT/acc_latency.csv (mpi-ext/bench/run.sh calls it):
# lock/acc/unlock median against size, the MPI's own path and the layer's
# (labelled with the path it took: XTQ, or pass-through when the layer
# left the window to the MPI) for each MPI and window kind; and
# allreduce.png from OUT/allreduce.csv: MPI_Allreduce, the MPI's own and
# through the layer (routed to libxtq_coll, or passed through).
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
if [ ${#plots[@]} -gt 0 ]; then
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
fi

# MPI_Allreduce: the MPI's own (first rows of each MPI) and the layer's.
csv=$OUT/allreduce.csv
plots=()
if [ -s "$csv" ]; then
    for mpi in $(awk -F, 'NR > 1 { print $1 }' "$csv" | sort -u); do
        for row in 1 2; do
            f=$OUT/.plot.ar.$mpi.$row
            awk -F, -v m="$mpi" -v r="$row" '
                NR > 1 && $1 == m { c[$3]++; if (c[$3] == r) print $3, $5, $2 }' "$csv" >"$f"
            [ -s "$f" ] || continue
            if [ $row = 1 ]; then
                label="the MPI itself"
            elif awk 'END { exit !($3 == "xtq") }' "$f"; then
                label="libxtq_mpi (libxtq_coll)"
            else
                label="libxtq_mpi (pass-through)"
            fi
            plots+=("'$f' u 1:2 w lp t '$mpi: $label'")
        done
    done
fi
if [ ${#plots[@]} -gt 0 ]; then
    {
        echo "set terminal pngcairo size 1000,600 noenhanced"
        echo "set output '$OUT/allreduce.png'"
        echo "set logscale xy; set grid"
        echo "set xlabel 'bytes (MPI_DOUBLE, MPI_SUM, 2 ranks)'; set ylabel 'median (us, slowest rank)'"
        echo "set title 'MPI_Allreduce, $MACHINE'"
        echo "set key left top"
        (IFS=,; echo "plot ${plots[*]}")
    } >"$OUT/.plot.gp"
    gnuplot "$OUT/.plot.gp"
fi
rm -f "$OUT"/.plot.*
