/*
 * Kernel and function objects: what AQL packets run.
 *
 * CPU kernels are called once per work-group, with the dispatch geometry;
 * the kernel loops over the work-items of its group. CPU functions receive
 * the agent-dispatch packet's four arguments. After an XTQ rewrite,
 * kernel argument 0 / function arg[0] is the registered target buffer and
 * kernel argument 1 / arg[1] is the payload (see xtq/registry.h).
 */
#ifndef XTQ_KERNEL_H
#define XTQ_KERNEL_H

#include <xtq/common.h>
#include <xtq/aql.h>

XTQ_EXTERN_C_BEGIN

/** What a CPU kernel sees for one work-group. */
typedef struct xtq_dispatch {
    const xtq_kernel_dispatch_packet_t *packet; /**< the packet, after any rewrite */
    uint32_t dimensions;                        /**< 1..3 */
    uint32_t grid_size[3];                      /**< work-items per dimension */
    uint32_t workgroup_size[3];                 /**< work-items per group per dimension */
    uint32_t workgroup_id[3];                   /**< this group's coordinates */
    uint32_t workgroup_count[3];                /**< groups per dimension */
    void *user_data;                            /**< from xtq_kernel_create_cpu() */
} xtq_dispatch_t;

/** A CPU kernel: called for each work-group. */
typedef void (*xtq_cpu_kernel_fn)(const xtq_dispatch_t *dispatch, void *kernarg);

/** A CPU function: arg[0..3] from the agent-dispatch packet. */
typedef void (*xtq_cpu_function_fn)(const uint64_t arg[4], void *return_address,
                                    void *user_data);

/**
 * Create a kernel object for a CPU agent.
 * @param kernarg_size the exact size of the kernel arguments, >= 16 when it is
 *        used through XTQ (arguments 0 and 1 are rewritten as pointers).
 */
XTQ_API int xtq_kernel_create_cpu(xtq_agent_t *agent, xtq_cpu_kernel_fn fn, uint32_t kernarg_size,
                                  void *user_data, xtq_kernel_t **kernel);

/**
 * Destroy a kernel object. Refused while anything names it, so that no
 * table entry or queued task is left pointing at a freed (or reused)
 * object: unregister it at every index, and let the tasks that commands
 * sent to it retire (they hold it from enqueue to retire), then destroy.
 * @return 0, -XTQ_EBUSY (still registered, or tasks naming it are queued
 *         or running; nothing is freed), -XTQ_EINVAL.
 */
XTQ_API int xtq_kernel_destroy(xtq_kernel_t *kernel);

/** Value to store in kernel_object for a local (non-XTQ) dispatch. */
XTQ_API uint64_t xtq_kernel_object(const xtq_kernel_t *kernel);

/** Kernel-argument size given at creation. */
XTQ_API uint32_t xtq_kernel_kernarg_size(const xtq_kernel_t *kernel);

/** The agent the kernel belongs to. */
XTQ_API xtq_agent_t *xtq_kernel_agent(const xtq_kernel_t *kernel);

/** Create a function object for a CPU agent. */
XTQ_API int xtq_function_create_cpu(xtq_agent_t *agent, xtq_cpu_function_fn fn, void *user_data,
                                    xtq_function_t **function);

/**
 * Destroy a function object; refused as xtq_kernel_destroy() is.
 * @return 0, -XTQ_EBUSY (registered, or tasks naming it are queued or
 *         running), -XTQ_EINVAL.
 */
XTQ_API int xtq_function_destroy(xtq_function_t *function);

/**
 * Value to store in an agent-dispatch packet's reserved2 field for a local
 * (non-XTQ) dispatch of this function; the XTQ rewrite stores it itself.
 */
XTQ_API uint64_t xtq_function_object(const xtq_function_t *function);

/**
 * Inside a CPU task (kernel or function) run for a fetching put
 * (xtq_put_param_t.result): the zero-filled result buffer whose contents
 * travel back to the initiator when the task finishes, and its length in
 * `*len` (may be NULL). NULL (and 0) outside such a task. All work-groups
 * of one dispatch share the one buffer.
 */
XTQ_API void *xtq_task_result(size_t *len);

/**
 * Inside a CPU task (kernel or function) run for a put: the payload that
 * came with it, and its length in `*len` (may be NULL). It lies in the
 * engine's receive buffer, read-only, and is valid until the task
 * returns (copy what must outlive it). A kernel also finds it through its
 * rewritten argument 1, a function through arg[1]; this names its length
 * too. NULL (and 0) outside a task, for a put without payload, and for a
 * task submitted locally with xtq_queue_submit (xtq_queue_submit_args
 * gives the payload it names, in the caller's memory). Thread-local: all
 * work-groups of one dispatch see the same payload.
 */
XTQ_API const void *xtq_task_payload(size_t *len);

/**
 * Inside a CPU task: fail it with `status` (an XTQ_E* code, such as
 * -XTQ_ERANGE for arguments that point outside the task's bound; either
 * sign, 0 is no failure). The initiator's completion carries the first
 * status reported; the task's remaining work-groups still run, and its
 * completion signal is still decremented. Outside a task: no effect.
 */
XTQ_API void xtq_task_fail(int status);

XTQ_EXTERN_C_END

#endif /* XTQ_KERNEL_H */
