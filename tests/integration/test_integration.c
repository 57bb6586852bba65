/*
 * Multi-rank integration tests over the public API, launched by mpirun (or
 * as a singleton for the self cases). `test_integration CASE [manual]`.
 *
 * stress: every rank sends XTQ_IT_PUTS puts (>= 10,000) round-robin to the
 * other ranks (to itself when alone), alternating kernel and function
 * commands, payload sizes 0..4 KiB with contents derived from (source,
 * index). Target kernels and functions check their arguments, the target
 * buffer and every payload byte, and count each (source, index) in a
 * table; at the end every expected task ran exactly once and every put's
 * completion reported success (and REMOTE where asked).
 *
 * bad_*: rank 0 sends a command naming something the target never
 * registered (or a wrong kernel-argument size); the completion carries the
 * target's error, the target keeps serving (a good put afterwards works)
 * and counts the rejection by reason.
 */
#include <xtq/xtq.h>

#include "xtq_test.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>
#include <stdint.h>
#include <string.h>

#define KERNEL_INDEX 42
#define FUNCTION_INDEX 7
#define QUEUE_INDEX 42
#define TARGET_QUEUE_SIZE 64 /* small: incoming bursts exercise flow control */
#define POOL 512             /* puts in flight per rank (window is 256 per target) */
#define MAX_PAYLOAD 4096
#define ARG_MAGIC 0x5854512d54455354ull

static int nputs(void)
{
    const char *s = getenv("XTQ_IT_PUTS");
    int n = s ? atoi(s) : 0;
    return n > 0 ? n : 10000;
}

static bool manual_mode(void)
{
    return xtq_test_argc > 0 && strcmp(xtq_test_argv[0], "manual") == 0;
}

struct kargs {
    void *target;          /* rewritten: registered target buffer */
    const uint8_t *payload; /* rewritten: where the payload landed */
    uint32_t src;
    uint32_t index;
    uint64_t len;
    uint64_t magic;
    uint64_t pad_;
};

struct state {
    int rank, size, nputs;
    _Atomic uint32_t *count; /* [src * nputs + index] */
    _Atomic uint64_t errors;
    xtq_signal_t *done;      /* counts down every task expected here */
};
static struct state S;

static uint8_t payload_byte(uint32_t src, uint32_t index, uint64_t i)
{
    return (uint8_t)(index * 7u + src * 13u + (uint32_t)i * 31u + (uint32_t)(i >> 8));
}

static size_t payload_len_of(uint32_t src, uint32_t index)
{
    return (size_t)((index * 37u + src * 101u) % (MAX_PAYLOAD + 1));
}

static int target_of(int src, int size, uint32_t index)
{
    if (size == 1)
        return 0;
    int k = (int)(index % (uint32_t)(size - 1));
    return k >= src ? k + 1 : k;
}

static void note(uint32_t src, uint32_t index, const void *target, const uint8_t *payload,
                 uint64_t len)
{
    bool ok = src < (uint32_t)S.size && index < (uint32_t)S.nputs &&
              target == (void *)S.count && len == payload_len_of(src, index) &&
              ((len == 0) == (payload == NULL));
    for (uint64_t i = 0; ok && i < len; i++)
        ok = payload[i] == payload_byte(src, index, i);
    if (!ok) {
        if (atomic_fetch_add(&S.errors, 1) < 5)
            fprintf(stderr, "rank %d: bad task src=%u index=%u len=%llu\n", S.rank, src, index,
                    (unsigned long long)len);
        return;
    }
    atomic_fetch_add_explicit(&S.count[(size_t)src * (size_t)S.nputs + index], 1,
                              memory_order_relaxed);
}

static void kernel_fn(const xtq_dispatch_t *d, void *kernarg)
{
    const struct kargs *a = kernarg;
    if (a->magic != (ARG_MAGIC ^ (((uint64_t)a->src << 32) | a->index)) ||
        d->user_data != &S) {
        atomic_fetch_add(&S.errors, 1);
        return;
    }
    note(a->src, a->index, a->target, a->payload, a->len);
}

static void function_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    uint32_t src = (uint32_t)(arg[2] >> 32), index = (uint32_t)arg[2];
    if (user_data != &S)
        atomic_fetch_add(&S.errors, 1);
    else
        note(src, index, (void *)(uintptr_t)arg[0], (const uint8_t *)(uintptr_t)arg[1], arg[3]);
    /* Function packets carry no completion signal: count down here. */
    xtq_signal_add(S.done, -1);
}

struct target_objs {
    xtq_agent_t *agent;
    xtq_queue_t *queue;
    xtq_kernel_t *kernel;
    xtq_function_t *function;
};

static xtq_ctx_t *init_ctx(void)
{
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx = NULL;
    attr.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS;
    attr.progress = manual_mode() ? XTQ_PROGRESS_MANUAL : XTQ_PROGRESS_DEFAULT;
    CHECK_OK(xtq_init(&attr, &ctx));
    return ctx;
}

