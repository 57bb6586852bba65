/*
 * The CPU agent: kernel dispatch geometry, function dispatch, barrier-AND
 * and barrier-OR, the barrier bit, completion signals, retire callbacks,
 * bad packets, a 100k-packet stress through a small queue, idle CPU use,
 * agent enumeration, destroy refused while objects are named (registered
 * or by queued tasks), and task results and failures. Threads meet on signals, never on sleeps.
 */
#include "internal.h"

#include <sched.h>
#include <time.h>

#include "cpu_agent.h"
#include "queue_int.h"
#include "registry/registry.h"
#include "xtq_test.h"

static xtq_agent_t *open_agent(unsigned workers)
{
    xtq_agent_t *a = NULL;

    CHECK_OK(xtq__cpu_agent_open_standalone(workers, &a));
    CHECK(a != NULL);
    return a;
}

static void close_agent(xtq_agent_t *a)
{
    a->ops->close(a);
}

/* Reserve (retrying while full), write, set the cookie, publish, ring:
 * the producer protocol of xtq/queue_int.h. */
/* The producer protocol (queue_int.h), with a result buffer beside the
 * cookie (NULL, 0: none). */
static void submit_result(xtq_queue_t *q, const xtq_aql_packet_t *p, void *cookie, void *result,
                          size_t result_len)
{
    uint64_t i;
    uint32_t first;

    while (xtq_queue_reserve(q, 1, &i) == -XTQ_EAGAIN)
        sched_yield();
    memcpy(xtq_queue_slot(q, i)->bytes + 4, p->bytes + 4, 60);
    q->cookies[i & q->mask] = cookie;
    q->results[i & q->mask] = (struct xtq__result_buf){result, result_len, NULL, 0};
    memcpy(&first, p->bytes, 4);
    xtq_queue_publish(q, i, (uint16_t)first, (uint16_t)(first >> 16));
    xtq_queue_ring_doorbell(q, i);
}

static void submit(xtq_queue_t *q, const xtq_aql_packet_t *p, void *cookie)
{
    submit_result(q, p, cookie, NULL, 0);
}

static void function_packet(xtq_aql_packet_t *p, const xtq_function_t *f, int barrier,
                            xtq_signal_t *done, uint64_t a0, uint64_t a1, uint64_t a2, uint64_t a3,
                            void *ret)
{
    memset(p, 0, sizeof(*p));
    p->agent.header = xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, barrier,
                                     XTQ_FENCE_SCOPE_SYSTEM, XTQ_FENCE_SCOPE_SYSTEM);
    p->agent.type = 1;
    p->agent.return_address = ret;
    p->agent.arg[0] = a0;
    p->agent.arg[1] = a1;
    p->agent.arg[2] = a2;
    p->agent.arg[3] = a3;
    p->agent.reserved2 = f != NULL ? xtq_function_object(f) : 0;
    p->agent.completion_signal = done != NULL ? xtq_signal_handle(done) : (xtq_signal_handle_t){0};
}

static void barrier_packet(xtq_aql_packet_t *p, enum xtq_packet_type type, xtq_signal_t *const deps[5],
                           xtq_signal_t *done)
{
    memset(p, 0, sizeof(*p));
    p->barrier.header = xtq_aql_header(type, 0, XTQ_FENCE_SCOPE_SYSTEM, XTQ_FENCE_SCOPE_SYSTEM);
    for (int i = 0; i < 5; i++)
        if (deps[i] != NULL)
            p->barrier.dep_signal[i] = xtq_signal_handle(deps[i]);
    p->barrier.completion_signal = xtq_signal_handle(done);
}

static void wait_zero(xtq_signal_t *s)
{
    CHECK_OK(xtq_signal_wait(s, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
}

/* ---- kernel dispatch ------------------------------------------------------- */

struct grid_rec {
    _Atomic uint32_t visits[64];
    uint32_t expect_count[3];
    uint32_t expect_grid[3];
    uint32_t expect_wg[3];
    uint32_t dims;
    _Atomic uint32_t bad;
};

static void grid_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    struct grid_rec *r = d->user_data;
    uint32_t *ka = kernarg;

    if (d->dimensions != r->dims || ka[0] != 0xabcd)
        atomic_fetch_add(&r->bad, 1);
    for (int i = 0; i < 3; i++)
        if (d->workgroup_count[i] != r->expect_count[i] || d->grid_size[i] != r->expect_grid[i] ||
            d->workgroup_size[i] != r->expect_wg[i] || d->workgroup_id[i] >= d->workgroup_count[i])
            atomic_fetch_add(&r->bad, 1);
    uint32_t flat = d->workgroup_id[0] +
                    d->workgroup_count[0] * (d->workgroup_id[1] + d->workgroup_count[1] * d->workgroup_id[2]);
    if (flat < 64)
        atomic_fetch_add(&r->visits[flat], 1);
    else
        atomic_fetch_add(&r->bad, 1);
}

static void run_grid(xtq_agent_t *a, xtq_queue_t *q, xtq_kernel_t *k, struct grid_rec *r,
                     unsigned dims, const uint32_t grid[3], const uint32_t wg[3])
{
    xtq_aql_packet_t p;
    xtq_signal_t *done;
    uint32_t kernarg[4] = {0xabcd, 0, 0, 0};
    uint32_t total = 1;

    memset(r, 0, sizeof(*r));
    r->dims = dims;
    for (int i = 0; i < 3; i++) {
        r->expect_grid[i] = grid[i];
        r->expect_wg[i] = wg[i];
        r->expect_count[i] = (grid[i] + wg[i] - 1) / wg[i];
        total *= r->expect_count[i];
    }
    CHECK(total <= 64);
    CHECK_OK(xtq_signal_create(1, &done));
    memset(&p, 0, sizeof(p));
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    p.kernel.setup = (uint16_t)dims;
    p.kernel.workgroup_size_x = (uint16_t)wg[0];
    p.kernel.workgroup_size_y = (uint16_t)wg[1];
    p.kernel.workgroup_size_z = (uint16_t)wg[2];
    p.kernel.grid_size_x = grid[0];
    p.kernel.grid_size_y = grid[1];
    p.kernel.grid_size_z = grid[2];
    p.kernel.kernel_object = xtq_kernel_object(k);
    p.kernel.kernarg_address = kernarg;
    p.kernel.completion_signal = xtq_signal_handle(done);
    CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));
    wait_zero(done);
    CHECK_EQ(atomic_load(&r->bad), 0);
    for (uint32_t i = 0; i < 64; i++)
        CHECK_EQ(atomic_load(&r->visits[i]), i < total ? 1 : 0);
    CHECK_OK(xtq_signal_destroy(done));
}

