/*
 * Lookup-table registration at coordinated indices (paper Section IV-B).
 *
 * Every rank agrees on small integer indices. A target registers its
 * kernels, functions and queues at those indices; initiators name only the
 * indices. Tables hold XTQ_TABLE_SIZE entries each (default 64).
 *
 * The rewrite the engine applies to an incoming command (paper Fig. 5):
 *  - queue:   reserved2 (queue index) selects the queue table entry;
 *  - kernel dispatch: the grid must follow HSA (non-zero sizes, work-group
 *             no larger than the grid, unused dimensions 1) and hold at
 *             most max_work_items work-items (-XTQ_ERANGE otherwise);
 *             kernel_object := registered kernel object;
 *             kernarg_address := where the kernel arguments landed;
 *             kernel argument 0 := registered target buffer (or NULL);
 *             kernel argument 1 := payload address (or NULL when empty);
 *             completion_signal := registered signal (or none);
 *             the kernel-argument size must equal the registration's.
 *  - agent dispatch: type (function index) selects the function entry;
 *             arg[0] := registered target buffer (or NULL);
 *             arg[1] := payload address (or NULL); arg[2], arg[3] as sent;
 *             return_address := NULL; completion_signal := none.
 * With XTQ_REGISTER_BOUNDED, argument 0 as sent is an offset and argument
 * 2 an extent: argument 0 := target buffer + offset once offset + extent
 * <= target_size (-XTQ_ERANGE otherwise).
 * Other fields pass through. Barrier packets are local only: a barrier
 * arriving from a peer is rejected (its dependency signals would be peer
 * pointers).
 */
#ifndef XTQ_REGISTRY_H
#define XTQ_REGISTRY_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

/**
 * Register a kernel at `index`, with an optional target buffer (argument 0
 * of every task) and an optional completion signal (decremented by the
 * agent when each task finishes).
 * @return 0, -XTQ_ERANGE (index), -XTQ_EEXIST (occupied), -XTQ_EINVAL.
 */
XTQ_API int xtq_register_kernel(xtq_ctx_t *ctx, uint32_t index, xtq_kernel_t *kernel,
                                void *target_buffer, xtq_signal_t *completion_signal);

/** Register a function at `index` with an optional target buffer (arg[0]). */
XTQ_API int xtq_register_function(xtq_ctx_t *ctx, uint32_t index, xtq_function_t *function,
                                  void *target_buffer);

/** Bits of xtq_register_attr_t.field_mask: which fields the caller set. */
enum xtq_register_attr_field {
    XTQ_REGISTER_ATTR_FIELD_BUFFER = 1u << 0,         /**< target_buffer, target_size */
    XTQ_REGISTER_ATTR_FIELD_SIGNAL = 1u << 1,         /**< completion_signal */
    XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS = 1u << 2, /**< max_work_items */
    XTQ_REGISTER_ATTR_FIELD_FLAGS = 1u << 3,          /**< flags */
};

/** xtq_register_attr_t.flags */
enum xtq_register_flags {
    /**
     * A bounded target: a registered buffer is not a licence to write
     * anywhere. As sent, argument 0 (kernel argument 0, or arg[0] of a
     * function packet) is a byte offset into the target buffer and argument
     * 2 a byte extent. The engine checks offset + extent <= target_size
     * before anything runs (else the initiator gets -XTQ_ERANGE and nothing
     * is enqueued), then rewrites argument 0 to target_buffer + offset and
     * leaves argument 2, now a checked bound, for the task to stay within.
     * Kernels so registered take at least 24 bytes of arguments.
     */
    XTQ_REGISTER_BOUNDED = 1u << 0,
    /**
     * A short task: the CPU agent may run it in the thread that received
     * it, the emulated NIC's progress thread (or the application thread
     * that drives progress, in manual mode or while it waits for a
     * completion), instead of waking one of its workers: its signal
     * completes and its ack leaves at once, one hand-off less per task
     * (XTQ_CPU_INLINE_TASKS). It does so only when that keeps the queue's
     * rules: the queue is empty and none of its packets is running (order
     * and barrier bits hold). Other agents ignore the flag.
     *
     * What the author promises: the task's work is bounded and small
     * (microseconds: an accumulate of one piece, a reduction of one chunk),
     * it does not block (it may take a lock that is only ever held for as
     * short), and it does not wait for libxtq: no xtq_completion_wait,
     * xtq_flush, counter or signal waits, no registration changes; a
     * blocking xtq_put whose window is full returns -XTQ_EAGAIN there
     * instead of waiting. While it runs, no other put reaches any queue of
     * this process: a long task so registered delays every one of them.
     */
    XTQ_REGISTER_SHORT = 1u << 1,
};

