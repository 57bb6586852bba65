/*
 * Inboxes on one host (XTQ_SHM_INBOX, xtq/nic-emul/inbox.c), 2 ranks:
 * `test_inbox CASE [manual]`.
 *
 * order: each rank puts to the other a run of puts whose sizes mix what
 * fits an inbox slot (64 B, 4 KiB) and what does not (16 KiB, through the
 * transport), into a queue with one worker and no short tasks, so that
 * tasks run in the order their puts reached the queue. Every task checks
 * that it is the next one and that its payload is whole. With the inbox
 * on, some puts (not all) went through it (puts_via_inbox); with
 * XTQ_SHM_INBOX=0, none. XTQ_SHM_INBOX_SLOTS=2 makes the ring fill while
 * the worker holds its copies: those puts go through the transport, in
 * order all the same.
 *
 * hostile (white-box): rank 0 writes into rank 1's inbox what no libxtq
 * would: garbage, a put claiming to come from rank 1, a length past the
 * slot. Rank 1 drops each one, counted as rejected, runs none of them,
 * and rank 0's puts after them still run.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"
#include "wire.h"

#include <xtq/xtq.h>

#include "xtq_test.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE_INDEX 3
#define FN_ORDER    7
#define NPUTS       600
#define GOOD_PUTS   20
#define SEC         1000000000ll
#define BIG         16384
#define MID         4096
#define SMALL       64

static struct {
    int rank, size;
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *queue;
    xtq_function_t *fn;
    _Atomic uint32_t next, bad, bad_payload, ran;
} S;

static bool manual_mode(void)
{
    return xtq_test_argc > 0 && strcmp(xtq_test_argv[0], "manual") == 0;
}

static size_t put_size(uint32_t i)
{
    return i % 7 == 3 ? BIG : i % 11 == 5 ? MID : SMALL;
}

static uint8_t pattern(uint32_t i, size_t j)
{
    return (uint8_t)(i * 31u + j);
}

/* arg2: the put's number; arg3: 1 to check the order. */
static void order_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    (void)user_data;
    size_t len = 0;
    const uint8_t *p = xtq_task_payload(&len);
    uint32_t i = (uint32_t)arg[2];
    atomic_fetch_add(&S.ran, 1);
    if (arg[3] != 1)
        return;
    if (atomic_fetch_add(&S.next, 1) != i)
        atomic_fetch_add(&S.bad, 1);
    if (!p || len != put_size(i) || p[0] != pattern(i, 0) || p[len / 2] != pattern(i, len / 2) ||
        p[len - 1] != pattern(i, len - 1))
        atomic_fetch_add(&S.bad_payload, 1);
}

static void setup(void)
{
    xtq_init_attr_t attr = {.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS,
                            .progress = manual_mode() ? XTQ_PROGRESS_MANUAL : XTQ_PROGRESS_DEFAULT};
    /* One worker, every task through the queue: tasks run in queue order. */
    setenv("XTQ_CPU_WORKERS", "1", 0);
    setenv("XTQ_CPU_INLINE_TASKS", "0", 0);
    CHECK_OK(xtq_init(&attr, &S.ctx));
    S.rank = xtq_rank(S.ctx);
    S.size = xtq_size(S.ctx);
    if (S.size != 2)
        XTQ_FAIL("test_inbox runs on 2 ranks, not %d", S.size);
    CHECK_OK(xtq_agent_find(S.ctx, XTQ_AGENT_CPU, &S.cpu));
    CHECK_OK(xtq_queue_create(S.cpu, 1024, &S.queue));
    CHECK_OK(xtq_function_create_cpu(S.cpu, order_fn, NULL, &S.fn));
    CHECK_OK(xtq_register_queue(S.ctx, QUEUE_INDEX, S.queue));
    CHECK_OK(xtq_register_function(S.ctx, FN_ORDER, S.fn, NULL));
    CHECK_OK(xtq_barrier(S.ctx));
}

