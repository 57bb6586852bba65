/*
 * Signals: create/load/store/add/exchange/CAS, every wait condition, timeouts, handles,
 * and waiters in other threads woken by a store (no sleeps used as
 * synchronisation: threads meet on signals or joins).
 */
#include "internal.h"

#include <sched.h>

#include "xtq_test.h"

XTQ_TEST(create_load_store_add)
{
    xtq_signal_t *s;

    CHECK_OK(xtq_signal_create(7, &s));
    CHECK_EQ(xtq_signal_load(s), 7);
    xtq_signal_store(s, -3);
    CHECK_EQ(xtq_signal_load(s), -3);
    CHECK_EQ(xtq_signal_add(s, 10), -3);
    CHECK_EQ(xtq_signal_load(s), 7);
    CHECK_EQ(xtq_signal_add(s, -7), 7);
    CHECK_EQ(xtq_signal_load(s), 0);
    xtq_signal_store(s, INT64_MAX);
    CHECK_EQ(xtq_signal_load(s), INT64_MAX);
    CHECK_OK(xtq_signal_destroy(s));
    CHECK_ERR(xtq_signal_create(0, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_signal_destroy(NULL), -XTQ_EINVAL);
}

XTQ_TEST(wait_conditions)
{
    xtq_signal_t *s;
    int64_t seen = -1;

    CHECK_OK(xtq_signal_create(5, &s));
    /* Conditions that hold return 0 at once, even with a zero timeout. */
    CHECK_OK(xtq_signal_wait(s, XTQ_SIGNAL_EQ, 5, 0, &seen));
    CHECK_EQ(seen, 5);
    CHECK_OK(xtq_signal_wait(s, XTQ_SIGNAL_NE, 4, 0, NULL));
    CHECK_OK(xtq_signal_wait(s, XTQ_SIGNAL_LT, 6, 0, NULL));
    CHECK_OK(xtq_signal_wait(s, XTQ_SIGNAL_GTE, 5, 0, NULL));
    CHECK_OK(xtq_signal_wait(s, XTQ_SIGNAL_GTE, -100, 0, NULL));
    /* Those that do not time out. */
    CHECK_ERR(xtq_signal_wait(s, XTQ_SIGNAL_EQ, 4, 0, &seen), -XTQ_ETIMEDOUT);
    CHECK_EQ(seen, 5);
    CHECK_ERR(xtq_signal_wait(s, XTQ_SIGNAL_NE, 5, 0, NULL), -XTQ_ETIMEDOUT);
    CHECK_ERR(xtq_signal_wait(s, XTQ_SIGNAL_LT, 5, 0, NULL), -XTQ_ETIMEDOUT);
    CHECK_ERR(xtq_signal_wait(s, XTQ_SIGNAL_GTE, 6, 0, NULL), -XTQ_ETIMEDOUT);
    /* Invalid arguments. */
    CHECK_ERR(xtq_signal_wait(s, (enum xtq_signal_condition)9, 0, 0, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_signal_wait(s, XTQ_SIGNAL_EQ, 0, -1, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_signal_wait(NULL, XTQ_SIGNAL_EQ, 0, 0, NULL), -XTQ_EINVAL);
    CHECK_OK(xtq_signal_destroy(s));
}

XTQ_TEST(wait_timeout)
{
    xtq_signal_t *s;
    int64_t seen = -1;
    uint64_t t0;

    CHECK_OK(xtq_signal_create(1, &s));
    t0 = xtq__now_ns();
    CHECK_ERR(xtq_signal_wait(s, XTQ_SIGNAL_EQ, 0, 2000000, &seen), -XTQ_ETIMEDOUT);
    /* A timeout is not early (lower bound only: no upper timing assertion). */
    CHECK(xtq__now_ns() - t0 >= 2000000);
    CHECK_EQ(seen, 1);
    CHECK_OK(xtq_signal_destroy(s));
}

XTQ_TEST(handles)
{
    xtq_signal_t *s;
    xtq_signal_handle_t h, zero = {0};
    uint64_t junk[8] = {0};

    CHECK_OK(xtq_signal_create(0, &s));
    h = xtq_signal_handle(s);
    CHECK(h.handle != 0);
    CHECK(xtq_signal_from_handle(h) == s);
    CHECK(xtq_signal_from_handle(zero) == NULL);
    /* Memory that is not a signal (no magic) and a misaligned value. */
    xtq_signal_handle_t bad = {(uint64_t)(uintptr_t)junk};
    CHECK(xtq_signal_from_handle(bad) == NULL);
    xtq_signal_handle_t odd = {h.handle + 1};
    CHECK(xtq_signal_from_handle(odd) == NULL);
    CHECK_OK(xtq_signal_destroy(s));
}

XTQ_TEST(init_at_not_freed)
{
    _Alignas(64) struct xtq_signal mem;

    xtq__signal_init_at(&mem, 3, XTQ__SIGNAL_DEVICE);
    CHECK(mem.flags & XTQ__SIGNAL_EXTERNAL_MEM);
    CHECK(xtq_signal_from_handle(xtq_signal_handle(&mem)) == &mem);
    CHECK_EQ(xtq_signal_add(&mem, -1), 3);
    CHECK_OK(xtq_signal_wait(&mem, XTQ_SIGNAL_EQ, 2, 0, NULL));
    /* Destroy of caller-owned memory must not free it (ASan would catch it). */
    CHECK_OK(xtq_signal_destroy(&mem));
    CHECK(xtq_signal_from_handle(xtq_signal_handle(&mem)) == NULL);
}

struct waiter_arg {
    xtq_signal_t *sig;
    xtq_signal_t *ready;
    enum xtq_signal_condition cond;
    int64_t compare;
    int rc;
    int64_t seen;
};

static void *waiter_main(void *p)
{
    struct waiter_arg *w = p;

    xtq_signal_add(w->ready, 1);
    w->rc = xtq_signal_wait(w->sig, w->cond, w->compare, XTQ_TIMEOUT_INFINITE, &w->seen);
    return NULL;
}

/* Waiters block (infinite timeout) and must all be woken by stores made
 * while some of them are asleep in the futex. */
XTQ_TEST(waiter_wakes_on_store)
{
    enum { N = 4 };
    xtq_signal_t *s, *ready;
    pthread_t th[N];
    struct waiter_arg w[N];

    CHECK_OK(xtq_signal_create(10, &s));
    CHECK_OK(xtq_signal_create(0, &ready));
    for (int i = 0; i < N; i++) {
        w[i] = (struct waiter_arg){s, ready, XTQ_SIGNAL_LT, 10 - i, -1, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    }
    CHECK_OK(xtq_signal_wait(ready, XTQ_SIGNAL_EQ, N, XTQ_TIMEOUT_INFINITE, NULL));
    /* Step down one at a time: each store releases exactly the waiters
     * whose condition now holds; the rest keep waiting. */
    for (int i = 0; i < N; i++)
        xtq_signal_store(s, 9 - i);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        CHECK_OK(w[i].rc);
        CHECK(w[i].seen < 10 - i);
    }
    CHECK_OK(xtq_signal_destroy(ready));
    CHECK_OK(xtq_signal_destroy(s));
}

/* A waiter that is certainly asleep (registered as a sleeper) is woken by
 * a store. */
XTQ_TEST(sleeping_waiter_wakes)
{
    xtq_signal_t *s, *ready;
    pthread_t th;
    struct waiter_arg w;

    CHECK_OK(xtq_signal_create(1, &s));
    CHECK_OK(xtq_signal_create(0, &ready));
    w = (struct waiter_arg){s, ready, XTQ_SIGNAL_EQ, 0, -1, 0};
    CHECK_EQ(pthread_create(&th, NULL, waiter_main, &w), 0);
    /* Wait until the waiter has registered itself (past its spin phase). */
    while (xtq__signal_sleepers(s) == 0)
        sched_yield();
    xtq_signal_add(s, -1);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_OK(w.rc);
    CHECK_EQ(w.seen, 0);
    CHECK_OK(xtq_signal_destroy(ready));
    CHECK_OK(xtq_signal_destroy(s));
}

static void *device_writer(void *p)
{
    struct xtq_signal *s = p;

    while (xtq__signal_sleepers(s) == 0)
        sched_yield();
    /* What a device does: change the value, no futex wake. */
    atomic_store_explicit(&s->value, 0, memory_order_release);
    return NULL;
}

/* A device-flagged signal changed without a wake is still seen (bounded
 * naps), instead of leaving the waiter asleep forever. */
XTQ_TEST(device_signal_naps)
{
    _Alignas(64) struct xtq_signal s;
    pthread_t th;
    int64_t seen = -1;

    xtq__signal_init_at(&s, 1, XTQ__SIGNAL_DEVICE);
    CHECK_EQ(pthread_create(&th, NULL, device_writer, &s), 0);
    CHECK_OK(xtq_signal_wait(&s, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, &seen));
    CHECK_EQ(seen, 0);
    CHECK_EQ(pthread_join(th, NULL), 0);
}

/* ---- exchange and compare-and-swap ---------------------------------------- */

XTQ_TEST(exchange_and_cas)
{
    xtq_signal_t *s;

    CHECK_OK(xtq_signal_create(5, &s));
    CHECK_EQ(xtq_signal_exchange(s, 9), 5);
    CHECK_EQ(xtq_signal_load(s), 9);
    /* A swap happens exactly when the observed value equals `expected`. */
    CHECK_EQ(xtq_signal_cas(s, 9, -4), 9);
    CHECK_EQ(xtq_signal_load(s), -4);
    CHECK_EQ(xtq_signal_cas(s, 9, 100), -4);
    CHECK_EQ(xtq_signal_load(s), -4);
    CHECK_EQ(xtq_signal_cas(s, -4, -4), -4); /* equal value: no change */
    CHECK_EQ(xtq_signal_load(s), -4);
    CHECK_EQ(xtq_signal_exchange(s, INT64_MIN), -4);
    CHECK_EQ(xtq_signal_cas(s, INT64_MIN, INT64_MAX), INT64_MIN);
    CHECK_EQ(xtq_signal_load(s), INT64_MAX);
    CHECK_OK(xtq_signal_destroy(s));
}

/* A waiter asleep in the futex is woken by an exchange, then by a CAS. */
XTQ_TEST(exchange_and_cas_wake)
{
    xtq_signal_t *s, *ready;
    pthread_t th;
    struct waiter_arg w;

    CHECK_OK(xtq_signal_create(1, &s));
    CHECK_OK(xtq_signal_create(0, &ready));
    w = (struct waiter_arg){s, ready, XTQ_SIGNAL_EQ, 7, -1, 0};
    CHECK_EQ(pthread_create(&th, NULL, waiter_main, &w), 0);
    while (xtq__signal_sleepers(s) == 0)
        sched_yield();
    CHECK_EQ(xtq_signal_exchange(s, 7), 1);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_OK(w.rc);
    CHECK_EQ(w.seen, 7);

    w = (struct waiter_arg){s, ready, XTQ_SIGNAL_LT, 0, -1, 0};
    CHECK_EQ(pthread_create(&th, NULL, waiter_main, &w), 0);
    while (xtq__signal_sleepers(s) == 0)
        sched_yield();
    /* A failed CAS changes nothing: the waiter keeps sleeping. */
    CHECK_EQ(xtq_signal_cas(s, 3, -1), 7);
    CHECK_EQ(xtq_signal_cas(s, 7, -1), 7);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_OK(w.rc);
    CHECK_EQ(w.seen, -1);
    CHECK_OK(xtq_signal_destroy(ready));
    CHECK_OK(xtq_signal_destroy(s));
}

#define CAS_THREADS 4
#define CAS_ROUNDS 20000

struct cas_arg {
    xtq_signal_t *s;
    xtq_signal_t *go;
    uint64_t wins;
    uint64_t losses;
};

/* Each thread adds 1 CAS_ROUNDS times through compare-and-swap alone. */
static void *cas_main(void *p)
{
    struct cas_arg *a = p;

    CHECK_OK(xtq_signal_wait(a->go, XTQ_SIGNAL_EQ, 1, XTQ_TIMEOUT_INFINITE, NULL));
    for (int i = 0; i < CAS_ROUNDS; i++) {
        int64_t v = xtq_signal_load(a->s);
        for (;;) {
            int64_t seen = xtq_signal_cas(a->s, v, v + 1);
            if (seen == v)
                break;
            a->losses++;
            v = seen;
        }
        a->wins++;
    }
    return NULL;
}

/* Concurrent CAS from several threads loses no increment, and a waiter on
 * the final value wakes (TSan runs this: the signal's atomics only). */
XTQ_TEST(concurrent_cas)
{
    xtq_signal_t *s, *go, *ready;
    pthread_t th[CAS_THREADS], wt;
    struct cas_arg a[CAS_THREADS];
    struct waiter_arg w;

    CHECK_OK(xtq_signal_create(0, &s));
    CHECK_OK(xtq_signal_create(0, &go));
    CHECK_OK(xtq_signal_create(0, &ready));
    w = (struct waiter_arg){s, ready, XTQ_SIGNAL_EQ, CAS_THREADS * CAS_ROUNDS, -1, 0};
    CHECK_EQ(pthread_create(&wt, NULL, waiter_main, &w), 0);
    for (int i = 0; i < CAS_THREADS; i++) {
        a[i] = (struct cas_arg){s, go, 0, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, cas_main, &a[i]), 0);
    }
    xtq_signal_store(go, 1);
    uint64_t wins = 0, losses = 0;
    for (int i = 0; i < CAS_THREADS; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        wins += a[i].wins;
        losses += a[i].losses;
    }
    CHECK_EQ(pthread_join(wt, NULL), 0);
    CHECK_OK(w.rc);
    CHECK_EQ(w.seen, CAS_THREADS * CAS_ROUNDS);
    CHECK_EQ(wins, CAS_THREADS * CAS_ROUNDS);
    CHECK_EQ(xtq_signal_load(s), CAS_THREADS * CAS_ROUNDS);
    printf("concurrent CAS: %llu swaps, %llu lost races\n", (unsigned long long)wins,
           (unsigned long long)losses);
    CHECK_OK(xtq_signal_destroy(ready));
    CHECK_OK(xtq_signal_destroy(go));
    CHECK_OK(xtq_signal_destroy(s));
}

/* Waits on device-changed signals poll for what the GPU agents asked, the
 * longest of them: an agent opened on a crowded host cannot shorten the
 * poll another agent asked for. */
XTQ_TEST(device_spin_only_raised)
{
    uint64_t base = xtq__device_signal_spin_ns();
    CHECK(base >= 4000);
    xtq__device_signal_spin_raise(0);
    CHECK_EQ(xtq__device_signal_spin_ns(), base);
    xtq__device_signal_spin_raise(base + 96000);
    CHECK_EQ(xtq__device_signal_spin_ns(), base + 96000);
    xtq__device_signal_spin_raise(base);
    CHECK_EQ(xtq__device_signal_spin_ns(), base + 96000);
}

/* ---- wake-ups only where the condition holds ------------------------------ */

/* A signal counting down a batch (one decrement per task, the waiter for
 * 0) wakes its sleeping waiter once, at 0: none of the other changes
 * makes a futex call. Before, each one did (xtq_bench_msgrate: one system
 * call per task on the engine's thread). */
XTQ_TEST(countdown_wakes_once)
{
    enum { N = 1000 };
    xtq_signal_t *s, *ready;
    pthread_t th;
    struct waiter_arg w;

    CHECK_OK(xtq_signal_create(N, &s));
    CHECK_OK(xtq_signal_create(0, &ready));
    w = (struct waiter_arg){s, ready, XTQ_SIGNAL_EQ, 0, -1, -1};
    CHECK_EQ(pthread_create(&th, NULL, waiter_main, &w), 0);
    while (xtq__signal_sleepers(s) == 0)
        sched_yield();
    uint64_t w0 = xtq__signal_wakeups();
    for (int i = 0; i < N - 1; i++)
        xtq_signal_add(s, -1);
    xtq_signal_store(s, 1); /* a store that does not meet it either */
    CHECK_EQ(xtq__signal_wakeups() - w0, 0);
    CHECK_EQ(xtq__signal_sleepers(s), 1);
    xtq_signal_add(s, -1);
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_OK(w.rc);
    CHECK_EQ(w.seen, 0);
    CHECK_EQ(xtq__signal_wakeups() - w0, 1);
    CHECK_EQ(xtq__signal_sleepers(s), 0);
    CHECK_OK(xtq_signal_destroy(ready));
    CHECK_OK(xtq_signal_destroy(s));
}

/* Sleepers with different conditions on one signal: the first one's
 * condition is the signal's, a second with the same shares it, a third
 * with another is woken by every change. Each returns exactly when its
 * own condition holds. */
XTQ_TEST(mixed_conditions)
{
    xtq_signal_t *s, *ready;
    pthread_t th[3];
    struct waiter_arg w[3];

    CHECK_OK(xtq_signal_create(10, &s));
    CHECK_OK(xtq_signal_create(0, &ready));
    w[0] = (struct waiter_arg){s, ready, XTQ_SIGNAL_EQ, 0, -1, -1};
    CHECK_EQ(pthread_create(&th[0], NULL, waiter_main, &w[0]), 0);
    while (xtq__signal_sleepers(s) < 1)
        sched_yield();
    w[1] = (struct waiter_arg){s, ready, XTQ_SIGNAL_EQ, 0, -1, -1};
    w[2] = (struct waiter_arg){s, ready, XTQ_SIGNAL_LT, 5, -1, -1};
    for (int i = 1; i < 3; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, waiter_main, &w[i]), 0);
    while (xtq__signal_sleepers(s) < 3)
        sched_yield();
    CHECK_EQ(atomic_load(&s->cond_waiters), 2);
    CHECK_EQ(atomic_load(&s->waiters), 1);
    /* Down to 4: the LT 5 waiter returns, the two EQ 0 ones sleep on. */
    for (int i = 0; i < 6; i++)
        xtq_signal_add(s, -1);
    CHECK_EQ(pthread_join(th[2], NULL), 0);
    CHECK_OK(w[2].rc);
    CHECK(w[2].seen < 5);
    CHECK_EQ(atomic_load(&s->waiters), 0);
    CHECK_EQ(atomic_load(&s->cond_waiters), 2);
    xtq_signal_store(s, 0);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        CHECK_OK(w[i].rc);
        CHECK_EQ(w[i].seen, 0);
    }
    CHECK_EQ(xtq__signal_sleepers(s), 0);
    CHECK_OK(xtq_signal_destroy(ready));
    CHECK_OK(xtq_signal_destroy(s));
}

