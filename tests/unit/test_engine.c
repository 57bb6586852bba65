/*
 * White-box tests of the engine (xtq/nic-emul/) in one process: a context
 * started without a launcher is rank 0 of 1, so the engine's endpoint,
 * progress thread and acks are real; the tests reach the paths no
 * multi-rank test can aim at (stop racing with agent threads).
 */
#include "internal.h"
#include "nic-emul/engine_int.h"

#include <dirent.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

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
    _Atomic uint64_t seq;
    _Atomic uint64_t sent_after_stop;
};

/* As a task's retirement does: the put's entry, then its ack. */
static void ack_one(struct xtq__engine *e, uint64_t seq)
{
    int err;
    struct ack_entry *a = xtq__ack_hold(e, 0, seq, 0, false, &err);
    if (a) /* else another thread's put holds the entry */
        xtq__ack_done(e, a, 0);
}

static void *ack_storm_main(void *arg)
{
    struct ack_storm *s = arg;
    while (atomic_load(&s->go)) {
        ack_one(s->e, atomic_fetch_add(&s->seq, 1));
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
    /* Never in our window: the acks are dropped on arrival. */
    atomic_init(&s.seq, 1u << 20);
    /* The ring of entries is made at a peer's first put (progress turn). */
    ack_one(s.e, atomic_fetch_add(&s.seq, 1));
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

/* ---- a queue destroyed with the engine's tasks in it (bug 3) ---------- */

struct gate {
    xtq_signal_t *started, *gate;
};

static void gate_fn(const uint64_t arg[4], void *ret, void *user)
{
    struct gate *g = user;
    xtq_signal_add(g->started, -1);
    CHECK_OK(xtq_signal_wait(g->gate, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
}

static void nop_fn(const uint64_t arg[4], void *ret, void *user) {}

/* One worker, so that a gated task holds it; the gate's two signals. */
static void gate_init(const xtq_init_attr_t *attr, xtq_ctx_t **ctx, xtq_agent_t **cpu,
                      struct gate *g)
{
    setenv("XTQ_CPU_WORKERS", "1", 1);
    CHECK_OK(xtq_init(attr, ctx));
    CHECK_OK(xtq_agent_find(*ctx, XTQ_AGENT_CPU, cpu));
    CHECK_OK(xtq_signal_create(1, &g->started));
    CHECK_OK(xtq_signal_create(1, &g->gate));
}

static void put_fn(xtq_ctx_t *ctx, uint32_t fn, uint32_t queue, xtq_completion_t *c)
{
    uint8_t cmd[64];
    size_t len;
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), fn, queue, 0, 0, &len));
    CHECK_OK(xtq_put(ctx, 0, cmd, len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, c));
}

/* A context whose function 1, on queue 1, is the gated task. */
struct gated {
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *fg;
    struct gate g;
};

static void gated_open(struct gated *t)
{
    xtq_init_attr_t attr = {0};
    gate_init(&attr, &t->ctx, &t->cpu, &t->g);
    CHECK_OK(xtq_queue_create(t->cpu, 16, &t->q));
    CHECK_OK(xtq_function_create_cpu(t->cpu, gate_fn, &t->g, &t->fg));
    CHECK_OK(xtq_register_queue(t->ctx, 1, t->q));
    CHECK_OK(xtq_register_function(t->ctx, 1, t->fg, NULL));
}

static void gated_close(struct gated *t)
{
    CHECK_OK(xtq_unregister_function(t->ctx, 1));
    CHECK_OK(xtq_unregister_queue(t->ctx, 1));
    CHECK_OK(xtq_queue_destroy(t->q));
    CHECK_OK(xtq_function_destroy(t->fg));
    xtq_signal_destroy(t->g.gate);
    xtq_signal_destroy(t->g.started);
    CHECK_OK(xtq_finalize(t->ctx));
}

/*
 * Puts whose tasks wait in a queue that the application destroys complete
 * with -XTQ_ECANCELED at once (the agent retires them), not after
 * finalize's timeout.
 */
XTQ_TEST(queue_destroy_cancels_puts)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *held, *q;
    xtq_function_t *fg, *f;
    struct gate g;
    xtq_completion_t first = {0}, c[4];
    xtq_stats_t st;

    gate_init(&attr, &ctx, &cpu, &g);
    CHECK_OK(xtq_queue_create(cpu, 16, &held));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, gate_fn, &g, &fg));
    CHECK_OK(xtq_function_create_cpu(cpu, nop_fn, NULL, &f));
    CHECK_OK(xtq_register_queue(ctx, 1, held));
    CHECK_OK(xtq_register_queue(ctx, 2, q));
    CHECK_OK(xtq_register_function(ctx, 1, fg, NULL));
    CHECK_OK(xtq_register_function(ctx, 2, f, NULL));

    /* The only worker is held by a task of the other queue. */
    put_fn(ctx, 1, 1, &first);
    CHECK_OK(xtq_signal_wait(g.started, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 4; i++)
        put_fn(ctx, 2, 2, &c[i]);
    for (;;) { /* all four in q */
        CHECK_OK(xtq_get_stats(ctx, &st));
        if (st.tasks_enqueued >= 5)
            break;
        nap_us(1000);
    }
    CHECK_OK(xtq_unregister_queue(ctx, 2));
    CHECK_OK(xtq_queue_destroy(q));
    for (int i = 0; i < 4; i++)
        CHECK_ERR(xtq_completion_wait(ctx, &c[i], 30ll * 1000000000), -XTQ_ECANCELED);

    xtq_signal_store(g.gate, 0);
    CHECK_OK(xtq_completion_wait(ctx, &first, 30ll * 1000000000));
    CHECK_OK(xtq_unregister_function(ctx, 1));
    CHECK_OK(xtq_unregister_function(ctx, 2));
    CHECK_OK(xtq_unregister_queue(ctx, 1));
    CHECK_OK(xtq_queue_destroy(held));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_function_destroy(fg));
    xtq_signal_destroy(g.gate);
    xtq_signal_destroy(g.started);
    CHECK_OK(xtq_finalize(ctx));
}

