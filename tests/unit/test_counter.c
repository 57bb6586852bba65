/*
 * Completion counters, white-box: puts are stood in for by the engine's
 * two calls (xtq__counter_attach when a put naming the counter is issued,
 * xtq__counter_complete when it is DONE). Counts, the first error, destroy
 * and reset refused while puts are pending, waits on a threshold woken by
 * completions from other threads (TSan runs these), timeouts, and the
 * manual-progress wait on a real context (manual_wait).
 */
#include "internal.h"

#include "xtq_test.h"

static xtq_ctx_t *fake_ctx(enum xtq_progress_mode mode)
{
    xtq_ctx_t *ctx = calloc(1, sizeof(*ctx));
    CHECK(ctx);
    ctx->progress = mode;
    return ctx;
}

XTQ_TEST(counts_and_first_error)
{
    xtq_ctx_t *ctx = fake_ctx(XTQ_PROGRESS_THREAD);
    xtq_counter_t *c;

    CHECK_ERR(xtq_counter_create(NULL, &c), -XTQ_EINVAL);
    CHECK_ERR(xtq_counter_create(ctx, NULL), -XTQ_EINVAL);
    CHECK_OK(xtq_counter_create(ctx, &c));
    CHECK_EQ(((uintptr_t)c) % XTQ_CACHELINE, 0);
    CHECK_EQ(xtq_counter_read(c), 0);
    CHECK_EQ(xtq_counter_read_err(c), 0);
    CHECK_EQ(xtq_counter_error(c), 0);
    for (int i = 0; i < 4; i++)
        xtq__counter_attach(c);
    /* Pending puts: neither destroy nor reset. */
    CHECK_ERR(xtq_counter_destroy(c), -XTQ_EBUSY);
    CHECK_ERR(xtq_counter_reset(c), -XTQ_EBUSY);
    xtq__counter_complete(c, 0);
    xtq__counter_complete(c, -XTQ_ERANGE);
    xtq__counter_complete(c, 0);
    xtq__counter_complete(c, -XTQ_EHOSTDOWN);
    CHECK_EQ(xtq_counter_read(c), 2);
    CHECK_EQ(xtq_counter_read_err(c), 2);
    CHECK_EQ(xtq_counter_error(c), -XTQ_ERANGE); /* the first one */
    CHECK_OK(xtq_counter_wait(ctx, c, 4, 0));
    CHECK_ERR(xtq_counter_wait(ctx, c, 5, 0), -XTQ_ETIMEDOUT);
    CHECK_ERR(xtq_counter_wait(ctx, c, 5, 1000000), -XTQ_ETIMEDOUT);
    CHECK_ERR(xtq_counter_wait(ctx, c, 1, -5), -XTQ_EINVAL);
    CHECK_ERR(xtq_counter_wait(NULL, c, 1, 0), -XTQ_EINVAL);
    /* A threshold no int64 count reaches is never met, not wrapped. */
    CHECK_ERR(xtq_counter_wait(ctx, c, UINT64_MAX, 0), -XTQ_ETIMEDOUT);
    CHECK_OK(xtq_counter_reset(c));
    CHECK_EQ(xtq_counter_read(c), 0);
    CHECK_EQ(xtq_counter_read_err(c), 0);
    CHECK_EQ(xtq_counter_error(c), 0);
    CHECK_OK(xtq_counter_wait(ctx, c, 0, 0));
    CHECK_ERR(xtq_counter_wait(ctx, c, 1, 0), -XTQ_ETIMEDOUT);
    CHECK_OK(xtq_counter_destroy(c));
    CHECK_ERR(xtq_counter_destroy(NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_counter_reset(NULL), -XTQ_EINVAL);
    free(ctx);
}

#define THREADS    4
#define PER_THREAD 20000

struct completer {
    xtq_counter_t *c;
    int id;
};

static void *completer_main(void *p)
{
    struct completer *w = p;
    for (int i = 0; i < PER_THREAD; i++)
        xtq__counter_complete(w->c, (i % 1000 == 999) ? -XTQ_EIO - w->id : 0);
    return NULL;
}

/* Completions from several threads (as from the progress thread and agent
 * workers) lose nothing, and a waiter asleep on the threshold wakes. */
XTQ_TEST(wait_woken_by_completions)
{
    xtq_ctx_t *ctx = fake_ctx(XTQ_PROGRESS_THREAD);
    xtq_counter_t *c;
    pthread_t th[THREADS];
    struct completer w[THREADS];

    CHECK_OK(xtq_counter_create(ctx, &c));
    for (int i = 0; i < THREADS * PER_THREAD; i++)
        xtq__counter_attach(c);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct completer){c, i};
        CHECK_EQ(pthread_create(&th[i], NULL, completer_main, &w[i]), 0);
    }
    CHECK_OK(xtq_counter_wait(ctx, c, THREADS * PER_THREAD, XTQ_TIMEOUT_INFINITE));
    /* Seen the total: seen every count (and DONE: destroy may follow). */
    CHECK_EQ(xtq_counter_read(c) + xtq_counter_read_err(c), THREADS * PER_THREAD);
    CHECK_EQ(xtq_counter_read_err(c), THREADS * PER_THREAD / 1000);
    int e = xtq_counter_error(c);
    CHECK(e <= -XTQ_EIO && e > -XTQ_EIO - THREADS);
    CHECK_OK(xtq_counter_destroy(c));
    for (int i = 0; i < THREADS; i++)
        CHECK_EQ(pthread_join(th[i], NULL), 0);
    free(ctx);
}

/* A waiter may destroy the counter as soon as its threshold holds, while
 * the completer that met it is still returning (TSan/ASan see any touch
 * after the free). */
static void *one_completion(void *p)
{
    xtq__counter_complete(p, 0);
    return NULL;
}

XTQ_TEST(destroy_right_after_wait)
{
    xtq_ctx_t *ctx = fake_ctx(XTQ_PROGRESS_THREAD);
    for (int round = 0; round < 200; round++) {
        xtq_counter_t *c;
        pthread_t th;
        CHECK_OK(xtq_counter_create(ctx, &c));
        xtq__counter_attach(c);
        CHECK_EQ(pthread_create(&th, NULL, one_completion, c), 0);
        CHECK_OK(xtq_counter_wait(ctx, c, 1, XTQ_TIMEOUT_INFINITE));
        CHECK_OK(xtq_counter_destroy(c));
        CHECK_EQ(pthread_join(th, NULL), 0);
    }
    free(ctx);
}

/* Manual progress on a real context (alone): the waiter turns the engine
 * between naps and still times out when nothing comes. */
XTQ_TEST(manual_wait)
{
    xtq_init_attr_t attr = {.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS,
                            .progress = XTQ_PROGRESS_MANUAL};
    xtq_ctx_t *ctx;
    xtq_counter_t *c;
    pthread_t th;

    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_OK(xtq_counter_create(ctx, &c));
    CHECK_ERR(xtq_counter_wait(ctx, c, 1, 2000000), -XTQ_ETIMEDOUT);
    xtq__counter_attach(c);
    CHECK_EQ(pthread_create(&th, NULL, one_completion, c), 0);
    CHECK_OK(xtq_counter_wait(ctx, c, 1, XTQ_TIMEOUT_INFINITE));
    CHECK_EQ(pthread_join(th, NULL), 0);
    CHECK_OK(xtq_counter_destroy(c));
    CHECK_OK(xtq_finalize(ctx));
}
