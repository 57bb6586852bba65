# Loss and test accuracy per epoch, one line per run (xtq_train CSVs).
#   gnuplot -e "files='a.csv b.csv'; out='training.png'; title='...'" apps/cntk-shim/plot_train.gp
# A run's title is its file name without .csv.
if (!exists("files")) files = 'mpi_cpu_np1.csv'
if (!exists("out")) out = 'training.png'
if (!exists("title")) title = 'xtq_train: MLP on Fashion-MNIST'
set terminal pngcairo noenhanced size 1100,450 font ",10"
set output out
set datafile separator ","
set multiplot layout 1,2 title title
set grid
set key bottom left
set xlabel "epoch"
data(f) = sprintf("< grep -v '^#' %s | tail -n +2", f)
name(f) = system(sprintf("basename %s .csv | sed s/_r1$//", f))
set ylabel "training loss"
set key top right
plot for [f in files] data(f) using 4:6 with linespoints title name(f)
set ylabel "test accuracy (%)"
set key bottom right
plot for [f in files] data(f) using 4:9 with linespoints title name(f)
unset multiplot