/* ---- waiting for LOCAL, reaping DONE later --------------------------- */

/*
 * xtq_completion_wait_state(LOCAL) returns once the put's buffers are free,
 * while its task still runs (libxtq_coll completes a call on it and reaps
 * the acknowledgement later); DONE is waited for on the same object after.
 */
XTQ_TEST(wait_state_local_before_done)
{
    struct gated t;
    xtq_completion_t c = {0};

    gated_open(&t);
    CHECK_ERR(xtq_completion_wait_state(t.ctx, &c, 0, 0), -XTQ_EINVAL);
    CHECK_ERR(xtq_completion_wait_state(t.ctx, &c, 1u << 7, 0), -XTQ_EINVAL);
    CHECK_ERR(xtq_completion_wait_state(NULL, &c, XTQ_COMPLETION_LOCAL, 0), -XTQ_EINVAL);

    put_fn(t.ctx, 1, 1, &c);
    CHECK_OK(xtq_signal_wait(t.g.started, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    CHECK_OK(xtq_completion_wait_state(t.ctx, &c, XTQ_COMPLETION_LOCAL, 30ll * 1000000000));
    CHECK(xtq_completion_state(&c) & XTQ_COMPLETION_LOCAL);
    /* The task is held: not DONE, and waiting for DONE times out. */
    CHECK_EQ(xtq_completion_test(&c), 0);
    CHECK_ERR(xtq_completion_wait_state(t.ctx, &c, XTQ_COMPLETION_DONE, 20000000), -XTQ_ETIMEDOUT);
    CHECK_EQ(xtq_completion_test(&c), 0);

    xtq_signal_store(t.g.gate, 0);
    CHECK_OK(xtq_completion_wait_state(t.ctx, &c, XTQ_COMPLETION_DONE, 30ll * 1000000000));
    CHECK_EQ(xtq_completion_test(&c), 1);
    /* Any bit once DONE: the final status at once. */
    CHECK_OK(xtq_completion_wait_state(t.ctx, &c, XTQ_COMPLETION_REMOTE, 0));
    gated_close(&t);
}

/* ---- how long a wait polls (issue 11, session 17) ------------------------ */

XTQ_TEST(wait_spin_budget_follows_recent_waits)
{
    const uint64_t base = 50000, max = 500000;
    /* Short waits, or none yet: the base spin. */
    CHECK(xtq__wait_spin_budget(base, max, 0) == base);
    CHECK(xtq__wait_spin_budget(base, max, 20000) == base);
    /* Waits of 150 us: poll 1.5 x as long. */
    CHECK(xtq__wait_spin_budget(base, max, 150000) == 225000);
    CHECK(xtq__wait_spin_budget(base, max, 333333) == 499999);
    /* Longer than max would allow: sleep after the base spin, as before. */
    CHECK(xtq__wait_spin_budget(base, max, 400000) == base);
    CHECK(xtq__wait_spin_budget(base, max, UINT64_MAX) == base);
    /* Adapting off (XTQ_WAIT_SPIN_MAX_US=0), or no spin at all. */
    CHECK(xtq__wait_spin_budget(base, 0, 150000) == base);
    CHECK(xtq__wait_spin_budget(0, 0, 150000) == 0);

    /* The average moves a quarter of the way, both ways, and settles. */
    CHECK(xtq__wait_est_update(0, 100000) == 25000);
    CHECK(xtq__wait_est_update(100000, 0) == 75000);
    CHECK(xtq__wait_est_update(100000, 100000) == 100000);
    uint64_t est = 0;
    for (int i = 0; i < 40; i++)
        est = xtq__wait_est_update(est, 150000);
    CHECK(est > 149000 && est <= 150000);
    CHECK(xtq__wait_est_update(UINT64_MAX, 0) == UINT64_MAX - UINT64_MAX / 4);
    CHECK(xtq__wait_est_update(0, UINT64_MAX) == UINT64_MAX / 4);
}

struct gate_opener {
    xtq_signal_t *gate;
    long after_us;
};

static void *open_gate_later(void *arg)
{
    struct gate_opener *o = arg;
    nap_us(o->after_us);
    xtq_signal_store(o->gate, 0);
    return NULL;
}

/* One completion wait of a task held for `held_us`; the context's running
 * average of its waits afterwards. */
static uint64_t wait_est_after_held_task(long held_us, uint64_t *spin_max_ns)
{
    struct gated t;
    xtq_completion_t c = {0};
    pthread_t th;

    gated_open(&t);
    *spin_max_ns = t.ctx->engine->wait_spin_max_ns;
    CHECK(atomic_load(&t.ctx->engine->wait_est_ns) == 0);

    struct gate_opener o = {t.g.gate, held_us};
    put_fn(t.ctx, 1, 1, &c);
    CHECK_OK(xtq_signal_wait(t.g.started, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    CHECK(pthread_create(&th, NULL, open_gate_later, &o) == 0);
    CHECK_OK(xtq_completion_wait(t.ctx, &c, 30ll * 1000000000));
    CHECK_OK(c.status);
    pthread_join(th, NULL);
    uint64_t est = atomic_load(&t.ctx->engine->wait_est_ns);
    gated_close(&t);
    return est;
}

/*
 * A completion wait teaches the context how long its waits take (a task
 * held 20 ms: the average moves a quarter of the way, 5 ms or more), where
 * waits may poll longer than XTQ_WAIT_SPIN_US; with XTQ_WAIT_SPIN_MAX_US=0,
 * or on a host whose waits do not poll, nothing is learnt.
 */
XTQ_TEST(completion_waits_teach_the_spin)
{
    uint64_t max;
    setenv("XTQ_WAIT_SPIN_US", "1", 1);
    setenv("XTQ_WAIT_SPIN_MAX_US", "1000", 1);
    uint64_t est = wait_est_after_held_task(20000, &max);
    CHECK(max == 1000000);
    CHECK(est >= 5000000);

    setenv("XTQ_WAIT_SPIN_MAX_US", "0", 1);
    est = wait_est_after_held_task(20000, &max);
    CHECK(max == 0);
    CHECK(est == 0);

    setenv("XTQ_WAIT_SPIN_US", "0", 1);
    setenv("XTQ_WAIT_SPIN_MAX_US", "1000", 1);
    est = wait_est_after_held_task(20000, &max);
    CHECK(max == 0);
    CHECK(est == 0);
    unsetenv("XTQ_WAIT_SPIN_US");
    unsetenv("XTQ_WAIT_SPIN_MAX_US");
}

/* ---- large puts land in recently used memory (issue 11) ---------------- */

#define BIG_PAYLOAD (1u << 20)

struct landing {
    _Atomic uint32_t n;
    _Atomic uintptr_t at[64]; /* written by the worker, read after completion */
};

static void landing_fn(const uint64_t arg[4], void *ret, void *user)
{
    struct landing *l = user;
    uint32_t i = atomic_fetch_add(&l->n, 1);
    if (i < ARRAY_SIZE(l->at))
        atomic_store(&l->at[i], (uintptr_t)arg[1]);
}

static void put_big(xtq_ctx_t *ctx, uint32_t fn, uint32_t queue, const void *payload,
                    xtq_completion_t *c)
{
    uint8_t cmd[64];
    size_t len;
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), fn, queue, 0, 0, &len));
    CHECK_OK(xtq_put(ctx, 0, cmd, len, payload, BIG_PAYLOAD, XTQ_PUT_REMOTE_COMPLETION, c));
}

/* Index of the receive region that holds `p`, or -1. */
static int region_of(const struct xtq__engine *e, const void *p)
{
    for (unsigned i = 0; i < e->nregions; i++) {
        const uint8_t *b = e->regions[i].buf;
        if ((const uint8_t *)p >= b && (const uint8_t *)p < b + e->regions[i].len)
            return (int)i;
    }
    return -1;
}

/*
 * One megabyte put after another: each lands in one of the few regions
 * kept posted, not in the next of all XTQ_RX_BUFFERS in turn (a copy into
 * memory last touched 32 MiB ago costs twice one into cached memory).
 */
XTQ_TEST(large_puts_land_in_few_regions)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;
    struct landing l = {0};
    bool used[8] = {0};
    int nused = 0;

    /* One worker: task N's region is put back before task N + 1 can
     * retire, so a third region is never needed (two workers could run
     * N + 1 while N's retire is between its ack and its region_put). */
    setenv("XTQ_CPU_WORKERS", "1", 1);
    setenv("XTQ_RX_BUFFERS", "8", 1);
    setenv("XTQ_RX_BUFFERS_POSTED", "1", 1);
    setenv("XTQ_RX_BUFFER_SIZE", "4M", 1);
    uint8_t *payload = calloc(1, BIG_PAYLOAD);
    CHECK(payload != NULL);
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_EQ(ctx->engine->nregions, 8);
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, landing_fn, &l, &f));
    CHECK_OK(xtq_register_queue(ctx, 1, q));
    CHECK_OK(xtq_register_function(ctx, 1, f, NULL));

    /* Three fit in a region: 24 went through all eight before. */
    for (int i = 0; i < 24; i++) {
        xtq_completion_t c = {0};
        put_big(ctx, 1, 1, payload, &c);
        CHECK_OK(xtq_completion_wait(ctx, &c, 30ll * 1000000000));
    }
    CHECK_EQ(atomic_load(&l.n), 24);
    for (int i = 0; i < 24; i++) {
        int r = region_of(ctx->engine, (const void *)atomic_load(&l.at[i]));
        CHECK(r >= 0);
        if (!used[r]) {
            used[r] = true;
            nused++;
        }
    }
    /* One posted, and a spare while a task still holds the region the
     * provider released. */
    CHECK(nused <= 2);

    CHECK_OK(xtq_unregister_function(ctx, 1));
    CHECK_OK(xtq_unregister_queue(ctx, 1));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_finalize(ctx));
    free(payload);
}

