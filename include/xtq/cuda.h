/*
 * GPU tasks on the CUDA agent (NVIDIA GPUs).
 *
 * The CUDA agent consumes AQL packets with a persistent command-processor
 * kernel: no host thread sits between the doorbell and the task starting.
 * A task is a __device__ function of one fixed signature, which the
 * processor calls once per work-item of each work-group. A device function
 * can only be called from its own CUDA module, so the processor is
 * compiled into the module that holds the tasks (<xtq/cuda_processor.cuh>)
 * and attached to the agent:
 *
 *     #include <xtq/cuda_processor.cuh>
 *
 *     __device__ void scale(const xtq_cuda_dispatch_t *d, void *kernarg)
 *     {
 *         struct args { float *out; const float *payload; float factor; } *a = kernarg;
 *         uint32_t i = d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
 *         if (i < d->grid_size[0]) a->out[i] = a->payload[i] * a->factor;
 *     }
 *     XTQ_CUDA_TASK_EXPORT(scale);  // a __device__ pointer variable scale_xtq_task
 *     XTQ_CUDA_MODULE(my_tasks);    // this module's processor
 *
 *     // host, in the same .cu file (its CUDA runtime owns the symbols):
 *     xtq_cuda_module_attach(agent, my_tasks);
 *     uint64_t fn;
 *     xtq_cuda_task_address(scale_xtq_task, &fn);
 *     xtq_kernel_create_cuda(agent, fn, sizeof(struct args), &kernel);
 *
 * Set CUDA_MODULE_LOADING=EAGER (the agent sets it when it is unset and
 * makes the process's first CUDA call), and create device memory and load
 * modules before packets flow: a lazy module load, and some frees, wait
 * for the device to idle, which it never does while a processor runs.
 * Make those calls (cudaFree, cudaFreeHost, cudaHostUnregister,
 * cudaDeviceSynchronize) inside xtq_cuda_quiesce(), or set
 * XTQ_CUDA_IDLE_EXIT_US: the processor then exits after that many
 * microseconds without a packet (after 4096 empty polls), so such calls
 * in an unmodified application return, and the next packet launches it
 * again (a kernel launch on that packet's path). Default 0 (never exit):
 * not yet run on a GPU (docs/cuda.md, "A processor that exits when idle").
 *
 * This header is plain C and needs no CUDA header; the helpers marked
 * "CUDA only" appear when compiled by nvcc.
 */
#ifndef XTQ_CUDA_H
#define XTQ_CUDA_H

#include <xtq/common.h>
#include <xtq/aql.h>

XTQ_EXTERN_C_BEGIN

/** What a task sees for one work-item. */
typedef struct xtq_cuda_dispatch {
    const xtq_kernel_dispatch_packet_t *packet; /**< device copy of the packet */
    uint32_t dimensions;                        /**< 1..3 */
    uint32_t grid_size[3];                      /**< work-items per dimension */
    uint32_t workgroup_size[3];                 /**< work-items per group per dimension */
    uint32_t workgroup_id[3];                   /**< this group's coordinates */
    uint32_t workgroup_count[3];                /**< groups per dimension */
    uint32_t local_id[3];                       /**< this work-item in its group */
    uint32_t flat_local_id;                     /**< 0 .. work-items per group - 1 */
    /**
     * The dispatch's status word, shared by all its work-items: 0 until a
     * task fails the dispatch with xtq_cuda_task_fail(); the first failure
     * is the packet's completion status, which reaches the initiator of
     * an XTQ put (its completion) and the producer's retire callback.
     */
    int32_t *status;
    /**
     * A fetching put's reply buffer (xtq_put_param_t.result), zero-filled,
     * shared by all work-groups: what it holds when the task finishes is
     * sent back to the initiator. NULL for other dispatches. Device-
     * visible host memory: write it with plain stores; the completion is
     * ordered after them.
     */
    void *result;
    uint32_t result_len; /**< bytes at `result` (0 when it is NULL) */
    /**
     * Bytes of the payload at argument 1, as the initiator sent them (an
     * XTQ put's payload_len), wherever the agent placed it (inline copy,
     * in place, or staged). 0 for a put without payload, and for a packet
     * whose producer gives no length (a plain AQL packet written with
     * xtq_queue_submit: argument 1 is then whatever it wrote).
     */
    uint64_t payload_len;
} xtq_cuda_dispatch_t;

/**
 * A GPU task. `kernarg` points to the processor's copy of the packet's
 * kernel arguments (kernarg_size bytes, at most XTQ_CUDA_MAX_KERNARG, in
 * shared or device memory). After an XTQ rewrite, argument 0 is the
 * registered target buffer and argument 1 the payload, wherever the agent
 * placed it: a small payload arrives with the packet and argument 1 points
 * at a copy in the processor's shared (one work-group) or device memory;
 * a larger one is read in place (pinned host memory registered with the
 * agent) or, from XTQ_CUDA_COPY_MIN bytes, copied into device memory
 * first. Read it through argument 1, never through an address sent
 * separately. Tasks run inside the agent's persistent thread blocks, or
 * for dispatches of XTQ_CUDA_GRID_MIN work-groups and more (task modules
 * built with -rdc) on a grid the processor launches: either way they may
 * not use __syncthreads(), shared memory of their own, or grid-wide
 * synchronisation.
 */
