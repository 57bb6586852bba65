/*
 * White-box tests of the engine (xtq/nic-emul/) in one process: a context
 * started without a launcher is rank 0 of 1, so the engine's endpoint,
 * progress thread and acks are real; the tests reach the paths no
 * multi-rank test can aim at (stop racing with agent threads).
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

#include <pthread.h>
#include <time.h>

#include "xtq_test.h"

static void nap_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* ---- stop while agent threads queue acks (issue 10, bug 8) ------------- */

struct ack_storm {
    struct xtq__engine *e;
    _Atomic int go;
    _Atomic uint64_t sent_after_stop;
};

static void *ack_storm_main(void *arg)
{
    struct ack_storm *s = arg;
    uint64_t seq = 1u << 20; /* never in our window: the acks are dropped on arrival */
    while (atomic_load(&s->go)) {
        xtq__ack_send(s->e, 0, seq++, 0);
        if (atomic_load_explicit(&s->e->stop, memory_order_relaxed))
            atomic_fetch_add(&s->sent_after_stop, 1);
    }
    return NULL;
}

/*
 * Agent workers acknowledge tasks from their own threads, and keep doing
 * so after finalize stopped the engine when a task outlived the drain
 * timeout. Stop must take the ack queue under its lock, and an ack queued
 * after it must be dropped, not leaked or linked into a freed list (TSan
 * and LSan see either).
 */
XTQ_TEST(stop_while_acks_are_queued)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    pthread_t th[2];
    struct ack_storm s;

    setenv("XTQ_FINALIZE_TIMEOUT_MS", "2000", 1);
    CHECK_OK(xtq_init(&attr, &ctx));
    s.e = ctx->engine;
    atomic_init(&s.go, 1);
    atomic_init(&s.sent_after_stop, 0);
    /* No inject space: every ack takes the queue (a provider without
     * inject does the same). */
    s.e->ofi.inject_size = 0;
    for (int i = 0; i < 2; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, ack_storm_main, &s), 0);
    nap_us(20000);
    xtq__engine_stop(s.e);
    /* Let the threads queue acks after the stop. */
    while (atomic_load(&s.sent_after_stop) < 200)
        nap_us(1000);
    atomic_store(&s.go, 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    /* Nothing is left for anyone to send. */
    CHECK_EQ(atomic_load(&s.e->acks_pending), 0);
    CHECK_OK(xtq_finalize(ctx));
}