XTQ_TEST(kernel_dispatch_grid)
{
    xtq_agent_t *a = open_agent(2);
    xtq_queue_t *q;
    xtq_kernel_t *k;
    static struct grid_rec r;

    CHECK_OK(xtq_queue_create(a, 8, &q));
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, &r, &k));
    CHECK(xtq_kernel_agent(k) == a);
    CHECK_EQ(xtq_kernel_kernarg_size(k), 16);
    /* 3-D with partial groups at the edges: 3 x 2 x 2 groups. */
    run_grid(a, q, k, &r, 3, (uint32_t[3]){10, 6, 3}, (uint32_t[3]){4, 4, 2});
    /* 2-D and 1-D: unused dimensions count as 1. */
    run_grid(a, q, k, &r, 2, (uint32_t[3]){8, 9, 1}, (uint32_t[3]){8, 2, 1});
    run_grid(a, q, k, &r, 1, (uint32_t[3]){64, 1, 1}, (uint32_t[3]){1, 1, 1});
    CHECK_EQ(xtq__cpu_agent_bad_packets(a), 0);
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_queue_destroy(q));
    close_agent(a);
}

/* ---- function dispatch -------------------------------------------------------- */

static void sum_fn(const uint64_t arg[4], void *ret, void *user)
{
    *(uint64_t *)ret = arg[0] + arg[1] * 10 + arg[2] * 100 + arg[3] * 1000 + *(uint64_t *)user;
}

XTQ_TEST(function_dispatch)
{
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_signal_t *done;
    xtq_aql_packet_t p;
    uint64_t user = 50000, result = 0;

    CHECK_OK(xtq_queue_create(a, 4, &q));
    CHECK_OK(xtq_function_create_cpu(a, sum_fn, &user, &f));
    CHECK_OK(xtq_signal_create(1, &done));
    function_packet(&p, f, 0, done, 1, 2, 3, 4, &result);
    CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));
    wait_zero(done);
    /* The completion signal's release orders the function's store. */
    CHECK_EQ(result, 54321);
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_signal_destroy(done));
    CHECK_OK(xtq_queue_destroy(q));
    close_agent(a);
}

/* ---- barriers -------------------------------------------------------------------- */

struct order_rec {
    xtq_signal_t *watch; /* a signal whose value the function records */
    _Atomic int64_t seen;
};

static void record_fn(const uint64_t arg[4], void *ret, void *user)
{
    struct order_rec *r = user;
    atomic_store(&r->seen, xtq_signal_load(r->watch));
}

static void barrier_case(enum xtq_packet_type type)
{
    xtq_agent_t *a = open_agent(2);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_signal_t *s1, *s2, *bdone, *fdone;
    xtq_aql_packet_t p;
    struct order_rec rec;

    CHECK_OK(xtq_queue_create(a, 8, &q));
    CHECK_OK(xtq_signal_create(1, &s1));
    CHECK_OK(xtq_signal_create(1, &s2));
    CHECK_OK(xtq_signal_create(1, &bdone));
    CHECK_OK(xtq_signal_create(1, &fdone));
    rec.watch = bdone;
    atomic_init(&rec.seen, -1);
    CHECK_OK(xtq_function_create_cpu(a, record_fn, &rec, &f));

    /* Zero handles among the deps are ignored. */
    barrier_packet(&p, type, (xtq_signal_t *const[5]){NULL, s1, NULL, s2, NULL}, bdone);
    CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));
    /* No barrier bit: only the barrier packet itself holds this back. */
    function_packet(&p, f, 0, fdone, 0, 0, 0, 0, NULL);
    CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));

    if (type == XTQ_PACKET_TYPE_BARRIER_AND) {
        xtq_signal_store(s1, 0);
        /* s2 is still 1: the AND cannot have completed, nor what follows. */
        CHECK_EQ(xtq_signal_load(bdone), 1);
        CHECK_EQ(xtq_signal_load(fdone), 1);
        xtq_signal_store(s2, 0);
    } else {
        CHECK_EQ(xtq_signal_load(bdone), 1);
        CHECK_EQ(xtq_signal_load(fdone), 1);
        xtq_signal_store(s2, 0); /* one is enough for OR */
    }
    wait_zero(bdone);
    wait_zero(fdone);
    /* The packet after the barrier ran after it completed. */
    CHECK_EQ(atomic_load(&rec.seen), 0);
    CHECK_EQ(xtq__cpu_agent_bad_packets(a), 0);

    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_queue_destroy(q));
    close_agent(a);
    xtq_signal_destroy(s1);
    xtq_signal_destroy(s2);
    xtq_signal_destroy(bdone);
    xtq_signal_destroy(fdone);
}

XTQ_TEST(barrier_and)
{
    barrier_case(XTQ_PACKET_TYPE_BARRIER_AND);
}

XTQ_TEST(barrier_or)
{
    barrier_case(XTQ_PACKET_TYPE_BARRIER_OR);
}

/* A barrier on a signal that another packet of the same agent decrements
 * (in another queue): woken by the completion, not by the host. */
XTQ_TEST(barrier_on_agent_signal)
{
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *q1, *q2;
    xtq_function_t *f;
    xtq_signal_t *dep, *bdone;
    xtq_aql_packet_t p;
    uint64_t user = 0, result;

    CHECK_OK(xtq_queue_create(a, 4, &q1));
    CHECK_OK(xtq_queue_create(a, 4, &q2));
    CHECK_OK(xtq_function_create_cpu(a, sum_fn, &user, &f));
    CHECK_OK(xtq_signal_create(1, &dep));
    CHECK_OK(xtq_signal_create(1, &bdone));
    barrier_packet(&p, XTQ_PACKET_TYPE_BARRIER_AND, (xtq_signal_t *const[5]){dep}, bdone);
    CHECK_OK(xtq_queue_submit(q1, &p, XTQ_TIMEOUT_INFINITE, NULL));
    function_packet(&p, f, 0, dep, 1, 0, 0, 0, &result);
    CHECK_OK(xtq_queue_submit(q2, &p, XTQ_TIMEOUT_INFINITE, NULL));
    wait_zero(bdone);
    CHECK_EQ(xtq_signal_load(dep), 0);
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_queue_destroy(q1));
    CHECK_OK(xtq_queue_destroy(q2));
    close_agent(a);
    xtq_signal_destroy(dep);
    xtq_signal_destroy(bdone);
}

/* ---- the barrier bit ------------------------------------------------------------- */

struct gate_rec {
    xtq_signal_t *gate;     /* the first function waits for it to reach 0 */
    xtq_signal_t *started;  /* it sets this to 0 when it starts */
    _Atomic int first_done;
    _Atomic int second_saw_first_done;
};