typedef void (*xtq_cuda_task_fn)(const xtq_cuda_dispatch_t *dispatch, void *kernarg);

/** Largest kernel-argument block a CUDA task accepts (bytes). */
#define XTQ_CUDA_MAX_KERNARG 4096u
/** Largest work-group (work-items) a CUDA task accepts. */
#define XTQ_CUDA_MAX_WORKGROUP 256u

/**
 * Launches a task module's processor: `blocks` x XTQ_CUDA_MAX_WORKGROUP
 * threads on `stream` (a cudaStream_t), with the agent's `state` and the
 * module's `tag`. XTQ_CUDA_MODULE(name) defines one as name_xtq_launch.
 * Returns a cudaError_t (0 on success).
 */
typedef int (*xtq_cuda_launch_fn)(void *state, uint32_t tag, unsigned blocks, void *stream);

/**
 * Attach a task module: its processor replaces the one serving the
 * agent's queues (libxtq's own, which runs barrier packets only), so the
 * module's tasks can run. Packets already queued are kept; a dispatch in
 * flight finishes first. Attaching the attached module again counts a
 * reference. Not while packets are being submitted from other threads.
 * @param launch the module's launcher (XTQ_CUDA_MODULE); usually through
 *        xtq_cuda_module_attach().
 * @param name the module's name, for messages.
 * @return 0, -XTQ_EINVAL, -XTQ_EAGENTKIND, -XTQ_EBUSY (another module is
 *         attached: one at a time), -XTQ_ENOSPC (64 modules over the agent's
 *         life), -XTQ_EVERSION (the module was built against other libxtq
 *         headers), -XTQ_EIO (a CUDA error; logged).
 */
XTQ_API int xtq_cuda_attach(xtq_agent_t *agent, xtq_cuda_launch_fn launch, const char *name);

/**
 * Drop a reference to the attached module; the last one puts libxtq's own
 * processor back. Kernel objects of the module stay valid to destroy, and
 * their packets complete with -XTQ_ENOKERNEL until it is attached again.
 * @return 0, -XTQ_EINVAL (not the attached module), -XTQ_EAGENTKIND, -XTQ_EIO.
 */
XTQ_API int xtq_cuda_detach(xtq_agent_t *agent, xtq_cuda_launch_fn launch);

/**
 * Create a kernel object for a CUDA agent from a task's device address.
 * The task must belong to the attached module (xtq_cuda_attach()).
 * @param device_fn the task's address in device memory, as read with
 *        xtq_cuda_task_address() (or cudaMemcpyFromSymbol of a __device__
 *        variable initialised with the task).
 * @param kernarg_size exact size of the kernel arguments (<= XTQ_CUDA_MAX_KERNARG).
 * @return 0, -XTQ_EINVAL (also: no module attached), -XTQ_EAGENTKIND (not a
 *         CUDA agent), -XTQ_ENOSPC (kernel table full), -XTQ_ENOMEM.
 */
XTQ_API int xtq_kernel_create_cuda(xtq_agent_t *agent, uint64_t device_fn, uint32_t kernarg_size,
                                   xtq_kernel_t **kernel);

/**
 * Create a signal a CUDA agent may decrement (pinned, mapped host memory).
 * Signals named in packets for a CUDA agent must come from here; host
 * waiters nap briefly instead of sleeping on a futex the GPU cannot wake.
 * @return 0, -XTQ_EAGENTKIND, -XTQ_ENOMEM (pool exhausted).
 */
XTQ_API int xtq_cuda_signal_create(xtq_agent_t *agent, int64_t initial_value,
                                   xtq_signal_t **signal);

/** Give a signal from xtq_cuda_signal_create() back to its agent. */
XTQ_API int xtq_cuda_signal_destroy(xtq_agent_t *agent, xtq_signal_t *signal);

/**
 * Make host memory readable in place by the agent's GPU (cudaHostRegister,
 * mapped): receive regions, payload buffers, target buffers in host memory.
 * Equivalent to what the engine does for its own receive regions.
 */
XTQ_API int xtq_cuda_mem_register(xtq_agent_t *agent, void *addr, size_t len);
XTQ_API int xtq_cuda_mem_deregister(xtq_agent_t *agent, void *addr, size_t len);

