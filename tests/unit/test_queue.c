/*
 * Queues, producer side: reservation up to "full" and never past it,
 * wraparound, several producers without loss, header publication, INVALID
 * marking. A test agent counts doorbells; the consumer is the test itself,
 * following the consumer protocol of xtq/queue_int.h.
 */
#include "internal.h"

#include <sched.h>

#include "queue_int.h"
#include "xtq_test.h"

/* ---- a queue on a test agent ---------------------------------------------- */

static _Atomic uint64_t doorbells;

static int t_queue_create(xtq_agent_t *agent, uint32_t size, xtq_queue_t **queue)
{
    return -XTQ_ENOSYS;
}
static int t_queue_destroy(xtq_queue_t *queue)
{
    return 0;
}
static void t_doorbell(xtq_queue_t *queue, uint64_t index)
{
    atomic_fetch_add(&doorbells, 1);
}
static int t_kernel_destroy(xtq_kernel_t *kernel)
{
    return -XTQ_ENOSYS;
}
static int t_function_destroy(xtq_function_t *function)
{
    return -XTQ_ENOSYS;
}
static int t_mem(xtq_agent_t *agent, void *addr, size_t len)
{
    return 0;
}
static void t_close(xtq_agent_t *agent)
{
}

static const struct xtq__agent_ops t_ops = {
    .name = "test",
    .queue_create = t_queue_create,
    .queue_destroy = t_queue_destroy,
    .enqueue = xtq__queue_enqueue,
    .doorbell = t_doorbell,
    .kernel_destroy = t_kernel_destroy,
    .function_destroy = t_function_destroy,
    .mem_register = t_mem,
    .mem_deregister = t_mem,
    .close = t_close,
};

struct tq {
    struct xtq_agent agent;
    struct xtq_queue q;
    _Alignas(64) struct xtq_signal doorbell;
    _Alignas(64) struct xtq__queue_indices idx;
    void *ring;
};

static struct tq *tq_new(uint32_t size)
{
    struct tq *t = aligned_alloc(64, XTQ_ALIGN_UP(sizeof(struct tq), (size_t)64));

    CHECK(t != NULL);
    memset(t, 0, sizeof(*t));
    t->agent.ops = &t_ops;
    t->agent.kind = XTQ_AGENT_CPU;
    t->agent.info.max_queue_size = 1u << 16;
    t->ring = aligned_alloc(64, (size_t)size * 64);
    CHECK(t->ring != NULL);
    memset(t->ring, 0xa5, (size_t)size * 64); /* garbage: init must clean it */
    xtq__signal_init_at(&t->doorbell, 0, 0);
    CHECK_OK(xtq__queue_init(&t->q, &t->agent, size, t->ring, &t->idx, &t->doorbell));
    return t;
}

static void tq_free(struct tq *t)
{
    xtq__queue_fini(&t->q);
    free(t->ring);
    free(t);
}

/* Consumer: take the head packet if it is published (and its result
 * buffer, when `res` is not NULL). */
static bool take_res(xtq_queue_t *q, xtq_aql_packet_t *out, void **cookie,
                     struct xtq__result_buf *res)
{
    uint64_t r = atomic_load_explicit(q->read_index, memory_order_relaxed);
    xtq_aql_packet_t *slot = &q->ring[r & q->mask];
    uint32_t word = atomic_load_explicit((_Atomic uint32_t *)(void *)slot, memory_order_acquire);

    if ((word & 0xff) == XTQ_PACKET_TYPE_INVALID)
        return false;
    memcpy(out, slot, sizeof(*out));
    if (cookie != NULL)
        *cookie = q->cookies[r & q->mask];
    q->cookies[r & q->mask] = NULL;
    if (res != NULL)
        *res = q->results[r & q->mask];
    q->results[r & q->mask] = (struct xtq__result_buf){NULL, 0, NULL, 0};
    atomic_store_explicit((_Atomic uint32_t *)(void *)slot, XTQ_PACKET_TYPE_INVALID,
                          memory_order_release);
    atomic_store_explicit(q->read_index, r + 1, memory_order_release);
    xtq__queue_notify_space(q);
    return true;
}

static bool take(xtq_queue_t *q, xtq_aql_packet_t *out, void **cookie)
{
    return take_res(q, out, cookie, NULL);
}

