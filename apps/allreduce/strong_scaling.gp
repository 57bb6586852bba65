# Fig. 9c: a 4 MiB allreduce against the number of ranks, per path:
# measured (points), the fitted model at the measured counts (open points)
# and its projection on the stated network (lines), from model.dat
# (xtq_allreduce_model --out: one block per path).
# gnuplot -e "datafile='model.dat'; outfile='x.png'; modes='mpi xtq'; subtitle='...'" strong_scaling.gp
set terminal pngcairo size 1000,650 font ",11"
set output outfile
set title "Allreduce of 4 MiB, strong scaling (measured, model, projection)\n{/*0.8 ".subtitle."}"
set xlabel "ranks (nodes in the projection)"
set ylabel "time per allreduce (us)"
set logscale x 2
set logscale y 10
set format y "%g"
set key outside right
set grid
nb = words(modes)
plot for [i=0:nb-1] datafile index i using 2:3 with points pt 7 ps 1.3 lc i+1 \
       title word(modes, i+1).' measured', \
     for [i=0:nb-1] datafile index i using 2:4 with points pt 6 ps 1.8 lc i+1 \
       title word(modes, i+1).' model', \
     for [i=0:nb-1] datafile index i using 2:5 with linespoints dt 2 pt 1 lc i+1 \
       title word(modes, i+1).' projected'
