#!/bin/bash
# The element-wise loops of xtq_reduce_local (xtq/reduce.c) are vectorised:
# they are built at -O3 whatever the build type, as the collective engine,
# mpi-ext and the training shim reduce megabytes through them. Until
# session 8 the -O3 was set where CMake did not apply it, and every loop
# ran one element at a time (2-4 GB/s for float sums on the 2-core VM).
# Counts the packed arithmetic instructions in the built function.
# Usage: reduce_vectorized.sh LIBXTQ.so
lib=$1
if [ "$(uname -m)" != x86_64 ]; then
    echo "SKIP: the packed-instruction check knows x86-64 only"
    exit 77
fi
if ! command -v objdump > /dev/null; then
    echo "SKIP: objdump (binutils) is not installed"
    exit 77
fi
n=$(objdump -d --no-show-raw-insn "$lib" |
    awk '/<xtq_reduce_local>:$/ { f = 1; next } f && /^$/ { exit } f' |
    grep -cE '[[:space:]]v?(add|mul|max|min)p[sd][[:space:]]|[[:space:]]v?padd[bwdq][[:space:]]')
echo "xtq_reduce_local: $n packed add/mul/max/min instructions"
if [ "$n" -lt 20 ]; then
    echo "FAIL: the reduction loops are not vectorised (is xtq/reduce.c built at -O3?)"
    exit 1
fi