static void agent_packet(xtq_aql_packet_t *p, uint64_t a0, uint64_t a1)
{
    memset(p, 0, sizeof(*p));
    p->agent.header = xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    p->agent.type = 0x1234;
    p->agent.arg[0] = a0;
    p->agent.arg[1] = a1;
}

/* ---- cases ------------------------------------------------------------------ */

XTQ_TEST(init)
{
    struct tq *t = tq_new(16);

    CHECK_EQ(xtq_queue_size(&t->q), 16);
    CHECK(xtq_queue_agent(&t->q) == &t->agent);
    CHECK_EQ(xtq_queue_load_write_index(&t->q), 0);
    CHECK_EQ(xtq_queue_load_read_index(&t->q), 0);
    CHECK(t->q.retire == NULL);
    CHECK(t->q.write_index == &t->idx.write_index);
    CHECK(t->q.read_index == &t->idx.read_index);
    for (uint32_t i = 0; i < 16; i++) {
        CHECK_EQ(xtq_queue_slot(&t->q, i)->header, XTQ_PACKET_TYPE_INVALID);
        CHECK(t->q.cookies[i] == NULL);
    }
    tq_free(t);

    struct xtq_queue q;
    _Alignas(64) uint8_t ring[3 * 64];
    struct xtq__queue_indices idx;
    struct xtq_signal db;
    memset(&q, 0, sizeof(q));
    xtq__signal_init_at(&db, 0, 0);
    CHECK_ERR(xtq__queue_init(&q, NULL, 3, ring, &idx, &db), -XTQ_EINVAL);
    CHECK_ERR(xtq__queue_init(&q, NULL, 1, ring, &idx, &db), -XTQ_EINVAL);
    CHECK_ERR(xtq__queue_init(&q, NULL, 2, ring + 8, &idx, &db), -XTQ_EINVAL);
}

XTQ_TEST(reserve_until_full)
{
    struct tq *t = tq_new(8);
    uint64_t idx;
    xtq_aql_packet_t p;

    for (uint64_t i = 0; i < 8; i++) {
        CHECK_OK(xtq_queue_reserve(&t->q, 1, &idx));
        CHECK_EQ(idx, i);
    }
    CHECK_ERR(xtq_queue_reserve(&t->q, 1, &idx), -XTQ_EAGAIN);
    CHECK_EQ(xtq_queue_load_write_index(&t->q), 8);
    CHECK_ERR(xtq_queue_reserve(&t->q, 0, &idx), -XTQ_EINVAL);
    CHECK_ERR(xtq_queue_reserve(&t->q, 9, &idx), -XTQ_EINVAL);

    /* Publish and consume one: exactly one slot frees up. */
    agent_packet(&p, 1, 2);
    memcpy(xtq_queue_slot(&t->q, 0)->bytes + 4, p.bytes + 4, 60);
    xtq_queue_publish(&t->q, 0, p.header, p.agent.type);
    CHECK(take(&t->q, &p, NULL));
    CHECK_ERR(xtq_queue_reserve(&t->q, 2, &idx), -XTQ_EAGAIN);
    CHECK_OK(xtq_queue_reserve(&t->q, 1, &idx));
    CHECK_EQ(idx, 8);
    CHECK_ERR(xtq_queue_reserve(&t->q, 1, &idx), -XTQ_EAGAIN);
    /* The slot it reused is slot 0, marked INVALID by the consumer. */
    CHECK(xtq_queue_slot(&t->q, 8) == xtq_queue_slot(&t->q, 0));
    CHECK_EQ(xtq_queue_slot(&t->q, 8)->header, XTQ_PACKET_TYPE_INVALID);
    tq_free(t);
}

XTQ_TEST(publish_header)
{
    struct tq *t = tq_new(4);
    uint64_t idx;
    xtq_aql_packet_t p, got;
    uint16_t h = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 1, XTQ_FENCE_SCOPE_AGENT,
                                XTQ_FENCE_SCOPE_SYSTEM);

    CHECK_OK(xtq_queue_reserve(&t->q, 1, &idx));
    xtq_aql_packet_t *slot = xtq_queue_slot(&t->q, idx);
    memset(&p, 0, sizeof(p));
    p.kernel.grid_size_x = 77;
    p.kernel.kernel_object = 0xfeedull;
    memcpy(slot->bytes + 4, p.bytes + 4, 60);
    /* Until published the consumer sees nothing. */
    CHECK(!take(&t->q, &got, NULL));
    xtq_queue_publish(&t->q, idx, h, 3 /* setup: 3 dimensions */);
    CHECK_EQ(slot->kernel.header, h);
    CHECK_EQ(slot->kernel.setup, 3);
    CHECK(take(&t->q, &got, NULL));
    CHECK_EQ(got.kernel.header, h);
    CHECK_EQ(got.kernel.setup, 3);
    CHECK_EQ(got.kernel.grid_size_x, 77);
    CHECK_EQ(got.kernel.kernel_object, 0xfeed);
    CHECK_EQ(slot->header, XTQ_PACKET_TYPE_INVALID);
    CHECK_EQ(xtq_queue_load_read_index(&t->q), 1);
    tq_free(t);
}

