/*
 * xtq_bench_rtt --agent cuda: the GPU task and the host helpers rtt.c
 * calls (this file's CUDA runtime owns the task symbols; libxtq's own
 * runtime cannot look them up, see xtq/cuda.h).
 *
 * One task body, two ways in: the CUDA agent's packet processor calls
 * rtt_task through its exported address (xtq mode); rtt_kernel, a
 * __global__ wrapper launched with the runtime API, builds the same
 * dispatch description per thread and calls it (hsa mode).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cuda_runtime.h>

#include <xtq/cuda_processor.cuh>

#include "rtt_cuda.h"

namespace cg = cooperative_groups;

/* Bytes [p, p + n), n <= 16, as little-endian 4-byte words, the last one
 * zero-padded. The payload is 64-byte aligned in the receive regions and
 * 32-byte aligned in rtt.c's buffers; the other paths are for safety. */
__device__ __forceinline__ unsigned long long item_sum(const uint8_t *p, uint64_t n)
{
    unsigned long long s = 0;

    if (n == RTT_CUDA_ITEM_BYTES && ((uintptr_t)p & 15) == 0) {
        uint4 v = *(const uint4 *)p;
        return (unsigned long long)v.x + v.y + v.z + v.w;
    }
    for (uint64_t w = 0; w < n; w += 4) {
        uint64_t k = n - w < 4 ? n - w : 4;
        uint32_t word = 0;
        if (k == 4 && ((uintptr_t)(p + w) & 3) == 0)
            word = *(const uint32_t *)(p + w);
        else
            for (uint64_t b = 0; b < k; b++)
                word |= (uint32_t)p[w + b] << (8 * b);
        s += word;
    }
    return s;
}

/* The task: each work-item sums its 16 bytes; the threads that arrive
 * together reduce (no __syncthreads or shared memory: the processor's
 * blocks run it) and one of them adds into device memory. Work-item 0
 * counts the task. */
__device__ void rtt_task(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct rtt_cuda_args *a = (const struct rtt_cuda_args *)kernarg;
    uint64_t item = (uint64_t)d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    uint64_t base = item * RTT_CUDA_ITEM_BYTES;
    unsigned long long s = 0;

    if (base < a->len) {
        uint64_t n = a->len - base;
        s = item_sum(a->payload + base, n < RTT_CUDA_ITEM_BYTES ? n : RTT_CUDA_ITEM_BYTES);
    }
    cg::coalesced_group g = cg::coalesced_threads();
    unsigned long long t = cg::reduce(g, s, cg::plus<unsigned long long>());
    if (g.thread_rank() == 0 && t != 0)
        atomicAdd(&a->result[1], t);
    if (item == 0)
        atomicAdd(&a->result[0], 1ull);
}
XTQ_CUDA_TASK_EXPORT(rtt_task);

/* End of phase: nothing to do; the agent decrements its completion signal. */
__device__ void rtt_done_task(const xtq_cuda_dispatch_t *d, void *kernarg) {}
XTQ_CUDA_TASK_EXPORT(rtt_done_task);

/* The CUDA agent's processor for this module: the tasks above are only
 * callable from here. */
XTQ_CUDA_MODULE(xtq_bench_rtt)

extern "C" int rtt_cuda_attach(struct xtq_agent *agent)
{
    return xtq_cuda_module_attach(agent, xtq_bench_rtt);
}

/* HSA mode: the same body as an ordinary kernel, one block per work-group. */
__global__ void rtt_kernel(struct rtt_cuda_args a)
{
    xtq_cuda_dispatch_t d;

    d.packet = NULL;
    d.dimensions = 1;
    d.grid_size[0] = gridDim.x * blockDim.x;
    d.workgroup_size[0] = blockDim.x;
    d.workgroup_id[0] = blockIdx.x;
    d.workgroup_count[0] = gridDim.x;
    d.local_id[0] = threadIdx.x;
    for (int i = 1; i < 3; i++) {
        d.grid_size[i] = d.workgroup_size[i] = d.workgroup_count[i] = 1;
        d.workgroup_id[i] = d.local_id[i] = 0;
    }
    d.flat_local_id = threadIdx.x;
    d.status = NULL;
    d.result = NULL;
    d.result_len = 0;
    rtt_task(&d, &a);
}

/* ---- host helpers ---------------------------------------------------------- */

static char last_error[512] = "no CUDA error recorded";
static cudaStream_t stream;
static bool have_stream;
static unsigned long long *result_dev;

/* Errors that poison the context. It is the primary context, shared with
 * libxtq's CUDA agent: a fault in its packet processor surfaces here. */
static bool sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorIllegalInstruction:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
        return true;
    default:
        return false;
    }
}

