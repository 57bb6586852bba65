/*
 * The benchmark's GPU work, in every form it is started in: an XTQ task
 * (run by the CUDA agent's packet processor, or on a grid the processor
 * launches), the same body as a __global__ kernel launched from the host
 * (HSA mode), and from the GPU by a poller kernel (dynamic parallelism or
 * device graph launch). Each sums the payload's 4-byte words (16 bytes
 * per work-item) into device memory. Built with -rdc (device launches).
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include <xtq/cuda_processor.cuh>

#include "gpu_rtt.h"

__device__ __forceinline__ void sum_body(uint32_t item, const struct rtt_args *a)
{
    uint32_t base = item * 4;
    unsigned long long s = 0;
    if (base + 4 <= a->words && !((uintptr_t)a->payload & 15)) {
        uint4 v = *(const uint4 *)(a->payload + base);
        s = (unsigned long long)v.x + v.y + v.z + v.w;
    } else {
        for (uint32_t i = 0; i < 4 && base + i < a->words; i++)
            s += a->payload[base + i];
    }
    /* Warp-reduce first: one device-memory atomic per warp. */
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0 && s)
        atomicAdd(a->result, s);
}

__device__ void rtt_task(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    sum_body(d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0],
             (const struct rtt_args *)kernarg);
}
XTQ_CUDA_TASK_EXPORT(rtt_task);

__device__ unsigned int rtt_blocks_done;
__device__ unsigned int rtt_launches;

/* The last block of a grid stores `value` (0: the launch count) in done. */
__device__ __forceinline__ void grid_done(unsigned *done, unsigned value)
{
    __syncthreads();
    if (threadIdx.x == 0 && done) {
        /* Count blocks in device memory; the last one stores the flag
         * (GPU atomics on host memory lose updates without host atomics). */
        __threadfence();
        if (atomicAdd(&rtt_blocks_done, 1u) == gridDim.x - 1) {
            rtt_blocks_done = 0;
            if (!value)
                value = ++rtt_launches;
            __threadfence_system();
            *(volatile unsigned int *)done = value;
        }
    }
}

__global__ void rtt_kernel(struct rtt_args a, unsigned int *done)
{
    sum_body(blockIdx.x * blockDim.x + threadIdx.x, &a);
    grid_done(done, gridDim.x);
}

/* Launched from the GPU: the launch count into done. */
__global__ void rtt_kernel_counted(struct rtt_args a, unsigned int *done)
{
    sum_body(blockIdx.x * blockDim.x + threadIdx.x, &a);
    grid_done(done, 0);
}

XTQ_CUDA_MODULE(xtq_gpu_rtt)

extern "C" int rtt_attach(xtq_agent_t *agent)
{
    return xtq_cuda_module_attach(agent, xtq_gpu_rtt);
}

extern "C" uint64_t rtt_task_address(void)
{
    uint64_t p = 0;
    return xtq_cuda_task_address(rtt_task_xtq_task, &p) == 0 ? p : 0;
}

extern "C" int rtt_launch(const struct rtt_args *a, unsigned groups, unsigned *done, void *stream)
{
    rtt_kernel<<<groups, RTT_WG, 0, (cudaStream_t)stream>>>(*a, done);
    return (int)cudaGetLastError();
}

/* ---- device-side launch without the agent ---------------------------------- */

__device__ __forceinline__ bool bell_wait(volatile unsigned *bell, unsigned k)
{
    for (unsigned long long spins = 0; *bell < k; spins++)
        if (spins > (1ull << 32))
            return false; /* the host went away */
    return true;
}

__global__ void poller_cdp(struct rtt_args a, unsigned groups, volatile unsigned *bell,
                           unsigned *done, unsigned n)
{
    if (threadIdx.x != 0)
        return;
    for (unsigned k = 1; k <= n; k++) {
        if (!bell_wait(bell, k))
            return;
        rtt_kernel_counted<<<groups, RTT_WG, 0, cudaStreamFireAndForget>>>(a, done);
    }
}