/*
 * While tasks hold the posted regions, spares are posted in their place:
 * every put lands and is enqueued while the one worker is held, none
 * waits unmatched for a region (nothing is lost either).
 */
XTQ_TEST(spare_regions_posted_while_tasks_hold_regions)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *fg, *f;
    struct gate g;
    struct landing l = {0};
    xtq_completion_t first = {0}, c[12];
    xtq_stats_t st;

    setenv("XTQ_CPU_WORKERS", "1", 1);
    setenv("XTQ_RX_BUFFERS", "8", 1);
    setenv("XTQ_RX_BUFFERS_POSTED", "2", 1);
    setenv("XTQ_RX_BUFFER_SIZE", "4M", 1);
    uint8_t *payload = calloc(1, BIG_PAYLOAD);
    CHECK(payload != NULL);
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_signal_create(1, &g.started));
    CHECK_OK(xtq_signal_create(1, &g.gate));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, gate_fn, &g, &fg));
    CHECK_OK(xtq_function_create_cpu(cpu, landing_fn, &l, &f));
    CHECK_OK(xtq_register_queue(ctx, 1, q));
    CHECK_OK(xtq_register_function(ctx, 1, fg, NULL));
    CHECK_OK(xtq_register_function(ctx, 2, f, NULL));

    put_fn(ctx, 1, 1, &first);
    CHECK_OK(xtq_signal_wait(g.started, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    /* Twelve megabytes: four regions of three, two more than are posted. */
    memset(c, 0, sizeof(c));
    for (int i = 0; i < 12; i++)
        put_big(ctx, 2, 1, payload, &c[i]);
    for (int tries = 0;; tries++) {
        CHECK_OK(xtq_get_stats(ctx, &st));
        if (st.tasks_enqueued >= 13)
            break;
        CHECK(tries < 10000); /* 10 s */
        nap_us(1000);
    }
    CHECK_EQ(atomic_load(&l.n), 0); /* all of them waited behind the gate */

    xtq_signal_store(g.gate, 0);
    CHECK_OK(xtq_completion_wait(ctx, &first, 30ll * 1000000000));
    for (int i = 0; i < 12; i++)
        CHECK_OK(xtq_completion_wait(ctx, &c[i], 30ll * 1000000000));
    CHECK_EQ(atomic_load(&l.n), 12);
    /* Spares went back on their stack: the posted count is the minimum. */
    xtq__mutex_lock(&ctx->engine->rx_lock);
    unsigned posted = ctx->engine->rx_posted;
    pthread_mutex_unlock(&ctx->engine->rx_lock);
    CHECK_EQ(posted, 2u);

    CHECK_OK(xtq_unregister_function(ctx, 1));
    CHECK_OK(xtq_unregister_function(ctx, 2));
    CHECK_OK(xtq_unregister_queue(ctx, 1));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_function_destroy(fg));
    xtq_signal_destroy(g.gate);
    xtq_signal_destroy(g.started);
    CHECK_OK(xtq_finalize(ctx));
    free(payload);
}

