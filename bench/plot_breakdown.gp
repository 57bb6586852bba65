# Fig. 7 style: stacked bars of the median time per stage of a remote task,
# XTQ vs HSA at 64 B and 4 KiB.
#   gnuplot -e "in='breakdown.dat'; out='breakdown.png'; title='...'" bench/plot_breakdown.gp
if (!exists("in")) in = 'breakdown.dat'
if (!exists("out")) out = 'breakdown.png'
if (!exists("title")) title = 'Remote task: time per stage (median)'
set terminal pngcairo noenhanced size 900,560 font ",10"
set output out
set title title
set style data histograms
set style histogram rowstacked
set style fill solid 0.85 border -1
set boxwidth 0.6
set ylabel "microseconds"
set key outside right top vertical title "stage (ends at)"
set grid ytics
set yrange [0:*]
# A stage the reducer had no data for is "-": no bar, not a bar of 0.
set datafile missing "-"
# Columns 2..8: msg_sent .. completion (each: time since the previous stage).
plot for [c=2:8] in using c:xtic(1) title columnheader(c)
