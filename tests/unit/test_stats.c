/*
 * The counters' sized query (xtq_query_stats), through the public API on a
 * context of one rank (no launcher: puts go to this process). Puts to
 * itself move the counters; the query is then asked with the first
 * version's size, this header's, a newer header's and too small a one,
 * the exported xtq_get_stats (what programs built against the first header
 * call) must agree with it on the first version's fields and write nothing
 * after them, and xtq_get_stats() compiled with this header must fill all
 * of this header's.
 */
#include <xtq/xtq.h>

#include "xtq_test.h"

#include <stdbool.h>
#include <stddef.h>
#include <time.h>

#define FUNCTION_INDEX 3
#define QUEUE_INDEX    3
#define CANARY         0xa5
#define EXTRA          64 /* bytes of fields a newer header would have */
#define WAIT_NS        (60ll * 1000000000)

/* The first version's size is ABI: a literal that never changes, ending
 * at rejected_by_reason. */
_Static_assert(XTQ_STATS_SIZE_V1 == 328, "XTQ_STATS_SIZE_V1 is fixed");
_Static_assert(XTQ_STATS_SIZE_V1 == offsetof(xtq_stats_t, rejected_by_reason) +
                                        sizeof(((xtq_stats_t *)0)->rejected_by_reason),
               "XTQ_STATS_SIZE_V1 ends at rejected_by_reason");

/* A stats struct followed by room a newer header's fields would take, and
 * a canary beyond that. */
union buf {
    xtq_stats_t st;
    unsigned char b[sizeof(xtq_stats_t) + EXTRA + 8];
};

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static void fn_count_down(const uint64_t arg[4], void *ret, void *user)
{
    xtq_signal_add((xtq_signal_t *)user, -1);
}

struct self {
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *queue;
    xtq_function_t *fn;
    xtq_signal_t *done;
};

static void self_init(struct self *s, int64_t tasks)
{
    CHECK_OK(xtq_init(NULL, &s->ctx));
    CHECK_EQ(xtq_size(s->ctx), 1);
    CHECK_OK(xtq_agent_find(s->ctx, XTQ_AGENT_CPU, &s->cpu));
    CHECK_OK(xtq_queue_create(s->cpu, 16, &s->queue));
    CHECK_OK(xtq_signal_create(tasks, &s->done));
    CHECK_OK(xtq_function_create_cpu(s->cpu, fn_count_down, s->done, &s->fn));
    CHECK_OK(xtq_register_queue(s->ctx, QUEUE_INDEX, s->queue));
    CHECK_OK(xtq_register_function(s->ctx, FUNCTION_INDEX, s->fn, NULL));
}

static void self_fini(struct self *s)
{
    CHECK_OK(xtq_unregister_function(s->ctx, FUNCTION_INDEX));
    CHECK_OK(xtq_unregister_queue(s->ctx, QUEUE_INDEX));
    CHECK_OK(xtq_function_destroy(s->fn));
    CHECK_OK(xtq_queue_destroy(s->queue));
    CHECK_OK(xtq_signal_destroy(s->done));
    CHECK_OK(xtq_finalize(s->ctx));
}

/* One put to this process of `len` payload bytes to function `index`;
 * returns its completion status. */
static int put_self(struct self *s, uint32_t index, const void *payload, size_t len)
{
    uint8_t cmd[64];
    size_t cmd_len = 0;
    xtq_completion_t c = {0};
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), index, QUEUE_INDEX, 0, len, &cmd_len));
    CHECK_OK(xtq_put(s->ctx, 0, cmd, cmd_len, payload, len, XTQ_PUT_REMOTE_COMPLETION, &c));
    return xtq_completion_wait(s->ctx, &c, WAIT_NS);
}

/* Counters that no longer move: the agent retires a task into the engine
 * after its function counted the signal down. */