static void setup_target(xtq_ctx_t *ctx, struct target_objs *t, int64_t expected)
{
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &t->agent));
    CHECK_OK(xtq_queue_create(t->agent, TARGET_QUEUE_SIZE, &t->queue));
    CHECK_OK(xtq_kernel_create_cpu(t->agent, kernel_fn, sizeof(struct kargs), &S, &t->kernel));
    CHECK_OK(xtq_function_create_cpu(t->agent, function_fn, &S, &t->function));
    CHECK_OK(xtq_signal_create(expected, &S.done));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, t->queue));
    CHECK_OK(xtq_register_kernel(ctx, KERNEL_INDEX, t->kernel, (void *)S.count, S.done));
    CHECK_OK(xtq_register_function(ctx, FUNCTION_INDEX, t->function, (void *)S.count));
}

static void teardown_target(xtq_ctx_t *ctx, struct target_objs *t)
{
    CHECK_OK(xtq_unregister_kernel(ctx, KERNEL_INDEX));
    CHECK_OK(xtq_unregister_function(ctx, FUNCTION_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(t->queue));
    CHECK_OK(xtq_kernel_destroy(t->kernel));
    CHECK_OK(xtq_function_destroy(t->function));
    CHECK_OK(xtq_signal_destroy(S.done));
}

/* Wait for a signal, driving the engine ourselves in manual mode. */
static void wait_signal_zero(xtq_ctx_t *ctx, xtq_signal_t *sig)
{
    uint64_t spins = 0;
    for (;;) {
        int rc = xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, manual_mode() ? 100000 : 1000000000,
                                 NULL);
        if (rc == 0)
            return;
        CHECK_EQ(rc, -XTQ_ETIMEDOUT);
        if (manual_mode())
            xtq_progress(ctx);
        if (++spins > (manual_mode() ? 1200000u : 120u))
            XTQ_FAIL("rank %d: tasks still missing after 120 s (signal %lld)", S.rank,
                     (long long)xtq_signal_load(sig));
    }
}

static void check_comp(xtq_completion_t *c, uint32_t index, bool remote)
{
    if (c->status != 0)
        XTQ_FAIL("rank %d: put %u to %d failed: %s", S.rank, index, c->target,
                 xtq_errname(c->status));
    /* Exactly the bits asked for: the library's own bits are masked off. */
    uint32_t want = XTQ_COMPLETION_DONE | XTQ_COMPLETION_LOCAL;
    if (remote)
        want |= XTQ_COMPLETION_REMOTE;
    CHECK_EQ(xtq_completion_state(c), want);
}

XTQ_TEST(stress)
{
    xtq_ctx_t *ctx = init_ctx();
    struct target_objs t;
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    S.nputs = nputs();
    S.count = calloc((size_t)S.size * (size_t)S.nputs, sizeof(*S.count));
    CHECK(S.count);

    /* Tasks expected here: from every source, the indices that map to us. */
    int64_t expected = 0;
    for (int src = 0; src < S.size; src++)
        for (uint32_t i = 0; i < (uint32_t)S.nputs; i++)
            expected += target_of(src, S.size, i) == S.rank;
    setup_target(ctx, &t, expected);
    CHECK_OK(xtq_barrier(ctx));

    uint8_t(*payload)[MAX_PAYLOAD] = calloc(POOL, MAX_PAYLOAD);
    uint8_t(*cmd)[256] = calloc(POOL, 256);
    xtq_completion_t *comp = calloc(POOL, sizeof(*comp));
    bool *remote = calloc(POOL, sizeof(bool));
    uint32_t *owner = calloc(POOL, sizeof(uint32_t));
    CHECK(payload && cmd && comp && remote && owner);
    uint64_t t0 = 0;
    {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    }
    for (uint32_t i = 0; i < (uint32_t)S.nputs; i++) {
        uint32_t p = i % POOL;
        if (i >= POOL) {
            CHECK_EQ(xtq_completion_wait(ctx, &comp[p], 60ll * 1000000000), 0);
            check_comp(&comp[p], owner[p], remote[p]);
        }
        size_t len = payload_len_of((uint32_t)S.rank, i), cmd_len = 0;
        for (size_t b = 0; b < len; b++)
            payload[p][b] = payload_byte((uint32_t)S.rank, i, b);
        if (i % 2 == 0) {
            struct kargs a = {NULL, NULL, (uint32_t)S.rank, i, len,
                              ARG_MAGIC ^ (((uint64_t)S.rank << 32) | i), 0};
            CHECK_OK(xtq_cmd_kernel(cmd[p], sizeof(cmd[p]), KERNEL_INDEX, QUEUE_INDEX, NULL, &a,
                                    sizeof(a), &cmd_len));
        } else {
            CHECK_OK(xtq_cmd_function(cmd[p], sizeof(cmd[p]), FUNCTION_INDEX, QUEUE_INDEX,
                                      ((uint64_t)S.rank << 32) | i, len, &cmd_len));
        }
        remote[p] = i % 3 != 0;
        owner[p] = i;
        comp[p].context = &owner[p];
        CHECK_OK(xtq_put(ctx, target_of(S.rank, S.size, i), cmd[p], cmd_len,
                         len ? payload[p] : NULL, len,
                         remote[p] ? XTQ_PUT_REMOTE_COMPLETION : 0, &comp[p]));
    }
    for (uint32_t i = S.nputs > POOL ? (uint32_t)S.nputs - POOL : 0; i < (uint32_t)S.nputs; i++) {
        uint32_t p = i % POOL;
        CHECK_EQ(xtq_completion_wait(ctx, &comp[p], 60ll * 1000000000), 0);
        check_comp(&comp[p], owner[p], remote[p]);
        CHECK(comp[p].context == &owner[p]);
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double secs = ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec - t0) / 1e9;

    /* Every task expected here has run (kernels and functions count the
     * signal down), and exactly once. */
    wait_signal_zero(ctx, S.done);
    CHECK_OK(xtq_barrier(ctx));
    CHECK_EQ(atomic_load(&S.errors), 0);
    for (int src = 0; src < S.size; src++)
        for (uint32_t i = 0; i < (uint32_t)S.nputs; i++) {
            uint32_t want = target_of(src, S.size, i) == S.rank ? 1 : 0;
            uint32_t got = atomic_load(&S.count[(size_t)src * (size_t)S.nputs + i]);
            if (got != want)
                XTQ_FAIL("rank %d: task (src %d, index %u) ran %u times, expected %u", S.rank,
                         src, i, got, want);
        }
    xtq_stats_t st;
    CHECK_OK(xtq_get_stats(ctx, &st));
    CHECK_EQ(st.puts_issued, (uint64_t)S.nputs);
    CHECK_EQ(st.puts_completed, (uint64_t)S.nputs);
    CHECK_EQ(st.puts_failed, 0);
    CHECK_EQ(st.tasks_enqueued, (uint64_t)expected);
    CHECK_EQ(st.msgs_rejected, 0);
    printf("rank %d/%d on %s (%s progress): %d puts in %.3f s (%.0f puts/s), %lld tasks ran "
           "here, queue-full events %llu\n",
           S.rank, S.size, xtq_provider_name(ctx), manual_mode() ? "manual" : "thread", S.nputs,
           secs, S.nputs / secs, (long long)expected, (unsigned long long)st.queue_full_events);
    CHECK_OK(xtq_barrier(ctx));
    teardown_target(ctx, &t);
    CHECK_OK(xtq_finalize(ctx));
    free(payload);
    free(cmd);
    free(comp);
    free(remote);
    free(owner);
    free(S.count);
}

