/*
 * Reconnect: `test_reconnect outage` at 2 ranks (shm or tcp), white-box.
 *
 * A link outage without namespaces: each rank sets the engine's fault hook
 * (xtq__fault_drop_from) so that everything from its peer is dropped on
 * arrival, puts, acks, pings and pongs alike, and streams puts with remote
 * completion to the peer until the peer is declared down (an xtq_put
 * refused with -XTQ_EHOSTDOWN). Both ranks then wait (out of band) for
 * half a timeout more, lift the hook together, and put to the peer until
 * one put succeeds: the peer must come back. The time it took is printed
 * next to 2 x XTQ_PEER_TIMEOUT_MS (the target; not asserted:
 * timing on a shared machine is no test), and a generous bound catches a
 * peer that never comes back.
 *
 * Every put carries an id; the target records how often each id ran.
 * At the end each rank sends the peer what became of each id it sent, and
 * the peer checks: acknowledged with 0 ran exactly once, failed with
 * -XTQ_EHOSTDOWN ran at most once (its outcome is unknown), nothing ran
 * twice, and every put completed (none waited past its bound).
 */
#include <xtq/xtq.h>

#include "nic-emul/engine.h"
#include "xtq_test.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE_INDEX 5
#define FN_INDEX    9
#define MAX_IDS     32768
#define RING        32
#define REPORT_ID   UINT64_MAX

enum outcome { NOT_SENT = 0, ACKED, FAILED };

static struct {
    _Atomic uint8_t ran[MAX_IDS]; /* by id, from the peer */
    uint8_t peer_outcome[MAX_IDS];
    _Atomic int report_in;
    uint8_t outcome[MAX_IDS]; /* of our own puts, by id */
    uint32_t next_id;
} S;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* arg[1]: payload; arg[2]: id, or REPORT_ID with the peer's outcomes. */
static void fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    (void)user_data;
    if (arg[2] == REPORT_ID) {
        memcpy(S.peer_outcome, (const void *)(uintptr_t)arg[1], sizeof(S.peer_outcome));
        atomic_store(&S.report_in, 1);
    } else if (arg[2] < MAX_IDS) {
        atomic_fetch_add(&S.ran[arg[2]], 1);
    }
}

struct stream {
    xtq_ctx_t *ctx;
    int peer;
    xtq_completion_t comp[RING];
    uint8_t cmd[RING][64]; /* a command stays untouched until its put is LOCAL */
    uint32_t id[RING];
    bool busy[RING];
    uint64_t bound_ns;
    unsigned acked, failed, refused;
};

/* Wait for ring entry i, if in use, and record its put's outcome. */
static void settle(struct stream *s, int i)
{
    if (!s->busy[i])
        return;
    int rc = xtq_completion_wait(s->ctx, &s->comp[i], (int64_t)s->bound_ns);
    if (rc != 0 && rc != -XTQ_EHOSTDOWN)
        XTQ_FAIL("put %u: %s (a put must complete or fail with -XTQ_EHOSTDOWN)", s->id[i],
                 xtq_errname(rc));
    /* A failed put may be DONE before LOCAL: its command is the
     * transport's until then (put.h). */
    uint64_t t0 = now_ns();
    while (!(xtq_completion_state(&s->comp[i]) & XTQ_COMPLETION_LOCAL)) {
        CHECK(now_ns() - t0 < s->bound_ns);
        sleep_ms(1);
    }
    S.outcome[s->id[i]] = rc == 0 ? ACKED : FAILED;
    if (rc == 0)
        s->acked++;
    else
        s->failed++;
    s->busy[i] = false;
}

/* One put of a new id into ring entry i: 0, or -XTQ_EHOSTDOWN (refused). */
static int put_one(struct stream *s, int i)
{
    size_t len;
    settle(s, i);
    CHECK(S.next_id < MAX_IDS);
    uint32_t id = S.next_id++;
    CHECK_OK(xtq_cmd_function(s->cmd[i], sizeof(s->cmd[i]), FN_INDEX, QUEUE_INDEX, id, 0, &len));
    int rc =
        xtq_put(s->ctx, s->peer, s->cmd[i], len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &s->comp[i]);
    if (rc == -XTQ_EHOSTDOWN) {
        S.outcome[id] = NOT_SENT;
        s->refused++;
        return rc;
    }
    CHECK_OK(rc);
    s->id[i] = id;
    s->busy[i] = true;
    return 0;
}

static void settle_all(struct stream *s)
{
    for (int i = 0; i < RING; i++)
        settle(s, i);
}