/* ---- a region released before every message cut from it landed ------- */

/*
 * ofi_rxm flags a region's release on the completion of the message that
 * took its last piece, while a segmented or rendezvous message matched
 * earlier may still be arriving (CI: the multihost rank_sigstop_8s case
 * ran a 59 KB put from the stopped rank with bytes of later messages).
 * The region must wait for that message before it is posted again. A
 * spare region plays the posted one: the provider never sees it, and the
 * progress thread never touches it.
 */
XTQ_TEST(release_waits_for_earlier_pieces)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;

    setenv("XTQ_RX_BUFFERS", "4", 1);
    setenv("XTQ_RX_BUFFERS_POSTED", "1", 1);
    CHECK_OK(xtq_init(&attr, &ctx));
    struct xtq__engine *e = ctx->engine;

    xtq__mutex_lock(&e->rx_lock);
    CHECK(e->rx_nspare >= 1);
    struct rx_region *r = e->rx_spare[--e->rx_nspare];
    e->rx_posted++;
    unsigned spares = e->rx_nspare;
    pthread_mutex_unlock(&e->rx_lock);
    r->out = false; /* as region_post leaves it */
    atomic_fetch_sub(&e->regions_out, 1);
    r->landed = r->landed_end = 0;
    r->release_pending = false;

    /* Pieces: [0, 192 KiB) a rendezvous message still arriving, then one
     * message to within 64 bytes of the end, whose completion carries the
     * release (FI_RECV | FI_MULTI_RECV). */
    uint8_t *b = r->buf;
    const size_t first = 192 * 1024;
    xtq__region_landed(r, b + first, r->len - first - 64);
    xtq__region_released(r, false);
    CHECK(r->release_pending);
    CHECK_EQ(atomic_load(&r->refs), 1);
    xtq__mutex_lock(&e->rx_lock);
    CHECK_EQ(e->rx_nspare, spares); /* not back among the spares */
    pthread_mutex_unlock(&e->rx_lock);

    /* Waiting is reported once it has lasted (a sender stalled). */
    CHECK_EQ(xtq__regions_stuck(e, r->pending_since + 2000000000ull, 5000000000ull), 0u);
    CHECK_EQ(xtq__regions_stuck(e, r->pending_since + 6000000000ull, 5000000000ull), 1u);

    /* The first message lands: now the region is free again. */
    xtq__region_landed(r, b, first);
    CHECK_EQ(xtq__regions_stuck(e, r->pending_since + 6000000000ull, 5000000000ull), 0u);
    CHECK(!r->release_pending);
    xtq__mutex_lock(&e->rx_lock);
    CHECK_EQ(e->rx_nspare, spares + 1);
    CHECK_EQ(e->rx_spare[e->rx_nspare - 1], r);
    pthread_mutex_unlock(&e->rx_lock);

    /* A release that came with an error frees the region at once. */
    xtq__mutex_lock(&e->rx_lock);
    CHECK_EQ(e->rx_spare[--e->rx_nspare], r);
    e->rx_posted++;
    pthread_mutex_unlock(&e->rx_lock);
    r->out = false;
    atomic_fetch_sub(&e->regions_out, 1);
    r->landed = r->landed_end = 0;
    xtq__region_landed(r, b + first, 4096);
    xtq__region_released(r, true);
    CHECK(!r->release_pending);
    xtq__mutex_lock(&e->rx_lock);
    CHECK_EQ(e->rx_nspare, spares + 1);
    pthread_mutex_unlock(&e->rx_lock);

    CHECK_OK(xtq_finalize(ctx));
    unsetenv("XTQ_RX_BUFFERS");
    unsetenv("XTQ_RX_BUFFERS_POSTED");
}