/* ---- bad input ------------------------------------------------------- */

enum bad_kind { BAD_NOKERNEL, BAD_NOFUNC, BAD_NOQUEUE, BAD_KERNARG };

static void bad_case(enum bad_kind kind, int expect_err)
{
    xtq_ctx_t *ctx = init_ctx();
    struct target_objs t;
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    S.nputs = 4;
    S.count = calloc((size_t)S.size * (size_t)S.nputs, sizeof(*S.count));
    /* The target (rank 1, or 0 when alone) expects one good task. */
    int target = S.size > 1 ? 1 : 0;
    setup_target(ctx, &t, S.rank == target ? 1 : 0);
    CHECK_OK(xtq_barrier(ctx));

    if (S.rank == 0) {
        uint8_t cmd[256], data[MAX_PAYLOAD];
        size_t cmd_len = 0, len = payload_len_of(0, 1);
        xtq_completion_t c = {0};
        for (size_t b = 0; b < len; b++)
            data[b] = payload_byte(0, 1, b);
        struct kargs a = {NULL, NULL, 0, 1, len, ARG_MAGIC ^ 1u, 0};
        switch (kind) {
        case BAD_NOKERNEL:
            CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX + 1, QUEUE_INDEX, NULL, &a,
                                    sizeof(a), &cmd_len));
            break;
        case BAD_NOFUNC:
            CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FUNCTION_INDEX + 1, QUEUE_INDEX, 0, 0,
                                      &cmd_len));
            break;
        case BAD_NOQUEUE:
            CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX + 1, NULL, &a,
                                    sizeof(a), &cmd_len));
            break;
        case BAD_KERNARG:
            CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, NULL, &a,
                                    sizeof(a) - 16, &cmd_len));
            break;
        }
        CHECK_OK(xtq_put(ctx, target, cmd, cmd_len, data, len, XTQ_PUT_REMOTE_COMPLETION, &c));
        CHECK_EQ(xtq_completion_wait(ctx, &c, 60ll * 1000000000), expect_err);
        uint32_t st = atomic_load((_Atomic uint32_t *)&c.state);
        CHECK(st & XTQ_COMPLETION_DONE);
        CHECK(!(st & XTQ_COMPLETION_REMOTE));
        CHECK_EQ(c.target, target);

        /* The target still serves good commands. */
        CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, NULL, &a, sizeof(a),
                                &cmd_len));
        xtq_completion_t good = {0};
        CHECK_OK(xtq_put(ctx, target, cmd, cmd_len, data, len, XTQ_PUT_REMOTE_COMPLETION, &good));
        CHECK_EQ(xtq_completion_wait(ctx, &good, 60ll * 1000000000), 0);
        CHECK(atomic_load((_Atomic uint32_t *)&good.state) & XTQ_COMPLETION_REMOTE);
        printf("rank 0: bad command -> %s; the next good command ran\n", xtq_errname(expect_err));
    }
    if (S.rank == target) {
        wait_signal_zero(ctx, S.done);
        CHECK_EQ(atomic_load(&S.count[1]), 1);
        /* The agent counts the signal down before it retires the packet
         * into the engine: wait (bounded) for the retire to be counted. */
        xtq_stats_t sr;
        for (int i = 0; i < 100000; i++) {
            CHECK_OK(xtq_get_stats(ctx, &sr));
            if (sr.tasks_completed >= 1)
                break;
            if (manual_mode())
                xtq_progress(ctx);
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    CHECK_OK(xtq_barrier(ctx));
    xtq_stats_t st;
    CHECK_OK(xtq_get_stats(ctx, &st));
    if (S.rank == target) {
        CHECK_EQ(st.msgs_rejected, 1);
        CHECK_EQ(st.rejected_by_reason[xtq_stats_reject_slot(expect_err)], 1);
        CHECK_EQ(st.tasks_completed, 1);
        printf("rank %d: rejected_by_reason[%s] = %llu, tasks completed %llu\n", S.rank,
               xtq_errname(expect_err),
               (unsigned long long)st.rejected_by_reason[xtq_stats_reject_slot(expect_err)],
               (unsigned long long)st.tasks_completed);
    } else {
        CHECK_EQ(st.msgs_rejected, 0);
    }
    CHECK_EQ(atomic_load(&S.errors), 0);
    teardown_target(ctx, &t);
    CHECK_OK(xtq_finalize(ctx));
    free(S.count);
}

XTQ_TEST(bad_nokernel)
{
    bad_case(BAD_NOKERNEL, -XTQ_ENOKERNEL);
}

XTQ_TEST(bad_nofunc)
{
    bad_case(BAD_NOFUNC, -XTQ_ENOFUNC);
}

XTQ_TEST(bad_noqueue)
{
    bad_case(BAD_NOQUEUE, -XTQ_ENOQUEUE);
}

XTQ_TEST(bad_kernarg)
{
    bad_case(BAD_KERNARG, -XTQ_EKERNARG);
}

/* Argument checks that never reach the wire. */
XTQ_TEST(put_args)
{
    xtq_ctx_t *ctx = init_ctx();
    uint8_t cmd[128];
    size_t cmd_len = 0;
    xtq_completion_t c = {0};
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FUNCTION_INDEX, QUEUE_INDEX, 0, 0, &cmd_len));
    CHECK_ERR(xtq_put(ctx, xtq_size(ctx), cmd, cmd_len, NULL, 0, 0, &c), -XTQ_ESRCRANK);
    CHECK_ERR(xtq_put(ctx, -1, cmd, cmd_len, NULL, 0, 0, &c), -XTQ_ESRCRANK);
    CHECK_ERR(xtq_put(ctx, 0, cmd, 10, NULL, 0, 0, &c), -XTQ_EINVAL);
    CHECK_ERR(xtq_put(ctx, 0, cmd, cmd_len, NULL, 5, 0, &c), -XTQ_EINVAL);
    CHECK_ERR(xtq_put(ctx, 0, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, NULL),
              -XTQ_EINVAL);
    CHECK_ERR(xtq_put(ctx, 0, cmd, cmd_len, cmd, xtq_put_max_size(ctx), 0, &c), -XTQ_EMSGSIZE);
    CHECK(xtq_provider_name(ctx) != NULL);
    CHECK_OK(xtq_finalize(ctx));
}

