/*
 * Completion counters (fi_cntr): many puts counted by one object.
 *
 * A put that names a counter attaches to it when it is issued (pending)
 * and completes into it when it is DONE: the success or error count goes
 * up, the first error is kept, then `total` (a signal: ok + err) is bumped
 * with release order, so a waiter that sees total >= threshold also sees
 * the counts. Waiting is the signal's wait (spin, then sleep); in manual
 * progress the waiter turns the engine between short sleeps.
 */
#include "internal.h"

/* Longest sleep between engine turns of a manual-progress waiter. */
#define COUNTER_MANUAL_NAP_NS 50000

struct xtq_counter {
    struct xtq_signal total; /* ok + err; first: 64-byte aligned */
    xtq_ctx_t *ctx;
    _Atomic uint64_t ok;
    _Atomic uint64_t err;
    _Atomic int32_t first_error;
    _Atomic uint32_t pending; /* puts attached and not yet DONE */
};

int xtq_counter_create(xtq_ctx_t *ctx, xtq_counter_t **counter)
{
    struct xtq_counter *c;

    if (!ctx || !counter)
        return -XTQ_EINVAL;
    c = aligned_alloc(XTQ_CACHELINE, XTQ_ALIGN_UP(sizeof(*c), (size_t)XTQ_CACHELINE));
    if (!c)
        return -XTQ_ENOMEM;
    memset(c, 0, sizeof(*c));
    xtq__signal_init_at(&c->total, 0, 0);
    c->ctx = ctx;
    atomic_init(&c->ok, 0);
    atomic_init(&c->err, 0);
    atomic_init(&c->first_error, 0);
    atomic_init(&c->pending, 0);
    *counter = c;
    return 0;
}

int xtq_counter_destroy(xtq_counter_t *counter)
{
    if (!counter)
        return -XTQ_EINVAL;
    if (atomic_load_explicit(&counter->pending, memory_order_acquire))
        return -XTQ_EBUSY;
    /* Waits for a completer still waking waiters on `total`. */
    xtq_signal_destroy(&counter->total);
    free(counter);
    return 0;
}

uint64_t xtq_counter_read(const xtq_counter_t *counter)
{
    return atomic_load_explicit(&((xtq_counter_t *)counter)->ok, memory_order_acquire);
}

uint64_t xtq_counter_read_err(const xtq_counter_t *counter)
{
    return atomic_load_explicit(&((xtq_counter_t *)counter)->err, memory_order_acquire);
}

int xtq_counter_error(const xtq_counter_t *counter)
{
    return atomic_load_explicit(&((xtq_counter_t *)counter)->first_error, memory_order_acquire);
}

int xtq_counter_reset(xtq_counter_t *counter)
{
    if (!counter)
        return -XTQ_EINVAL;
    if (atomic_load_explicit(&counter->pending, memory_order_acquire))
        return -XTQ_EBUSY;
    atomic_store_explicit(&counter->ok, 0, memory_order_relaxed);
    atomic_store_explicit(&counter->err, 0, memory_order_relaxed);
    atomic_store_explicit(&counter->first_error, 0, memory_order_relaxed);
    xtq_signal_store(&counter->total, 0);
    return 0;
}

int xtq_counter_wait(xtq_ctx_t *ctx, xtq_counter_t *counter, uint64_t threshold, int64_t timeout_ns)
{
    if (!ctx || !counter || timeout_ns < 0)
        return -XTQ_EINVAL;
    /* total is an int64: a larger threshold is never reached. */
    int64_t want = threshold > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)threshold;
    if (ctx->progress != XTQ_PROGRESS_MANUAL)
        return xtq_signal_wait(&counter->total, XTQ_SIGNAL_GTE, want, timeout_ns, NULL);

    /* Manual progress: nobody else turns the engine. */
    uint64_t now = xtq__now_ns();
    uint64_t deadline =
        timeout_ns == XTQ_TIMEOUT_INFINITE || (uint64_t)timeout_ns > UINT64_MAX - now
            ? UINT64_MAX
            : now + (uint64_t)timeout_ns;
    for (;;) {
        if (xtq_signal_load(&counter->total) >= want)
            return 0;
        int n = xtq_progress(ctx);
        if (n < 0)
            return n;
        if (n > 0)
            continue;
        now = xtq__now_ns();
        if (now >= deadline)
            return xtq_signal_load(&counter->total) >= want ? 0 : -XTQ_ETIMEDOUT;
        uint64_t left = deadline - now;
        int64_t nap = left < COUNTER_MANUAL_NAP_NS ? (int64_t)left : COUNTER_MANUAL_NAP_NS;
        (void)xtq_signal_wait(&counter->total, XTQ_SIGNAL_GTE, want, nap, NULL);
    }
}

void xtq__counter_attach(xtq_counter_t *counter)
{
    atomic_fetch_add_explicit(&counter->pending, 1, memory_order_relaxed);
}

void xtq__counter_complete(xtq_counter_t *counter, int status)
{
    if (status) {
        int32_t none = 0;
        atomic_compare_exchange_strong_explicit(&counter->first_error, &none, status,
                                                memory_order_relaxed, memory_order_relaxed);
        atomic_fetch_add_explicit(&counter->err, 1, memory_order_relaxed);
    } else {
        atomic_fetch_add_explicit(&counter->ok, 1, memory_order_relaxed);
    }
    /* The put is DONE before a waiter can see it counted, so a waiter may
     * destroy the counter at once: we stay registered as a changer of
     * `total` (busy, which destroy drains) from before pending drops until
     * our last touch. Release on total: a waiter that sees the new total
     * sees the counts above. */
    atomic_fetch_add_explicit(&counter->total.busy, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&counter->pending, 1, memory_order_release);
    xtq_signal_add(&counter->total, 1);
    atomic_fetch_sub_explicit(&counter->total.busy, 1, memory_order_release);
}
