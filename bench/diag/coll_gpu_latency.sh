#!/usr/bin/env bash
# Where does a CUDA team's small allreduce spend its time? (issue 13: on
# the H100 every xtqgpu time was a multiple of 2.25 ms, the sum of a nap
# series 20 us .. 1 ms.) Run after `STAGES=build bash bench/gpu_device_run.sh`
# on the GPU machine: timings under variants of the waits, then host stacks
# of both ranks in the middle of a long run (cuda-gdb attaches; the machine
# has no gdb), then the GPU tests of the collectives and the shim.
set -uo pipefail
OUT=${OUT:-/tmp/out}
B=${B:-/tmp/build-gpu}
D=$OUT/diag; mkdir -p $D
exec > >(tee -a "$D/log.txt") 2>&1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
AR=$B/apps/allreduce/xtq_allreduce
MPI=(mpirun --bind-to none -np 2 -x CUDA_MODULE_LOADING=EAGER)
v() { # name env...
  local n=$1; shift
  echo "== $n"
  timeout 60 env "$@" "${MPI[@]}" $AR --modes xtqgpu --sizes 8,64K --iters ${ITERS:-30} 2>&1 |
    grep -E "^ +[0-9]+ |rror|FAIL" | head -4
}
v default
v triggers_task XTQ_COLL_TRIGGERS=task
v idle1000 XTQ_CUDA_IDLE_EXIT_US=1000
v spin0 XTQ_AGENT_SPIN_US=0
v spin2000 XTQ_AGENT_SPIN_US=2000
v lone0 XTQ_LONE_WAITER=0
echo "== stacks"
CG=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
"${MPI[@]}" $AR --modes xtqgpu --sizes 8 --iters 200000 >$D/long.txt 2>&1 &
LP=$!
sleep 8
for pid in $(pgrep -x xtq_allreduce); do
  grep -q xtq_allreduce /proc/$pid/cmdline 2>/dev/null || continue
  for k in 1 2 3; do
    for t in /proc/$pid/task/*; do
      echo "$pid $(basename $t) $(cat $t/comm) $(awk '{print $3}' $t/stat) $(cut -d' ' -f1-3 $t/syscall 2>/dev/null)"
    done >>$D/proc_$pid.txt
    timeout 40 $CG -p $pid -batch -ex "set pagination off" -ex "thread apply all bt 14" \
      >$D/bt_${pid}_$k.txt 2>&1
    echo "pid $pid sample $k rc=$? $(grep -c '^Thread' $D/bt_${pid}_$k.txt) threads"
    sleep 0.3
  done
done
kill $LP 2>/dev/null; sleep 1; pkill -x xtq_allreduce; wait
echo "== tests"
(cd $B && timeout 200 ctest -R '^shim\.device_staged|^coll\.gpu_|^coll\.nonblocking_reduce' \
  --output-on-failure --timeout 90) >$D/ctest.txt 2>&1
grep -E "Test +#|tests passed|FAIL" $D/ctest.txt | head -20
tar -C $OUT -czf $OUT/diag.tgz diag