static int fail(const char *call, cudaError_t e)
{
    if (e == cudaSuccess)
        e = cudaErrorUnknown; /* a failure without a CUDA code: still a failure */
    snprintf(last_error, sizeof(last_error), "%s: %s (%s)%s", call, cudaGetErrorName(e),
             cudaGetErrorString(e),
             sticky(e) ? "; the context is lost: the fault may be in this benchmark's kernel or "
                         "in the CUDA agent's packet processor (same context)"
                       : "");
    (void)cudaGetLastError(); /* clear it; sticky errors come back on the next call */
    return (int)e;
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return fail(#call, e_);                                                                \
    } while (0)

extern "C" const char *rtt_cuda_last_error(void)
{
    return last_error;
}

extern "C" int rtt_cuda_result_zero(void)
{
    CK(cudaMemsetAsync(result_dev, 0, 2 * sizeof(*result_dev), stream));
    CK(cudaStreamSynchronize(stream));
    return 0;
}

extern "C" int rtt_cuda_result_read(unsigned long long out[2])
{
    CK(cudaMemcpyAsync(out, result_dev, 2 * sizeof(*result_dev), cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
    return 0;
}

extern "C" int rtt_cuda_launch(const struct rtt_cuda_args *args)
{
    rtt_kernel<<<rtt_cuda_groups(args->len), RTT_CUDA_WG, 0, stream>>>(*args);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return fail("rtt_kernel<<<groups, RTT_CUDA_WG, 0, stream>>> (launch)", e);
    return 0;
}

extern "C" int rtt_cuda_wait(void)
{
    CK(cudaStreamSynchronize(stream));
    return 0;
}

extern "C" int rtt_cuda_setup(int device, unsigned long long **result, struct rtt_cuda_tasks *tasks)
{
    int n = 0;
    unsigned long long check[2];

    /* Before this process's first CUDA call; the CUDA agent asks for the
     * same (docs/cuda.md: lazy loading deadlocks against its processor). */
    setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    CK(cudaGetDeviceCount(&n));
    if (device >= n)
        return fail("cudaGetDeviceCount (fewer devices than the CUDA agent's index)",
                    cudaErrorInvalidDevice);
    CK(cudaSetDevice(device));
    CK(cudaFree(NULL)); /* create the context and load this module now */
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    have_stream = true;
    CK(cudaMalloc((void **)&result_dev, 2 * sizeof(*result_dev)));
    if (xtq_cuda_task_address(rtt_task_xtq_task, &tasks->sum) != 0 || tasks->sum == 0)
        return fail("xtq_cuda_task_address(rtt_task_xtq_task)", cudaGetLastError());
    if (xtq_cuda_task_address(rtt_done_task_xtq_task, &tasks->done) != 0 || tasks->done == 0)
        return fail("xtq_cuda_task_address(rtt_done_task_xtq_task)", cudaGetLastError());
    /* One empty task through the launch path: loads the kernel, and shows
     * a missing sm_XX image here rather than in the first measurement. */
    int rc = rtt_cuda_result_zero();
    if (rc == 0) {
        struct rtt_cuda_args a = {result_dev, NULL, 0};
        rc = rtt_cuda_launch(&a);
    }
    if (rc == 0)
        rc = rtt_cuda_wait();
    if (rc == 0)
        rc = rtt_cuda_result_read(check);
    if (rc)
        return rc;
    if (check[0] != 1 || check[1] != 0)
        return fail("warm-up launch of rtt_kernel (wrong result: the kernel did not run)",
                    cudaErrorLaunchFailure);
    rc = rtt_cuda_result_zero();
    if (rc)
        return rc;
    *result = result_dev;
    return 0;
}

extern "C" void rtt_cuda_teardown(void)
{
    cudaError_t e = cudaSuccess;

    if (result_dev != NULL)
        e = cudaFree(result_dev);
    if (e != cudaSuccess)
        fprintf(stderr, "rtt: cudaFree(result): %s\n", cudaGetErrorString(e));
    result_dev = NULL;
    if (have_stream) {
        e = cudaStreamDestroy(stream);
        if (e != cudaSuccess)
            fprintf(stderr, "rtt: cudaStreamDestroy: %s\n", cudaGetErrorString(e));
        have_stream = false;
    }
}

extern "C" int rtt_cuda_host_register(void *addr, size_t len, void **dev)
{
    CK(cudaHostRegister(addr, len, cudaHostRegisterMapped | cudaHostRegisterPortable));
    cudaError_t e = cudaHostGetDevicePointer(dev, addr, 0);
    if (e != cudaSuccess) {
        int rc = fail("cudaHostGetDevicePointer", e);
        (void)cudaHostUnregister(addr);
        return rc;
    }
    return 0;
}

extern "C" int rtt_cuda_host_unregister(void *addr)
{
    CK(cudaHostUnregister(addr));
    return 0;
}
