/*
 * The benchmark's GPU work, in two forms: an XTQ task (run by the CUDA
 * agent's packet processor) and the same body as a __global__ kernel that
 * HSA mode launches from the host. Both read the payload (4-byte words,
 * 16 bytes per work-item) and add its sum into a result in host memory.
 */
#include <stdint.h>

#include <cuda_runtime.h>

#include <xtq/cuda_processor.cuh>

#include "gpu_rtt.h"

__device__ __forceinline__ void sum_body(uint32_t item, const struct rtt_args *a)
{
    uint32_t base = item * 4;
    unsigned long long s = 0;
    for (uint32_t i = 0; i < 4 && base + i < a->words; i++)
        s += a->payload[base + i];
    /* Warp-reduce first: one system atomic per warp. */
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0 && s)
        atomicAdd_system(a->result, s);
}

__device__ void rtt_task(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    sum_body(d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0],
             (const struct rtt_args *)kernarg);
}
XTQ_CUDA_TASK_EXPORT(rtt_task);

__device__ unsigned int rtt_blocks_done;

__global__ void rtt_kernel(struct rtt_args a, unsigned int *done)
{
    sum_body(blockIdx.x * blockDim.x + threadIdx.x, &a);
    __syncthreads();
    if (threadIdx.x == 0 && done) {
        /* Count blocks in device memory; the last one stores the flag
         * (GPU atomics on host memory lose updates without host atomics). */
        __threadfence_system();
        if (atomicAdd(&rtt_blocks_done, 1u) == gridDim.x - 1) {
            rtt_blocks_done = 0;
            __threadfence_system();
            *(volatile unsigned int *)done = gridDim.x;
        }
    }
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