static void gated_fn(const uint64_t arg[4], void *ret, void *user)
{
    struct gate_rec *g = user;
    xtq_signal_store(g->started, 0);
    CHECK_OK(xtq_signal_wait(g->gate, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
    atomic_store(&g->first_done, 1);
}

static void second_fn(const uint64_t arg[4], void *ret, void *user)
{
    struct gate_rec *g = user;
    atomic_store(&g->second_saw_first_done, atomic_load(&g->first_done));
}

static void barrier_bit_case(int barrier)
{
    xtq_agent_t *a = open_agent(2);
    xtq_queue_t *q;
    xtq_function_t *f1, *f2;
    xtq_signal_t *d1, *d2;
    xtq_aql_packet_t p;
    struct gate_rec g;

    CHECK_OK(xtq_queue_create(a, 4, &q));
    CHECK_OK(xtq_signal_create(1, &g.gate));
    CHECK_OK(xtq_signal_create(1, &g.started));
    atomic_init(&g.first_done, 0);
    atomic_init(&g.second_saw_first_done, -1);
    CHECK_OK(xtq_signal_create(1, &d1));
    CHECK_OK(xtq_signal_create(1, &d2));
    CHECK_OK(xtq_function_create_cpu(a, gated_fn, &g, &f1));
    CHECK_OK(xtq_function_create_cpu(a, second_fn, &g, &f2));

    function_packet(&p, f1, 0, d1, 0, 0, 0, 0, NULL);
    CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));
    wait_zero(g.started);
    function_packet(&p, f2, barrier, d2, 0, 0, 0, 0, NULL);
    CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));
    if (barrier) {
        /* Cannot have started while the first one is held at the gate. */
        CHECK_EQ(xtq_signal_load(d2), 1);
        xtq_signal_store(g.gate, 0);
        wait_zero(d2);
        CHECK_EQ(atomic_load(&g.second_saw_first_done), 1);
    } else {
        /* Without the bit the second runs on the other worker while the
         * first is still held: this wait would never end otherwise. */
        wait_zero(d2);
        CHECK_EQ(atomic_load(&g.second_saw_first_done), 0);
        xtq_signal_store(g.gate, 0);
    }
    wait_zero(d1);
    CHECK_OK(xtq_function_destroy(f1));
    CHECK_OK(xtq_function_destroy(f2));
    CHECK_OK(xtq_queue_destroy(q));
    close_agent(a);
    xtq_signal_destroy(g.gate);
    xtq_signal_destroy(g.started);
    xtq_signal_destroy(d1);
    xtq_signal_destroy(d2);
}

XTQ_TEST(barrier_bit_orders)
{
    barrier_bit_case(1);
}

XTQ_TEST(no_barrier_bit_runs_concurrently)
{
    barrier_bit_case(0);
}

/* ---- completion and retire ------------------------------------------------------- */

static _Atomic uint64_t retired_ok, retired_err, retired_cancel;
static _Atomic uint32_t retire_hits[256];

static void test_retire(void *cookie, int status)
{
    uintptr_t c = (uintptr_t)cookie;
    if (status == 0)
        atomic_fetch_add(&retired_ok, 1);
    else if (status == -XTQ_EPACKET)
        atomic_fetch_add(&retired_err, 1);
    else if (status == -XTQ_ECANCELED)
        atomic_fetch_add(&retired_cancel, 1);
    if (c < 256)
        atomic_fetch_add(&retire_hits[c], 1);
}

static void nop_fn(const uint64_t arg[4], void *ret, void *user)
{
}

XTQ_TEST(completion_and_retire)
{
    xtq_agent_t *a = open_agent(2);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_signal_t *done;
    xtq_aql_packet_t p;

    CHECK_OK(xtq_queue_create(a, 8, &q));
    q->retire = test_retire;
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    CHECK_OK(xtq_signal_create(200, &done));
    /* 200 packets, every other one with a cookie (1..100). */
    for (uintptr_t i = 0; i < 200; i++) {
        function_packet(&p, f, 0, done, i, 0, 0, 0, NULL);
        submit(q, &p, (i & 1) ? (void *)(i / 2 + 1) : NULL);
    }
    wait_zero(done);
    /* Each decrement is by one: never below zero. */
    CHECK_EQ(xtq_signal_load(done), 0);
    /* Retire runs before the packet counts as done (before the queue drains);
     * destroying the queue waits for in-flight packets. */
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_EQ(atomic_load(&retired_ok), 100);
    CHECK_EQ(atomic_load(&retire_hits[0]), 0);
    for (int i = 1; i <= 100; i++)
        CHECK_EQ(atomic_load(&retire_hits[i]), 1);
    CHECK_EQ(xtq__cpu_agent_packets_done(a), 200);
    CHECK_OK(xtq_function_destroy(f));
    close_agent(a);
    xtq_signal_destroy(done);
}

XTQ_TEST(bad_packets)
{
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_kernel_t *k;
    xtq_signal_t *done, *good;
    xtq_aql_packet_t p;
    uint64_t junk[8] = {0};

    CHECK_OK(xtq_queue_create(a, 8, &q));
    q->retire = test_retire;
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, NULL, &k));
    CHECK_OK(xtq_signal_create(5, &done));
    CHECK_OK(xtq_signal_create(1, &good));

    /* 1: vendor-specific type. */
    function_packet(&p, f, 0, done, 0, 0, 0, 0, NULL);
    p.agent.header = xtq_aql_header(XTQ_PACKET_TYPE_VENDOR_SPECIFIC, 0, 0, 0);
    submit(q, &p, (void *)(uintptr_t)11);
    /* 2: function object that is not one. */
    function_packet(&p, NULL, 0, done, 0, 0, 0, 0, NULL);
    p.agent.reserved2 = (uint64_t)(uintptr_t)junk;
    submit(q, &p, (void *)(uintptr_t)12);
    /* 3: a kernel object used as a function object (wrong magic). */
    function_packet(&p, NULL, 0, done, 0, 0, 0, 0, NULL);
    p.agent.reserved2 = xtq_kernel_object(k);
    submit(q, &p, (void *)(uintptr_t)13);
    /* 4: kernel dispatch with a wild kernel object. */
    memset(&p, 0, sizeof(p));
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, 0, 0);
    p.kernel.setup = 1;
    p.kernel.grid_size_x = p.kernel.grid_size_y = p.kernel.grid_size_z = 1;
    p.kernel.workgroup_size_x = p.kernel.workgroup_size_y = p.kernel.workgroup_size_z = 1;
    p.kernel.kernel_object = 0x1000;
    p.kernel.completion_signal = xtq_signal_handle(done);
    submit(q, &p, (void *)(uintptr_t)14);
    /* 5: a destroyed function. */
    xtq_function_t *gone;
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &gone));
    uint64_t gone_obj = xtq_function_object(gone);
    CHECK_OK(xtq_function_destroy(gone));
    function_packet(&p, NULL, 0, done, 0, 0, 0, 0, NULL);
    p.agent.reserved2 = gone_obj;
    submit(q, &p, (void *)(uintptr_t)15);
    /* Then a good one: the agent kept going. */
    function_packet(&p, f, 0, good, 0, 0, 0, 0, NULL);
    submit(q, &p, (void *)(uintptr_t)16);

    wait_zero(good);
    /* Same queue, in order, one worker: the bad ones were retired first. */
    CHECK_EQ(atomic_load(&retired_err), 5);
    for (int i = 11; i <= 15; i++)
        CHECK_EQ(atomic_load(&retire_hits[i]), 1);
    CHECK_EQ(xtq__cpu_agent_bad_packets(a), 5);
    /* Failed packets do not signal completion. */
    CHECK_EQ(xtq_signal_load(done), 5);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_EQ(atomic_load(&retire_hits[16]), 1);
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_kernel_destroy(k));
    close_agent(a);
    xtq_signal_destroy(done);
    xtq_signal_destroy(good);
}

