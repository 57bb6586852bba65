/*
 * Signals (HSA semantics): a 64-bit value plus a futex word.
 *
 * Every host-side change stores the value, then bumps `seq`, then wakes
 * the futex if a sleeper registered for it. A waiter registers, reads
 * `seq`, re-checks the value and sleeps on `seq`: the seq_cst order of
 * (registration, seq load) against (seq++, registration load) means either
 * the changer sees the waiter or the waiter sees the new seq, so no
 * wake-up is lost.
 *
 * A sleeper registers with its condition: the first one writes it into
 * the signal (cond_kind, cond_compare) and every sleeper waiting for the
 * same counts in cond_waiters; a change wakes them only when the value it
 * produced meets the condition. Every change's own result is judged by
 * that change, so the one that makes the condition true wakes them, and a
 * value that later changes back is what a woken waiter re-checks anyway.
 * A sleeper waiting for something else counts in `waiters`, and every
 * change wakes it. Without this a waiter on a signal that counts down a
 * batch (one decrement per task, the waiter for 0) was woken, and the
 * task's thread paid a futex wake, at every task: one system call per
 * task on the engine's thread with inline tasks (xtq_bench_msgrate).
 *
 * A signal a device changes (XTQ__SIGNAL_DEVICE) never bumps `seq`, so its
 * waiters sleep in bounded naps.
 */
#include "internal.h"

#include <inttypes.h>
#include <sched.h>

/* Poll this long before sleeping: a completion often lands within a few
 * microseconds, and a futex round trip costs about as much. */
#define SIGNAL_SPIN_NS 4000
/* Longest sleep of a waiter on a device-changed signal. */
#define SIGNAL_DEVICE_NAP_NS 50000

/* A GPU task's round trip (10-40 us) outlasts SIGNAL_SPIN_NS, and a nap
 * is at least the thread's timer slack (50 us): on the H100 the waits for
 * a collective's reductions on the CUDA agent each paid a nap. Where the
 * cores allow it a GPU agent raises the spin of device signals. */
static _Atomic uint64_t device_spin_ns = SIGNAL_SPIN_NS;

uint64_t xtq__device_signal_spin_ns(void)
{
    return atomic_load_explicit(&device_spin_ns, memory_order_relaxed);
}

void xtq__device_signal_spin_raise(uint64_t ns)
{
    uint64_t cur = atomic_load_explicit(&device_spin_ns, memory_order_relaxed);
    while (ns > cur && !atomic_compare_exchange_weak(&device_spin_ns, &cur, ns))
        ;
}

static void signal_init(struct xtq_signal *sig, int64_t initial, uint32_t flags)
{
    memset(sig, 0, sizeof(*sig));
    atomic_init(&sig->value, initial);
    atomic_init(&sig->seq, 0);
    atomic_init(&sig->waiters, 0);
    atomic_init(&sig->busy, 0);
    atomic_init(&sig->refs, 0);
    atomic_init(&sig->watchers, 0);
    sig->flags = flags;
    sig->magic = XTQ__SIGNAL_MAGIC;
}

void xtq__signal_init_at(struct xtq_signal *sig, int64_t initial, uint32_t flags)
{
    /* Memory the caller owns: destroy must not free it. */
    signal_init(sig, initial, flags | XTQ__SIGNAL_EXTERNAL_MEM);
}

static _Atomic uint64_t signal_wakeups;

uint64_t xtq__signal_wakeups(void)
{
    return atomic_load_explicit(&signal_wakeups, memory_order_relaxed);
}

uint32_t xtq__signal_sleepers(const struct xtq_signal *sig)
{
    struct xtq_signal *s = (struct xtq_signal *)sig;
    return atomic_load(&s->waiters) + atomic_load(&s->cond_waiters);
}

static bool signal_cond_holds(enum xtq_signal_condition cond, int64_t value, int64_t compare)
{
    switch (cond) {
    case XTQ_SIGNAL_EQ:
        return value == compare;
    case XTQ_SIGNAL_NE:
        return value != compare;
    case XTQ_SIGNAL_LT:
        return value < compare;
    case XTQ_SIGNAL_GTE:
        return value >= compare;
    }
    return false;
}

/* Whether a change that produced `value` must wake the sleepers (`any`:
 * whatever the value, as after a change made outside this file). */
static inline bool signal_must_wake(struct xtq_signal *sig, int64_t value, bool any)
{
    if (atomic_load_explicit(&sig->waiters, memory_order_seq_cst) != 0)
        return true;
    if (atomic_load_explicit(&sig->cond_waiters, memory_order_seq_cst) == 0)
        return false;
    /* Written before the count we read was raised; a pair torn by a
     * sleeper that joins meanwhile concerns a sleeper that sees our seq
     * (it registered after our load of the count) and does not sleep. */
    return any || signal_cond_holds(
                      (enum xtq_signal_condition)atomic_load_explicit(&sig->cond_kind,
                                                                      memory_order_relaxed),
                      value, atomic_load_explicit(&sig->cond_compare, memory_order_relaxed));
}