/* CPU time (user + system) of this process so far, in ns. */
static uint64_t process_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * An idle engine must not burn a core (DESIGN.md: machines have two). Over
 * one idle second the whole process (progress thread, agent workers) may
 * use at most 5% of one core; the measured figure is printed.
 */
XTQ_TEST(idle_cpu)
{
    xtq_ctx_t *ctx = init_ctx();
    CHECK_OK(xtq_barrier(ctx));
    uint64_t c0 = process_cpu_ns();
    struct timespec one = {1, 0};
    nanosleep(&one, NULL); /* the measurement window, not synchronisation */
    uint64_t used = process_cpu_ns() - c0;
    printf("rank %d on %s: idle CPU time over 1 s: %.2f ms\n", xtq_rank(ctx),
           xtq_provider_name(ctx), used / 1e6);
    CHECK(used < 50000000ull);
    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_finalize(ctx));
}

/* ---- large payloads and the put window ----------------------------------- */

static _Atomic uint64_t large_ok;

static uint8_t large_byte(uint64_t tag, uint64_t i)
{
    return (uint8_t)(i * 131u + (i >> 10) + tag * 17u);
}

/* arg2: tag, arg3: length. */
static void large_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    const uint8_t *p = (const uint8_t *)(uintptr_t)arg[1];
    bool ok = p != NULL;
    for (uint64_t i = 0; ok && i < arg[3]; i++)
        ok = p[i] == large_byte(arg[2], i);
    if (ok)
        atomic_fetch_add(&large_ok, 1);
    else
        atomic_fetch_add(&S.errors, 1);
    xtq_signal_add(S.done, -1);
}

/* Payloads up to the largest accepted size cross every provider protocol
 * (inline, CMA/SAR on shm, rendezvous on tcp;ofi_rxm). */