/* Holds the only worker until `gate` reaches 0; says so on `started`. */
struct gate {
    xtq_signal_t *started, *gate;
};

static void gate_fn(const uint64_t arg[4], void *ret, void *user)
{
    struct gate *g = user;
    xtq_signal_add(g->started, -1);
    CHECK_OK(xtq_signal_wait(g->gate, XTQ_SIGNAL_EQ, 0, XTQ_TIMEOUT_INFINITE, NULL));
}

/*
 * Destroying a queue with packets still in it (the engine put them there:
 * they carry cookies) retires each with -XTQ_ECANCELED, as ROCr does, so
 * the initiator hears of it; their completion signals are left alone (a
 * failed task does not signal). Issue 10, bug 3.
 */
XTQ_TEST(destroy_cancels_queued)
{
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *held, *q;
    xtq_function_t *fg, *f;
    struct gate g;
    xtq_signal_t *done;
    xtq_aql_packet_t p;

    CHECK_OK(xtq_signal_create(1, &g.started));
    CHECK_OK(xtq_signal_create(1, &g.gate));
    CHECK_OK(xtq_signal_create(5, &done));
    CHECK_OK(xtq_queue_create(a, 8, &held));
    CHECK_OK(xtq_queue_create(a, 8, &q));
    q->retire = test_retire;
    CHECK_OK(xtq_function_create_cpu(a, gate_fn, &g, &fg));
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    /* The worker is busy on the other queue: q's packets stay queued. */
    function_packet(&p, fg, 0, NULL, 0, 0, 0, 0, NULL);
    submit(held, &p, NULL);
    wait_zero(g.started);
    for (uintptr_t i = 0; i < 5; i++) {
        function_packet(&p, f, 0, done, i, 0, 0, 0, NULL);
        submit(q, &p, (void *)(31 + i));
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_EQ(atomic_load(&retired_cancel), 5);
    for (int i = 31; i < 36; i++)
        CHECK_EQ(atomic_load(&retire_hits[i]), 1);
    CHECK_EQ(xtq_signal_load(done), 5);
    xtq_signal_store(g.gate, 0);
    CHECK_OK(xtq_queue_destroy(held));
    /* None of them ran. */
    CHECK_EQ(xtq__cpu_agent_packets_done(a), 1);
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_function_destroy(fg));
    close_agent(a);
    xtq_signal_destroy(done);
    xtq_signal_destroy(g.gate);
    xtq_signal_destroy(g.started);
}

static void *open_gate_later(void *arg)
{
    struct gate *g = arg;
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL); /* so that close() is (most likely) waiting by then */
    xtq_signal_store(g->gate, 0);
    return NULL;
}

/* Closing the agent with packets queued retires them the same way. */
XTQ_TEST(close_cancels_queued)
{
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *held, *q;
    xtq_function_t *fg, *f;
    struct gate g;
    xtq_aql_packet_t p;

    CHECK_OK(xtq_signal_create(1, &g.started));
    CHECK_OK(xtq_signal_create(1, &g.gate));
    CHECK_OK(xtq_queue_create(a, 8, &held));
    CHECK_OK(xtq_queue_create(a, 8, &q));
    q->retire = test_retire;
    CHECK_OK(xtq_function_create_cpu(a, gate_fn, &g, &fg));
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    function_packet(&p, fg, 0, NULL, 0, 0, 0, 0, NULL);
    submit(held, &p, NULL);
    wait_zero(g.started);
    for (uintptr_t i = 0; i < 3; i++) {
        function_packet(&p, f, 0, NULL, i, 0, 0, 0, NULL);
        submit(q, &p, (void *)(41 + i));
    }
    /* close() joins the worker: the gate opens while it waits. */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, open_gate_later, &g), 0);
    close_agent(a);
    pthread_join(th, NULL);
    /* Had the gate opened before close, the worker ran some of them; the
     * rest were cancelled. Each retired exactly once. */
    for (int i = 41; i < 44; i++)
        CHECK_EQ(atomic_load(&retire_hits[i]), 1);
    CHECK_EQ(atomic_load(&retired_cancel) + atomic_load(&retired_ok), 3);
    xtq_signal_destroy(g.gate);
    xtq_signal_destroy(g.started);
}

/* ---- stress ------------------------------------------------------------------------ */

enum { STRESS_PER_PRODUCER = 50000, STRESS_PRODUCERS = 2 };
static _Atomic uint8_t stress_hits[STRESS_PRODUCERS][STRESS_PER_PRODUCER];

static void stress_fn(const uint64_t arg[4], void *ret, void *user)
{
    if (arg[0] < STRESS_PRODUCERS && arg[1] < STRESS_PER_PRODUCER)
        atomic_fetch_add_explicit(&stress_hits[arg[0]][arg[1]], 1, memory_order_relaxed);
}

struct stress_arg {
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_signal_t *done;
    uint64_t id;
    int rc;
};

static void *stress_producer(void *p)
{
    struct stress_arg *s = p;
    xtq_aql_packet_t pkt;

    for (uint64_t i = 0; i < STRESS_PER_PRODUCER && s->rc == 0; i++) {
        function_packet(&pkt, s->f, 0, s->done, s->id, i, 0, 0, NULL);
        s->rc = xtq_queue_submit(s->q, &pkt, XTQ_TIMEOUT_INFINITE, NULL);
    }
    return NULL;
}

XTQ_TEST(stress_100k_two_producers)
{
    xtq_agent_t *a = open_agent(2);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_signal_t *done;
    pthread_t th[STRESS_PRODUCERS];
    struct stress_arg args[STRESS_PRODUCERS];

    CHECK_OK(xtq_queue_create(a, 16, &q));
    CHECK_OK(xtq_function_create_cpu(a, stress_fn, NULL, &f));
    CHECK_OK(xtq_signal_create(STRESS_PRODUCERS * STRESS_PER_PRODUCER, &done));
    for (int i = 0; i < STRESS_PRODUCERS; i++) {
        args[i] = (struct stress_arg){q, f, done, (uint64_t)i, 0};
        CHECK_EQ(pthread_create(&th[i], NULL, stress_producer, &args[i]), 0);
    }
    for (int i = 0; i < STRESS_PRODUCERS; i++) {
        CHECK_EQ(pthread_join(th[i], NULL), 0);
        CHECK_OK(args[i].rc);
    }
    wait_zero(done);
    for (int p = 0; p < STRESS_PRODUCERS; p++)
        for (int i = 0; i < STRESS_PER_PRODUCER; i++)
            if (atomic_load(&stress_hits[p][i]) != 1)
                XTQ_FAIL("packet %d/%d ran %u times", p, i, atomic_load(&stress_hits[p][i]));
    CHECK_EQ(xtq_queue_load_read_index(q), STRESS_PRODUCERS * STRESS_PER_PRODUCER);
    /* Destroy drains packets still finishing after their signal. */
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_EQ(xtq__cpu_agent_packets_done(a), STRESS_PRODUCERS * STRESS_PER_PRODUCER);
    CHECK_OK(xtq_function_destroy(f));
    close_agent(a);
    xtq_signal_destroy(done);
}