/* ---- a put failed after its last MISSING answer never runs ------------ */

/*
 * The initiator fails a put with -XTQ_EIO at its (XTQ__RESEND_MAX + 1)-th
 * MISSING answer. Every copy may have been on its way all along (CI: a
 * peer whose puts waited unmatched for 50 s ran 52 puts it had failed):
 * after that many answers no resend revives the tombstone; before, one
 * does. Rank 0 of 1 asks itself; the answers go to its own initiator,
 * which drops them (no put in flight).
 */
XTQ_TEST(missing_tombstone_final_after_last_answer)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    int err;

    CHECK_OK(xtq_init(&attr, &ctx));
    struct xtq__engine *e = ctx->engine;
    xtq__mutex_lock(&e->progress_lock);
    /* seq 3: as many answers as the initiator resends after; the resend
     * that then arrives runs. */
    xtq__ack_reask(e, 0, 3, true); /* the tombstone, first MISSING */
    for (int i = 1; i < XTQ__RESEND_MAX; i++)
        xtq__ack_reask(e, 0, 3, true);
    struct ack_entry *a = xtq__ack_hold(e, 0, 3, 0, true, &err);
    CHECK(a != NULL);
    CHECK_EQ(err, 0);
    /* seq 4: one answer more, at which the initiator gave up: its late
     * resend is a copy, dropped. */
    for (int i = 0; i <= XTQ__RESEND_MAX; i++)
        xtq__ack_reask(e, 0, 4, true);
    CHECK(xtq__ack_hold(e, 0, 4, 0, true, &err) == NULL);
    CHECK_EQ(err, -XTQ_EALREADY);
    /* A late original is never revived either. */
    CHECK(xtq__ack_hold(e, 0, 4, 0, false, &err) == NULL);
    CHECK_EQ(err, -XTQ_EALREADY);
    pthread_mutex_unlock(&e->progress_lock);
    xtq__ack_done(e, a, 0);
    CHECK_OK(xtq_finalize(ctx));
}

/* ---- sizes and timeouts that would wrap (bug 9) ------------------------ */

XTQ_TEST(size_params_do_not_wrap)
{
    setenv("XTQ_RX_BUFFER_SIZE", "3G", 1);
    CHECK(xtq__param_size(XTQ__PARAM_XTQ_RX_BUFFER_SIZE) == 3ull << 30);
    /* Scaled past 2^63: not a size, the default instead of a wrapped value. */
    static const char *bad[] = {"9223372036854775807k", "8796093022208G", "8589934592g", "-1k"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        setenv("XTQ_RX_BUFFER_SIZE", bad[i], 1);
        CHECK_EQ(xtq__param_size(XTQ__PARAM_XTQ_RX_BUFFER_SIZE), 4194304);
    }
    setenv("XTQ_RX_BUFFER_SIZE", "8589934591G", 1); /* 2^63 - 2^30: fits */
    CHECK(xtq__param_size(XTQ__PARAM_XTQ_RX_BUFFER_SIZE) == (8589934591ull << 30));
    unsetenv("XTQ_RX_BUFFER_SIZE");
    /* Milliseconds as ns: saturated, negative is 0. */
    setenv("XTQ_PEER_TIMEOUT_MS", "9223372036854775807", 1);
    CHECK(xtq__param_ns(XTQ__PARAM_XTQ_PEER_TIMEOUT_MS, 1000000) == UINT64_MAX);
    setenv("XTQ_PEER_TIMEOUT_MS", "-5", 1);
    CHECK(xtq__param_ns(XTQ__PARAM_XTQ_PEER_TIMEOUT_MS, 1000000) == 0);
    setenv("XTQ_PEER_TIMEOUT_MS", "1500", 1);
    CHECK(xtq__param_ns(XTQ__PARAM_XTQ_PEER_TIMEOUT_MS, 1000000) == 1500000000ull);
    unsetenv("XTQ_PEER_TIMEOUT_MS");
}

XTQ_TEST(deadlines_saturate)
{
    uint64_t now = xtq__now_ns();
    CHECK(xtq__deadline_ns(UINT64_MAX) == UINT64_MAX);
    CHECK(xtq__deadline_ns(UINT64_MAX - now / 2) == UINT64_MAX);
    CHECK(xtq__deadline_ns(0) >= now);
    CHECK(xtq__deadline_ns(1000) < now + 60ull * 1000000000);
    CHECK(xtq__timeout_ns(XTQ_TIMEOUT_INFINITE) == UINT64_MAX);
    CHECK(xtq__timeout_ns(-1) == 0);
    CHECK(xtq__timeout_ns(INT64_MIN) == 0);
    CHECK(xtq__timeout_ns(INT64_MAX - 1) == (uint64_t)INT64_MAX - 1);
    CHECK(xtq__mul_sat(UINT64_MAX / 2, 3) == UINT64_MAX);
    CHECK(xtq__mul_sat(1ull << 31, 1ull << 31) == 1ull << 62);
}

