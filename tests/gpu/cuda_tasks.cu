/*
 * Device tasks for the CUDA agent tests. Compiled into the test program:
 * a module of its own, as a user's tasks would be, with its processor.
 * Built with -rdc (and cudadevrt): the processor can launch large
 * dispatches on a grid of their own, which the tests exercise.
 */
#include <stdint.h>
#include <string.h>

#include <cuda_runtime.h>

#include <xtq/coll_cuda.cuh>
#include <xtq/cuda_processor.cuh>

#include "cuda_tasks.h"

/* Each work-item adds its coordinates to its own cell: a cell written
 * twice, or by the wrong item, shows. */
__device__ void task_geom(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct geom_args *a = (const struct geom_args *)kernarg;
    uint32_t x = d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    uint32_t y = d->workgroup_id[1] * d->workgroup_size[1] + d->local_id[1];
    uint32_t z = d->workgroup_id[2] * d->workgroup_size[2] + d->local_id[2];
    uint32_t lin = x + y * d->grid_size[0] + z * d->grid_size[0] * d->grid_size[1];
    /* One writer per cell: a plain add (GPU atomics on host memory lose
     * the update where the link has no host atomics, as on the H100 VM). */
    volatile uint32_t *cell = &a->out[lin];
    *cell = *cell + geom_value(x, y, z, a->tag) + a->payload[0];
}
XTQ_CUDA_TASK_EXPORT(task_geom);

/* One cell per packet: counts executions of packet `seq`. */
__device__ void task_count(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct count_args *a = (const struct count_args *)kernarg;
    volatile uint32_t *cell = &a->seen[a->seq]; /* one work-item per packet */
    *cell = *cell + 1;
}
XTQ_CUDA_TASK_EXPORT(task_count);

/* Reads a host flag: run after a barrier, it must see the flag set. */
__device__ void task_read_flag(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct flag_args *a = (const struct flag_args *)kernarg;
    *(volatile uint32_t *)a->out = *(const volatile uint32_t *)a->flag;
}
XTQ_CUDA_TASK_EXPORT(task_read_flag);

/* Sums the payload bytes (in place in host memory, or in device memory)
 * into result[0] (device memory: GPU atomics there are exact) and leaves
 * the payload address it was given in result[1]. */
__device__ void task_sum(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct sum_args *a = (const struct sum_args *)kernarg;
    uint32_t n = d->workgroup_size[0] * d->workgroup_count[0];
    uint32_t me = d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    unsigned long long s = 0;
    for (uint32_t i = me; i < a->len; i += n)
        s += a->payload[i];
    atomicAdd(a->result, s);
    if (me == 0)
        a->result[1] = (unsigned long long)(uintptr_t)a->payload;
}
XTQ_CUDA_TASK_EXPORT(task_sum);

/* Many live values: a task that needs more registers than the processor. */
__device__ void task_heavy(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct heavy_args *a = (const struct heavy_args *)kernarg;
    float v[HEAVY_N];
#pragma unroll
    for (int i = 0; i < HEAVY_N; i++)
        v[i] = a->in[(i * 7 + d->flat_local_id) % HEAVY_N];
    for (int r = 0; r < 4; r++) {
#pragma unroll
        for (int i = 0; i < HEAVY_N; i++)
            v[i] = v[i] * 1.0001f + v[(i + 1) % HEAVY_N];
    }
    float s = 0;
#pragma unroll
    for (int i = 0; i < HEAVY_N; i++)
        s += v[i] * (float)(i + 1);
    a->out[d->flat_local_id] = s;
}
XTQ_CUDA_TASK_EXPORT(task_heavy);

/* Fails the dispatch from one work-item; every item still runs. */
__device__ void task_fail(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct fail_args *a = (const struct fail_args *)kernarg;
    uint32_t lin = d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    a->seen[lin] = 1;
    if (d->workgroup_id[0] == a->fail_group && d->local_id[0] == 0)
        xtq_cuda_task_fail(d, a->status);
}
XTQ_CUDA_TASK_EXPORT(task_fail);

/* Fills a fetching put's reply buffer. */
__device__ void task_result(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct result_args *a = (const struct result_args *)kernarg;
    uint32_t lin = d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
    if (d->result && lin < d->result_len / 4)
        ((uint32_t *)d->result)[lin] = RESULT_WORD(lin);
    if (lin == 0) {
        a->info[0] = d->result_len;
        a->info[1] = d->result != NULL;
        a->info[2] = (uint32_t)d->payload_len;
        a->info[3] = (uint32_t)(d->payload_len >> 32);
    }
    if (lin == d->grid_size[0] - 1) {
        const uint8_t *p = (const uint8_t *)a->payload;
        a->info[4] = d->payload_len ? p[0] | (uint32_t)p[d->payload_len - 1] << 8 : 0;
    }
}
XTQ_CUDA_TASK_EXPORT(task_result);