/* ---- idle workers sleep ------------------------------------------------------------ */

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A measurement, not a timing assertion: over 300 ms of idleness the
 * process (main thread asleep, 4 workers idle, 2 empty queues) must use
 * well under 10% of one core; a spinning worker would use ~100%. */
XTQ_TEST(idle_workers_sleep)
{
    xtq_agent_t *a = open_agent(4);
    xtq_queue_t *q1, *q2;
    xtq_function_t *f;
    xtq_signal_t *done;
    xtq_aql_packet_t p;
    struct timespec nap = {0, 300000000};
    uint64_t c0, c1;

    CHECK_OK(xtq_queue_create(a, 4, &q1));
    CHECK_OK(xtq_queue_create(a, 4, &q2));
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    CHECK_OK(xtq_signal_create(1, &done));
    function_packet(&p, f, 0, done, 0, 0, 0, 0, NULL);
    CHECK_OK(xtq_queue_submit(q1, &p, XTQ_TIMEOUT_INFINITE, NULL));
    wait_zero(done);

    c0 = cpu_ns();
    while (nanosleep(&nap, &nap) != 0)
        ;
    c1 = cpu_ns();
    printf("idle CPU: %.3f ms over 300 ms (4 workers)\n", (double)(c1 - c0) / 1e6);
    CHECK(c1 - c0 < 30000000);

    CHECK_OK(xtq_queue_destroy(q1));
    CHECK_OK(xtq_queue_destroy(q2));
    CHECK_OK(xtq_function_destroy(f));
    close_agent(a);
    xtq_signal_destroy(done);
}

/*
 * A worker that finds its queue's take lock held (another worker taking a
 * packet, or a receiving thread checking whether a short task may run
 * where it arrived) looks again instead of sleeping: the packet whose
 * doorbell woke it is still to be taken, and no other doorbell may come
 * (a full queue's producers wait for room). Here the test holds the lock
 * while the packet's doorbell wakes the one worker, lets it find the lock
 * held, then releases it: the packet must run. (Before, the worker slept
 * until the next doorbell, which never came.)
 */
XTQ_TEST(take_lock_busy_scan_again)
{
    setenv("XTQ_AGENT_SPIN_US", "0", 1); /* the worker sleeps when idle */
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_signal_t *done;
    xtq_aql_packet_t p;

    CHECK_OK(xtq_queue_create(a, 4, &q));
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    CHECK_OK(xtq_signal_create(1, &done));
    uint64_t busy0 = xtq__cpu_take_busy();
    xtq__cpu_queue_hold_take(q, true);
    function_packet(&p, f, 0, done, 0, 0, 0, 0, NULL);
    submit(q, &p, NULL);
    for (int i = 0; i < 10000 && xtq__cpu_take_busy() == busy0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    CHECK(xtq__cpu_take_busy() > busy0);
    xtq__cpu_queue_hold_take(q, false);
    CHECK_OK(xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, 5000000000ll, NULL));

    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    close_agent(a);
    xtq_signal_destroy(done);
    unsetenv("XTQ_AGENT_SPIN_US");
}

/* ---- enumeration -------------------------------------------------------------------- */

XTQ_TEST(agents_open)
{
    xtq_ctx_t *ctx = calloc(1, sizeof(*ctx));
    xtq_agent_t *a;
    xtq_agent_info_t info;
    char reason[160];

    CHECK(ctx != NULL);
    CHECK_OK(xtq__agents_open(ctx));
    CHECK(xtq_agent_count(ctx) >= 1);
    CHECK_OK(xtq_agent_kind_status(ctx, XTQ_AGENT_CPU, reason, sizeof(reason)));
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &a));
    CHECK_OK(xtq_agent_get_info(a, &info));
    CHECK_EQ(info.kind, XTQ_AGENT_CPU);
    CHECK(strcmp(info.name, "cpu0") == 0);
    CHECK(info.workers >= 1);
    CHECK(info.max_queue_size >= 2);
    CHECK(a->ctx == ctx);
    for (unsigned i = 0; i < xtq_agent_count(ctx); i++) {
        xtq_agent_t *g;
        CHECK_OK(xtq_agent_get(ctx, i, &g));
        CHECK(g != NULL);
    }
    CHECK_ERR(xtq_agent_get(ctx, xtq_agent_count(ctx), &a), -XTQ_EINVAL);
    /* By device index: every agent is found as itself, and no other. */
    for (unsigned i = 0; i < xtq_agent_count(ctx); i++) {
        xtq_agent_t *g, *f;
        xtq_agent_info_t gi;
        CHECK_OK(xtq_agent_get(ctx, i, &g));
        CHECK_OK(xtq_agent_get_info(g, &gi));
        CHECK_OK(xtq_agent_find_device(ctx, gi.kind, gi.device_index, &f));
        CHECK(f == g);
    }
    CHECK_ERR(xtq_agent_find_device(ctx, XTQ_AGENT_CPU, 4096, &a), -XTQ_ENOAGENT);
    CHECK_ERR(xtq_agent_find_device(ctx, XTQ_AGENT_KIND_COUNT, 0, &a), -XTQ_EINVAL);
    CHECK_ERR(xtq_agent_find_device(NULL, XTQ_AGENT_CPU, 0, &a), -XTQ_EINVAL);
    CHECK_ERR(xtq_agent_find_device(ctx, XTQ_AGENT_CPU, 0, NULL), -XTQ_EINVAL);
    /* Every kind either works or says why not. */
    for (int k = XTQ_AGENT_CUDA; k < XTQ_AGENT_KIND_COUNT; k++) {
        int rc = xtq_agent_kind_status(ctx, (enum xtq_agent_kind)k, reason, sizeof(reason));
        if (rc != 0) {
            CHECK_EQ(rc, -XTQ_ENOAGENT);
            CHECK(reason[0] != '\0');
            CHECK_ERR(xtq_agent_find(ctx, (enum xtq_agent_kind)k, &a), -XTQ_ENOAGENT);
            printf("%s: %s\n", xtq_agent_kind_name((enum xtq_agent_kind)k), reason);
        }
    }
    CHECK(strcmp(xtq_agent_kind_name(XTQ_AGENT_CPU), "cpu") == 0);
    CHECK(strcmp(xtq_agent_kind_name(XTQ_AGENT_CUDA), "cuda") == 0);
    CHECK(strcmp(xtq_agent_kind_name(XTQ_AGENT_ROCR), "rocr") == 0);
    xtq__agents_close(ctx);
    CHECK_EQ(xtq_agent_count(ctx), 0);
    free(ctx);
}