XTQ_TEST(large)
{
    static const size_t sizes[] = {4097, 65536, 262144 + 8, 1048576};
    xtq_ctx_t *ctx = init_ctx();
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *fn;
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    int nsz = (int)(sizeof(sizes) / sizeof(sizes[0]));
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, large_fn, NULL, &fn));
    CHECK_OK(xtq_signal_create(S.rank > 0 || S.size == 1 ? nsz : 0, &S.done));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(ctx, FUNCTION_INDEX, fn, NULL));
    CHECK_OK(xtq_barrier(ctx));
    if (S.rank == 0) {
        CHECK(xtq_put_max_size(ctx) >= 1048576 + 64);
        for (int t = S.size > 1 ? 1 : 0; t < S.size; t++)
            for (int k = 0; k < nsz; k++) {
                uint8_t *buf = malloc(sizes[k]);
                uint8_t cmd[64];
                size_t cmd_len;
                xtq_completion_t c = {0};
                uint64_t tag = (uint64_t)t * 10 + (uint64_t)k;
                for (size_t i = 0; i < sizes[k]; i++)
                    buf[i] = large_byte(tag, i);
                CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FUNCTION_INDEX, QUEUE_INDEX, tag,
                                          sizes[k], &cmd_len));
                CHECK_OK(xtq_put(ctx, t, cmd, cmd_len, buf, sizes[k], XTQ_PUT_REMOTE_COMPLETION,
                                 &c));
                CHECK_EQ(xtq_completion_wait(ctx, &c, 60ll * 1000000000), 0);
                free(buf);
            }
    }
    if (S.rank > 0 || S.size == 1) {
        wait_signal_zero(ctx, S.done);
        CHECK_EQ(atomic_load(&large_ok), nsz);
        printf("rank %d: %d large payloads (up to %zu bytes) arrived intact on %s\n", S.rank, nsz,
               sizes[nsz - 1], xtq_provider_name(ctx));
    }
    CHECK_EQ(atomic_load(&S.errors), 0);
    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_unregister_function(ctx, FUNCTION_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(fn));
    CHECK_OK(xtq_signal_destroy(S.done));
    CHECK_OK(xtq_finalize(ctx));
}

/* A full window: -XTQ_EAGAIN with XTQ_PUT_NONBLOCKING, and room again once
 * completions arrive. Manual progress makes "full" deterministic. */
XTQ_TEST(window_nonblocking)
{
    setenv("XTQ_PUT_WINDOW", "2", 1);
    xtq_init_attr_t attr = {.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS,
                            .progress = XTQ_PROGRESS_MANUAL};
    xtq_ctx_t *ctx;
    CHECK_OK(xtq_init(&attr, &ctx));
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *fn;
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, large_fn, NULL, &fn));
    CHECK_OK(xtq_signal_create(3, &S.done));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(ctx, FUNCTION_INDEX, fn, NULL));

    uint8_t buf[100], cmd[64];
    size_t cmd_len;
    xtq_completion_t c[3];
    memset(c, 0, sizeof(c));
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = large_byte(5, i);
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FUNCTION_INDEX, QUEUE_INDEX, 5, sizeof(buf),
                              &cmd_len));
    CHECK_OK(xtq_put(ctx, 0, cmd, cmd_len, buf, sizeof(buf), XTQ_PUT_NONBLOCKING, &c[0]));
    CHECK_OK(xtq_put(ctx, 0, cmd, cmd_len, buf, sizeof(buf), XTQ_PUT_NONBLOCKING, &c[1]));
    CHECK_ERR(xtq_put(ctx, 0, cmd, cmd_len, buf, sizeof(buf), XTQ_PUT_NONBLOCKING, &c[2]),
              -XTQ_EAGAIN);
    CHECK_EQ(xtq_completion_wait(ctx, &c[0], 60ll * 1000000000), 0);
    CHECK_EQ(c[0].seq, 0);
    CHECK_EQ(c[1].seq, 1);
    CHECK_OK(xtq_put(ctx, 0, cmd, cmd_len, buf, sizeof(buf), XTQ_PUT_NONBLOCKING, &c[2]));
    CHECK_EQ(c[2].seq, 2);
    CHECK_EQ(xtq_completion_wait(ctx, &c[1], 60ll * 1000000000), 0);
    CHECK_EQ(xtq_completion_wait(ctx, &c[2], 60ll * 1000000000), 0);
    wait_signal_zero(ctx, S.done);
    CHECK_EQ(atomic_load(&large_ok), 3);
    CHECK_OK(xtq_unregister_function(ctx, FUNCTION_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(fn));
    CHECK_OK(xtq_signal_destroy(S.done));
    CHECK_OK(xtq_finalize(ctx));
}

/* Registered objects cannot be destroyed (issue 10, bug 2): -XTQ_EBUSY
 * changes nothing, and the objects still serve a put afterwards; after
 * unregistration they can be destroyed. Alone (a put to ourselves). */
XTQ_TEST(destroy_busy)
{
    xtq_ctx_t *ctx = init_ctx();
    struct target_objs t;
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    S.nputs = 1;
    S.count = calloc((size_t)S.size, sizeof(*S.count));
    CHECK(S.count);
    setup_target(ctx, &t, 1);
    CHECK_ERR(xtq_kernel_destroy(t.kernel), -XTQ_EBUSY);
    CHECK_ERR(xtq_function_destroy(t.function), -XTQ_EBUSY);
    CHECK_ERR(xtq_signal_destroy(S.done), -XTQ_EBUSY);
    CHECK_ERR(xtq_queue_destroy(t.queue), -XTQ_EBUSY);

    /* Still registered and working: one kernel task, to ourselves. */
    uint8_t cmd[256];
    size_t cmd_len;
    struct kargs ka;
    xtq_completion_t c;
    memset(&ka, 0, sizeof(ka));
    ka.src = (uint32_t)S.rank;
    ka.magic = ARG_MAGIC ^ ((uint64_t)ka.src << 32);
    CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, NULL, &ka, sizeof(ka),
                            &cmd_len));
    CHECK_OK(xtq_put(ctx, S.rank, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c));
    CHECK_OK(xtq_completion_wait(ctx, &c, 60ll * 1000000000));
    wait_signal_zero(ctx, S.done);
    CHECK_EQ(atomic_load(&S.count[S.rank]), 1);
    CHECK_EQ(atomic_load(&S.errors), 0);
    teardown_target(ctx, &t);
    CHECK_OK(xtq_finalize(ctx));
    free(S.count);
}