#define DOWN_THREADS 2
#define DOWN_WAITERS 3
#define DOWN_ROUNDS 200
#define DOWN_STEPS 50

struct down_arg {
    xtq_signal_t *s;
    xtq_signal_t *go;
};

/* Each round: DOWN_STEPS decrements from each thread, then wait for the
 * round's next start. */
static void *down_main(void *p)
{
    struct down_arg *a = p;
    for (int r = 1; r <= DOWN_ROUNDS; r++) {
        CHECK_OK(xtq_signal_wait(a->go, XTQ_SIGNAL_GTE, r, XTQ_TIMEOUT_INFINITE, NULL));
        for (int i = 0; i < DOWN_STEPS; i++)
            xtq_signal_add(a->s, -1);
    }
    return NULL;
}

struct round_waiter {
    xtq_signal_t *s;
    xtq_signal_t *done;
};

static void *round_waiter_main(void *p)
{
    struct round_waiter *w = p;
    for (int r = 1; r <= DOWN_ROUNDS; r++) {
        /* Each round's countdown ends at -r * DOWN_THREADS * DOWN_STEPS
         * relative to its start: the waiters join, sleep and leave the
         * condition's slot over and over, with another condition each
         * round. */
        int64_t end = -(int64_t)r * DOWN_THREADS * DOWN_STEPS;
        CHECK_OK(xtq_signal_wait(w->s, XTQ_SIGNAL_EQ, end, XTQ_TIMEOUT_INFINITE, NULL));
        xtq_signal_add(w->done, 1);
    }
    return NULL;
}