XTQ_TEST(wraparound)
{
    struct tq *t = tq_new(4);
    xtq_aql_packet_t p, got;
    uint64_t db0 = atomic_load(&doorbells);

    for (uint64_t i = 0; i < 10000; i++) {
        uint64_t idx;
        /* Fill to full, then drain, so every slot wraps many times. */
        agent_packet(&p, i, ~i);
        CHECK_OK(xtq_queue_submit(&t->q, &p, 0, &idx));
        CHECK_EQ(idx, i);
        CHECK_EQ(atomic_load_explicit(&t->doorbell.value, memory_order_relaxed), (int64_t)i);
        if ((i & 3) == 3) {
            CHECK_ERR(xtq_queue_submit(&t->q, &p, 0, NULL), -XTQ_EAGAIN);
            for (uint64_t j = i - 3; j <= i; j++) {
                CHECK(take(&t->q, &got, NULL));
                CHECK_EQ(got.agent.header, p.agent.header);
                CHECK_EQ(got.agent.type, 0x1234);
                CHECK_EQ(got.agent.arg[0], j);
                CHECK_EQ(got.agent.arg[1], ~j);
            }
            CHECK(!take(&t->q, &got, NULL));
        }
    }
    CHECK_EQ(atomic_load(&doorbells) - db0, 10000);
    CHECK_EQ(xtq_queue_load_write_index(&t->q), 10000);
    CHECK_EQ(xtq_queue_load_read_index(&t->q), 10000);
    tq_free(t);
}

XTQ_TEST(submit_timeout)
{
    struct tq *t = tq_new(2);
    xtq_aql_packet_t p;

    agent_packet(&p, 0, 0);
    CHECK_OK(xtq_queue_submit(&t->q, &p, 0, NULL));
    CHECK_OK(xtq_queue_submit(&t->q, &p, 0, NULL));
    CHECK_ERR(xtq_queue_submit(&t->q, &p, 0, NULL), -XTQ_EAGAIN);
    CHECK_ERR(xtq_queue_submit(&t->q, &p, 1000000, NULL), -XTQ_ETIMEDOUT);
    /* Nothing was overwritten. */
    CHECK_EQ(xtq_queue_load_write_index(&t->q), 2);
    tq_free(t);
}

/* ---- several producers -------------------------------------------------------- */

enum { PRODUCERS = 4, PER_PRODUCER = 20000, MP_SIZE = 64 };

struct prod_arg {
    xtq_queue_t *q;
    uint64_t id;
    int rc;
};

static void *producer_main(void *p)
{
    struct prod_arg *a = p;
    xtq_aql_packet_t pkt;

    for (uint64_t i = 0; i < PER_PRODUCER; i++) {
        agent_packet(&pkt, a->id, i);
        /* Half with the blocking path, half retrying on EAGAIN. */
        if (i & 1) {
            a->rc = xtq_queue_submit(a->q, &pkt, XTQ_TIMEOUT_INFINITE, NULL);
        } else {
            while ((a->rc = xtq_queue_submit(a->q, &pkt, 0, NULL)) == -XTQ_EAGAIN)
                sched_yield();
        }
        if (a->rc != 0)
            return NULL;
    }
    return NULL;
}

