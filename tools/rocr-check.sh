#!/usr/bin/env bash
# End-to-end check of the ROCr agent on a machine with an AMD GPU.
#   tools/rocr-check.sh [build-dir]      (default: build-rocr-check)
# 1. configures and builds libxtq with the ROCr agent required, warnings as
#    errors (and the AMD kernel code objects when hipcc is installed);
# 2. runs xtq_info, which must list the rocr agent as available;
# 3. runs the rocr unit tests, which must PASS (not skip) here;
# 4. runs a 2-rank XtqPut: rank 0 sends 1000 floats, rank 1's engine
#    enqueues xtq_sum_f32 on a ROCr hardware queue, the GPU adds them into
#    rank 1's buffer and the completion signal mirrors back.
# Exit 0 only if every step passed. Needs: libhsa-runtime-dev, hipcc (for
# step 3's kernel case and step 4), mpirun, and access to /dev/kfd.
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build-rocr-check}
fail() { echo "rocr-check: FAIL: $*" >&2; exit 1; }
step() { echo; echo "== $*"; }

[ -e /dev/kfd ] || fail "no /dev/kfd: no AMD GPU driver on this machine"
[ -r /dev/kfd ] && [ -w /dev/kfd ] || fail "/dev/kfd not accessible (add $USER to the render and video groups)"

step "build ($build)"
cmake -S "$src" -B "$build" -DXTQ_ENABLE_ROCR=ON -DXTQ_WERROR=ON >/dev/null
cmake --build "$build" -j"$(nproc)"

step "xtq_info"
info=$("$build/tools/xtq_info" 2>&1 || true)
echo "$info"
grep -Ei 'rocr' <<<"$info" | grep -Eiq 'unavailable|no /dev/kfd|not ' &&
    fail "xtq_info reports the rocr agent unavailable"

step "rocr unit tests (none may skip here)"
ctest --test-dir "$build" -R '^rocr\.' --output-on-failure
skipped=$(ctest --test-dir "$build" -R '^rocr\.' 2>&1 | grep -c 'Skipped' || true)
if [ "$skipped" -ne 0 ]; then
    ctest --test-dir "$build" -R '^rocr\.' -V 2>&1 | grep 'SKIP \[' || true
    # probe_reports_absence skips by design where a GPU is present.
    [ "$skipped" -eq 1 ] && ctest --test-dir "$build" -R '^rocr\.probe_reports_absence$' 2>&1 |
        grep -q Skipped || fail "$skipped rocr case(s) skipped on a machine with a GPU"
fi

step "2-rank XtqPut to a ROCr queue"
isa=$(ctest --test-dir "$build" -R '^rocr\.agent_info$' -V 2>/dev/null | grep -o 'gfx[0-9a-f]*' | head -1 || true)
[ -n "$isa" ] || isa=$(rocm_agent_enumerator 2>/dev/null | grep -v gfx000 | head -1 || true)
hsaco=${XTQ_ROCR_HSACO:-$build/kernels/xtq_kernels-$isa.hsaco}
[ -f "$hsaco" ] || fail "no code object $hsaco (install hipcc, or add $isa to XTQ_HIP_ARCHS)"
prog=$build/rocr_put_check
cat >"$prog.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xtq/xtq.h>
#include "hsa-glue/rocr_kernels/xtq_kernels.h"
#define N 1000
#define TMO (30LL * 1000000000LL)
#define TRY(x) do { int rc_ = (x); if (rc_) { fprintf(stderr, "%s: %s\n", #x, xtq_strerror(rc_)); exit(1); } } while (0)
int main(int argc, char **argv)
{
    xtq_ctx_t *ctx; xtq_agent_t *gpu; xtq_queue_t *q; xtq_kernel_t *k; xtq_signal_t *done;
    static float buf[N] __attribute__((aligned(4096)));
    TRY(xtq_init(NULL, &ctx));
    if (xtq_size(ctx) != 2) { fprintf(stderr, "run with 2 ranks\n"); return 1; }
    if (xtq_rank(ctx) == 1) {
        TRY(xtq_agent_find(ctx, XTQ_AGENT_ROCR, &gpu));
        TRY(xtq_kernel_create_rocr(gpu, argv[1], XTQ_KERNEL_SUM_F32, &k));
        TRY(xtq_rocr_mem_register(gpu, buf, sizeof(buf)));
        for (int i = 0; i < N; i++) buf[i] = (float)i;
        TRY(xtq_queue_create(gpu, 256, &q));
        TRY(xtq_signal_create(1, &done));
        TRY(xtq_register_queue(ctx, 0, q));
        TRY(xtq_register_kernel(ctx, 0, k, buf, done));
    }
    TRY(xtq_barrier(ctx));
    if (xtq_rank(ctx) == 0) {
        float payload[N]; unsigned char cmd[256]; size_t len; xtq_completion_t c;
        struct xtq_kernel_args a = {NULL, NULL, N};
        xtq_dispatch_geometry_t g = {1, {1024, 1, 1}, {64, 1, 1}};
        for (int i = 0; i < N; i++) payload[i] = 0.5f * (float)i;
        TRY(xtq_cmd_kernel(cmd, sizeof(cmd), 0, 0, &g, &a, sizeof(a), &len));
        TRY(xtq_put(ctx, 1, cmd, len, payload, sizeof(payload), XTQ_PUT_REMOTE_COMPLETION, &c));
        TRY(xtq_completion_wait(ctx, &c, TMO));
    } else {
        TRY(xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, TMO, NULL));
        for (int i = 0; i < N; i++)
            if (buf[i] != 1.5f * (float)i) { fprintf(stderr, "buf[%d] = %g\n", i, buf[i]); return 1; }
        printf("rank 1: the GPU summed the payload into the target buffer\n");
    }
    TRY(xtq_barrier(ctx));
    if (xtq_rank(ctx) == 1) {
        TRY(xtq_unregister_kernel(ctx, 0)); TRY(xtq_unregister_queue(ctx, 0));
        TRY(xtq_queue_destroy(q)); TRY(xtq_kernel_destroy(k));
        TRY(xtq_rocr_mem_deregister(gpu, buf, sizeof(buf)));
    }
    return xtq_finalize(ctx) ? 1 : 0;
}
C
cc -std=gnu11 -O2 -Wall -Werror -I"$src/include" -I"$src" "$prog.c" -o "$prog" \
    -L"$build" -Wl,-rpath,"$(cd "$build" && pwd)" -lxtq
mpirun --oversubscribe -np 2 -x XTQ_LOG_LEVEL=warn "$prog" "$hsaco" ||
    fail "2-rank XtqPut to the ROCr queue"

echo; echo "rocr-check: PASS ($isa, $hsaco)"
