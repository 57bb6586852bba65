/*
 * The round trip's GPU task (xtq_bench_rtt --agent cuda), shared by rtt.c
 * (plain C) and rtt_cuda.cu (device code and small host helpers).
 *
 * The task sums the payload as little-endian 4-byte words (a last partial
 * word is zero-padded) into result[1] and counts itself in result[0];
 * `result` is device memory. One work-item per 16 payload bytes,
 * work-groups of RTT_CUDA_WG, at least one group: the same geometry when
 * the CUDA agent runs it (xtq) and when the application launches it (hsa).
 *
 * Without XTQ_BENCH_CUDA (libxtq built without the CUDA agent) the helpers
 * are stubs that fail, so rtt.c needs no guards of its own.
 */
#ifndef XTQ_BENCH_RTT_CUDA_H
#define XTQ_BENCH_RTT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RTT_CUDA_WG         256u
#define RTT_CUDA_ITEM_BYTES 16u

/* Kernel arguments. 0 and 1 are rewritten by XTQ (target buffer, payload). */
struct rtt_cuda_args {
    unsigned long long *result; /* device memory: [0] tasks run, [1] sum of words */
    const uint8_t *payload;     /* host memory the GPU can read (pinned, mapped) */
    uint64_t len;               /* payload bytes */
};

/* Work-groups for a payload of `len` bytes (at least one). */
static inline uint32_t rtt_cuda_groups(uint64_t len)
{
    uint64_t per_group = (uint64_t)RTT_CUDA_WG * RTT_CUDA_ITEM_BYTES;
    uint64_t g = (len + per_group - 1) / per_group;
    return g ? (uint32_t)g : 1u;
}

/* Device addresses of the tasks, for xtq_kernel_create_cuda(). */
struct rtt_cuda_tasks {
    uint64_t sum;  /* the benchmark task */
    uint64_t done; /* end of phase: does nothing; its completion signal matters */
};

#ifdef XTQ_BENCH_CUDA
#define RTT_CUDA_BUILT 1

/*
 * Every helper returns 0 or a cudaError_t value; rtt_cuda_last_error()
 * then names the failing CUDA call and the error.
 */

/*
 * Set up this process's CUDA runtime on `device`: EAGER module loading
 * (unless the environment says otherwise), the context, a non-blocking
 * stream, the result buffer (device memory), the tasks' addresses, and one
 * launch of the kernel so nothing is loaded later. Call it before
 * xtq_init(): the CUDA agent's persistent processor keeps the GPU busy,
 * and loading a module while it runs can wait forever (docs/cuda.md).
 */
int rtt_cuda_setup(int device, unsigned long long **result, struct rtt_cuda_tasks *tasks);
/* Free what rtt_cuda_setup() made; after xtq_finalize() (frees may synchronise the device). */
void rtt_cuda_teardown(void);

/* Attach this module's processor to the CUDA agent (an XTQ error code). */
struct xtq_agent;
int rtt_cuda_attach(struct xtq_agent *agent);

/* result[0..1] := 0 / read them back (through the stream, synchronously). */
int rtt_cuda_result_zero(void);
int rtt_cuda_result_read(unsigned long long out[2]);

/* Pin and map host memory for the GPU; `dev` receives its device address. */
int rtt_cuda_host_register(void *addr, size_t len, void **dev);
int rtt_cuda_host_unregister(void *addr);

/* HSA mode: launch the task as a __global__ kernel on the stream / wait for it. */
int rtt_cuda_launch(const struct rtt_cuda_args *args);
int rtt_cuda_wait(void);

/* "cudaXxx(...): cudaErrorName: description" for the last failure. */
const char *rtt_cuda_last_error(void);

#else /* !XTQ_BENCH_CUDA */
#define RTT_CUDA_BUILT 0

static inline int rtt_cuda_setup(int device, unsigned long long **result,
                                 struct rtt_cuda_tasks *tasks)
{
    return -1;
}
static inline void rtt_cuda_teardown(void) {}
struct xtq_agent;
static inline int rtt_cuda_attach(struct xtq_agent *agent)
{
    return -1;
}
static inline int rtt_cuda_result_zero(void)
{
    return -1;
}
static inline int rtt_cuda_result_read(unsigned long long out[2])
{
    return -1;
}
static inline int rtt_cuda_host_register(void *addr, size_t len, void **dev)
{
    return -1;
}
static inline int rtt_cuda_host_unregister(void *addr)
{
    return -1;
}
static inline int rtt_cuda_launch(const struct rtt_cuda_args *args)
{
    return -1;
}
static inline int rtt_cuda_wait(void)
{
    return -1;
}
static inline const char *rtt_cuda_last_error(void)
{
    return "xtq_bench_rtt was built without CUDA";
}
#endif

#ifdef __cplusplus
}
#endif
#endif /* XTQ_BENCH_RTT_CUDA_H */
