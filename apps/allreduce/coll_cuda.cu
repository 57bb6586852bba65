/*
 * CUDA teams (coll_cuda.h): libxtq_coll's task module for the CUDA agent
 * and the host calls around it.
 *
 * The module holds one task, xtq_coll_cuda_task (<xtq/coll_cuda.cuh>): its
 * work-items stride over the elements of a piece, with the reductions of
 * that header; it writes the result to device memory and, for the next
 * step's put, to a pinned host mirror (a push across PCIe: the GPU writes,
 * nobody reads back). The
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
 * The processor is a kernel that runs as long as the agent has a queue, so
 * the device never idles: every CUDA call here must be one that does not
 * wait for an idle device. Copies go on this library's own non-blocking
 * stream; device memory comes from a pool of its own (stream-ordered, and
 * never trimmed, so a free unmaps nothing while the processor runs); and
 * pinned host memory is freed with the processor paused
 * (xtq_cuda_quiesce): cudaFreeHost waits for an idle device, and did so
 * for ever on the H100 (coll.gpu_team hung at its second size, whose
 * mirrors replace the first size's; docs/cuda.md, "Calls that wait for an
 * idle device").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#include <cuda.h> /* the driver API's types only: libcuda is not linked */
#include <cuda_runtime.h>

#include <xtq/coll_cuda.cuh>
#include <xtq/cuda_processor.cuh>

#include "coll_cuda.h"

XTQ_CUDA_TASK_EXPORT(xtq_coll_cuda_task);
XTQ_CUDA_MODULE(xtq_coll_tasks);

/* ---- host -------------------------------------------------------------------------- */

#define COLL_GPU_SLOTS 32
/* Elements per work-item at least before a dispatch takes another
 * work-group (xtq_cuda_stride_groups): a group's claim and start cost
 * about what a work-item's few extra rounds of loads do. */
#define COLL_GPU_PER_ITEM 8

/* cuMemGetAddressRange (its size_t form, _v2), which the runtime finds in
 * the driver it loaded: the extent of a peer's allocation mapped here. */
typedef CUresult(CUDAAPI *mem_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);

struct coll_gpu_slot {
    xtq_signal_t *sig;
    struct xtq_coll_cuda_args *args; /* pinned: the processor reads it */
    int next;                        /* free list */
};

struct coll_gpu {
    struct coll_gpu_opts opts;
    xtq_agent_t *agent;
    int dev; /* the agent's device: current in every thread that calls CUDA here */
    xtq_queue_t *queue;
    xtq_kernel_t *kernel;
    cudaStream_t stream;
    cudaMemPool_t pool;  /* device memory, never trimmed */
    uint32_t groups_max; /* work-groups that run at once: the processor's blocks */
    uint32_t grid_max;   /* a launched grid's groups: 8 per SM (0: none) */
    int attached;
    int host_atomics; /* the GPU decrements completion signals itself */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int free_head;
    struct coll_gpu_slot slot[COLL_GPU_SLOTS];
    /* Pinned, per slot: a waiting task's error (xtq_coll_cuda_args.fail),
     * which a local packet's completion does not carry; after them a 1,
     * what coll_gpu_cancel_waits copies to the device word `dcancel` that
     * every wait reads (xtq_coll_cuda_args.cancel). Device memory: a few
     * waits' threads read host memory at once slowed the stream's copies
     * from pinned memory (2-4 MiB calls took 1.4-4.2 ms against 0.1-0.2
     * on four H100s), and the copy engine writes it even while a waiting
     * grid holds every SM. */
    int32_t *fail;
    uint32_t *cancel, *dcancel;
    cudaStream_t cstream; /* the copy to dcancel */
    int cancelled;        /* for good: coll_gpu_cancel_waits */
    mem_range_fn mem_range; /* NULL: peers' memory is not mapped here */
};

/* The team's device current for the calls of a scope, the caller's put
 * back after it (agent workers and application threads both call here). */
struct on_device {
    int prev;
    int dev;
    explicit on_device(int d) : prev(-1), dev(d)
    {
        if (cudaGetDevice(&prev) != cudaSuccess) {
            cudaGetLastError();
            prev = -1;
        }
        if (prev != dev)
            cudaSetDevice(dev);
    }
    ~on_device()
    {
        if (prev >= 0 && prev != dev)
            cudaSetDevice(prev);
    }
};