/* Held until the test opens the gate, then 300 ms more: still running
 * when finalize begins, however late the main thread gets there. */
static void sleepy_fn(const uint64_t arg[4], void *ret, void *user)
{
    struct gate *g = user;
    CHECK_OK(xtq_signal_wait(g->gate, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    nap_us(300000);
}

/*
 * A finalize timeout so large that now + timeout wraps must wait, not
 * time out at once: the put in flight completes with success instead of
 * -XTQ_EFINALIZED.
 */
XTQ_TEST(finalize_huge_timeout_waits)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_completion_t c = {0};
    struct gate g = {0};

    setenv("XTQ_FINALIZE_TIMEOUT_MS", "18446744073709", 1); /* * 10^6 is 2^64 - 551616 */
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_signal_create(1, &g.gate));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, sleepy_fn, &g, &f));
    CHECK_OK(xtq_register_queue(ctx, 1, q));
    CHECK_OK(xtq_register_function(ctx, 1, f, NULL));
    put_fn(ctx, 1, 1, &c);
    /* Waits with timeouts that are not infinite, however large or small. */
    CHECK_ERR(xtq_completion_wait(ctx, &c, -1), -XTQ_ETIMEDOUT);
    CHECK_ERR(xtq_completion_wait(ctx, &c, 0), -XTQ_ETIMEDOUT);
    xtq_signal_store(g.gate, 0);
    CHECK_OK(xtq_finalize(ctx));
    CHECK(xtq_completion_test(&c));
    CHECK_OK(c.status);
    xtq_signal_destroy(g.gate);
}

XTQ_TEST(table_size_one_limit)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    setenv("XTQ_TABLE_SIZE", "65537", 1);
    CHECK_ERR(xtq_init(&attr, &ctx), -XTQ_EINVAL);
    setenv("XTQ_TABLE_SIZE", "65536", 1);
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_OK(xtq_finalize(ctx));
}

/* ---- doorbell names (bug 9) ---------------------------------------------- */

static int shm_names_with(const char *prefix)
{
    int n = 0;
    DIR *d = opendir("/dev/shm");
    struct dirent *ent;
    CHECK(d != NULL);
    while ((ent = readdir(d)) != NULL)
        n += strncmp(ent->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/*
 * Two contexts of one process (and so two jobs with one key) must not
 * share a doorbell: its name carries the process and a count. Once the
 * peers have mapped it the name leaves /dev/shm, so a killed process
 * leaves nothing behind.
 */
XTQ_TEST(doorbell_names_unique)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *a, *b;
    char prefix[64];

    setenv("XTQ_PROVIDER", "shm", 1);
    setenv("XTQ_JOB_KEY", "engine-doorbell-test", 1);
    CHECK_OK(xtq_init(&attr, &a));
    CHECK_OK(xtq_init(&attr, &b));
    CHECK(a->job_key == b->job_key);
    if (!a->engine->bell_fence)
        XTQ_SKIP("provider %s has a CQ wait fd: no doorbells", xtq__engine_provider(a->engine));
    CHECK(a->engine->bells != NULL && b->engine->bells != NULL);
    /* Distinct memory, not two mappings of one object. */
    memset(a->engine->bells[0]->pad_, 0xa5, sizeof(a->engine->bells[0]->pad_));
    memset(b->engine->bells[0]->pad_, 0x5a, sizeof(b->engine->bells[0]->pad_));
    CHECK_EQ(a->engine->bells[0]->pad_[0], 0xa5);
    snprintf(prefix, sizeof(prefix), "xtq-%016llx-0-%ld-", (unsigned long long)a->job_key,
             (long)getpid());
    CHECK_EQ(shm_names_with(prefix), 0);
    /* Each context still serves its own puts. */
    for (int i = 0; i < 2; i++) {
        xtq_ctx_t *ctx = i ? b : a;
        xtq_agent_t *cpu;
        xtq_queue_t *q;
        xtq_function_t *f;
        xtq_completion_t c = {0};
        CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
        CHECK_OK(xtq_queue_create(cpu, 16, &q));
        CHECK_OK(xtq_function_create_cpu(cpu, nop_fn, NULL, &f));
        CHECK_OK(xtq_register_queue(ctx, 1, q));
        CHECK_OK(xtq_register_function(ctx, 1, f, NULL));
        put_fn(ctx, 1, 1, &c);
        CHECK_OK(xtq_completion_wait(ctx, &c, 30ll * 1000000000));
    }
    CHECK_OK(xtq_finalize(b));
    CHECK_OK(xtq_finalize(a));
    CHECK_EQ(shm_names_with(prefix), 0);
}

/* ---- the progress thread backs off (XTQ_PROGRESS_BACKOFF_US, issue 11) -- */

static void count_fn(const uint64_t arg[4], void *ret, void *user)
{
    atomic_fetch_add((_Atomic uint32_t *)user, 1);
}

/* A context with a CPU queue and function 1 counting into `n`; a small
 * put of it to ourselves, injected (on a doorbell rank no wake-up). */
static void backoff_ctx(xtq_ctx_t **ctx, xtq_queue_t **q, xtq_function_t **f,
                        _Atomic uint32_t *n)
{
    xtq_init_attr_t attr = {0};
    xtq_agent_t *cpu;
    CHECK_OK(xtq_init(&attr, ctx));
    CHECK_OK(xtq_agent_find(*ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, q));
    CHECK_OK(xtq_function_create_cpu(cpu, count_fn, (void *)n, f));
    CHECK_OK(xtq_register_queue(*ctx, 1, *q));
    CHECK_OK(xtq_register_function(*ctx, 1, *f, NULL));
}

static void backoff_done(xtq_ctx_t *ctx, xtq_queue_t *q, xtq_function_t *f)
{
    CHECK_OK(xtq_unregister_function(ctx, 1));
    CHECK_OK(xtq_unregister_queue(ctx, 1));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_finalize(ctx));
}

