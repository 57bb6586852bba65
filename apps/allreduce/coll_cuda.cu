/*
 * CUDA teams (coll_cuda.h): libxtq_coll's task module for the CUDA agent
 * and the host calls around it.
 *
 * The module holds one task, xtq_coll_cuda_task (<xtq/coll_cuda.cuh>): one
 * work-item per element of a piece, with the reductions of that header; it writes the
 * result to device memory and, for the next step's put, to a pinned host
 * mirror (a push across PCIe: the GPU writes, nobody reads back). The
 * collective's control (which step runs when) stays in the CPU agent's
 * task; it dispatches this task into a local queue of the CUDA agent,
 * which the persistent processor runs with no launch, and waits for it
 * (the piece stays in the receive region until then).
 *
 * One module per agent at a time (xtq_cuda_attach): an application (or
 * mpi-ext) that attaches its own module compiles the task into it and
 * passes its address (xtq_coll_team_attr_t.cuda_task); this module is then
 * not attached (docs/allreduce.md, "Sharing the CUDA module").
 *
 * All copies and allocations go on this library's own non-blocking stream
 * and the stream-ordered allocator: the legacy default stream, and plain
 * cudaFree, would wait for the processor, which never ends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <cuda_runtime.h>

#include <xtq/coll_cuda.cuh>
#include <xtq/cuda_processor.cuh>

#include "coll_cuda.h"

XTQ_CUDA_TASK_EXPORT(xtq_coll_cuda_task);
XTQ_CUDA_MODULE(xtq_coll_tasks);

/* ---- host -------------------------------------------------------------------------- */

#define COLL_GPU_SLOTS 32

struct coll_gpu_slot {
    xtq_signal_t *sig;
    struct xtq_coll_cuda_args *args; /* pinned: the processor reads it */
    int next;                        /* free list */
};

struct coll_gpu {
    xtq_agent_t *agent;
    xtq_queue_t *queue;
    xtq_kernel_t *kernel;
    cudaStream_t stream;
    int attached;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int free_head;
    struct coll_gpu_slot slot[COLL_GPU_SLOTS];
};

extern "C" int coll_gpu_supported(int op, int type)
{
    return xtq_cuda_reduce_supported(op, type);
}

extern "C" void coll_gpu_close(struct coll_gpu *g)
{
    if (!g)
        return;
    for (int i = 0; i < COLL_GPU_SLOTS; i++) {
        if (g->slot[i].sig)
            xtq_cuda_signal_destroy(g->agent, g->slot[i].sig);
        if (g->slot[i].args)
            cudaFreeHost(g->slot[i].args);
    }
    if (g->kernel)
        xtq_kernel_destroy(g->kernel);
    if (g->queue)
        xtq_queue_destroy(g->queue);
    if (g->attached)
        xtq_cuda_module_detach(g->agent, xtq_coll_tasks);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g);
}

extern "C" int coll_gpu_open(xtq_ctx_t *ctx, uint64_t task, struct coll_gpu **out, char *why,
                             size_t len)
{
    struct coll_gpu *g = (struct coll_gpu *)calloc(1, sizeof(*g));
    uint64_t fn = task;
    int rc;

    if (!g)
        return -XTQ_ENOMEM;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    rc = xtq_agent_kind_status(ctx, XTQ_AGENT_CUDA, why, len);
    if (rc == 0)
        rc = xtq_agent_find(ctx, XTQ_AGENT_CUDA, &g->agent);
    if (rc)
        goto fail;
    if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess) {
        snprintf(why, len, "cudaStreamCreate: %s", cudaGetErrorString(cudaGetLastError()));
        rc = -XTQ_EIO;
        goto fail;
    }
    if (!fn) {
        rc = xtq_cuda_module_attach(g->agent, xtq_coll_tasks);
        if (rc) {
            snprintf(why, len,
                     rc == -XTQ_EBUSY
                         ? "another CUDA task module is attached (one per agent): compile "
                           "xtq_coll_cuda_task into it and pass its address as the team's "
                           "cuda_task (docs/allreduce.md)"
                         : "xtq_cuda_attach: %s",
                     xtq_strerror(rc));
            goto fail;
        }
        g->attached = 1;
        if (xtq_cuda_task_address(xtq_coll_cuda_task_xtq_task, &fn) != 0) {
            snprintf(why, len, "the task's address: %s", cudaGetErrorString(cudaGetLastError()));
            rc = -XTQ_EIO;
            goto fail;
        }
    }
    rc = xtq_kernel_create_cuda(g->agent, fn, sizeof(struct xtq_coll_cuda_args), &g->kernel);
    if (rc == 0)
        rc = xtq_queue_create(g->agent, 256, &g->queue);
    if (rc) {
        snprintf(why, len, "CUDA kernel or queue: %s", xtq_strerror(rc));
        goto fail;
    }
    g->free_head = 0;
    for (int i = 0; i < COLL_GPU_SLOTS; i++) {
        void *p = NULL;
        rc = xtq_cuda_signal_create(g->agent, 1, &g->slot[i].sig);
        if (rc == 0 && cudaHostAlloc(&p, sizeof(struct xtq_coll_cuda_args), cudaHostAllocMapped) !=
                           cudaSuccess)
            rc = -XTQ_ENOMEM;
        if (rc) {
            snprintf(why, len, "CUDA signals and arguments: %s", xtq_strerror(rc));
            goto fail;
        }
        g->slot[i].args = (struct xtq_coll_cuda_args *)p;
        g->slot[i].next = i + 1 < COLL_GPU_SLOTS ? i + 1 : -1;
    }
    *out = g;
    return 0;