static inline void signal_wake_for(struct xtq_signal *sig, int64_t value, bool any)
{
    atomic_fetch_add_explicit(&sig->seq, 1, memory_order_seq_cst);
    if (signal_must_wake(sig, value, any)) {
        atomic_fetch_add_explicit(&signal_wakeups, 1, memory_order_relaxed);
        xtq__futex_wake(&sig->seq, -1);
    }
    /* A put armed on this signal fires from its engine: no application
     * thread between the change and the send. The engine registers as a
     * watcher before it reads the value, so either it sees the change or
     * we see it. */
    if (unlikely(atomic_load_explicit(&sig->watchers, memory_order_seq_cst) != 0))
        xtq__triggers_kick();
}

/* A change is bracketed by busy++ / busy-- so that destroy, which a waiter
 * may call as soon as it sees the new value, waits until the changer no
 * longer touches the signal. */
static inline void signal_change_begin(struct xtq_signal *sig)
{
    atomic_fetch_add_explicit(&sig->busy, 1, memory_order_relaxed);
}

static inline void signal_change_end(struct xtq_signal *sig)
{
    atomic_fetch_sub_explicit(&sig->busy, 1, memory_order_release);
}

void xtq__signal_notify(struct xtq_signal *sig)
{
    signal_change_begin(sig);
    signal_wake_for(sig, 0, true);
    signal_change_end(sig);
}

int xtq_signal_create(int64_t initial_value, xtq_signal_t **signal)
{
    struct xtq_signal *sig;

    if (signal == NULL)
        return -XTQ_EINVAL;
    sig = aligned_alloc(XTQ_CACHELINE, sizeof(*sig));
    if (sig == NULL)
        return -XTQ_ENOMEM;
    signal_init(sig, initial_value, 0);
    *signal = sig;
    return 0;
}

int xtq_signal_destroy(xtq_signal_t *signal)
{
    if (signal == NULL || signal->magic != XTQ__SIGNAL_MAGIC)
        return -XTQ_EINVAL;
    /* Registered as a completion signal, or named by a queued task: an
     * agent would decrement freed memory. */
    if (xtq__refs_kill(&signal->refs) != 0)
        return -XTQ_EBUSY;
    /* A store/add whose value a waiter already saw may still be waking. */
    for (unsigned i = 0; atomic_load_explicit(&signal->busy, memory_order_acquire) != 0; i++) {
        if (i < 1000)
            xtq__cpu_relax();
        else
            sched_yield();
    }
    /* Clearing the magic makes a stale handle in a packet detectable. */
    signal->magic = 0;
    if (!(signal->flags & XTQ__SIGNAL_EXTERNAL_MEM))
        free(signal);
    return 0;
}

int64_t xtq_signal_load(const xtq_signal_t *signal)
{
    return atomic_load_explicit(&((xtq_signal_t *)signal)->value, memory_order_acquire);
}

void xtq_signal_store(xtq_signal_t *signal, int64_t value)
{
    signal_change_begin(signal);
    atomic_store_explicit(&signal->value, value, memory_order_release);
    signal_wake_for(signal, value, false);
    signal_change_end(signal);
}

int64_t xtq_signal_add(xtq_signal_t *signal, int64_t delta)
{
    int64_t old;

    signal_change_begin(signal);
    old = atomic_fetch_add_explicit(&signal->value, delta, memory_order_acq_rel);
    /* Wrapping, as the atomic did. */
    signal_wake_for(signal, (int64_t)((uint64_t)old + (uint64_t)delta), false);
    signal_change_end(signal);
    return old;
}

int64_t xtq_signal_exchange(xtq_signal_t *signal, int64_t value)
{
    int64_t old;

    signal_change_begin(signal);
    old = atomic_exchange_explicit(&signal->value, value, memory_order_acq_rel);
    signal_wake_for(signal, value, false);
    signal_change_end(signal);
    return old;
}

int64_t xtq_signal_cas(xtq_signal_t *signal, int64_t expected, int64_t value)
{
    int64_t seen = expected;

    signal_change_begin(signal);
    /* A failed swap reads with acquire order, as HSA's scacq_screl does. */
    if (atomic_compare_exchange_strong_explicit(&signal->value, &seen, value,
                                                memory_order_acq_rel, memory_order_acquire) &&
        value != expected)
        signal_wake_for(signal, value, false);
    signal_change_end(signal);
    return seen;
}

struct signal_cond {
    struct xtq_signal *sig;
    enum xtq_signal_condition cond;
    int64_t compare;
    int64_t value; /* last seen */
    bool joined;   /* counted in cond_waiters, else in waiters */
};

