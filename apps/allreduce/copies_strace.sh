#!/usr/bin/env bash
# Count, per allreduce call, what rank 0 does in the kernel: CMA copies
# (process_vm_readv: calls and bytes), futex wake-ups (thread hand-offs)
# and poll/epoll waits, for the MPI's MPI_Allreduce and for libxtq_coll
# with XTQ_COLL_CMA=off and auto, same sizes, same script. Counts, not
# times: they do not depend on the machine's load (strace slows every
# call, so its times are meaningless and not printed).
#
#   apps/allreduce/copies_strace.sh [OUTFILE]
#
# Environment: BUILD_DIR (build), RANKS ("2 4"), SIZES ("64K 256K 1M"),
# ITERS (10: calls per placement; xtq_allreduce runs out of place and in
# place, so 2 x ITERS calls are counted, plus one team creation).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD_DIR:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
out=${1:-/dev/stdout}
ranks=${RANKS:-2 4}
sizes=${SIZES:-64K 256K 1M}
iters=${ITERS:-10}
bin=$build/apps/allreduce/xtq_allreduce
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# strace summary of rank 0 for one (mode, setting, ranks, size) and a
# zero-iteration run of the same (start-up and team creation only); the
# difference over 2 x ITERS calls is per call.
run() { # mode cma np size iters -> file
    local f=$tmp/st.$1.$2.$3.$4.$5
    env XTQ_COLL_CMA="$2" mpirun --oversubscribe --bind-to none -x XTQ_COLL_CMA -np "$3" \
        sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then exec strace -f -qq -e trace=process_vm_readv,futex,poll,epoll_wait,ppoll -o "$0" "$@"; else exec "$@"; fi' \
        "$f" "$bin" --modes "$1" --sizes "$4" --iters "$5" --warmup 0 --budget 4G >/dev/null 2>&1 || true
    awk '/process_vm_readv/ && !/unfinished/ { n = $NF; if (n ~ /^[0-9]+$/ && n > 0) { cma++; bytes += n } }
         /futex\(.*FUTEX_WAKE/ { wake++ }
         /(poll|epoll_wait|ppoll)\(/ { polls++ }
         END { printf "%d %d %d %d\n", cma, bytes, wake, polls }' "$f"
}
{
    echo "# $(date -u +%FT%TZ) commit $(git -C "$root" describe --always --dirty --abbrev=7) machine $(uname -n), $(nproc) cores"
    echo "# $0 $*  RANKS=\"$ranks\" SIZES=\"$sizes\" ITERS=$iters; per call on rank 0 (difference of a"
    echo "# run of $iters calls per placement and one of 1, over 2 x ($iters - 1) calls)"
    printf "%-5s %-8s %-9s %6s %12s %14s %12s %10s\n" ranks size path cma_calls cma_bytes bytes/vector futex_wakes polls
    for np in $ranks; do
        for sz in $sizes; do
            bytes=$(numfmt --from=iec "$sz")
            for p in "mpi auto" "xtq off" "xtq auto"; do
                set -- $p
                read -r c1 b1 w1 q1 < <(run "$1" "$2" "$np" "$sz" 1)
                read -r cn bn wn qn < <(run "$1" "$2" "$np" "$sz" "$iters")
                k=$((2 * (iters - 1)))
                name=$1; [ "$1" = xtq ] && name="xtq/cma=$2"
                awk -v np="$np" -v sz="$sz" -v name="$name" -v k="$k" -v v="$bytes" \
                    -v c="$((cn - c1))" -v b="$((bn - b1))" -v w="$((wn - w1))" -v q="$((qn - q1))" \
                    'BEGIN { printf "%-5s %-8s %-9s %6.1f %12.0f %14.2f %12.1f %10.1f\n", np, sz, name, c / k, b / k, b / k / v, w / k, q / k }'
            done
        done
    done
} >"$out"