/** How a kernel or function is registered (fields named in field_mask). */
typedef struct xtq_register_attr {
    uint64_t field_mask;
    void *target_buffer;             /**< argument 0 of every task (or NULL) */
    size_t target_size;              /**< bytes at target_buffer (needed for BOUNDED) */
    xtq_signal_t *completion_signal; /**< kernels: decremented as each task finishes */
    /**
     * Largest grid (work-items, the product over dimensions) a command may
     * ask for; larger ones are refused with -XTQ_ERANGE at the rewrite, so
     * no peer can make an agent loop for ever. Default: 2^32.
     */
    uint64_t max_work_items;
    uint32_t flags; /**< XTQ_REGISTER_* */
} xtq_register_attr_t;

/**
 * Register a kernel at `index` with the options of `attr` (NULL: no target
 * buffer, no signal, default bounds). xtq_register_kernel() is this with
 * the buffer and the signal.
 * @return 0, -XTQ_ERANGE (index), -XTQ_EEXIST (occupied), -XTQ_EINVAL
 *         (unknown field_mask bits or flags; BOUNDED without a buffer or
 *         with fewer than 24 bytes of kernel arguments; a target_size
 *         without a buffer; max_work_items 0).
 */
XTQ_API int xtq_register_kernel_attr(xtq_ctx_t *ctx, uint32_t index, xtq_kernel_t *kernel,
                                     const xtq_register_attr_t *attr);

/**
 * Register a function at `index` with the options of `attr`. Function
 * packets carry no completion signal (naming one is -XTQ_EINVAL) and no
 * grid (max_work_items is not used). xtq_register_function() is this with
 * the buffer.
 */
XTQ_API int xtq_register_function_attr(xtq_ctx_t *ctx, uint32_t index,
                                       xtq_function_t *function,
                                       const xtq_register_attr_t *attr);

/** Register a queue at `index`. */
XTQ_API int xtq_register_queue(xtq_ctx_t *ctx, uint32_t index, xtq_queue_t *queue);

/**
 * Remove a registration. Commands that name the index afterwards fail with
 * -XTQ_ENOKERNEL / -XTQ_ENOFUNC / -XTQ_ENOQUEUE at their initiator.
 * Returns -XTQ_ENOENT if nothing is registered there.
 *
 * Unregistration does not wait for tasks already enqueued: they run
 * against the old entry. Objects stay safe to use until they are
 * destroyed, and destroy refuses (-XTQ_EBUSY) while a registration or a
 * queued or running task still names the kernel, function or completion
 * signal; a queue registered anywhere cannot be destroyed either. So:
 * unregister, wait for the tasks in flight (a completion signal, the puts'
 * remote completions), then destroy; a destroy that returns -XTQ_EBUSY
 * changed nothing and may be retried.
 */
XTQ_API int xtq_unregister_kernel(xtq_ctx_t *ctx, uint32_t index);
XTQ_API int xtq_unregister_function(xtq_ctx_t *ctx, uint32_t index);
XTQ_API int xtq_unregister_queue(xtq_ctx_t *ctx, uint32_t index);

/** Entries per lookup table in this context. */
XTQ_API uint32_t xtq_table_size(xtq_ctx_t *ctx);

XTQ_EXTERN_C_END

#endif /* XTQ_REGISTRY_H */