static void teardown(void)
{
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_ORDER));
    CHECK_OK(xtq_unregister_queue(S.ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(S.queue));
    CHECK_OK(xtq_function_destroy(S.fn));
    CHECK_OK(xtq_finalize(S.ctx));
}

static void wait_ran(uint32_t n)
{
    const uint64_t t0 = (uint64_t)time(NULL);
    while (atomic_load(&S.ran) < n) {
        if (manual_mode())
            xtq_progress(S.ctx);
        CHECK((uint64_t)time(NULL) - t0 < 60);
    }
}

XTQ_TEST(order)
{
    static uint8_t buf[BIG];
    static xtq_completion_t comp[NPUTS];
    setup();
    xtq_stats_t before, after;
    CHECK_OK(xtq_get_stats(S.ctx, &before));
    const int peer = 1 - S.rank;
    for (uint32_t i = 0; i < NPUTS; i++) {
        uint8_t cmd[64];
        size_t cmd_len, len = put_size(i);
        for (size_t j = 0; j < len; j++)
            buf[j] = pattern(i, j);
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_ORDER, QUEUE_INDEX, i, 1, &cmd_len));
        /* The window (256) fills: the put waits for room, progressing
         * itself in manual mode. */
        CHECK_OK(xtq_put(S.ctx, peer, cmd, cmd_len, buf, len, XTQ_PUT_REMOTE_COMPLETION,
                         &comp[i]));
        /* Its buffer is ours again once LOCAL. */
        while (!(xtq_completion_state(&comp[i]) & XTQ_COMPLETION_LOCAL))
            if (manual_mode())
                xtq_progress(S.ctx);
    }
    for (uint32_t i = 0; i < NPUTS; i++)
        CHECK_OK(xtq_completion_wait(S.ctx, &comp[i], 60 * SEC));
    wait_ran(NPUTS);
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_OK(xtq_get_stats(S.ctx, &after));
    const uint64_t via = after.puts_via_inbox - before.puts_via_inbox;
    const char *env = getenv("XTQ_SHM_INBOX");
    const bool off = env && strcmp(env, "0") == 0;
    printf("rank %d (%s, %s): %u puts, %llu through the inbox; %u out of order, %u with a "
           "wrong payload\n",
           S.rank, xtq_provider_name(S.ctx), manual_mode() ? "manual" : "thread", NPUTS,
           (unsigned long long)via, atomic_load(&S.bad), atomic_load(&S.bad_payload));
    CHECK_EQ(atomic_load(&S.next), NPUTS);
    CHECK_EQ(atomic_load(&S.bad), 0);
    CHECK_EQ(atomic_load(&S.bad_payload), 0);
    CHECK_EQ(after.puts_completed - before.puts_completed, NPUTS);
    if (off) {
        CHECK_EQ(via, 0);
    } else {
        CHECK(via > 0);
        CHECK(via < NPUTS); /* the 16 KiB ones cannot */
    }
    teardown();
}

/* Rank `r`'s ring in `g`, slot of index `idx` (the layout inbox.c makes). */
static struct xtq__inbox_slot *ring_slot(struct xtq__inbox_seg *g, int r, uint64_t idx)
{
    size_t off = sizeof(*g) + (size_t)g->nranks * sizeof(struct xtq__inbox_ring);
    size_t stride = sizeof(struct xtq__inbox_slot) + g->slot_bytes;
    return (struct xtq__inbox_slot *)((uint8_t *)g + off +
                                      ((size_t)r * g->nslots + idx % g->nslots) * stride);
}

/* Rank 0's engine reserves the next index of its ring at rank 1. */
static uint64_t reserve(struct xtq__engine *e)
{
    uint64_t idx = 0;
    bool ok;
    xtq__mutex_lock(&e->put_lock);
    ok = xtq__inbox_reserve(e, 1, 64, &idx);
    pthread_mutex_unlock(&e->put_lock);
    CHECK(ok);
    return idx;
}