XTQ_TEST(kernel_create_checks)
{
    xtq_agent_t *a = open_agent(1);
    xtq_kernel_t *k;
    xtq_function_t *f;
    /* A CPU-kind agent with another operations table (not a copy of *a:
     * its workers update it meanwhile). */
    struct xtq_agent other = {.ops = NULL, .kind = a->kind, .ctx = a->ctx, .info = a->info};

    CHECK_ERR(xtq_kernel_create_cpu(&other, grid_kernel, 16, NULL, &k), -XTQ_EAGENTKIND);
    CHECK_ERR(xtq_function_create_cpu(&other, nop_fn, NULL, &f), -XTQ_EAGENTKIND);
    CHECK_ERR(xtq_kernel_create_cpu(a, NULL, 16, NULL, &k), -XTQ_EINVAL);
    CHECK_ERR(xtq_function_create_cpu(a, NULL, NULL, &f), -XTQ_EINVAL);
    /* Objects are recycled: destroy then create reuses the slot safely. */
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, NULL, &k));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    CHECK_OK(xtq_function_destroy(f));
    close_agent(a);
}

/* ---- destroy while named (issue 10, bug 2) -------------------------------------- */

/* Registered objects cannot be destroyed: the table entry would point at a
 * freed object, and the pool would hand its slot to the next kernel. */
XTQ_TEST(destroy_refused_while_registered)
{
    xtq_agent_t *a = open_agent(1);
    struct xtq__registry *reg;
    xtq_kernel_t *k;
    xtq_function_t *f;
    xtq_signal_t *sig;

    CHECK_OK(xtq__registry_create(8, &reg));
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, NULL, &k));
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    CHECK_OK(xtq_signal_create(0, &sig));
    CHECK_OK(xtq__registry_set_kernel(reg, 1, k, NULL, sig));
    CHECK_OK(xtq__registry_set_kernel(reg, 2, k, NULL, NULL));
    CHECK_OK(xtq__registry_set_function(reg, 3, f, NULL));
    CHECK_ERR(xtq_kernel_destroy(k), -XTQ_EBUSY);
    CHECK_ERR(xtq_function_destroy(f), -XTQ_EBUSY);
    CHECK_ERR(xtq_signal_destroy(sig), -XTQ_EBUSY);
    /* Refusals changed nothing: the objects still work. */
    CHECK_EQ(xtq_kernel_kernarg_size(k), 16);
    xtq_signal_store(sig, 5);
    CHECK_EQ(xtq_signal_load(sig), 5);
    /* One registration left still holds the kernel; not the signal. */
    CHECK_OK(xtq__registry_clear_kernel(reg, 1));
    CHECK_ERR(xtq_kernel_destroy(k), -XTQ_EBUSY);
    CHECK_OK(xtq_signal_destroy(sig));
    CHECK_OK(xtq__registry_clear_kernel(reg, 2));
    CHECK_OK(xtq__registry_clear_function(reg, 3));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_function_destroy(f));

    /* Destroying the tables (finalize) releases what they still named. */
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, NULL, &k));
    CHECK_OK(xtq_signal_create(0, &sig));
    CHECK_OK(xtq__registry_set_kernel(reg, 1, k, NULL, sig));
    CHECK_ERR(xtq_kernel_destroy(k), -XTQ_EBUSY);
    xtq__registry_destroy(reg);
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_signal_destroy(sig));
    close_agent(a);
}

/* A task the engine enqueued holds its kernel, function and signal from
 * enqueue (task_begin) to retire (task_end), past unregistration. */
XTQ_TEST(destroy_refused_while_tasks_queued)
{
    xtq_agent_t *a = open_agent(1);
    struct xtq__registry *reg;
    struct xtq__task_refs kt, ft;
    xtq_kernel_t *k, *k2;
    xtq_function_t *f;
    xtq_signal_t *sig;
    xtq_aql_packet_t kp, fp;

    CHECK_OK(xtq__registry_create(8, &reg));
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, NULL, &k));
    CHECK_OK(xtq_function_create_cpu(a, nop_fn, NULL, &f));
    CHECK_OK(xtq_signal_create(1, &sig));
    CHECK_OK(xtq__registry_set_kernel(reg, 4, k, NULL, sig));
    CHECK_OK(xtq__registry_set_function(reg, 6, f, NULL));
    /* Packets as they arrive: indices, not pointers. */
    memset(&kp, 0, sizeof(kp));
    kp.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM);
    kp.kernel.kernel_object = 4;
    memset(&fp, 0, sizeof(fp));
    fp.agent.header = xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    fp.agent.type = 6;
    pthread_rwlock_rdlock(&reg->lock);
    xtq__registry_task_begin(reg, &kp, &kt);
    xtq__registry_task_begin(reg, &fp, &ft);
    pthread_rwlock_unlock(&reg->lock);
    CHECK(kt.kernel == k && kt.signal == sig && kt.function == NULL);
    CHECK(ft.function == f && ft.kernel == NULL && ft.signal == NULL);

    CHECK_OK(xtq__registry_clear_kernel(reg, 4));
    CHECK_OK(xtq__registry_clear_function(reg, 6));
    /* Unregistered, but the tasks are still queued. */
    CHECK_ERR(xtq_kernel_destroy(k), -XTQ_EBUSY);
    CHECK_ERR(xtq_signal_destroy(sig), -XTQ_EBUSY);
    CHECK_ERR(xtq_function_destroy(f), -XTQ_EBUSY);
    /* The pool slot is not handed out meanwhile. */
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, NULL, &k2));
    CHECK(k2 != k);
    /* The kernel task retires: its kernel and signal are free to go. */
    xtq__registry_task_end(&kt);
    CHECK(kt.kernel == NULL);
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_signal_destroy(sig));
    CHECK_ERR(xtq_function_destroy(f), -XTQ_EBUSY);
    xtq__registry_task_end(&ft);
    CHECK_OK(xtq_function_destroy(f));
    /* A new kernel in the recycled slot starts with no references. */
    CHECK_OK(xtq_kernel_create_cpu(a, grid_kernel, 16, NULL, &k));
    CHECK_OK(xtq__registry_set_kernel(reg, 4, k, NULL, NULL));
    CHECK_OK(xtq__registry_clear_kernel(reg, 4));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_kernel_destroy(k2));
    xtq__registry_destroy(reg);
    close_agent(a);
}

/* ---- task results and failures -------------------------------------------------- */