XTQ_TEST(multi_producer)
{
    struct tq *t = tq_new(MP_SIZE);
    pthread_t th[PRODUCERS];
    struct prod_arg args[PRODUCERS];
    uint64_t next[PRODUCERS] = {0};
    uint64_t total = 0;
    xtq_aql_packet_t got;

    for (int i = 0; i < PRODUCERS; i++) {
        args[i] = (struct prod_arg){&t->q, (uint64_t)i, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, producer_main, &args[i]), 0);
    }
    while (total < (uint64_t)PRODUCERS * PER_PRODUCER) {
        if (!take(&t->q, &got, NULL)) {
            sched_yield();
            continue;
        }
        uint64_t id = got.agent.arg[0];
        CHECK(id < PRODUCERS);
        /* Each producer's packets arrive once each, in its order. */
        CHECK_EQ(got.agent.arg[1], next[id]);
        next[id]++;
        total++;
    }
    for (int i = 0; i < PRODUCERS; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        CHECK_OK(args[i].rc);
        CHECK_EQ(next[i], PER_PRODUCER);
    }
    CHECK(!take(&t->q, &got, NULL));
    CHECK_EQ(xtq_queue_load_write_index(&t->q), (uint64_t)PRODUCERS * PER_PRODUCER);
    tq_free(t);
}

XTQ_TEST(destroy_busy_while_registered)
{
    struct tq *t = tq_new(4);

    atomic_store(&t->q.registrations, 1);
    CHECK_ERR(xtq_queue_destroy(&t->q), -XTQ_EBUSY);
    atomic_store(&t->q.registrations, 0);
    CHECK_OK(xtq_queue_destroy(&t->q)); /* the test agent frees nothing */
    CHECK_ERR(xtq_queue_create(&t->agent, 3, NULL), -XTQ_EINVAL);
    xtq_queue_t *q;
    CHECK_ERR(xtq_queue_create(&t->agent, 6, &q), -XTQ_EINVAL);
    CHECK_ERR(xtq_queue_create(&t->agent, 1u << 17, &q), -XTQ_EINVAL);
    tq_free(t);
}

/* ---- the agents' enqueue operation (what the engine calls) ---------------- */

static int retired_status = 1;
static void *retired_cookie;

static void t_retire(void *cookie, int status)
{
    retired_cookie = cookie;
    retired_status = status;
}

/* The generic enqueue writes the body, attaches cookie and retire, publishes
 * the header last and rings the doorbell once; on a full queue it writes
 * nothing and says -XTQ_EAGAIN. */
XTQ_TEST(enqueue_op_generic)
{
    struct tq *t = tq_new(2);
    xtq_aql_packet_t p, got;
    int cookie_a, cookie_b;
    void *cookie;

    agent_packet(&p, 7, 8);
    struct xtq__enqueue d = {.packet = &p, .retire = t_retire, .cookie = &cookie_a};
    uint64_t rang = atomic_load(&doorbells);
    CHECK_OK(t->agent.ops->enqueue(&t->q, &d));
    CHECK_EQ(atomic_load(&doorbells), rang + 1);
    CHECK_EQ(atomic_load(&t->doorbell.value), 0); /* the doorbell holds the index */
    CHECK(t->q.retire == t_retire);
    d.cookie = &cookie_b;
    agent_packet(&p, 9, 10);
    CHECK_OK(t->agent.ops->enqueue(&t->q, &d));
    CHECK_EQ(atomic_load(&t->doorbell.value), 1);
    /* Full: nothing reserved, written or rung. */
    agent_packet(&p, 11, 12);
    CHECK_ERR(t->agent.ops->enqueue(&t->q, &d), -XTQ_EAGAIN);
    CHECK_EQ(xtq_queue_load_write_index(&t->q), 2);
    CHECK_EQ(atomic_load(&doorbells), rang + 2);

    CHECK(take(&t->q, &got, &cookie));
    CHECK(cookie == &cookie_a);
    CHECK_EQ(got.agent.header, p.agent.header);
    CHECK_EQ(got.agent.type, 0x1234);
    CHECK_EQ(got.agent.arg[0], 7);
    CHECK_EQ(got.agent.arg[1], 8);
    CHECK(take(&t->q, &got, &cookie));
    CHECK(cookie == &cookie_b);
    CHECK_EQ(got.agent.arg[0], 9);
    /* The consumer calls retire with the cookie it took. */
    t->q.retire(cookie, -XTQ_ECANCELED);
    CHECK(retired_cookie == &cookie_b);
    CHECK_EQ(retired_status, -XTQ_ECANCELED);

    /* Space again: the third goes in. */
    CHECK_OK(t->agent.ops->enqueue(&t->q, &d));
    CHECK(take(&t->q, &got, NULL));
    CHECK_EQ(got.agent.arg[0], 11);
    tq_free(t);
}

/* A fetching put's result buffer rides beside the cookie: the consumer
 * takes what the enqueue attached, {NULL, 0} for a task without one, and
 * a submitted packet never inherits the previous lap's buffer. */