extern "C" int coll_gpu_supported(int op, int type)
{
    return xtq_cuda_reduce_supported(op, type);
}

/* Calls that wait for an idle device, run with the processor paused. */
static void free_args(void *arg)
{
    struct coll_gpu *g = (struct coll_gpu *)arg;
    for (int i = 0; i < COLL_GPU_SLOTS; i++)
        if (g->slot[i].args) {
            cudaFreeHost(g->slot[i].args);
            g->slot[i].args = NULL;
        }
    if (g->fail) {
        cudaFreeHost(g->fail);
        g->fail = NULL;
        g->cancel = NULL;
    }
}

static void free_host(void *p)
{
    cudaFreeHost(p);
}

static void destroy_pool(void *arg)
{
    struct coll_gpu *g = (struct coll_gpu *)arg;
    cudaMemPoolDestroy(g->pool);
    g->pool = NULL;
}

struct quiesce_call {
    void (*fn)(void *);
    void *arg;
    int ran;
};

static void quiesce_run(void *arg)
{
    struct quiesce_call *c = (struct quiesce_call *)arg;
    c->fn(c->arg);
    c->ran = 1;
}

/* Run `fn` where the device can idle: with the processor paused. Without
 * an agent (open failed before) no processor of ours runs. */
static void quiesced(struct coll_gpu *g, void (*fn)(void *), void *arg)
{
    struct quiesce_call c = {fn, arg, 0};
    int rc = g->agent ? xtq_cuda_quiesce(g->agent, quiesce_run, &c) : -XTQ_EINVAL;
    if (rc && !c.ran) {
        /* Not paused: the call would wait for ever; leak instead. */
        if (g->agent) {
            fprintf(stderr,
                    "xtq_coll: cannot pause the CUDA processor (%s): pinned or device "
                    "memory not freed\n",
                    xtq_strerror(rc));
            return;
        }
        fn(arg);
    }
}

extern "C" void coll_gpu_close(struct coll_gpu *g)
{
    if (!g)
        return;
    for (int i = 0; i < COLL_GPU_SLOTS; i++)
        if (g->slot[i].sig)
            xtq_cuda_signal_destroy(g->agent, g->slot[i].sig);
    if (g->cstream) {
        cudaStreamSynchronize(g->cstream);
        cudaStreamDestroy(g->cstream);
    }
    if (g->dcancel)
        coll_gpu_free(g, g->dcancel);
    quiesced(g, free_args, g);
    if (g->kernel)
        xtq_kernel_destroy(g->kernel);
    if (g->queue)
        xtq_queue_destroy(g->queue);
    if (g->attached)
        xtq_cuda_module_detach(g->agent, xtq_coll_tasks);
    if (g->pool)
        quiesced(g, destroy_pool, g);
    if (g->stream)
        cudaStreamDestroy(g->stream);
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->cond);
    free(g);
}

/* The driver's cuMemGetAddressRange, or NULL (then no peer's memory is
 * mapped here: its size could not be checked). */
static mem_range_fn mem_range_lookup(void)
{
    void *fn = NULL;
    cudaError_t e;
#if CUDART_VERSION >= 12000
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    /* 3020: the CUDA version whose form takes size_t sizes (the _v2). */
    e = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020, cudaEnableDefault,
                                         &found);
#else
    e = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault, &found);
#endif
    if (found != cudaDriverEntryPointSuccess)
        fn = NULL;
#else
    e = cudaGetDriverEntryPoint("cuMemGetAddressRange", &fn, cudaEnableDefault);
#endif
    if (e != cudaSuccess || !fn) {
        cudaGetLastError();
        return NULL;
    }
    return (mem_range_fn)fn;
}

static int open_on_device(xtq_ctx_t *ctx, uint64_t task, int dev, const struct coll_gpu_opts *o,
                          struct coll_gpu **out, char *why, size_t len)
{
    struct coll_gpu *g = (struct coll_gpu *)calloc(1, sizeof(*g));
    uint64_t fn = task;
    int rc;