/* ---- payload byte counters ------------------------------------------- */

#define BYTES_TAG 9
#define BYTES_MAX 1048576

struct bytes_kargs {
    void *target;           /* rewritten: registered target buffer */
    const uint8_t *payload; /* rewritten: where the payload landed */
    uint64_t len;
    uint64_t pad_;
};

static void bytes_check(const uint8_t *p, uint64_t len)
{
    bool ok = (len == 0) == (p == NULL);
    for (uint64_t i = 0; ok && i < len; i++)
        ok = p[i] == large_byte(BYTES_TAG, i);
    if (!ok)
        atomic_fetch_add(&S.errors, 1);
}

/* The kernel's completion signal counts S.done down. */
static void bytes_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    const struct bytes_kargs *a = kernarg;
    bytes_check(a->payload, a->len);
}

static void bytes_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    bytes_check((const uint8_t *)(uintptr_t)arg[1], arg[3]);
    xtq_signal_add(S.done, -1);
}

/* One put of buf[0..len) to `target` as a kernel (with remote completion)
 * or a function (without); waits for its completion. */
static int bytes_put(xtq_ctx_t *ctx, int target, bool kernel, uint32_t fn_index, const uint8_t *buf,
                     size_t len)
{
    uint8_t cmd[256];
    size_t cmd_len = 0;
    xtq_completion_t c = {0};
    if (kernel) {
        struct bytes_kargs a = {NULL, NULL, len, 0};
        CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, NULL, &a, sizeof(a),
                                &cmd_len));
    } else {
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), fn_index, QUEUE_INDEX, 0, len, &cmd_len));
    }
    CHECK_OK(xtq_put(ctx, target, cmd, cmd_len, len ? buf : NULL, len,
                     kernel || fn_index != FUNCTION_INDEX ? XTQ_PUT_REMOTE_COMPLETION : 0, &c));
    return xtq_completion_wait(ctx, &c, 60ll * 1000000000);
}

static void stats_now(xtq_ctx_t *ctx, xtq_stats_t *st)
{
    CHECK_EQ(xtq_query_stats(ctx, st, sizeof(*st)), sizeof(*st));
}

/*
 * payload_bytes: rank 0 sends rank 1 (itself when alone) a known set of
 * puts: payload sizes across the send protocols (injected, copied,
 * gathered, the provider's rendezvous), each as a kernel with remote
 * completion and as a function without, a three-piece putv, and one put
 * the target rejects. Between snapshots taken around the traffic,
 * payload_bytes_sent moves on rank 0 by every accepted put's payload,
 * payload_bytes_received on the target by the payloads of the commands
 * that passed validation, and neither moves anywhere else.
 */
