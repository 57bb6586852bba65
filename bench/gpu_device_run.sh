#!/usr/bin/env bash
# On the GPU machine: build the CUDA agent, run the gpu test label, the
# compute-sanitizer pass and the round-trip benchmark. Logs go to $OUT.
# libfabric headers travel in .carry/ (see docs/cuda.md).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROOT=$PWD; B=/tmp/build-gpu
mkdir -p /tmp/pc
sed "s|^prefix=.*|prefix=$ROOT/.carry/root/usr|" .carry/root/usr/lib/x86_64-linux-gnu/pkgconfig/libfabric.pc > /tmp/pc/libfabric.pc
export PKG_CONFIG_PATH=/tmp/pc:${PKG_CONFIG_PATH:-}
export LD_LIBRARY_PATH=$ROOT/.carry/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv
cmake -S . -B $B -DXTQ_ENABLE_CUDA=ON -DXTQ_ENABLE_ROCR=OFF -DXTQ_ENABLE_MPI=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DXTQ_BUILD_APPS=ON 2>&1 | tail -3
cmake --build $B -j16 --target test_cuda xtq_gpu_rtt 2>&1 | grep -E "error|warning|Built target" 
} 2>&1 | tee $OUT/build.log
# Fail fast: one case first.
timeout 40 $B/tests/unit/test_cuda dispatch_geometry_and_kernargs > $OUT/ctest.log 2>&1 || { echo "first case rc=$?"; cat $OUT/ctest.log; exit 1; }
( cd $B && timeout 240 ctest -L gpu --output-on-failure --timeout 60 ) 2>&1 | tee -a $OUT/ctest.log | tail -25
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for c in dispatch_geometry_and_kernargs signal_seen_by_host_waiter barrier_and_or bad_packets_complete_with_error payload_in_place_and_in_device_memory register_heavy_task shutdown_and_reopen; do
  timeout 60 $SAN --tool memcheck --error-exitcode 3 $B/tests/unit/test_cuda $c > /tmp/san.log 2>&1
  rc=$?; cat /tmp/san.log >> $OUT/sanitizer.log
  echo "sanitizer $c rc=$rc $(grep -E 'ERROR SUMMARY' /tmp/san.log | tail -1)" | tee -a $OUT/sanitizer.log
done
HB=$(find $B -name xtq_gpu_rtt -type f | head -1)
timeout 150 $HB -n 2000 -c $COMMIT -o $OUT/gpu_rtt.csv 2>&1 | tee $OUT/bench.log
XTQ_CUDA_BLOCKS=16 timeout 60 $HB -n 1000 -c $COMMIT -o $OUT/gpu_rtt_blocks16.csv 2>&1 | tail -12 | tee $OUT/bench16.log