    if (!g)
        return -XTQ_ENOMEM;
    g->opts = *o;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    rc = xtq_agent_kind_status(ctx, XTQ_AGENT_CUDA, why, len);
    if (rc)
        goto fail;
    g->dev = dev;
    rc = xtq_agent_find_device(ctx, XTQ_AGENT_CUDA, (uint32_t)dev, &g->agent);
    if (rc) {
        snprintf(why, len, "no CUDA agent for device %d", dev);
        goto fail;
    }
    if (cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking) != cudaSuccess) {
        snprintf(why, len, "cudaStreamCreate: %s", cudaGetErrorString(cudaGetLastError()));
        rc = -XTQ_EIO;
        goto fail;
    }
    g->mem_range = mem_range_lookup();
    {
        /* A pool of its own that keeps what it mapped (release threshold:
         * everything): the default pool trims at every synchronisation,
         * and unmapping device memory under a running processor is not
         * a call to make (see the top of this file). */
        cudaMemPoolProps props;
        uint64_t keep = UINT64_MAX;
        memset(&props, 0, sizeof(props));
        props.allocType = cudaMemAllocationTypePinned;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        if (cudaMemPoolCreate(&g->pool, &props) != cudaSuccess ||
            cudaMemPoolSetAttribute(g->pool, cudaMemPoolAttrReleaseThreshold, &keep) !=
                cudaSuccess) {
            snprintf(why, len, "cudaMemPoolCreate: %s", cudaGetErrorString(cudaGetLastError()));
            rc = -XTQ_EIO;
            goto fail;
        }
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
    {
        int native = 0;
        if (cudaDeviceGetAttribute(&native, cudaDevAttrHostNativeAtomicSupported, dev) !=
            cudaSuccess) {
            cudaGetLastError();
            native = 1; /* unknown: never chain */
        }
        g->host_atomics = native != 0;
        int sms = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
            cudaGetLastError();
            sms = 0;
        }
        /* Only this library's module is known to be built with -rdc (a
         * caller's module, given as `task`, may not launch grids: its
         * processor would run every group in its own blocks in turn). */
        g->grid_max = sms > 0 && !task ? 8u * (uint32_t)sms : 0;
    }
    rc = xtq_kernel_create_cuda(g->agent, fn, sizeof(struct xtq_coll_cuda_args), &g->kernel);
    if (rc == 0)
        rc = xtq_queue_create(g->agent, 256, &g->queue);
    if (rc == 0) {
        /* The processor's blocks: a dispatch's work-groups beyond them
         * run one after another (docs/cuda.md, "Grid-stride tasks"). */
        xtq_agent_info_t info;
        memset(&info, 0, sizeof(info));
        g->groups_max = xtq_agent_get_info(g->agent, &info) == 0 && info.workers ? info.workers : 1;
    }
    if (rc) {
        snprintf(why, len, "CUDA kernel or queue: %s", xtq_strerror(rc));
        goto fail;
    }
    g->free_head = 0;
    {
        void *p = NULL;
        if (cudaHostAlloc(&p, (COLL_GPU_SLOTS + 1) * sizeof(int32_t),
                          cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
            cudaGetLastError();
            snprintf(why, len, "CUDA task status words: out of pinned memory");
            rc = -XTQ_ENOMEM;
            goto fail;
        }
        g->fail = (int32_t *)p;
        memset(g->fail, 0, (COLL_GPU_SLOTS + 1) * sizeof(int32_t));
        g->cancel = (uint32_t *)(g->fail + COLL_GPU_SLOTS);
        *g->cancel = 1;
        g->dcancel = (uint32_t *)coll_gpu_alloc(g, sizeof(uint32_t));
        if (!g->dcancel ||
            cudaMemsetAsync(g->dcancel, 0, sizeof(uint32_t), g->stream) != cudaSuccess ||
            cudaStreamSynchronize(g->stream) != cudaSuccess ||
            cudaStreamCreateWithFlags(&g->cstream, cudaStreamNonBlocking) != cudaSuccess) {
            cudaGetLastError();
            snprintf(why, len, "CUDA cancel word: out of device memory or streams");
            rc = -XTQ_ENOMEM;
            goto fail;
        }
    }
    for (int i = 0; i < COLL_GPU_SLOTS; i++) {
        void *p = NULL;
        rc = xtq_cuda_signal_create(g->agent, 1, &g->slot[i].sig);
        if (rc == 0 && cudaHostAlloc(&p, sizeof(struct xtq_coll_cuda_args),
                                                      cudaHostAllocMapped | cudaHostAllocPortable) !=
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

/* The agent of the team's device (one GPU per rank on a host of several):
 * its memory lives there. Agent workers and the caller's thread both call
 * CUDA here, so each call makes that device current for itself. */
extern "C" int coll_gpu_open(xtq_ctx_t *ctx, uint64_t task, int dev, const struct coll_gpu_opts *o,
                             struct coll_gpu **out, char *why, size_t len)
{
    if (dev < 0 && cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        dev = 0;
    }
    on_device d(dev);
    return open_on_device(ctx, task, dev, o, out, why, len);
}

extern "C" void *coll_gpu_alloc(struct coll_gpu *g, size_t bytes)
{
    void *p = NULL;
    on_device d(g->dev);
    if (cudaMallocFromPoolAsync(&p, bytes ? bytes : 1, g->pool, g->stream) != cudaSuccess ||
        cudaStreamSynchronize(g->stream) != cudaSuccess)
        return NULL;
    return p;
}

extern "C" void coll_gpu_free(struct coll_gpu *g, void *p)
{
    if (p) {
        on_device d(g->dev);
        cudaFreeAsync(p, g->stream);
        cudaStreamSynchronize(g->stream);
    }
}

extern "C" void *coll_gpu_host_alloc(struct coll_gpu *g, size_t bytes)
{
    void *p = NULL;
    on_device d(g->dev);
    return cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable) ==
                   cudaSuccess
               ? p
               : NULL;
}

extern "C" void coll_gpu_host_free(struct coll_gpu *g, void *p)
{
    if (p)
        quiesced(g, free_host, p);
}

/* ---- peer reads (CUDA IPC): device memory other ranks map and read ---- */

struct ipc_call {
    struct coll_gpu *g;
    size_t bytes; /* to allocate; to find mapped (open) */
    void *ptr;
    const void *handle;
    int rc;
    size_t mapped; /* open: the bytes the mapping holds from ptr on */
};

static void ipc_alloc_run(void *arg)
{
    struct ipc_call *c = (struct ipc_call *)arg;
    on_device d(c->g->dev);
    if (cudaMalloc(&c->ptr, c->bytes ? c->bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        c->ptr = NULL;
        c->rc = -XTQ_ENOMEM;
    }
}

static void ipc_free_run(void *arg)
{
    struct ipc_call *c = (struct ipc_call *)arg;
    on_device d(c->g->dev);
    cudaFree(c->ptr);
}

static void ipc_open_run(void *arg)
{
    struct ipc_call *c = (struct ipc_call *)arg;
    cudaIpcMemHandle_t h;
    CUdeviceptr base = 0, at;
    size_t size = 0;
    on_device d(c->g->dev);
    if (!c->g->mem_range) {
        c->rc = -XTQ_ENOSYS;
        return;
    }
    memcpy(&h, c->handle, sizeof(h));
    if (cudaIpcOpenMemHandle(&c->ptr, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
        cudaGetLastError();
        c->ptr = NULL;
        c->rc = -XTQ_ENOSYS;
        return;
    }
    /* The peer says how large its buffer is; the mapping says how large it
     * is: a smaller one (a bug, mismatched counts, a forged handle) would
     * have this GPU's tasks read and write past it. */
    at = (CUdeviceptr)(uintptr_t)c->ptr;
    if (c->g->mem_range(&base, &size, at) != CUDA_SUCCESS) {
        c->rc = -XTQ_EIO;
    } else {
        c->mapped = at >= base && at - base <= size ? size - (size_t)(at - base) : 0;
        if (c->mapped < c->bytes)
            c->rc = -XTQ_ERANGE;
    }
    if (c->rc) {
        cudaIpcCloseMemHandle(c->ptr);
        cudaGetLastError();
        c->ptr = NULL;
    }
}

static void ipc_close_run(void *arg)
{
    struct ipc_call *c = (struct ipc_call *)arg;
    on_device d(c->g->dev);
    cudaIpcCloseMemHandle(c->ptr);
}

/* Every call here runs with the processor paused (xtq_cuda_quiesce):
 * mapping and unmapping device memory are not calls to make under a
 * running persistent kernel (the top of this file). */
static int ipc_quiesced(struct coll_gpu *g, void (*fn)(void *), struct ipc_call *c)
{
    struct quiesce_call q = {fn, c, 0};
    int rc = xtq_cuda_quiesce(g->agent, quiesce_run, &q);
    return q.ran ? 0 : rc ? rc : -XTQ_EIO;
}

extern "C" int coll_gpu_ipc_alloc(struct coll_gpu *g, size_t bytes, void **ptr, void *handle)
{
    struct ipc_call c = {g, bytes, NULL, NULL, 0, 0};
    int rc = ipc_quiesced(g, ipc_alloc_run, &c);
    if (rc || c.rc)
        return rc ? rc : c.rc;
    on_device d(g->dev);
    cudaIpcMemHandle_t h;
    if (cudaIpcGetMemHandle(&h, c.ptr) != cudaSuccess) {
        cudaGetLastError();
        (void)ipc_quiesced(g, ipc_free_run, &c);
        return -XTQ_ENOSYS;
    }
    memcpy(handle, &h, sizeof(h));
    *ptr = c.ptr;
    return 0;
}

extern "C" void coll_gpu_ipc_free(struct coll_gpu *g, void *ptr)
{
    struct ipc_call c = {g, 0, ptr, NULL, 0, 0};
    if (ptr && ipc_quiesced(g, ipc_free_run, &c) != 0)
        fprintf(stderr, "xtq_coll: cannot pause the CUDA processor: device memory not freed\n");
}

extern "C" int coll_gpu_ipc_open(struct coll_gpu *g, const void *handle, uint64_t bytes, void **ptr,
                                 uint64_t *mapped)
{
    struct ipc_call c = {g, (size_t)bytes, NULL, handle, 0, 0};
    if ((size_t)bytes != bytes)
        return -XTQ_ERANGE;
    int rc = ipc_quiesced(g, ipc_open_run, &c);
    if (mapped)
        *mapped = c.mapped;
    if (rc || c.rc)
        return rc ? rc : c.rc;
    *ptr = c.ptr;
    return 0;
}

extern "C" void coll_gpu_ipc_close(struct coll_gpu *g, void *ptr)
{
    struct ipc_call c = {g, 0, ptr, NULL, 0, 0};
    if (ptr && ipc_quiesced(g, ipc_close_run, &c) != 0)
        fprintf(stderr, "xtq_coll: cannot pause the CUDA processor: a peer's memory not unmapped\n");
}

extern "C" int coll_gpu_register(struct coll_gpu *g, void *p, size_t bytes)
{
    return xtq_cuda_mem_register(g->agent, p, bytes);
}

extern "C" void coll_gpu_deregister(struct coll_gpu *g, void *p, size_t bytes)
{
    (void)xtq_cuda_mem_deregister(g->agent, p, bytes);
}

extern "C" int coll_gpu_copy(struct coll_gpu *g, void *dst, const void *src, size_t bytes,
                             int wait)
{
    on_device d(g->dev);
    if ((bytes && cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, g->stream) != cudaSuccess) ||
        (wait && cudaStreamSynchronize(g->stream) != cudaSuccess)) {
        fprintf(stderr, "xtq_coll: CUDA copy of %zu bytes: %s\n", bytes,
                cudaGetErrorString(cudaGetLastError()));
        return -XTQ_EIO;
    }
    return 0;
}

/* A free slot, waited for while every slot is out. */
static int slot_take(struct coll_gpu *g)
{
    pthread_mutex_lock(&g->lock);
    while (g->free_head < 0)
        pthread_cond_wait(&g->cond, &g->lock);
    int idx = g->free_head;
    g->free_head = g->slot[idx].next;
    pthread_mutex_unlock(&g->lock);
    return idx;
}

/* Back to the free list, unless its packet may still run (`keep`). */
static void slot_give(struct coll_gpu *g, int idx, int keep)
{
    pthread_mutex_lock(&g->lock);
    if (!keep) {
        g->slot[idx].next = g->free_head;
        g->free_head = idx;
    }
    pthread_cond_signal(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

/* The packet of one task: arguments at `args` (pinned), completion `sig`;
 * submitted with the arguments (and a payload of `payload` bytes) in the
 * queue slot where the team does so. */
static int submit(struct coll_gpu *g, const struct xtq_coll_cuda_args *a,
                  struct xtq_coll_cuda_args *args, xtq_signal_t *sig, uint64_t payload,
                  int64_t timeout_ns)
{
    xtq_aql_packet_t pkt;

    *args = *a;
    memset(&pkt, 0, sizeof(pkt));
    /* Packets run in queue order (cuda_processor.cuh): a copy started
     * after another reads what the first wrote. */
    pkt.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                       XTQ_FENCE_SCOPE_SYSTEM);
    pkt.kernel.setup = 1;
    /* At most one work-group per processor block, each work-item striding
     * over the piece with several loads in flight: one group per 256
     * elements ran the groups of a 1 MiB piece one after another in two
     * blocks, each a round trip to the piece (20 ms per aggregation of
     * xtq_train on the H100; docs/cuda.md, "Grid-stride tasks"). */
    uint32_t grid = 1, wg = 1, cap = g->groups_max;
    /* A piece of enough groups to reach XTQ_CUDA_GRID_MIN goes to a grid
     * the processor launches over the whole GPU (this module is built
     * with -rdc): every SM reads the piece where it landed at once,
     * rather than the processor's few blocks in turn. */
    if (g->opts.grid_min && g->grid_max > cap &&
        xtq_cuda_stride_groups(a->count, XTQ_CUDA_MAX_WORKGROUP, COLL_GPU_PER_ITEM, g->grid_max) >=
            g->opts.grid_min)
        cap = g->grid_max;
    xtq_cuda_stride_geometry(a->count, XTQ_CUDA_MAX_WORKGROUP, COLL_GPU_PER_ITEM, cap, &grid, &wg);
    pkt.kernel.workgroup_size_x = (uint16_t)wg;
    pkt.kernel.workgroup_size_y = 1;
    pkt.kernel.workgroup_size_z = 1;
    pkt.kernel.grid_size_x = grid;
    pkt.kernel.grid_size_y = 1;
    pkt.kernel.grid_size_z = 1;
    pkt.kernel.kernel_object = xtq_kernel_object(g->kernel);
    pkt.kernel.kernarg_address = args;
    pkt.kernel.completion_signal = xtq_signal_handle(sig);
    /* The arguments (and a small piece from host memory) travel in the
     * queue slot: the processor reads the task in one PCIe round trip
     * instead of the header, the body and the arguments one after
     * another (docs/allreduce.md, "What a GPU step costs"). */
    if (g->opts.inline_args)
        return xtq_queue_submit_args(g->queue, &pkt, sizeof(*a), payload, timeout_ns);
    return xtq_queue_submit(g->queue, &pkt, timeout_ns, NULL);
}

extern "C" int coll_gpu_start(struct coll_gpu *g, const struct xtq_coll_cuda_args *a,
                              uint64_t payload, int64_t timeout_ns)
{
    struct coll_gpu_slot *s;
    int idx, rc;

    if (a->count > UINT32_MAX)
        return -XTQ_EMSGSIZE;
    /* Waits are over for good once cancelled: on the GPU, a wait whose
     * word already holds its value would not look at the cancel word. */
    if (a->ready && __atomic_load_n(&g->cancelled, __ATOMIC_ACQUIRE))
        return -XTQ_ECANCELED;
    idx = slot_take(g);
    s = &g->slot[idx];
    xtq_signal_store(s->sig, 1);
    struct xtq_coll_cuda_args with = *a;
    if (a->ready) {
        /* A task that waits: its failure comes back through g->fail. */
        __atomic_store_n(&g->fail[idx], 0, __ATOMIC_RELAXED);
        with.fail = (uint64_t)(uintptr_t)&g->fail[idx];
        with.cancel = (uint64_t)(uintptr_t)g->dcancel;
    }
    rc = submit(g, &with, s->args, s->sig, payload, timeout_ns);
    if (rc) {
        slot_give(g, idx, 0);
        return rc;
    }
    return idx;
}

/* Never undone (coll_cuda.h): the word stays 1, and so does `cancelled`. */
extern "C" void coll_gpu_cancel_waits(struct coll_gpu *g)
{
    if (!g || __atomic_exchange_n(&g->cancelled, 1, __ATOMIC_ACQ_REL) || !g->dcancel)
        return;
    on_device d(g->dev);
    /* Not waited for: the copy engine lands it; waits read it within 64
     * polls after. */
    if (cudaMemcpyAsync(g->dcancel, g->cancel, sizeof(uint32_t), cudaMemcpyHostToDevice,
                        g->cstream) != cudaSuccess) {
        cudaGetLastError();
        fprintf(stderr, "xtq_coll: cannot end the GPU's waits: they run to their bound\n");
    }
}

extern "C" int coll_gpu_can_chain(const struct coll_gpu *g)
{
    return g->opts.chain && g->opts.inline_args && !g->host_atomics;
}

extern "C" int coll_gpu_start_signal(struct coll_gpu *g, const struct xtq_coll_cuda_args *a,
                                     struct xtq_coll_cuda_args *args, xtq_signal_t *sig,
                                     int64_t timeout_ns)
{
    if (!coll_gpu_can_chain(g))
        return -XTQ_ENOSYS;
    if (a->count > UINT32_MAX)
        return -XTQ_EMSGSIZE;
    return submit(g, a, args, sig, 0, timeout_ns);
}

extern "C" int coll_gpu_fence(struct coll_gpu *g, int64_t timeout_ns)
{
    struct xtq_coll_cuda_args a;
    memset(&a, 0, sizeof(a));
    a.mode = XTQ_COLL_CUDA_COPY; /* of nothing: done once the ones before it are */
    a.esize = 1;
    int ticket = coll_gpu_start(g, &a, 0, timeout_ns);
    return ticket < 0 ? ticket : coll_gpu_finish(g, ticket, timeout_ns);
}

extern "C" int coll_gpu_finish(struct coll_gpu *g, int ticket, int64_t timeout_ns)
{
    int rc = xtq_signal_wait(g->slot[ticket].sig, XTQ_SIGNAL_EQ, 0, timeout_ns, NULL);
    if (rc == -XTQ_ETIMEDOUT) {
        /* A task that never finishes: say whether the device is gone. */
        on_device d(g->dev);
        cudaError_t e = cudaStreamQuery(g->stream);
        if (e != cudaSuccess && e != cudaErrorNotReady)
            fprintf(stderr, "xtq_coll: CUDA task not done, and the device reports: %s\n",
                    cudaGetErrorString(e));
    }
    /* On a timeout the packet may still run: its slot is not reused. */
    const int keep = rc != 0;
    if (rc == 0) /* it ran: a wait in it may have failed */
        rc = __atomic_exchange_n(&g->fail[ticket], 0, __ATOMIC_ACQUIRE);
    slot_give(g, ticket, keep);
    return rc;
}

extern "C" int coll_gpu_apply(struct coll_gpu *g, const struct xtq_coll_cuda_args *a,
                              uint64_t payload, int64_t timeout_ns)
{
    if (a->count == 0)
        return 0;
    int ticket = coll_gpu_start(g, a, payload, timeout_ns);
    return ticket < 0 ? ticket : coll_gpu_finish(g, ticket, timeout_ns);
}

extern "C" int coll_gpu_wait_ready(struct coll_gpu *g, const void *word, uint64_t val,
                                   int64_t wait_ns, int64_t timeout_ns)
{
    struct xtq_coll_cuda_args a;
    memset(&a, 0, sizeof(a));
    a.mode = XTQ_COLL_CUDA_WAIT;
    a.count = 1;
    a.esize = 1;
    a.ready = (uint64_t)(uintptr_t)word;
    a.ready_val = val;
    a.ready_ns = (uint64_t)wait_ns;
    int ticket = coll_gpu_start(g, &a, 0, timeout_ns);
    return ticket < 0 ? ticket : coll_gpu_finish(g, ticket, timeout_ns);
}

extern "C" size_t coll_gpu_copy_max(const struct coll_gpu *g)
{
    return g->opts.copy_max;
}
