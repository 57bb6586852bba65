/* Shared by tools/gpu_rtt.c and tools/gpu_rtt_kernels.cu. */
#ifndef XTQ_BENCH_GPU_RTT_H
#define XTQ_BENCH_GPU_RTT_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
#define RTT_WG 256
/* Kernel arguments (XTQ layout: argument 0 the target, 1 the payload). */
struct rtt_args {
    unsigned long long *result; /* device memory: the payload's word sum */
    const uint32_t *payload;
    uint32_t words;
    uint32_t pad;
};
struct xtq_agent;
int rtt_attach(struct xtq_agent *agent);
uint64_t rtt_task_address(void);
/* Host launch of the same body; `done` (mapped host, may be NULL): the
 * last block stores the number of blocks there. */
int rtt_launch(const struct rtt_args *a, unsigned groups, unsigned *done, void *stream);

/*
 * Device-side launch of the same body without the CUDA agent: a one-warp
 * poller kernel waits for `bell` (mapped host) to reach 1, 2, ... `n` and
 * launches the sum grid each time, with dynamic parallelism (cdp) or as a
 * device graph (graph: the poller runs in a graph of its own, and a graph
 * may device-launch at most 120 others per execution, so n <= 100). The
 * grid's last block stores the launch's number in `done`. Start a poller,
 * ring, wait, and collect it with rtt_poller_wait.
 */
enum { RTT_LAUNCH_CDP, RTT_LAUNCH_GRAPH };
int rtt_poller_start(int how, const struct rtt_args *a, unsigned groups, volatile unsigned *bell,
                     unsigned *done, unsigned n, void *stream);
int rtt_poller_wait(void *stream);

/*
 * The floor of any GPU task started from host memory: one block of
 * RTT_WG threads (the processor's shape) polls `bell` (mapped host, one
 * 16-byte line per thread for the first `lines` threads, the counter in
 * the first word) until it reaches 1, 2, ... `n`, and answers each in
 * `ans` (mapped host) with a release store at system scope (`release`)
 * or a plain volatile one. Nothing else runs in it: no task, no checks.
 * stagger_ns > 0: two polls in flight, each issued stagger_ns after the
 * one before (a plain answer).
 */
int rtt_echo_start(const volatile unsigned *bell, unsigned *ans, unsigned n, unsigned lines,
                   int release, unsigned stagger_ns, void *stream);
/*
 * The echo with `warps` warps of one block polling, each 32 lines of its
 * copy of the doorbell (copy w % copies, 512 bytes apart: the host writes
 * the counter into each), warp w starting gap_ns * w after the last
 * answer, then reading back to back; the first to see the counter
 * answers (plain store). Do reads of one line from several warps of an
 * SM overlap, and do reads of several copies?
 */
int rtt_echo_warps_start(const volatile unsigned *bell, unsigned *ans, unsigned n, unsigned warps,
                         unsigned copies, unsigned gap_ns, void *stream);
#ifdef __cplusplus
}
#endif
#endif