fail:
    coll_gpu_close(g);
    return rc ? rc : -XTQ_ENOAGENT;
}

extern "C" void *coll_gpu_alloc(struct coll_gpu *g, size_t bytes)
{
    void *p = NULL;
    if (cudaMallocAsync(&p, bytes ? bytes : 1, g->stream) != cudaSuccess ||
        cudaStreamSynchronize(g->stream) != cudaSuccess)
        return NULL;
    return p;
}

extern "C" void coll_gpu_free(struct coll_gpu *g, void *p)
{
    if (p) {
        cudaFreeAsync(p, g->stream);
        cudaStreamSynchronize(g->stream);
    }
}

extern "C" void *coll_gpu_host_alloc(struct coll_gpu *g, size_t bytes)
{
    void *p = NULL;
    (void)g;
    return cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped) == cudaSuccess ? p : NULL;
}

extern "C" void coll_gpu_host_free(struct coll_gpu *g, void *p)
{
    (void)g;
    if (p)
        cudaFreeHost(p);
}

extern "C" int coll_gpu_register(struct coll_gpu *g, void *p, size_t bytes)
{
    return xtq_cuda_mem_register(g->agent, p, bytes);
}

extern "C" void coll_gpu_deregister(struct coll_gpu *g, void *p, size_t bytes)
{
    (void)xtq_cuda_mem_deregister(g->agent, p, bytes);
}

extern "C" int coll_gpu_copy(struct coll_gpu *g, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    if (cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g->stream) != cudaSuccess ||
        cudaStreamSynchronize(g->stream) != cudaSuccess) {
        fprintf(stderr, "xtq_coll: CUDA copy of %zu bytes: %s\n", bytes,
                cudaGetErrorString(cudaGetLastError()));
        return -XTQ_EIO;
    }
    return 0;
}

extern "C" int coll_gpu_apply(struct coll_gpu *g, const struct xtq_coll_cuda_args *a,
                              int64_t timeout_ns)
{
    struct coll_gpu_slot *s;
    xtq_aql_packet_t pkt;
    int idx, rc;

    if (a->count == 0)
        return 0;
    if (a->count > UINT32_MAX)
        return -XTQ_EMSGSIZE;
    pthread_mutex_lock(&g->lock);
    while (g->free_head < 0)
        pthread_cond_wait(&g->cond, &g->lock);
    idx = g->free_head;
    s = &g->slot[idx];
    g->free_head = s->next;
    pthread_mutex_unlock(&g->lock);

    *s->args = *a;
    xtq_signal_store(s->sig, 1);
    memset(&pkt, 0, sizeof(pkt));
    pkt.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                       XTQ_FENCE_SCOPE_SYSTEM);
    pkt.kernel.setup = 1;
    pkt.kernel.workgroup_size_x = XTQ_CUDA_MAX_WORKGROUP;
    pkt.kernel.workgroup_size_y = 1;
    pkt.kernel.workgroup_size_z = 1;
    pkt.kernel.grid_size_x = (uint32_t)a->count;
    pkt.kernel.grid_size_y = 1;
    pkt.kernel.grid_size_z = 1;
    pkt.kernel.kernel_object = xtq_kernel_object(g->kernel);
    pkt.kernel.kernarg_address = s->args;
    pkt.kernel.completion_signal = xtq_signal_handle(s->sig);
    rc = xtq_queue_submit(g->queue, &pkt, timeout_ns, NULL);
    if (rc == 0)
        rc = xtq_signal_wait(s->sig, XTQ_SIGNAL_EQ, 0, timeout_ns, NULL);

    pthread_mutex_lock(&g->lock);
    if (rc == 0) { /* else the packet may still run: the slot is not reused */
        s->next = g->free_head;
        g->free_head = idx;
    }
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->lock);
    return rc;
}