/* Copies its (long) arguments out, every work-item a stride of them. */
__device__ void task_karg(const xtq_cuda_dispatch_t *d, void *kernarg)
{
    const struct karg_args *a = (const struct karg_args *)kernarg;
    for (uint32_t i = d->flat_local_id; i < a->n && i < KARG_WORDS_MAX; i += d->workgroup_size[0])
        a->out[i] = a->words[i];
}
XTQ_CUDA_TASK_EXPORT(task_karg);

XTQ_CUDA_MODULE(xtq_test_tasks)
/* A second processor, standing for another module in the attach rules. */
XTQ_CUDA_MODULE(xtq_test_other)

extern "C" int cuda_tasks_attach(xtq_agent_t *agent)
{
    return xtq_cuda_module_attach(agent, xtq_test_tasks);
}

extern "C" int cuda_tasks_detach(xtq_agent_t *agent)
{
    return xtq_cuda_module_detach(agent, xtq_test_tasks);
}

extern "C" int cuda_tasks_attach_other(xtq_agent_t *agent)
{
    return xtq_cuda_module_attach(agent, xtq_test_other);
}

/* libxtq_coll's task, exported as a task module must (its address is taken
 * in device code: the host-and-device definition must allow it). */
XTQ_CUDA_TASK_EXPORT(xtq_coll_cuda_task);

extern "C" uint64_t cuda_task_address(int which)
{
    uint64_t p = 0;
    int rc = -1;
    switch (which) {
    case TASK_GEOM: rc = xtq_cuda_task_address(task_geom_xtq_task, &p); break;
    case TASK_COUNT: rc = xtq_cuda_task_address(task_count_xtq_task, &p); break;
    case TASK_READ_FLAG: rc = xtq_cuda_task_address(task_read_flag_xtq_task, &p); break;
    case TASK_SUM: rc = xtq_cuda_task_address(task_sum_xtq_task, &p); break;
    case TASK_HEAVY: rc = xtq_cuda_task_address(task_heavy_xtq_task, &p); break;
    case TASK_FAIL: rc = xtq_cuda_task_address(task_fail_xtq_task, &p); break;
    case TASK_RESULT: rc = xtq_cuda_task_address(task_result_xtq_task, &p); break;
    case TASK_KARG: rc = xtq_cuda_task_address(task_karg_xtq_task, &p); break;
    case TASK_COLL: rc = xtq_cuda_task_address(xtq_coll_cuda_task_xtq_task, &p); break;
    }
    return rc == 0 ? p : 0;
}

/* The same arithmetic on the host, for task_heavy's reference. */
extern "C" void heavy_reference(const float *in, uint32_t lid, float *out)
{
    float v[HEAVY_N];
    for (int i = 0; i < HEAVY_N; i++)
        v[i] = in[(i * 7 + lid) % HEAVY_N];
    for (int r = 0; r < 4; r++)
        for (int i = 0; i < HEAVY_N; i++)
            v[i] = v[i] * 1.0001f + v[(i + 1) % HEAVY_N];
    float s = 0;
    for (int i = 0; i < HEAVY_N; i++)
        s += v[i] * (float)(i + 1);
    *out = s;
}

/* libxtq_coll's task, run on the host below: every work-item of a 1-D
 * grid of `grid` work-items in groups of `wg`, one after another. */

extern "C" void coll_task_run_host(const struct xtq_coll_cuda_args *a, uint32_t grid, uint32_t wg)
{
    xtq_cuda_dispatch_t d;
    memset(&d, 0, sizeof(d));
    d.dimensions = 1;
    d.grid_size[0] = grid;
    d.grid_size[1] = d.grid_size[2] = 1;
    d.workgroup_size[0] = wg;
    d.workgroup_size[1] = d.workgroup_size[2] = 1;
    d.workgroup_count[0] = (grid + wg - 1) / wg;
    d.workgroup_count[1] = d.workgroup_count[2] = 1;
    for (uint32_t g = 0; g < d.workgroup_count[0]; g++)
        for (uint32_t l = 0; l < wg && g * wg + l < grid; l++) {
            d.workgroup_id[0] = g;
            d.local_id[0] = l;
            d.flat_local_id = l;
            xtq_coll_cuda_task(&d, (void *)a);
        }
}

extern "C" int coll_task_supported(int op, int type)
{
    return xtq_cuda_reduce_supported(op, type);
}