XTQ_TEST(outage)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;
    CHECK_OK(xtq_init(&attr, &ctx));
    int rank = xtq_rank(ctx);
    if (xtq_size(ctx) != 2) {
        xtq_finalize(ctx);
        XTQ_SKIP("outage runs at 2 ranks");
    }
    const char *pt = getenv("XTQ_PEER_TIMEOUT_MS");
    uint64_t timeout_ms = pt ? strtoull(pt, NULL, 10) : 5000;
    CHECK(timeout_ms > 0);
    struct stream s = {.ctx = ctx, .peer = 1 - rank, .bound_ns = 20 * timeout_ms * 1000000};
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 256, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, fn, NULL, &f));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(ctx, FN_INDEX, f, NULL));
    CHECK_OK(xtq_barrier(ctx));

    /* Before: a healthy stream. */
    for (int n = 0; n < 500; n++)
        CHECK_OK(put_one(&s, n % RING));
    settle_all(&s);
    CHECK_EQ(s.failed, 0);
    CHECK_OK(xtq_barrier(ctx));

    /* The outage: stream until the peer is declared down. */
    atomic_store(&xtq__fault_drop_from, 1ull << s.peer);
    uint64_t t0 = now_ns();
    for (int n = 0; put_one(&s, n % RING) == 0; n++)
        CHECK(now_ns() - t0 < s.bound_ns);
    uint64_t t_down = now_ns();
    settle_all(&s);
    CHECK(s.failed > 0);
    printf("rank %d: peer declared down %llu ms into the outage; %u acked, %u failed\n", rank,
           (unsigned long long)((t_down - t0) / 1000000), s.acked, s.failed);
    CHECK_OK(xtq_barrier(ctx)); /* out of band: both sides down */
    sleep_ms(timeout_ms / 2);
    CHECK_OK(xtq_barrier(ctx));
    atomic_store(&xtq__fault_drop_from, 0);
    uint64_t t_back = now_ns();

    /* After: put until one succeeds, then a healthy stream again. */
    unsigned tries = 0;
    for (;;) {
        CHECK(now_ns() - t_back < s.bound_ns); /* never came back: the defect */
        tries++;
        if (put_one(&s, 0) == 0) {
            unsigned acked = s.acked;
            settle(&s, 0);
            if (s.acked > acked)
                break;
        }
        sleep_ms(10);
    }
    uint64_t back_ms = (now_ns() - t_back) / 1000000;
    printf("rank %d: peer usable again %llu ms after the link returned (%u tries; 2 x "
           "XTQ_PEER_TIMEOUT_MS = %llu ms)\n",
           rank, (unsigned long long)back_ms, tries, (unsigned long long)(2 * timeout_ms));
    unsigned failed_before = s.failed;
    for (int n = 0; n < 500; n++)
        CHECK_OK(put_one(&s, n % RING));
    settle_all(&s);
    CHECK_EQ(s.failed, failed_before);

    /* Each rank tells the other what became of its puts. */
    uint8_t cmd[64];
    size_t len;
    xtq_completion_t rc_comp;
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_INDEX, QUEUE_INDEX, REPORT_ID, 0, &len));
    CHECK_OK(xtq_put(ctx, s.peer, cmd, len, S.outcome, sizeof(S.outcome), XTQ_PUT_REMOTE_COMPLETION,
                     &rc_comp));
    CHECK_OK(xtq_completion_wait(ctx, &rc_comp, (int64_t)s.bound_ns));
    CHECK_OK(xtq_barrier(ctx));
    CHECK(atomic_load(&S.report_in));
    unsigned lost = 0, twice = 0, unsent = 0, failed_ran = 0;
    for (uint32_t id = 0; id < MAX_IDS; id++) {
        uint8_t ran = atomic_load(&S.ran[id]);
        twice += ran > 1;
        if (S.peer_outcome[id] == ACKED)
            lost += ran != 1;
        else if (S.peer_outcome[id] == FAILED)
            failed_ran += ran == 1;
        else
            unsent += ran != 0;
    }
    printf("rank %d: from rank %d: %u acknowledged puts lost, %u ran twice, %u ran unsent, %u "
           "of the failed ran\n",
           rank, s.peer, lost, twice, unsent, failed_ran);
    CHECK_EQ(lost, 0);
    CHECK_EQ(twice, 0);
    CHECK_EQ(unsent, 0);

    CHECK_OK(xtq_unregister_function(ctx, FN_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_finalize(ctx));
    printf("rank %d: outage ok\n", rank);
}