/* Countdowns in rounds, with waiters joining and leaving the condition
 * between them: no wake-up is lost (a lost one hangs the test; TSan runs
 * it: the signal's atomics only). */
XTQ_TEST(countdown_rounds)
{
    xtq_signal_t *s, *go, *done;
    pthread_t dt[DOWN_THREADS], wt[DOWN_WAITERS];
    struct down_arg da = {0};
    struct round_waiter rw = {0};

    CHECK_OK(xtq_signal_create(0, &s));
    CHECK_OK(xtq_signal_create(0, &go));
    CHECK_OK(xtq_signal_create(0, &done));
    da = (struct down_arg){s, go};
    rw = (struct round_waiter){s, done};
    for (int i = 0; i < DOWN_THREADS; i++)
        CHECK_EQ(pthread_create(&dt[i], NULL, down_main, &da), 0);
    for (int i = 0; i < DOWN_WAITERS; i++)
        CHECK_EQ(pthread_create(&wt[i], NULL, round_waiter_main, &rw), 0);
    for (int r = 1; r <= DOWN_ROUNDS; r++) {
        xtq_signal_store(go, r);
        CHECK_OK(xtq_signal_wait(done, XTQ_SIGNAL_EQ, (int64_t)r * DOWN_WAITERS,
                                 XTQ_TIMEOUT_INFINITE, NULL));
    }
    for (int i = 0; i < DOWN_THREADS; i++)
        CHECK_EQ(pthread_join(dt[i], NULL), 0);
    for (int i = 0; i < DOWN_WAITERS; i++)
        CHECK_EQ(pthread_join(wt[i], NULL), 0);
    CHECK_EQ(xtq_signal_load(s), -(int64_t)DOWN_ROUNDS * DOWN_THREADS * DOWN_STEPS);
    CHECK_EQ(xtq__signal_sleepers(s), 0);
    CHECK_OK(xtq_signal_destroy(done));
    CHECK_OK(xtq_signal_destroy(go));
    CHECK_OK(xtq_signal_destroy(s));
}