XTQ_TEST(enqueue_op_result_beside_cookie)
{
    struct tq *t = tq_new(2);
    xtq_aql_packet_t p, got;
    struct xtq__result_buf res;
    uint64_t buf[4] = {0};
    int cookie_a;
    void *cookie;

    agent_packet(&p, 1, 2);
    struct xtq__enqueue d = {.packet = &p,
                             .result = buf,
                             .result_len = sizeof(buf),
                             .retire = t_retire,
                             .cookie = &cookie_a};
    CHECK_OK(t->agent.ops->enqueue(&t->q, &d));
    d.result = NULL;
    d.result_len = 0;
    CHECK_OK(t->agent.ops->enqueue(&t->q, &d));
    CHECK(take_res(&t->q, &got, &cookie, &res));
    CHECK(cookie == &cookie_a);
    CHECK(res.buf == buf);
    CHECK_EQ(res.len, sizeof(buf));
    CHECK(take_res(&t->q, &got, &cookie, &res));
    CHECK(res.buf == NULL);
    CHECK_EQ(res.len, 0);

    /* Slot 0 again, through xtq_queue_submit, after a result lap. */
    d.result = buf;
    d.result_len = sizeof(buf);
    CHECK_OK(t->agent.ops->enqueue(&t->q, &d));
    CHECK(take_res(&t->q, &got, &cookie, &res));
    CHECK(res.buf == buf);
    t->q.results[1] = (struct xtq__result_buf){buf, 8, NULL, 0}; /* a consumer that left it */
    CHECK_OK(xtq_queue_submit(&t->q, &p, 0, NULL));
    CHECK(take_res(&t->q, &got, &cookie, &res));
    CHECK(cookie == NULL);
    CHECK(res.buf == NULL);
    CHECK_EQ(res.len, 0);
    tq_free(t);
}

/* ---- host memory for every agent: all or nothing -------------------------- */

static int reg_calls[3], dereg_calls[3];

static int m_index(xtq_agent_t *agent)
{
    return (int)agent->info.device_index;
}
static int m_register(xtq_agent_t *agent, void *addr, size_t len)
{
    reg_calls[m_index(agent)]++;
    return m_index(agent) == 2 ? -XTQ_EIO : 0; /* the third agent cannot map it */
}
static int m_deregister(xtq_agent_t *agent, void *addr, size_t len)
{
    dereg_calls[m_index(agent)]++;
    return 0;
}

static const struct xtq__agent_ops m_ops = {
    .name = "test-mem",
    .queue_create = t_queue_create,
    .queue_destroy = t_queue_destroy,
    .enqueue = xtq__queue_enqueue,
    .doorbell = t_doorbell,
    .kernel_destroy = t_kernel_destroy,
    .function_destroy = t_function_destroy,
    .mem_register = m_register,
    .mem_deregister = m_deregister,
    .close = t_close,
};

XTQ_TEST(agents_mem_register_all_or_nothing)
{
    xtq_ctx_t *ctx = calloc(1, sizeof(*ctx));
    struct xtq_agent agents[3];
    char buf[64];

    CHECK(ctx != NULL);
    memset(agents, 0, sizeof(agents));
    for (unsigned i = 0; i < 3; i++) {
        agents[i].ops = &m_ops;
        agents[i].info.device_index = i;
        snprintf(agents[i].info.name, sizeof(agents[i].info.name), "mem%u", i);
        ctx->agents[i] = &agents[i];
    }
    /* Two that can: registered with both, deregistered from both. */
    ctx->nagents = 2;
    CHECK_OK(xtq__agents_mem_register(ctx, buf, sizeof(buf)));
    CHECK_EQ(reg_calls[0], 1);
    CHECK_EQ(reg_calls[1], 1);
    xtq__agents_mem_deregister(ctx, buf, sizeof(buf));
    CHECK_EQ(dereg_calls[0], 1);
    CHECK_EQ(dereg_calls[1], 1);
    /* The third fails: its error, and the first two let go again. */
    ctx->nagents = 3;
    CHECK_ERR(xtq__agents_mem_register(ctx, buf, sizeof(buf)), -XTQ_EIO);
    CHECK_EQ(reg_calls[2], 1);
    CHECK_EQ(dereg_calls[0], 2);
    CHECK_EQ(dereg_calls[1], 2);
    CHECK_EQ(dereg_calls[2], 0);
    free(ctx);
}