/* What a producer (the engine, for a fetching put) attaches to a packet:
 * its cookie, and beside it a result buffer (queue_int.h). */
struct result_task {
    unsigned char buf[64];
    size_t len;
    _Atomic int status;
    _Atomic int retired;
};

static void submit_task(xtq_queue_t *q, const xtq_aql_packet_t *p, struct result_task *rt)
{
    submit_result(q, p, rt, rt->len ? rt->buf : NULL, rt->len);
}

static void result_retire(void *cookie, int status)
{
    struct result_task *rt = cookie;
    atomic_store(&rt->status, status);
    atomic_store_explicit(&rt->retired, 1, memory_order_release);
}

static void wait_retired(struct result_task *rt)
{
    while (!atomic_load_explicit(&rt->retired, memory_order_acquire)) {
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* arg[2] selects: 0 write the sum into the result, 1 fail twice (the first
 * status wins), 2 record what xtq_task_result sees (no buffer expected),
 * 3 fail with a positive code. */
static _Atomic uint64_t seen_len = 99;
static _Atomic uintptr_t seen_buf = 1;

static void result_fn(const uint64_t arg[4], void *ret, void *user)
{
    size_t len = 12345;
    char *r = xtq_task_result(&len);
    switch (arg[2]) {
    case 0:
        CHECK(r != NULL);
        snprintf(r, len, "sum=%llu", (unsigned long long)(arg[0] + arg[3]));
        break;
    case 1:
        xtq_task_fail(-XTQ_ERANGE);
        xtq_task_fail(-XTQ_EINVAL);
        break;
    case 2:
        atomic_store(&seen_len, len);
        atomic_store(&seen_buf, (uintptr_t)r);
        break;
    case 3:
        xtq_task_fail(XTQ_EPROTO);
        break;
    }
}

/* Every work-group of one dispatch sees the one buffer. */
static void result_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    size_t len;
    unsigned char *r = xtq_task_result(&len);
    if (r && d->workgroup_id[0] < len)
        r[d->workgroup_id[0]] = (unsigned char)(0x40 + d->workgroup_id[0]);
    if (d->workgroup_id[0] == 2)
        xtq_task_fail(-XTQ_ECANCELED);
}

XTQ_TEST(task_result_and_fail)
{
    xtq_agent_t *a = open_agent(2);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_kernel_t *k;
    xtq_signal_t *done;
    xtq_aql_packet_t p;
    static struct result_task sum, fail, none, pos, kern;
    uint32_t kernarg[4] = {0};

    /* Outside a task: nothing, and no effect. */
    size_t len = 7;
    CHECK(xtq_task_result(&len) == NULL);
    CHECK_EQ(len, 0);
    CHECK(xtq_task_result(NULL) == NULL);
    xtq_task_fail(-XTQ_EIO);

    CHECK_OK(xtq_queue_create(a, 8, &q));
    q->retire = result_retire;
    CHECK_OK(xtq_function_create_cpu(a, result_fn, NULL, &f));
    CHECK_OK(xtq_kernel_create_cpu(a, result_kernel, 16, NULL, &k));
    CHECK_OK(xtq_signal_create(5, &done));

    sum.len = 16;
    function_packet(&p, f, 0, done, 40, 0, 0, 2, NULL);
    submit_task(q, &p, &sum);
    fail.len = 8;
    function_packet(&p, f, 0, done, 0, 0, 1, 0, NULL);
    submit_task(q, &p, &fail);
    none.len = 0; /* a put that asked for no result */
    function_packet(&p, f, 0, done, 0, 0, 2, 0, NULL);
    submit_task(q, &p, &none);
    function_packet(&p, f, 0, done, 0, 0, 3, 0, NULL);
    submit_task(q, &p, &pos);
    /* A kernel of 4 work-groups, one result buffer. */
    kern.len = 4;
    memset(&p, 0, sizeof(p));
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    p.kernel.setup = 1;
    p.kernel.grid_size_x = 4;
    p.kernel.grid_size_y = p.kernel.grid_size_z = 1;
    p.kernel.workgroup_size_x = p.kernel.workgroup_size_y = p.kernel.workgroup_size_z = 1;
    p.kernel.kernel_object = xtq_kernel_object(k);
    p.kernel.kernarg_address = kernarg;
    p.kernel.completion_signal = xtq_signal_handle(done);
    submit_task(q, &p, &kern);

    /* Failed tasks still decrement their completion signal. */
    wait_zero(done);
    wait_retired(&sum);
    wait_retired(&fail);
    wait_retired(&none);
    wait_retired(&pos);
    wait_retired(&kern);
    CHECK_EQ(atomic_load(&sum.status), 0);
    CHECK(strcmp((char *)sum.buf, "sum=42") == 0);
    CHECK_EQ(atomic_load(&fail.status), -XTQ_ERANGE);
    CHECK_EQ(atomic_load(&none.status), 0);
    CHECK_EQ(atomic_load(&seen_len), 0);
    CHECK_EQ(atomic_load(&seen_buf), 0);
    CHECK_EQ(atomic_load(&pos.status), -XTQ_EPROTO);
    CHECK_EQ(atomic_load(&kern.status), -XTQ_ECANCELED);
    CHECK(memcmp(kern.buf, "\x40\x41\x42\x43", 4) == 0);
    /* Failures of the task are not the agent's bad packets. */
    CHECK_EQ(xtq__cpu_agent_bad_packets(a), 0);

    /* A cookie and no buffer beside it, in a slot that held one before
     * (the consumer cleared it): the task sees no buffer. */
    atomic_store(&seen_len, 99);
    atomic_store(&seen_buf, 1);
    memset(&none, 0, sizeof(none));
    xtq_signal_store(done, 1);
    function_packet(&p, f, 0, done, 0, 0, 2, 0, NULL);
    submit(q, &p, &none);
    wait_zero(done);
    wait_retired(&none);
    CHECK_EQ(atomic_load(&seen_len), 0);
    CHECK_EQ(atomic_load(&seen_buf), 0);
    /* Nor one run without a cookie (a local submission). */
    atomic_store(&seen_len, 99);
    xtq_signal_store(done, 1);
    function_packet(&p, f, 0, done, 0, 0, 2, 0, NULL);
    CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));
    wait_zero(done);
    CHECK_EQ(atomic_load(&seen_len), 0);

    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_signal_destroy(done));
    close_agent(a);
}

/* ---- the task's payload ----------------------------------------------------------- */

/* Copies what xtq_task_payload() shows into the task's result buffer:
 * its length first (8 bytes), then the bytes. */
static void payload_fn(const uint64_t arg[4], void *ret, void *user)
{
    size_t rlen, plen = 12345;
    uint8_t *r = xtq_task_result(&rlen);
    const uint8_t *pl = xtq_task_payload(&plen);
    if (!r || rlen < 8)
        return;
    uint64_t n = plen;
    memcpy(r, &n, 8);
    if (pl && plen <= rlen - 8)
        memcpy(r + 8, pl, plen);
    if ((pl != NULL) != (plen != 0))
        xtq_task_fail(-XTQ_EPROTO);
}