XTQ_TEST(hostile)
{
    setup();
    struct xtq__engine *e = S.ctx->planes[0];
    if (!e->inbox_own || !e->inbox_peers.seg || !e->inbox_peers.seg[1 - S.rank]) {
        printf("SKIP: no inboxes (XTQ_SHM_INBOX=0, or not all ranks on one host)\n");
        CHECK_OK(xtq_finalize(S.ctx));
        exit(77);
    }
    xtq_stats_t before, after;
    CHECK_OK(xtq_get_stats(S.ctx, &before));
    /* Rank 1 counts from here: nothing is written before it has. */
    CHECK_OK(xtq_barrier(S.ctx));
    const unsigned srcrank = xtq_stats_reject_slot(-XTQ_ESRCRANK);
    if (S.rank == 0) {
        /* The window's first put makes the peer's slots (initiator.c):
         * one real put first, so that e->peers[1] is set up. */
        uint8_t cmd[64], junk[192];
        size_t cmd_len;
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_ORDER, QUEUE_INDEX, 0, 0, &cmd_len));
        CHECK_OK(xtq_put(S.ctx, 1, cmd, cmd_len, NULL, 0, 0, NULL));
        /* 1: garbage. */
        for (size_t j = 0; j < sizeof(junk); j++)
            junk[j] = (uint8_t)(j * 77u + 5u);
        struct iovec iov = {junk, sizeof(junk)};
        xtq__inbox_write(e, 1, reserve(e), &iov, 1);
        /* 2: a well-formed put that claims to come from rank 1. */
        uint8_t msg[256] __attribute__((aligned(64)));
        memset(msg, 0, sizeof(msg));
        struct xtq__wire_hdr *h = (struct xtq__wire_hdr *)msg;
        xtq__wire_hdr_init(h, XTQ__MSG_PUT, S.ctx->job_key, 1, 12345);
        h->cmd_len = (uint32_t)cmd_len;
        memcpy(msg + sizeof(*h), cmd, cmd_len);
        iov = (struct iovec){msg, xtq__wire_put_len((uint32_t)cmd_len, 0)};
        xtq__inbox_write(e, 1, reserve(e), &iov, 1);
        /* 3: a length past the slot (stored by hand: xtq__inbox_write
         * would copy that much). */
        struct xtq__inbox_seg *g = e->inbox_peers.seg[1];
        uint64_t idx = reserve(e);
        struct xtq__inbox_slot *s = ring_slot(g, 0, idx);
        s->len = g->slot_bytes + 64;
        atomic_store_explicit(&s->flag, idx + 1, memory_order_release);
        atomic_fetch_add_explicit(&g->posted, 1, memory_order_release);
        /* Then real puts, through the same ring. */
        for (uint32_t i = 0; i < GOOD_PUTS; i++) {
            xtq_completion_t c;
            CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_ORDER, QUEUE_INDEX, i, 0, &cmd_len));
            CHECK_OK(xtq_put(S.ctx, 1, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c));
            CHECK_OK(xtq_completion_wait(S.ctx, &c, 60 * SEC));
        }
        CHECK_OK(xtq_get_stats(S.ctx, &after));
        CHECK(after.puts_via_inbox - before.puts_via_inbox >= GOOD_PUTS);
    } else {
        wait_ran(1 + GOOD_PUTS);
    }
    CHECK_OK(xtq_barrier(S.ctx));
    if (S.rank == 1) {
        CHECK_OK(xtq_get_stats(S.ctx, &after));
        uint64_t rejected = after.msgs_rejected - before.msgs_rejected;
        uint64_t forged = after.rejected_by_reason[srcrank] - before.rejected_by_reason[srcrank];
        printf("rank 1: %llu messages of rank 0's inbox ring rejected (%llu claiming another "
               "rank); %u tasks ran, %d expected\n",
               (unsigned long long)rejected, (unsigned long long)forged, atomic_load(&S.ran),
               1 + GOOD_PUTS);
        CHECK_EQ(rejected, 3);
        CHECK_EQ(forged, 1);
        CHECK_EQ(atomic_load(&S.ran), 1 + GOOD_PUTS);
    }
    teardown();
}