__global__ void poller_graph(cudaGraphExec_t g, volatile unsigned *bell, unsigned n)
{
    if (threadIdx.x != 0)
        return;
    for (unsigned k = 1; k <= n; k++) {
        if (!bell_wait(bell, k))
            return;
        cudaGraphLaunch(g, cudaStreamGraphFireAndForget);
    }
}

static cudaGraphExec_t child_exec, poller_exec;
static cudaGraph_t child_graph, poller_graph_g;

static void graphs_free(void)
{
    if (poller_exec)
        cudaGraphExecDestroy(poller_exec);
    if (poller_graph_g)
        cudaGraphDestroy(poller_graph_g);
    if (child_exec)
        cudaGraphExecDestroy(child_exec);
    if (child_graph)
        cudaGraphDestroy(child_graph);
    poller_exec = child_exec = NULL;
    poller_graph_g = child_graph = NULL;
}

extern "C" int rtt_poller_start(int how, const struct rtt_args *a, unsigned groups,
                                volatile unsigned *bell, unsigned *done, unsigned n, void *stream)
{
    cudaStream_t s = (cudaStream_t)stream;
    unsigned zero = 0;
    cudaError_t e = cudaMemcpyToSymbolAsync(rtt_launches, &zero, sizeof(zero), 0,
                                            cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
        return (int)e;
    if (how == RTT_LAUNCH_CDP) {
        poller_cdp<<<1, 32, 0, s>>>(*a, groups, bell, done, n);
        return (int)cudaGetLastError();
    }
    /* The child: one kernel node, device-launchable. */
    graphs_free();
    struct rtt_args args = *a;
    unsigned *done_arg = done;
    void *params[] = {&args, &done_arg};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)rtt_kernel_counted;
    kp.gridDim = dim3(groups);
    kp.blockDim = dim3(RTT_WG);
    kp.kernelParams = params;
    cudaGraphNode_t node;
    e = cudaGraphCreate(&child_graph, 0);
    if (e == cudaSuccess)
        e = cudaGraphAddKernelNode(&node, child_graph, NULL, 0, &kp);
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&child_exec, child_graph, cudaGraphInstantiateFlagDeviceLaunch);
    if (e == cudaSuccess)
        e = cudaGraphUpload(child_exec, s);
    /* The parent: the poller, itself in a graph (a device graph is only
     * launched from a kernel that runs in one). */
    cudaGraphExec_t cexec = child_exec;
    unsigned nn = n;
    void *pparams[] = {&cexec, &bell, &nn};
    cudaKernelNodeParams pp = {};
    pp.func = (void *)poller_graph;
    pp.gridDim = dim3(1);
    pp.blockDim = dim3(32);
    pp.kernelParams = pparams;
    if (e == cudaSuccess)
        e = cudaGraphCreate(&poller_graph_g, 0);
    if (e == cudaSuccess)
        e = cudaGraphAddKernelNode(&node, poller_graph_g, NULL, 0, &pp);
    if (e == cudaSuccess)
        e = cudaGraphInstantiate(&poller_exec, poller_graph_g, 0);
    if (e == cudaSuccess)
        e = cudaGraphLaunch(poller_exec, s);
    return (int)e;
}

__device__ __forceinline__ unsigned echo_load(const volatile unsigned *bell, unsigned lines)
{
    unsigned v = 0;
    if (threadIdx.x < lines) {
        const volatile uint4 *line = (const volatile uint4 *)bell + threadIdx.x;
        unsigned x, y, z, w;
        asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(x), "=r"(y), "=r"(z), "=r"(w)
                     : "l"(line)
                     : "memory");
        v = x | ((y | z | w) & 0u); /* the whole line read, its first word used */
    }
    return v;
}

