/*
 * Signals: 64-bit values that agents decrement when a task completes and
 * that threads wait on with a condition and a timeout (HSA signal
 * semantics). Waiters spin briefly, then block; they do not burn a core.
 */
#ifndef XTQ_SIGNAL_H
#define XTQ_SIGNAL_H

#include <xtq/common.h>
#include <xtq/aql.h>

XTQ_EXTERN_C_BEGIN

/** Wait conditions (hsa_signal_condition_t). */
enum xtq_signal_condition {
    XTQ_SIGNAL_EQ = 0,  /**< value == compare */
    XTQ_SIGNAL_NE = 1,  /**< value != compare */
    XTQ_SIGNAL_LT = 2,  /**< value <  compare */
    XTQ_SIGNAL_GTE = 3, /**< value >= compare */
};

/**
 * Create a signal with an initial value.
 * @return 0, -XTQ_EINVAL or -XTQ_ENOMEM.
 */
XTQ_API int xtq_signal_create(int64_t initial_value, xtq_signal_t **signal);

/**
 * Destroy a signal. Nobody may wait on it or reference it in a packet the
 * caller submitted. Refused while a kernel registration names it as its
 * completion signal, or tasks enqueued for such a kernel are queued or
 * running (they decrement it when they finish).
 * @return 0, -XTQ_EBUSY (nothing is freed), -XTQ_EINVAL.
 */
XTQ_API int xtq_signal_destroy(xtq_signal_t *signal);

/** Load the value (acquire order). */
XTQ_API int64_t xtq_signal_load(const xtq_signal_t *signal);

/** Store a value (release order) and wake waiters. */
XTQ_API void xtq_signal_store(xtq_signal_t *signal, int64_t value);

/** Atomically add `delta` (may be negative; release order), wake waiters;
 *  returns the previous value. */
XTQ_API int64_t xtq_signal_add(xtq_signal_t *signal, int64_t delta);

/**
 * Atomically store `value` (acquire-release order) and wake waiters;
 * returns the previous value (hsa_signal_exchange_scacq_screl).
 */
XTQ_API int64_t xtq_signal_exchange(xtq_signal_t *signal, int64_t value);

/**
 * Atomically replace the value with `value` if it equals `expected`
 * (acquire-release order), waking waiters when it changed; returns the
 * value observed, which equals `expected` exactly when the swap happened
 * (hsa_signal_cas_scacq_screl).
 */
XTQ_API int64_t xtq_signal_cas(xtq_signal_t *signal, int64_t expected, int64_t value);

/**
 * Wait until `value <cond> compare` holds or `timeout_ns` passes
 * (XTQ_TIMEOUT_INFINITE waits forever). The waiter polls a few
 * microseconds, then sleeps; while it sleeps, only a change whose result
 * meets its condition wakes it (and costs the changing thread a system
 * call), so one signal counting down a batch of tasks costs one wake-up,
 * not one per task. Waiters with different conditions on one signal are
 * all correct; all but the first condition's are woken by every change.
 * @param observed if not NULL, receives the last value read.
 * @return 0 when the condition held, -XTQ_ETIMEDOUT, or -XTQ_EINVAL.
 */
XTQ_API int xtq_signal_wait(const xtq_signal_t *signal, enum xtq_signal_condition cond,
                            int64_t compare, int64_t timeout_ns, int64_t *observed);

/** The handle of a signal as stored in an AQL packet's completion_signal. */
XTQ_API xtq_signal_handle_t xtq_signal_handle(const xtq_signal_t *signal);

/** The signal behind a packet handle (NULL for a zero handle). */
XTQ_API xtq_signal_t *xtq_signal_from_handle(xtq_signal_handle_t handle);

XTQ_EXTERN_C_END

#endif /* XTQ_SIGNAL_H */
