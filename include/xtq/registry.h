/*
 * Lookup-table registration at coordinated indices (paper Section IV-B).
 *
 * Every rank agrees on small integer indices. A target registers its
 * kernels, functions and queues at those indices; initiators name only the
 * indices. Tables hold XTQ_TABLE_SIZE entries each (default 64).
 *
 * The rewrite the engine applies to an incoming command (paper Fig. 5):
 *  - queue:   reserved2 (queue index) selects the queue table entry;
 *  - kernel dispatch: kernel_object := registered kernel object;
 *             kernarg_address := where the kernel arguments landed;
 *             kernel argument 0 := registered target buffer (or NULL);
 *             kernel argument 1 := payload address (or NULL when empty);
 *             completion_signal := registered signal (or none);
 *             the kernel-argument size must equal the registration's.
 *  - agent dispatch: type (function index) selects the function entry;
 *             arg[0] := registered target buffer (or NULL);
 *             arg[1] := payload address (or NULL); arg[2], arg[3] as sent;
 *             return_address := NULL; completion_signal := none.
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

/** Register a queue at `index`. */
XTQ_API int xtq_register_queue(xtq_ctx_t *ctx, uint32_t index, xtq_queue_t *queue);

/**
 * Remove a registration. Commands that name the index afterwards fail with
 * -XTQ_ENOKERNEL / -XTQ_ENOFUNC / -XTQ_ENOQUEUE at their initiator.
 * Returns -XTQ_ENOENT if nothing is registered there.
 */
XTQ_API int xtq_unregister_kernel(xtq_ctx_t *ctx, uint32_t index);
XTQ_API int xtq_unregister_function(xtq_ctx_t *ctx, uint32_t index);
XTQ_API int xtq_unregister_queue(xtq_ctx_t *ctx, uint32_t index);

/** Entries per lookup table in this context. */
XTQ_API uint32_t xtq_table_size(xtq_ctx_t *ctx);

XTQ_EXTERN_C_END

#endif /* XTQ_REGISTRY_H */