static void settle(struct self *s, uint64_t tasks)
{
    CHECK_OK(xtq_signal_wait(s->done, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (int i = 0; i < 10000; i++) {
        xtq_stats_t st;
        CHECK_OK(xtq_get_stats(s->ctx, &st));
        if (st.tasks_completed >= tasks)
            return;
        nap_ms(1);
    }
    XTQ_FAIL("tasks not retired after 10 s");
}

static void check_bytes(const unsigned char *p, size_t from, size_t to, unsigned char v)
{
    for (size_t i = from; i < to; i++)
        if (p[i] != v)
            XTQ_FAIL("byte %zu is 0x%02x, expected 0x%02x", i, p[i], v);
}

/* The first version's size fills exactly that many bytes; this header's
 * size fills the whole struct; a newer header's gets its extra bytes
 * zeroed and is told how many the library filled. */
XTQ_TEST(query_sizes)
{
    static const uint8_t payload[100];
    struct self s;
    union buf u;
    int rc;

    self_init(&s, 2);
    CHECK_OK(put_self(&s, FUNCTION_INDEX, payload, sizeof(payload)));
    CHECK_OK(put_self(&s, FUNCTION_INDEX, payload, 1));
    settle(&s, 2);

    /* An old program's buffer: not a byte past XTQ_STATS_SIZE_V1. */
    memset(&u, CANARY, sizeof(u));
    rc = xtq_query_stats(s.ctx, &u.st, XTQ_STATS_SIZE_V1);
    CHECK_EQ(rc, XTQ_STATS_SIZE_V1);
    CHECK_EQ(u.st.puts_issued, 2);
    CHECK_EQ(u.st.tasks_enqueued, 2);
    CHECK_EQ(u.st.msgs_rejected, 0);
    check_bytes(u.b, XTQ_STATS_SIZE_V1, sizeof(u.b), CANARY);

    /* This header's buffer: all of it, nothing past it. */
    memset(&u, CANARY, sizeof(u));
    rc = xtq_query_stats(s.ctx, &u.st, sizeof(u.st));
    CHECK_EQ(rc, sizeof(xtq_stats_t));
    CHECK_EQ(u.st.puts_issued, 2);
    check_bytes(u.b, sizeof(xtq_stats_t), sizeof(u.b), CANARY);

    /* A newer header's buffer: our fields, then zeros where the library
     * has none; the canary beyond is the caller's. */
    memset(&u, CANARY, sizeof(u));
    rc = xtq_query_stats(s.ctx, &u.st, sizeof(xtq_stats_t) + EXTRA);
    CHECK_EQ(rc, sizeof(xtq_stats_t));
    CHECK_EQ(u.st.puts_issued, 2);
    check_bytes(u.b, sizeof(xtq_stats_t), sizeof(xtq_stats_t) + EXTRA, 0);
    check_bytes(u.b, sizeof(xtq_stats_t) + EXTRA, sizeof(u.b), CANARY);

    self_fini(&s);
}

/* NULL pointers and a size short of the first version are refused, and
 * nothing is written. */
XTQ_TEST(query_invalid)
{
    struct self s;
    union buf u;

    self_init(&s, 0);
    memset(&u, CANARY, sizeof(u));
    CHECK_ERR(xtq_query_stats(NULL, &u.st, sizeof(u.st)), -XTQ_EINVAL);
    CHECK_ERR(xtq_query_stats(s.ctx, NULL, sizeof(u.st)), -XTQ_EINVAL);
    CHECK_ERR(xtq_query_stats(s.ctx, &u.st, 0), -XTQ_EINVAL);
    CHECK_ERR(xtq_query_stats(s.ctx, &u.st, sizeof(uint64_t)), -XTQ_EINVAL);
    CHECK_ERR(xtq_query_stats(s.ctx, &u.st, XTQ_STATS_SIZE_V1 - 1), -XTQ_EINVAL);
    CHECK_ERR(xtq_get_stats(NULL, &u.st), -XTQ_EINVAL);
    CHECK_ERR(xtq_get_stats(s.ctx, NULL), -XTQ_EINVAL);
    check_bytes(u.b, 0, sizeof(u.b), CANARY);
    self_fini(&s);
}

/* The exported xtq_get_stats is the first version's query: the same
 * values for the first version's fields, and nothing written after them;
 * xtq_get_stats() as this header spells it fills every field it declares. */
XTQ_TEST(get_stats_is_v1)
{
    static const uint8_t payload[4096];
    struct self s;
    union buf q1, g, q2;
    bool same = false;

    self_init(&s, 3);
    CHECK_OK(put_self(&s, FUNCTION_INDEX, payload, sizeof(payload)));
    CHECK_OK(put_self(&s, FUNCTION_INDEX, NULL, 0));
    CHECK_OK(put_self(&s, FUNCTION_INDEX, payload, 17));
    /* A rejection, so that rejected_by_reason holds a count too. */
    CHECK_ERR(put_self(&s, FUNCTION_INDEX + 1, payload, 8), -XTQ_ENOFUNC);
    settle(&s, 3);

    /* Between two equal queries nothing moved: get_stats's values must be
     * theirs. (Nothing should move here at all; retry a few times in case
     * a late acknowledgement is still being counted.) */
    for (int i = 0; i < 1000 && !same; i++) {
        memset(&q1, 0, sizeof(q1));
        memset(&q2, 0, sizeof(q2));
        memset(&g, CANARY, sizeof(g));
        CHECK_EQ(xtq_query_stats(s.ctx, &q1.st, sizeof(q1.st)), sizeof(xtq_stats_t));
        CHECK_OK((xtq_get_stats)(s.ctx, &g.st)); /* the symbol, not the macro */
        CHECK_EQ(xtq_query_stats(s.ctx, &q2.st, sizeof(q2.st)), sizeof(xtq_stats_t));
        same = memcmp(q1.b, q2.b, XTQ_STATS_SIZE_V1) == 0;
        if (!same)
            nap_ms(1);
    }
    CHECK(same);
    CHECK(memcmp(g.b, q1.b, XTQ_STATS_SIZE_V1) == 0);
    check_bytes(g.b, XTQ_STATS_SIZE_V1, sizeof(g.b), CANARY);
    CHECK_EQ(g.st.puts_issued, 4);
    CHECK_EQ(g.st.puts_failed, 1);
    CHECK_EQ(g.st.tasks_enqueued, 3);
    CHECK_EQ(g.st.msgs_rejected, 1);
    CHECK_EQ(g.st.rejected_by_reason[xtq_stats_reject_slot(-XTQ_ENOFUNC)], 1);

    /* This header's xtq_get_stats(): every field, the new ones too. */
    union buf all;
    memset(&all, CANARY, sizeof(all));
    CHECK_OK(xtq_get_stats(s.ctx, &all.st));
    CHECK(memcmp(all.b, q1.b, sizeof(xtq_stats_t)) == 0);
    CHECK(all.st.payload_bytes_sent == sizeof(payload) + 17 + 8);
    check_bytes(all.b, sizeof(xtq_stats_t), sizeof(all.b), CANARY);
    self_fini(&s);
}

/* payload_bytes_sent and payload_bytes_received, on one process: every
 * accepted put counts its payload (all pieces of a putv) as sent; only the
 * commands that pass validation count theirs as received. */
XTQ_TEST(payload_bytes_self)
{
    static const size_t sizes[] = {0, 1, 63, 64, 4096, 4097, 70000};
    static uint8_t payload[70000];
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    struct self s;
    xtq_stats_t st;
    uint64_t good = 0;

    self_init(&s, (int64_t)n + 1);
    CHECK_EQ(xtq_query_stats(s.ctx, &st, sizeof(st)), sizeof(st));
    CHECK_EQ(st.payload_bytes_sent, 0);
    CHECK_EQ(st.payload_bytes_received, 0);
    for (size_t i = 0; i < n; i++) {
        CHECK_OK(put_self(&s, FUNCTION_INDEX, payload, sizes[i]));
        good += sizes[i];
    }
    /* Three pieces, one empty: 10 + 300 bytes. */
    {
        uint8_t cmd[64];
        size_t cmd_len = 0;
        xtq_completion_t c = {0};
        struct iovec iov[3] = {{payload, 10}, {payload + 10, 0}, {payload + 100, 300}};
        xtq_put_param_t p = {0};
        p.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COMPLETION;
        p.flags = XTQ_PUT_REMOTE_COMPLETION;
        p.comp = &c;
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FUNCTION_INDEX, QUEUE_INDEX, 0, 310, &cmd_len));
        CHECK_OK(xtq_putv(s.ctx, 0, cmd, cmd_len, iov, 3, &p));
        CHECK_OK(xtq_completion_wait(s.ctx, &c, WAIT_NS));
        good += 310;
    }
    /* Rejected at the target (no such function): sent, never received. */
    CHECK_ERR(put_self(&s, FUNCTION_INDEX + 1, payload, 123), -XTQ_ENOFUNC);
    /* Refused at the call: neither. */
    CHECK_ERR(xtq_put(s.ctx, 1, payload, 64, payload, 99, 0, NULL), -XTQ_ESRCRANK);
    settle(&s, n + 1);

    CHECK_EQ(xtq_query_stats(s.ctx, &st, sizeof(st)), sizeof(st));
    CHECK_EQ(st.puts_issued, n + 2);
    CHECK_EQ(st.tasks_enqueued, n + 1);
    CHECK_EQ(st.payload_bytes_sent, good + 123);
    CHECK_EQ(st.payload_bytes_received, good);
    printf("payload bytes: sent %llu, received %llu\n", (unsigned long long)st.payload_bytes_sent,
           (unsigned long long)st.payload_bytes_received);
    self_fini(&s);
}