XTQ_TEST(payload_bytes)
{
    static const size_t sizes[] = {0, 1, 100, 4096, 4097, 65536, 262144 + 8, BYTES_MAX};
    const int nsz = (int)(sizeof(sizes) / sizeof(sizes[0]));
    const size_t reject_len = 777;
    xtq_ctx_t *ctx = init_ctx();
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_kernel_t *k;
    xtq_function_t *fn;
    xtq_stats_t before, after;
    uint64_t good = 0;
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    int target = S.size > 1 ? 1 : 0;
    int64_t tasks = 2 * nsz + 1;

    uint8_t *buf = malloc(BYTES_MAX);
    CHECK(buf);
    for (size_t i = 0; i < BYTES_MAX; i++)
        buf[i] = large_byte(BYTES_TAG, i);
    for (int i = 0; i < nsz; i++)
        good += 2 * sizes[i];
    good += 1000 + 5000; /* the putv */

    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_signal_create(S.rank == target ? tasks : 0, &S.done));
    CHECK_OK(xtq_kernel_create_cpu(cpu, bytes_kernel, sizeof(struct bytes_kargs), NULL, &k));
    CHECK_OK(xtq_function_create_cpu(cpu, bytes_fn, NULL, &fn));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_kernel(ctx, KERNEL_INDEX, k, NULL, S.done));
    CHECK_OK(xtq_register_function(ctx, FUNCTION_INDEX, fn, NULL));
    CHECK_OK(xtq_barrier(ctx));
    stats_now(ctx, &before);
    CHECK_OK(xtq_barrier(ctx));

    if (S.rank == 0) {
        CHECK(xtq_put_max_size(ctx) >= BYTES_MAX + 64);
        for (int i = 0; i < nsz; i++) {
            CHECK_OK(bytes_put(ctx, target, true, 0, buf, sizes[i]));
            CHECK_OK(bytes_put(ctx, target, false, FUNCTION_INDEX, buf, sizes[i]));
        }
        /* 1000 + 0 + 5000 bytes, read as one payload at the target. */
        uint8_t cmd[64];
        size_t cmd_len = 0;
        xtq_completion_t c = {0};
        struct iovec iov[3] = {{buf, 1000}, {buf + 1000, 0}, {buf + 1000, 5000}};
        xtq_put_param_t p = {0};
        p.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COMPLETION;
        p.flags = XTQ_PUT_REMOTE_COMPLETION;
        p.comp = &c;
        CHECK_OK(
            xtq_cmd_function(cmd, sizeof(cmd), FUNCTION_INDEX, QUEUE_INDEX, 0, 6000, &cmd_len));
        CHECK_OK(xtq_putv(ctx, target, cmd, cmd_len, iov, 3, &p));
        CHECK_OK(xtq_completion_wait(ctx, &c, 60ll * 1000000000));
        /* No such function there: accepted here, rejected there. */
        CHECK_ERR(bytes_put(ctx, target, false, FUNCTION_INDEX + 1, buf, reject_len), -XTQ_ENOFUNC);
    }
    if (S.rank == target)
        wait_signal_zero(ctx, S.done);
    CHECK_OK(xtq_barrier(ctx));
    stats_now(ctx, &after);

    uint64_t sent = after.payload_bytes_sent - before.payload_bytes_sent;
    uint64_t received = after.payload_bytes_received - before.payload_bytes_received;
    uint64_t want_sent = S.rank == 0 ? good + reject_len : 0;
    uint64_t want_received = S.rank == target ? good : 0;
    printf("rank %d/%d on %s: payload bytes sent %llu (expected %llu), received %llu (expected "
           "%llu)\n",
           S.rank, S.size, xtq_provider_name(ctx), (unsigned long long)sent,
           (unsigned long long)want_sent, (unsigned long long)received,
           (unsigned long long)want_received);
    CHECK_EQ(sent, want_sent);
    CHECK_EQ(received, want_received);
    /* The same puts in the first version's counters. */
    CHECK_EQ(after.puts_issued - before.puts_issued, S.rank == 0 ? tasks + 1 : 0);
    CHECK_EQ(after.tasks_enqueued - before.tasks_enqueued, S.rank == target ? tasks : 0);
    CHECK_EQ(after.msgs_rejected - before.msgs_rejected, S.rank == target ? 1 : 0);
    CHECK_EQ(atomic_load(&S.errors), 0);

    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_unregister_kernel(ctx, KERNEL_INDEX));
    CHECK_OK(xtq_unregister_function(ctx, FUNCTION_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_function_destroy(fn));
    CHECK_OK(xtq_signal_destroy(S.done));
    CHECK_OK(xtq_finalize(ctx));
    free(buf);
}

/* ---- completion words on one host (XTQ_DIRECT_COMPLETION, notify.c) ---- */

#define DIRECT_PUTS 2000
#define DIRECT_FAIL_EVERY 7

struct direct_kargs {
    void *target;           /* rewritten (no buffer registered: NULL) */
    const uint8_t *payload; /* rewritten (no payload: NULL) */
    uint32_t id;
    uint32_t fail;
};

static _Atomic uint32_t direct_runs[DIRECT_PUTS];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Counts its run; every DIRECT_FAIL_EVERY-th fails with -XTQ_EIO. */
static void direct_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    const struct direct_kargs *a = kernarg;
    (void)d;
    if (a->id < DIRECT_PUTS)
        atomic_fetch_add(&direct_runs[a->id], 1);
    else
        atomic_fetch_add(&S.errors, 1);
    if (a->fail)
        xtq_task_fail(-XTQ_EIO);
}

/*
 * direct_completion [manual|thread] [off] [test|flush|trigger]: rank 0 puts DIRECT_PUTS remote-completion tasks to
 * rank 1 (itself when alone), one at a time, through ONE completion object
 * reused as soon as each put is DONE; every seventh task fails. Whether a
 * waiter learns of its put from the target's completion word or from the
 * ack, each put reports its own task's status (a late ack of the previous
 * put never reaches the reused object), each task runs once, and after a
 * flush every put is counted completed by the acks. The argument "off"
 * (run with XTQ_DIRECT_COMPLETION=0) expects no put completed from a word;
 * otherwise, with a waiter that polls (manual progress, or a spin), some
 * must be. With "test" the caller polls xtq_completion_test itself
 * instead of waiting, as a runtime's own progress loop does; with "flush"
 * the puts report to a counter and each is flushed (an MPI epoch's way),
 * the counter final when flush returns; with "trigger" each put is armed
 * on a signal and fired by it (libxtq_coll's sends).
 */