/*
 * After the application takes a turn itself, the progress thread keeps
 * off the endpoint for the back-off: a put that arrives meanwhile is
 * received by the application's next turn, not by the thread (which
 * would have run it within microseconds). A back-off of 30 s, looked at
 * after 200 ms.
 */
XTQ_TEST(progress_thread_backs_off_after_application_turns)
{
    xtq_ctx_t *ctx;
    xtq_queue_t *q;
    xtq_function_t *f;
    _Atomic uint32_t n = 0;
    xtq_completion_t c = {0};

    setenv("XTQ_PROGRESS_BACKOFF_US", "30000000", 1);
    backoff_ctx(&ctx, &q, &f, &n);
    CHECK(ctx->engine->thread_started);
    CHECK_EQ(ctx->engine->backoff_ns, 30ull * 1000000000);
    if (!ctx->engine->bells)
        XTQ_SKIP("provider %s has a CQ wait fd: every put wakes the progress thread",
                 xtq__engine_provider(ctx->engine));
    CHECK(xtq_progress(ctx) >= 0);
    put_fn(ctx, 1, 1, &c);
    nap_us(200000);
    CHECK_EQ(atomic_load(&n), 0);
    /* Our own turns receive it, run it (a worker) and read its ack. */
    uint64_t deadline = xtq__deadline_ns(30ull * 1000000000);
    while (!xtq_completion_test(&c) && xtq__now_ns() < deadline)
        CHECK(xtq_progress(ctx) >= 0);
    CHECK(xtq_completion_test(&c));
    CHECK_OK(c.status);
    CHECK_EQ(atomic_load(&n), 1);
    backoff_done(ctx, q, f);
}

/*
 * The back-off ends by itself: an application that took a turn and then
 * calls nothing has its puts served by the progress thread once the
 * back-off (here 100 ms) has passed. Only plain loads while we wait.
 */
XTQ_TEST(progress_thread_resumes_after_the_backoff)
{
    xtq_ctx_t *ctx;
    xtq_queue_t *q;
    xtq_function_t *f;
    _Atomic uint32_t n = 0;
    xtq_completion_t c = {0};

    setenv("XTQ_PROGRESS_BACKOFF_US", "100000", 1);
    backoff_ctx(&ctx, &q, &f, &n);
    CHECK(xtq_progress(ctx) >= 0);
    put_fn(ctx, 1, 1, &c);
    uint64_t deadline = xtq__deadline_ns(30ull * 1000000000);
    while (!(__atomic_load_n(&c.state, __ATOMIC_ACQUIRE) & XTQ_COMPLETION_DONE) &&
           xtq__now_ns() < deadline)
        nap_us(1000);
    CHECK_EQ(atomic_load(&n), 1);
    CHECK_OK(xtq_completion_wait(ctx, &c, 30ll * 1000000000));
    CHECK_OK(c.status);
    backoff_done(ctx, q, f);
}

/* ---- receive regions in huge pages (XTQ_RX_HUGEPAGES, issue 11) -------- */

/* Each region starts on a 2 MiB boundary, so that the kernel can back it
 * with transparent huge pages (advised); puts still land and run. */
XTQ_TEST(rx_regions_on_huge_page_boundaries)
{
    xtq_ctx_t *ctx;
    xtq_queue_t *q;
    xtq_function_t *f;
    _Atomic uint32_t n = 0;

    setenv("XTQ_RX_HUGEPAGES", "1", 1);
    backoff_ctx(&ctx, &q, &f, &n);
    for (unsigned i = 0; i < ctx->engine->nregions; i++)
        CHECK_EQ((uintptr_t)ctx->engine->regions[i].buf % (2u << 20), 0);
    for (int i = 0; i < 8; i++) {
        xtq_completion_t c = {0};
        put_fn(ctx, 1, 1, &c);
        CHECK_OK(xtq_completion_wait(ctx, &c, 30ll * 1000000000));
        CHECK_OK(c.status);
    }
    CHECK_EQ(atomic_load(&n), 8);
    backoff_done(ctx, q, f);
}

/* ---- put windows made at a peer's first put ---------------------------- */

/*
 * A peer's window (XTQ_PUT_WINDOW slots of 304 bytes) is made at the first
 * put to it, not for every peer at init: a rank among thousands that talks
 * to a few, and the planes that only receive, hold none. A cancel that
 * names a peer never put to, and an ack from it, find nothing and say so.
 */