/* A sleeper announces itself: with its condition where the signal holds
 * none or the same one, else as one that every change wakes. */
static void signal_enlist(void *arg)
{
    struct signal_cond *c = arg;
    struct xtq_signal *sig = c->sig;
    while (atomic_exchange_explicit(&sig->cond_lock, 1, memory_order_acquire))
        xtq__cpu_relax();
    uint32_t n = atomic_load_explicit(&sig->cond_waiters, memory_order_relaxed);
    c->joined = n == 0 || (atomic_load_explicit(&sig->cond_kind, memory_order_relaxed) ==
                               (uint32_t)c->cond &&
                           atomic_load_explicit(&sig->cond_compare, memory_order_relaxed) ==
                               c->compare);
    if (c->joined) {
        if (n == 0) {
            atomic_store_explicit(&sig->cond_kind, (uint32_t)c->cond, memory_order_relaxed);
            atomic_store_explicit(&sig->cond_compare, c->compare, memory_order_relaxed);
        }
        /* After the condition: a changer that sees the count sees it. */
        atomic_fetch_add_explicit(&sig->cond_waiters, 1, memory_order_seq_cst);
    }
    atomic_store_explicit(&sig->cond_lock, 0, memory_order_release);
    if (!c->joined)
        atomic_fetch_add_explicit(&sig->waiters, 1, memory_order_seq_cst);
}

static void signal_delist(void *arg)
{
    struct signal_cond *c = arg;
    /* Without the lock: a sleeper joining meanwhile sees the count before
     * (and joins the same condition, or falls back to `waiters`) or after
     * (0: it writes its own). */
    atomic_fetch_sub_explicit(c->joined ? &c->sig->cond_waiters : &c->sig->waiters, 1,
                              memory_order_relaxed);
}

static bool signal_cond_ready(void *arg)
{
    struct signal_cond *c = arg;
    c->value = atomic_load_explicit(&c->sig->value, memory_order_acquire);
    return signal_cond_holds(c->cond, c->value, c->compare);
}

int xtq_signal_wait(const xtq_signal_t *signal, enum xtq_signal_condition cond, int64_t compare,
                    int64_t timeout_ns, int64_t *observed)
{
    /* Waiting registers in the signal; the value itself is not changed. */
    struct xtq_signal *sig = (struct xtq_signal *)signal;
    struct signal_cond c = {sig, cond, compare, 0, false};
    uint64_t now, deadline;
    int rc = 0;

    if (sig == NULL || (unsigned)cond > XTQ_SIGNAL_GTE || timeout_ns < 0)
        return -XTQ_EINVAL;

    if (signal_cond_ready(&c))
        goto out;
    if (timeout_ns == 0) {
        rc = -XTQ_ETIMEDOUT;
        goto out;
    }

    now = xtq__now_ns();
    deadline = timeout_ns == XTQ_TIMEOUT_INFINITE || (uint64_t)timeout_ns > UINT64_MAX - now
                   ? UINT64_MAX
                   : now + (uint64_t)timeout_ns;
    /* Every host-side change bumps `seq`; a device's does not, so its
     * waiters nap. */
    struct xtq__spin_wait w = {
        .ready = signal_cond_ready,
        .arg = &c,
        .word = &sig->seq,
        .enlist = signal_enlist,
        .delist = signal_delist,
        .spin_ns = (sig->flags & XTQ__SIGNAL_DEVICE)
                       ? atomic_load_explicit(&device_spin_ns, memory_order_relaxed)
                       : SIGNAL_SPIN_NS,
        .nap_ns = (sig->flags & XTQ__SIGNAL_DEVICE) ? SIGNAL_DEVICE_NAP_NS : XTQ_TIMEOUT_INFINITE,
    };
    rc = xtq__spin_wait(&w, deadline);
    if (rc > 0)
        rc = 0;

out:
    if (observed != NULL)
        *observed = c.value;
    return rc;
}

xtq_signal_handle_t xtq_signal_handle(const xtq_signal_t *signal)
{
    xtq_signal_handle_t h = {(uint64_t)(uintptr_t)signal};
    return h;
}

xtq_signal_t *xtq_signal_from_handle(xtq_signal_handle_t handle)
{
    struct xtq_signal *sig = (struct xtq_signal *)(uintptr_t)handle.handle;

    if (sig == NULL)
        return NULL;
    /* A misaligned pointer cannot be one of ours; do not even read it. */
    if ((handle.handle & 7) != 0 || sig->magic != XTQ__SIGNAL_MAGIC) {
        XTQ_LOG_ONCE(CORE, WARN, "signal handle 0x%" PRIx64 " is not a live signal",
                     handle.handle);
        return NULL;
    }
    return sig;
}
