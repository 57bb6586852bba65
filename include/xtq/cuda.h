/*
 * GPU tasks on the CUDA agent (NVIDIA GPUs).
 *
 * The CUDA agent consumes AQL packets with a persistent command-processor
 * kernel: no host thread sits between the doorbell and the task starting.
 * A task is a __device__ function of one fixed signature, which the
 * processor calls once per work-item of each work-group:
 *
 *     __device__ void scale(const xtq_cuda_dispatch_t *d, void *kernarg)
 *     {
 *         struct args { float *out; const float *payload; float factor; } *a = kernarg;
 *         uint32_t i = d->workgroup_id[0] * d->workgroup_size[0] + d->local_id[0];
 *         if (i < d->grid_size[0]) a->out[i] = a->payload[i] * a->factor;
 *     }
 *     XTQ_CUDA_TASK_EXPORT(scale);  // a __device__ pointer variable scale_xtq_task
 *
 *     // host, in the same .cu file (its CUDA runtime owns the symbol):
 *     uint64_t fn;
 *     xtq_cuda_task_address(scale_xtq_task, &fn);
 *     xtq_kernel_create_cuda(agent, fn, sizeof(struct args), &kernel);
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
} xtq_cuda_dispatch_t;

/**
 * A GPU task. `kernarg` points to a device-memory copy of the packet's
 * kernel arguments (kernarg_size bytes, at most XTQ_CUDA_MAX_KERNARG); after
 * an XTQ rewrite, argument 0 is the registered target buffer and argument 1
 * the payload, which stays where it landed (pinned host memory registered
 * with the agent) and is read in place. Tasks run inside the agent's
 * persistent thread blocks: they may not use __syncthreads(), shared
 * memory of their own, or grid-wide synchronisation.
 */
typedef void (*xtq_cuda_task_fn)(const xtq_cuda_dispatch_t *dispatch, void *kernarg);

/** Largest kernel-argument block a CUDA task accepts (bytes). */
#define XTQ_CUDA_MAX_KERNARG 4096u
/** Largest work-group (work-items) a CUDA task accepts. */
#define XTQ_CUDA_MAX_WORKGROUP 256u

/**
 * Create a kernel object for a CUDA agent from a task's device address.
 * @param device_fn the task's address in device memory, as read with
 *        xtq_cuda_task_address() (or cudaMemcpyFromSymbol of a __device__
 *        variable initialised with the task).
 * @param kernarg_size exact size of the kernel arguments (<= XTQ_CUDA_MAX_KERNARG).
 * @return 0, -XTQ_EINVAL, -XTQ_EAGENTKIND (not a CUDA agent), -XTQ_ENOSPC
 *         (kernel table full), -XTQ_ENOMEM.
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

XTQ_EXTERN_C_END

#ifdef __CUDACC__
/** CUDA only: define `<fn>_xtq_task`, a __device__ variable holding the task's address. */
#define XTQ_CUDA_TASK_EXPORT(fn) __device__ xtq_cuda_task_fn fn##_xtq_task = fn

/**
 * CUDA only: read a task's device address from its exported variable.
 * Inline on purpose: the symbol belongs to the caller's CUDA runtime and
 * module, which libxtq's own (static) runtime cannot look up.
 */
#define xtq_cuda_task_address(sym, out)                                                     \
    (cudaMemcpyFromSymbol((out), (sym), sizeof(uint64_t)) == cudaSuccess ? 0 : -22)
#endif

#endif /* XTQ_CUDA_H */