XTQ_TEST(put_windows_made_at_first_put)
{
    xtq_ctx_t *ctx;
    xtq_queue_t *q;
    xtq_function_t *f;
    _Atomic uint32_t n = 0;
    xtq_completion_t c = {0}, never = {0};

    setenv("XTQ_PROGRESS_THREADS", "2", 1);
    backoff_ctx(&ctx, &q, &f, &n);
    CHECK_EQ(ctx->nplanes, 2);
    struct xtq__engine *own = ctx->engine, *other = ctx->planes[1];
    CHECK(own == ctx->planes[0]);
    CHECK(own->peers[0].slots == NULL);
    CHECK(other->peers[0].slots == NULL);
    CHECK_ERR(xtq__engine_put_cancel(own, &never), -XTQ_EALREADY);
    /* An ack for a put never made: dropped, nothing touched. */
    struct xtq__wire_hdr h = {0};
    h.src_rank = 0;
    h.seq = 3;
    xtq__initiator_ack(own, &h, NULL);
    CHECK(own->peers[0].slots == NULL);
    CHECK_EQ(atomic_load(&own->acks_unknown), 1);

    put_fn(ctx, 1, 1, &c);
    CHECK_OK(xtq_completion_wait(ctx, &c, 30ll * 1000000000));
    CHECK_OK(c.status);
    CHECK_EQ(atomic_load(&n), 1);
    CHECK(own->peers[0].slots != NULL);
    /* Rank 0's puts travel on plane 0: plane 1 only ever receives. */
    CHECK(other->peers[0].slots == NULL);
    backoff_done(ctx, q, f);
}

/*
 * An ack for a put answered already (a resend's second answer, after a
 * fault) is dropped quietly, without touching the slot, which may serve
 * another put by then; one for a put never sent is the peer's error and
 * is warned about. Both leave the completions alone.
 */
XTQ_TEST(second_acks_dropped_apart_from_unknown_ones)
{
    xtq_ctx_t *ctx;
    xtq_queue_t *q;
    xtq_function_t *f;
    _Atomic uint32_t n = 0;
    xtq_completion_t c = {0};

    backoff_ctx(&ctx, &q, &f, &n);
    struct xtq__engine *e = ctx->engine;
    put_fn(ctx, 1, 1, &c);
    CHECK_OK(xtq_completion_wait(ctx, &c, 30ll * 1000000000));
    /* Its own ack in (the wait may have ended on the completion word,
     * XTQ_DIRECT_COMPLETION, and so may a flush): the slot is free. */
    for (int t = 0; atomic_load(&e->puts_outstanding) && t < 30000; t++)
        usleep(1000);
    CHECK_EQ(atomic_load(&e->puts_outstanding), 0);
    CHECK_EQ(e->peers[0].next_seq, 1);
    struct xtq__wire_hdr h = {0};
    h.src_rank = 0;
    h.seq = 0; /* answered */
    h.status = -XTQ_EIO;
    xtq__initiator_ack(e, &h, NULL);
    CHECK_EQ(atomic_load(&e->acks_late), 1);
    CHECK_EQ(atomic_load(&e->acks_unknown), 0);
    h.seq = 1; /* not sent */
    xtq__initiator_ack(e, &h, NULL);
    CHECK_EQ(atomic_load(&e->acks_late), 1);
    CHECK_EQ(atomic_load(&e->acks_unknown), 1);
    CHECK_OK(c.status);
    /* The next put takes sequence 1 and is answered by its own ack. */
    xtq_completion_t d = {0};
    put_fn(ctx, 1, 1, &d);
    CHECK_OK(xtq_completion_wait(ctx, &d, 30ll * 1000000000));
    CHECK_OK(d.status);
    CHECK_EQ(atomic_load(&n), 2);
    backoff_done(ctx, q, f);
}

/* ---- GPU agents' completions retired in engine turns (XTQ_AGENT_RETIRE) -- */

struct fake_agent {
    struct xtq_agent base;
    _Atomic uint32_t polls, releases;
};

static int fake_retire_poll(xtq_agent_t *agent)
{
    atomic_fetch_add(&((struct fake_agent *)agent)->polls, 1);
    return 0;
}

static void fake_retire_release(xtq_agent_t *agent)
{
    atomic_fetch_add(&((struct fake_agent *)agent)->releases, 1);
}

static const struct xtq__agent_ops fake_ops = {
    .name = "fake",
    .retire_poll = fake_retire_poll,
    .retire_release = fake_retire_release,
};

/*
 * Every engine turn polls the agents that let engine threads retire, and
 * a thread about to sleep on the transport releases them first (the
 * CUDA agent's side of it is cuda.retire_poll_claims_the_retiring). No
 * progress thread here, so that the agent can be added after xtq_init.
 */
XTQ_TEST(engine_turns_poll_agents_and_release_before_sleeping)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    struct fake_agent fake = {.base = {.ops = &fake_ops, .kind = XTQ_AGENT_CUDA}};

    setenv("XTQ_PROGRESS", "manual", 1);
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK(!ctx->engine->thread_started);
    /* The CPU agent retires on its own threads: its poll says so at open
     * (-XTQ_ENOSYS), and turns never call it. */
    for (unsigned i = 0; i < ctx->nretire_agents; i++)
        CHECK(ctx->retire_agents[i]->kind != XTQ_AGENT_CPU);
    CHECK(ctx->nretire_agents < XTQ__MAX_AGENTS);
    ctx->retire_agents[ctx->nretire_agents++] = &fake.base;
    for (int i = 0; i < 3; i++)
        CHECK(xtq_progress(ctx) >= 0);
    CHECK(atomic_load(&fake.polls) >= 3);
    CHECK_EQ(atomic_load(&fake.releases), 0);
    xtq__progress_block(ctx->engine); /* at most 100 ms: nothing will come */
    CHECK_EQ(atomic_load(&fake.releases), 1);
    ctx->nretire_agents--;
    CHECK_OK(xtq_finalize(ctx));
}
