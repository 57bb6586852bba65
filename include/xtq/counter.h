/*
 * Completion counters: many puts counted by one object (libfabric's
 * fi_cntr). A put names a counter in xtq_put_param_t; when the put is DONE
 * the counter's success or error count goes up by one. Schedules of many
 * puts (MPI epochs, collectives) wait on a threshold instead of keeping a
 * completion object per put.
 */
#ifndef XTQ_COUNTER_H
#define XTQ_COUNTER_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

/** A completion counter. */
typedef struct xtq_counter xtq_counter_t;

/** Create a counter at zero. @return 0, -XTQ_EINVAL, -XTQ_ENOMEM. */
XTQ_API int xtq_counter_create(xtq_ctx_t *ctx, xtq_counter_t **counter);

/**
 * Destroy a counter. @return 0, or -XTQ_EBUSY while puts that name it are
 * not yet DONE (nothing is freed then).
 */
XTQ_API int xtq_counter_destroy(xtq_counter_t *counter);

/** Puts counted as succeeded (acquire order). */
XTQ_API uint64_t xtq_counter_read(const xtq_counter_t *counter);

/** Puts counted as failed (acquire order). */
XTQ_API uint64_t xtq_counter_read_err(const xtq_counter_t *counter);

/** The first failed put's status (-XTQ_E*), or 0 while none failed. */
XTQ_API int xtq_counter_error(const xtq_counter_t *counter);

/**
 * Set both counts to zero and forget the first error (no puts may be in
 * flight on it). @return 0 or -XTQ_EBUSY.
 */
XTQ_API int xtq_counter_reset(xtq_counter_t *counter);

/**
 * Wait until read() + read_err() >= threshold, progressing the engine in
 * manual mode; spins briefly, then sleeps.
 * @return 0, -XTQ_ETIMEDOUT.
 */
XTQ_API int xtq_counter_wait(xtq_ctx_t *ctx, xtq_counter_t *counter, uint64_t threshold,
                             int64_t timeout_ns);

XTQ_EXTERN_C_END

#endif /* XTQ_COUNTER_H */