__device__ __forceinline__ uint64_t echo_now(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void echo_kernel(const volatile unsigned *bell, unsigned *ans, unsigned n,
                            unsigned lines, int release, unsigned stagger_ns)
{
    __shared__ unsigned seen;
    if (stagger_ns) {
        /* Two polls in flight, issued stagger_ns apart: each round issues
         * the next poll's loads, then consumes the previous one's. */
        for (unsigned k = 1; k <= n; k++) {
            unsigned prev = echo_load(bell, lines);
            uint64_t issued = echo_now();
            for (;;) {
                while (echo_now() - issued < stagger_ns)
                    ;
                unsigned cur = echo_load(bell, lines);
                issued = echo_now();
                if (threadIdx.x == 0)
                    seen = prev;
                __syncthreads();
                const bool got = seen >= k;
                __syncthreads();
                if (got)
                    break;
                prev = cur;
            }
            if (threadIdx.x == 0)
                *(volatile unsigned *)ans = k;
        }
        return;
    }
    for (unsigned k = 1; k <= n; k++) {
        for (;;) {
            /* Every line in flight at once, as the processor's poll. */
            unsigned v = echo_load(bell, lines);
            if (threadIdx.x == 0)
                seen = v;
            __syncthreads();
            const bool got = seen >= k;
            __syncthreads();
            if (got)
                break;
        }
        if (threadIdx.x == 0) {
            if (release)
                asm volatile("st.release.sys.u32 [%0], %1;" ::"l"(ans), "r"(k) : "memory");
            else
                *(volatile unsigned *)ans = k;
        }
    }
}

extern "C" int rtt_echo_start(const volatile unsigned *bell, unsigned *ans, unsigned n,
                              unsigned lines, int release, unsigned stagger_ns, void *stream)
{
    echo_kernel<<<1, RTT_WG, 0, (cudaStream_t)stream>>>(bell, ans, n, lines, release,
                                                       stagger_ns);
    return (int)cudaGetLastError();
}

__global__ void echo_warps_kernel(const volatile unsigned *bell, unsigned *ans, unsigned n,
                                  unsigned copies, unsigned gap_ns)
{
    __shared__ volatile unsigned got, claim;
    __shared__ volatile unsigned long long t_ans;
    const unsigned warp = threadIdx.x / 32u, lane = threadIdx.x & 31u;
    if (threadIdx.x == 0) {
        got = 0;
        claim = 0;
        t_ans = echo_now();
    }
    __syncthreads();
    const volatile uint4 *mine = (const volatile uint4 *)(bell + (warp % copies) * 128u) + lane;
    for (unsigned k = 1; k <= n; k++) {
        while (got < k - 1)
            ;
        const uint64_t start = t_ans + (uint64_t)warp * gap_ns;
        while (echo_now() < start)
            ;
        /* got as lane 0 read it: the warp leaves the loop together. */
        while (__shfl_sync(~0u, got, 0) < k) {
            unsigned x, y, z, w;
            asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(x), "=r"(y), "=r"(z), "=r"(w)
                         : "l"(mine)
                         : "memory");
            const unsigned v = __shfl_sync(~0u, x | ((y | z | w) & 0u), 0);
            if (v >= k) {
                if (lane == 0 && atomicCAS((unsigned *)&claim, k - 1, k) == k - 1) {
                    t_ans = echo_now();
                    __threadfence_block();
                    got = k;
                    *(volatile unsigned *)ans = k;
                }
                break;
            }
        }
    }
}

extern "C" int rtt_echo_warps_start(const volatile unsigned *bell, unsigned *ans, unsigned n,
                                    unsigned warps, unsigned copies, unsigned gap_ns, void *stream)
{
    echo_warps_kernel<<<1, 32u * warps, 0, (cudaStream_t)stream>>>(bell, ans, n, copies, gap_ns);
    return (int)cudaGetLastError();
}

extern "C" int rtt_poller_wait(void *stream)
{
    return (int)cudaStreamSynchronize((cudaStream_t)stream);
}