/**
 * Run `fn(arg)` with the agent's packet processor stopped, so that the
 * device can idle. The processor is a kernel that runs for as long as the
 * agent has a queue, so a CUDA call that waits for an idle device never
 * returns while it runs: cudaFree of cudaMalloc memory, cudaFreeHost,
 * cudaHostUnregister, cudaDeviceSynchronize (any runtime in the process,
 * the application's too). Make such calls inside `fn`. Packets wait
 * meanwhile (none is lost); a dispatch in flight finishes first; the
 * same processor starts again before this returns. `fn` must not call
 * libxtq's CUDA functions (the agent is locked) nor wait for a packet.
 * A processor that has exited idle (XTQ_CUDA_IDLE_EXIT_US) is left as it
 * is: the device idles already, and the next packet relaunches it.
 * @return 0 (fn ran), -XTQ_EINVAL, -XTQ_EAGENTKIND, -XTQ_EIO (the
 *         processor did not stop: fn did not run; or did not restart).
 */
XTQ_API int xtq_cuda_quiesce(xtq_agent_t *agent, void (*fn)(void *arg), void *arg);

/**
 * Work-groups of a grid-stride dispatch over `items` elements (plain C,
 * host). A dispatch runs its work-groups `max_groups` at a time (the
 * processor's blocks: xtq_agent_info_t.workers of the CUDA agent); more
 * groups than that run one after another, each paying a claim and a
 * round trip to its data. So a task over many elements should stride
 * (element i + k * grid_size[0] for k = 0, 1, ...) under a grid of at most
 * `max_groups` groups of `wg` work-items, each with at least `per_item`
 * elements where there are enough. Returns 1 .. max_groups (0 and 1 in
 * the arguments count as 1).
 */
static inline uint32_t xtq_cuda_stride_groups(uint64_t items, uint32_t wg, uint32_t per_item,
                                              uint32_t max_groups)
{
    const uint64_t per_group = (uint64_t)(wg ? wg : 1) * (per_item ? per_item : 1);
    uint64_t groups = items / per_group + (items % per_group != 0);
    if (groups < 1)
        groups = 1;
    if (max_groups < 1)
        max_groups = 1;
    return groups > max_groups ? max_groups : (uint32_t)groups;
}

/**
 * The 1-D geometry of that dispatch: `*grid` work-items in groups of
 * `*wg_out` (never more work-items than elements, so a small dispatch is
 * one partial group, as HSA requires: work-group size <= grid size).
 */
static inline void xtq_cuda_stride_geometry(uint64_t items, uint32_t wg, uint32_t per_item,
                                            uint32_t max_groups, uint32_t *grid, uint32_t *wg_out)
{
    const uint32_t w = wg ? wg : 1;
    const uint64_t n = (uint64_t)xtq_cuda_stride_groups(items, w, per_item, max_groups) * w;
    *grid = (uint32_t)(items && items < n ? items : n);
    *wg_out = *grid < w ? *grid : w;
}

XTQ_EXTERN_C_END

/** Declare, in C, the launcher XTQ_CUDA_MODULE(name) defines in a .cu file. */
#define XTQ_CUDA_MODULE_DECLARE(name)                                                       \
    XTQ_EXTERN_C_BEGIN                                                                      \
    int name##_xtq_launch(void *state, uint32_t tag, unsigned blocks, void *stream);        \
    XTQ_EXTERN_C_END

/** Attach the module XTQ_CUDA_MODULE(name) defined (see xtq_cuda_attach()). */
#define xtq_cuda_module_attach(agent, name) xtq_cuda_attach((agent), name##_xtq_launch, #name)
/** Detach it again (see xtq_cuda_detach()). */
#define xtq_cuda_module_detach(agent, name) xtq_cuda_detach((agent), name##_xtq_launch)

#ifdef __CUDACC__
/** CUDA only: define `<fn>_xtq_task`, a __device__ variable holding the task's address. */
#define XTQ_CUDA_TASK_EXPORT(fn) __device__ xtq_cuda_task_fn fn##_xtq_task = fn

/**
 * CUDA only, inside a task: fail the dispatch with `status` (a negative
 * XTQ_E* code, such as -XTQ_ERANGE for arguments outside the task's
 * bound). The first failure of any work-item wins; the task still
 * completes (its signal is decremented) with that status.
 */
static __device__ __forceinline__ void xtq_cuda_task_fail(const xtq_cuda_dispatch_t *d, int status)
{
    if (d->status && status < 0)
        atomicCAS((int *)d->status, 0, status);
}

/**
 * CUDA only: read a task's device address from its exported variable.
 * Inline on purpose: the symbol belongs to the caller's CUDA runtime and
 * module, which libxtq's own (static) runtime cannot look up.
 */
#define xtq_cuda_task_address(sym, out)                                                     \
    (cudaMemcpyFromSymbol((out), (sym), sizeof(uint64_t)) == cudaSuccess ? 0 : -22)
#endif

#endif /* XTQ_CUDA_H */