/* A producer (the engine) puts the payload beside the cookie; the task
 * sees it, and only its own: the next task in that slot has none. */
XTQ_TEST(task_payload)
{
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *q;
    xtq_function_t *f;
    xtq_signal_t *done;
    xtq_aql_packet_t p;
    static struct result_task with, without;
    static const char payload[] = "payload of 24 bytes....";
    uint64_t n;

    size_t len = 7;
    CHECK(xtq_task_payload(&len) == NULL);
    CHECK_EQ(len, 0);
    CHECK(xtq_task_payload(NULL) == NULL);

    CHECK_OK(xtq_queue_create(a, 2, &q));
    q->retire = result_retire;
    CHECK_OK(xtq_function_create_cpu(a, payload_fn, NULL, &f));
    CHECK_OK(xtq_signal_create(3, &done));
    for (int round = 0; round < 2; round++) {
        uint64_t i;
        uint32_t first;
        with.len = 40;
        function_packet(&p, f, 0, done, 0, 0, 0, 0, NULL);
        while (xtq_queue_reserve(q, 1, &i) == -XTQ_EAGAIN)
            sched_yield();
        memcpy(xtq_queue_slot(q, i)->bytes + 4, p.bytes + 4, 60);
        q->cookies[i & q->mask] = &with;
        q->results[i & q->mask] =
            (struct xtq__result_buf){with.buf, with.len, payload, sizeof(payload)};
        memcpy(&first, p.bytes, 4);
        xtq_queue_publish(q, i, (uint16_t)first, (uint16_t)(first >> 16));
        xtq_queue_ring_doorbell(q, i);
        wait_retired(&with);
        CHECK_EQ(atomic_load(&with.status), 0);
        memcpy(&n, with.buf, 8);
        CHECK_EQ(n, sizeof(payload));
        CHECK(memcmp(with.buf + 8, payload, sizeof(payload)) == 0);
        memset(&with, 0, sizeof(with));
    }
    /* The slot is reused (queue of 2) by a task without payload. */
    without.len = 40;
    function_packet(&p, f, 0, done, 0, 0, 0, 0, NULL);
    submit_task(q, &p, &without);
    wait_retired(&without);
    CHECK_EQ(atomic_load(&without.status), 0);
    memcpy(&n, without.buf, 8);
    CHECK_EQ(n, 0);
    wait_zero(done);

    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_signal_destroy(done));
    close_agent(a);
}

/* Arguments of the local-submit test: where to write what the task saw
 * (argument 0), the payload (argument 1). */
struct seen {
    _Atomic uint64_t len;
    const void *_Atomic ptr;
    _Atomic uint64_t arg1;
};

static void seen_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    uint64_t arg[2];
    size_t len = 999;
    (void)d;
    memcpy(arg, kernarg, sizeof(arg));
    struct seen *s = (struct seen *)(uintptr_t)arg[0];
    const void *p = xtq_task_payload(&len);
    atomic_store(&s->ptr, p);
    atomic_store(&s->arg1, arg[1]);
    atomic_store(&s->len, len);
}

/* xtq_queue_submit_args: the task's payload is what argument 1 points
 * at, with its length (xtq_queue_submit gives none); bad calls refused,
 * nothing queued. */
XTQ_TEST(submit_args_payload)
{
    xtq_agent_t *a = open_agent(1);
    xtq_queue_t *q;
    xtq_kernel_t *k;
    xtq_signal_t *done;
    xtq_aql_packet_t p;
    static struct seen seen;
    static const char payload[] = "a payload of 27 bytes ....";
    uint64_t kernarg[2] = {(uint64_t)(uintptr_t)&seen, (uint64_t)(uintptr_t)payload};

    CHECK_OK(xtq_queue_create(a, 4, &q));
    CHECK_OK(xtq_kernel_create_cpu(a, seen_kernel, 16, NULL, &k));
    CHECK_OK(xtq_signal_create(1, &done));
    memset(&p, 0, sizeof(p));
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    p.kernel.setup = 1;
    p.kernel.workgroup_size_x = p.kernel.workgroup_size_y = p.kernel.workgroup_size_z = 1;
    p.kernel.grid_size_x = p.kernel.grid_size_y = p.kernel.grid_size_z = 1;
    p.kernel.kernel_object = xtq_kernel_object(k);
    p.kernel.kernarg_address = kernarg;
    p.kernel.completion_signal = xtq_signal_handle(done);

    CHECK_OK(xtq_queue_submit_args(q, &p, sizeof(kernarg), sizeof(payload), XTQ_TIMEOUT_INFINITE));
    wait_zero(done);
    CHECK(atomic_load(&seen.ptr) == (const void *)payload);
    CHECK_EQ(atomic_load(&seen.len), sizeof(payload));

    /* Without a payload the task sees none; plain submit neither. */
    for (int plain = 0; plain < 2; plain++) {
        xtq_signal_store(done, 1);
        atomic_store(&seen.len, 77);
        if (plain)
            CHECK_OK(xtq_queue_submit(q, &p, XTQ_TIMEOUT_INFINITE, NULL));
        else
            CHECK_OK(xtq_queue_submit_args(q, &p, sizeof(kernarg), 0, XTQ_TIMEOUT_INFINITE));
        wait_zero(done);
        CHECK(atomic_load(&seen.ptr) == NULL);
        CHECK_EQ(atomic_load(&seen.len), 0);
        CHECK_EQ(atomic_load(&seen.arg1), (uint64_t)(uintptr_t)payload);
    }

    /* Refused: no arguments, a payload without argument 1 (too short, or
     * NULL), not a kernel dispatch, a negative timeout. */
    CHECK_ERR(xtq_queue_submit_args(q, &p, 0, 0, 0), -XTQ_EINVAL);
    CHECK_ERR(xtq_queue_submit_args(q, &p, 8, 4, 0), -XTQ_EINVAL);
    kernarg[1] = 0;
    CHECK_ERR(xtq_queue_submit_args(q, &p, sizeof(kernarg), 4, 0), -XTQ_EINVAL);
    CHECK_ERR(xtq_queue_submit_args(q, &p, sizeof(kernarg), 0, -1), -XTQ_EINVAL);
    CHECK_ERR(xtq_queue_submit_args(NULL, &p, sizeof(kernarg), 0, 0), -XTQ_EINVAL);
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_AND, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    CHECK_ERR(xtq_queue_submit_args(q, &p, sizeof(kernarg), 0, 0), -XTQ_EINVAL);
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    p.kernel.kernarg_address = NULL;
    CHECK_ERR(xtq_queue_submit_args(q, &p, sizeof(kernarg), 0, 0), -XTQ_EINVAL);

    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_signal_destroy(done));
    close_agent(a);
}