XTQ_TEST(direct_completion)
{
    bool off = false, poll_test = false, flush = false, trigger = false;
    for (int i = 0; i < xtq_test_argc; i++) {
        off |= strcmp(xtq_test_argv[i], "off") == 0;
        poll_test |= strcmp(xtq_test_argv[i], "test") == 0;
        flush |= strcmp(xtq_test_argv[i], "flush") == 0;
        trigger |= strcmp(xtq_test_argv[i], "trigger") == 0;
    }
    xtq_ctx_t *ctx = init_ctx();
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_kernel_t *k;
    xtq_stats_t before, after;
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    const int target = S.size > 1 ? 1 : 0;

    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, 16, &q));
    CHECK_OK(xtq_signal_create(S.rank == target ? DIRECT_PUTS : 0, &S.done));
    CHECK_OK(xtq_kernel_create_cpu(cpu, direct_kernel, sizeof(struct direct_kargs), NULL, &k));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_kernel(ctx, KERNEL_INDEX, k, NULL, S.done));
    CHECK_OK(xtq_barrier(ctx));
    stats_now(ctx, &before);

    int failed = 0;
    if (S.rank == 0 && flush) {
        /* An MPI epoch's way: puts counted by a counter, then a flush. */
        xtq_counter_t *cnt;
        CHECK_OK(xtq_counter_create(ctx, &cnt));
        for (uint32_t i = 0; i < DIRECT_PUTS; i++) {
            struct direct_kargs a = {NULL, NULL, i, i % DIRECT_FAIL_EVERY == 0};
            uint8_t cmd[128];
            size_t cmd_len = 0;
            CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, NULL, &a,
                                    sizeof(a), &cmd_len));
            xtq_put_param_t p = {0};
            p.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COUNTER;
            p.flags = XTQ_PUT_REMOTE_COMPLETION;
            p.counter = cnt;
            CHECK_OK(xtq_putv(ctx, target, cmd, cmd_len, NULL, 0, &p));
            CHECK_OK(xtq_flush(ctx, target, 60ll * 1000000000));
            failed += a.fail;
            /* Final once flush returns, from the word or from the ack. */
            CHECK_EQ(xtq_counter_read_err(cnt), (uint64_t)failed);
            CHECK_EQ(xtq_counter_read(cnt), (uint64_t)(i + 1 - failed));
        }
        CHECK_EQ(xtq_counter_error(cnt), -XTQ_EIO);
        /* Every ack in before the counter goes: a late one never touches it. */
        CHECK_OK(xtq_flush(ctx, target, 60ll * 1000000000));
        CHECK_OK(xtq_counter_destroy(cnt));
    } else if (S.rank == 0) {
        xtq_completion_t c = {0};
        xtq_signal_t *go = NULL;
        if (trigger)
            CHECK_OK(xtq_signal_create(1, &go));
        for (uint32_t i = 0; i < DIRECT_PUTS; i++) {
            struct direct_kargs a = {NULL, NULL, i, i % DIRECT_FAIL_EVERY == 0};
            uint8_t cmd[128];
            size_t cmd_len = 0;
            CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_INDEX, QUEUE_INDEX, NULL, &a,
                                    sizeof(a), &cmd_len));
            if (trigger) {
                /* Armed first, fired by the signal (libxtq_coll's sends). */
                xtq_put_param_t p = {0};
                p.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COMPLETION |
                               XTQ_PUT_PARAM_FIELD_TRIGGER;
                p.flags = XTQ_PUT_REMOTE_COMPLETION;
                p.comp = &c;
                p.trigger = go;
                p.trigger_cond = XTQ_SIGNAL_LT;
                p.trigger_value = 1;
                xtq_signal_store(go, 1);
                CHECK_OK(xtq_putv(ctx, target, cmd, cmd_len, NULL, 0, &p));
                xtq_signal_store(go, 0);
            } else {
                CHECK_OK(
                    xtq_put(ctx, target, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c));
            }
            int rc;
            if (poll_test) {
                /* The caller's own polling loop: xtq_completion_test reads
                 * the target's word too; progress only where nobody else
                 * does. */
                const uint64_t t0 = now_ns();
                while (!xtq_completion_test(&c)) {
                    if (manual_mode())
                        xtq_progress(ctx);
                    CHECK(now_ns() - t0 < 60ull * 1000000000);
                }
                CHECK(xtq_completion_state(&c) & XTQ_COMPLETION_DONE);
                rc = c.status;
            } else {
                rc = xtq_completion_wait(ctx, &c, 60ll * 1000000000);
            }
            if (a.fail) {
                CHECK_ERR(rc, -XTQ_EIO);
                failed++;
            } else {
                CHECK_OK(rc);
                CHECK(xtq_completion_state(&c) & XTQ_COMPLETION_REMOTE);
            }
            CHECK(xtq_completion_state(&c) & XTQ_COMPLETION_LOCAL);
        }
        /* Every ack in: each put counted once. */
        CHECK_OK(xtq_flush(ctx, target, 60ll * 1000000000));
        if (go)
            CHECK_OK(xtq_signal_destroy(go));
    }
    if (S.rank == target)
        wait_signal_zero(ctx, S.done);
    CHECK_OK(xtq_barrier(ctx));
    stats_now(ctx, &after);
    if (S.rank == target) {
        for (uint32_t i = 0; i < DIRECT_PUTS; i++)
            CHECK_EQ(atomic_load(&direct_runs[i]), 1);
        CHECK_EQ(atomic_load(&S.errors), 0);
    }
    if (S.rank == 0) {
        uint64_t direct = after.puts_completed_direct - before.puts_completed_direct;
        printf("rank 0 on %s (%s): %d puts, %llu completed from the target's word, %d failed\n",
               xtq_provider_name(ctx), manual_mode() ? "manual" : "thread", DIRECT_PUTS,
               (unsigned long long)direct, failed);
        CHECK_EQ(after.puts_completed - before.puts_completed, DIRECT_PUTS);
        CHECK_EQ(after.puts_failed - before.puts_failed, failed);
        if (off)
            CHECK_EQ(direct, 0);
        else
            CHECK(direct > 0);
    } else {
        CHECK_EQ(after.puts_completed_direct - before.puts_completed_direct, 0);
    }
    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_unregister_kernel(ctx, KERNEL_INDEX));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_signal_destroy(S.done));
    CHECK_OK(xtq_finalize(ctx));
}
