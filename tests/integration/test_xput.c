/*
 * Extended puts over the public API (xtq_putv, counters, xtq_flush),
 * launched by mpirun at 2 and 4 ranks over shm and tcp, or alone (puts to
 * itself). `test_xput CASE [manual]`.
 *
 * Every rank is a target: a checking function (FN_CHECK) verifies each
 * payload byte against a pattern named by its arguments and counts the
 * good and bad ones; a blocking function (FN_BLOCK) holds its worker until
 * the test releases it. Initiators check completions and counters; after
 * a barrier each target checks what ran.
 */
#include <xtq/xtq.h>

#include "xtq_test.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#define QUEUE_INDEX   3
#define FN_CHECK      1
#define FN_BLOCK      2
#define FN_MISSING    9 /* never registered */
#define KERNEL_SLOW   5
#define FN_RESULT     4
#define KERNEL_RESULT 6
#define RESULT_FAIL   (1ull << 40) /* in a result task's tag: fail after writing */
#define SEC           1000000000ll

static struct {
    int rank, size;
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *queue;
    xtq_function_t *check, *block, *result;
    xtq_kernel_t *rkernel;
    xtq_signal_t *pending;    /* counts down the checked tasks expected here */
    xtq_signal_t *release;    /* FN_BLOCK and the slow kernel wait for 1 */
    _Atomic uint64_t ok, bad; /* checked payloads */
    _Atomic uint32_t started; /* blocking tasks that began */
} S;

static bool manual_mode(void)
{
    return xtq_test_argc > 0 && strcmp(xtq_test_argv[0], "manual") == 0;
}

static int nputs(void)
{
    const char *s = getenv("XTQ_IT_PUTS");
    int n = s ? atoi(s) : 0;
    return n > 0 ? n : 3000;
}

static uint8_t pattern(uint64_t tag, uint64_t i)
{
    return (uint8_t)(i * 131u + (i >> 10) + tag * 17u + 1u);
}

/* arg2: tag, arg3: length. */
static void check_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    const uint8_t *p = (const uint8_t *)(uintptr_t)arg[1];
    bool ok = (arg[3] == 0) == (p == NULL);
    for (uint64_t i = 0; ok && i < arg[3]; i++)
        ok = p[i] == pattern(arg[2], i);
    if (ok) {
        atomic_fetch_add(&S.ok, 1);
    } else if (atomic_fetch_add(&S.bad, 1) < 3) {
        fprintf(stderr, "rank %d: bad payload, tag %llu, length %llu\n", S.rank,
                (unsigned long long)arg[2], (unsigned long long)arg[3]);
    }
    xtq_signal_add(S.pending, -1);
}

/* Wait (bounded, 60 s) until `sig` is 1, progressing a manual engine. */
static void wait_release(void)
{
    for (int i = 0; i < 600; i++)
        if (xtq_signal_wait(S.release, XTQ_SIGNAL_EQ, 1, SEC / 10, NULL) == 0)
            return;
    fprintf(stderr, "rank %d: a blocking task was never released\n", S.rank);
}

static void block_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    atomic_fetch_add(&S.started, 1);
    wait_release();
}

static void slow_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    atomic_fetch_add(&S.started, 1);
    wait_release();
}

/* Everything but the barrier: the caller sets S.pending first. */
/* A fetching put's task: writes the pattern of its tag into the whole
 * result buffer, whose length must be arg3 (arg2: tag). */
static void result_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    size_t len = 7;
    uint8_t *r = xtq_task_result(&len);
    bool ok = len == arg[3] && (r != NULL) == (len != 0);
    for (size_t i = 0; ok && i < len; i++)
        ok = r[i] == 0; /* zero-filled */
    for (size_t i = 0; r && i < len; i++)
        r[i] = pattern(arg[2], i);
    if (!ok && atomic_fetch_add(&S.bad, 1) < 3)
        fprintf(stderr, "rank %d: result buffer of %zu bytes, %llu expected, or not zeroed\n",
                S.rank, len, (unsigned long long)arg[3]);
    if (arg[2] & RESULT_FAIL)
        xtq_task_fail(-XTQ_ERANGE);
}

/* A kernel of 4 work-groups: each writes its quarter of the result. */
static void result_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    size_t len;
    uint8_t *r = xtq_task_result(&len);
    uint64_t tag = ((const uint64_t *)kernarg)[2]; /* 0 and 1: the target's */
    size_t q = len / 4, lo = q * d->workgroup_id[0], hi = d->workgroup_id[0] == 3 ? len : lo + q;
    for (size_t i = lo; r && i < hi; i++)
        r[i] = pattern(tag, i);
}

static void setup(void)
{
    xtq_init_attr_t attr = {.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS,
                            .progress = manual_mode() ? XTQ_PROGRESS_MANUAL : XTQ_PROGRESS_DEFAULT};
    CHECK_OK(xtq_init(&attr, &S.ctx));
    S.rank = xtq_rank(S.ctx);
    S.size = xtq_size(S.ctx);
    CHECK_OK(xtq_agent_find(S.ctx, XTQ_AGENT_CPU, &S.cpu));
    CHECK_OK(xtq_queue_create(S.cpu, 64, &S.queue));
    CHECK_OK(xtq_function_create_cpu(S.cpu, check_fn, NULL, &S.check));
    CHECK_OK(xtq_function_create_cpu(S.cpu, block_fn, NULL, &S.block));
    CHECK_OK(xtq_signal_create(0, &S.pending));
    CHECK_OK(xtq_signal_create(0, &S.release));
    CHECK_OK(xtq_register_queue(S.ctx, QUEUE_INDEX, S.queue));
    CHECK_OK(xtq_register_function(S.ctx, FN_CHECK, S.check, NULL));
    CHECK_OK(xtq_register_function(S.ctx, FN_BLOCK, S.block, NULL));
    CHECK_OK(xtq_function_create_cpu(S.cpu, result_fn, NULL, &S.result));
    CHECK_OK(xtq_register_function(S.ctx, FN_RESULT, S.result, NULL));
    CHECK_OK(xtq_kernel_create_cpu(S.cpu, result_kernel, 32, NULL, &S.rkernel));
    CHECK_OK(xtq_register_kernel(S.ctx, KERNEL_RESULT, S.rkernel, NULL, NULL));
}

/* Expect `n` checked tasks here, then let everybody start. */
static void start(int64_t n)
{
    xtq_signal_store(S.pending, n);
    CHECK_OK(xtq_barrier(S.ctx));
}

static void teardown(void)
{
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_CHECK));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_BLOCK));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_RESULT));
    CHECK_OK(xtq_unregister_kernel(S.ctx, KERNEL_RESULT));
    CHECK_OK(xtq_unregister_queue(S.ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(S.queue));
    CHECK_OK(xtq_function_destroy(S.check));
    CHECK_OK(xtq_function_destroy(S.block));
    CHECK_OK(xtq_function_destroy(S.result));
    CHECK_OK(xtq_kernel_destroy(S.rkernel));
    CHECK_OK(xtq_signal_destroy(S.pending));
    CHECK_OK(xtq_signal_destroy(S.release));
    CHECK_OK(xtq_finalize(S.ctx));
}

/* The targets of rank r: every other rank, or itself when alone. */
static int ntargets(void)
{
    return S.size > 1 ? S.size - 1 : 1;
}

/* Put i of rank src goes to its (i mod targets)-th target. */
static int target_of(int src, int i)
{
    if (S.size == 1)
        return 0;
    int k = i % (S.size - 1);
    return k >= src ? k + 1 : k;
}

static int target_k(int k)
{
    return target_of(S.rank, k);
}

/* Wait until every task expected here has been checked, then check them. */
static void expect_checked(uint64_t n)
{
    for (int i = 0;; i++) {
        if (xtq_signal_wait(S.pending, XTQ_SIGNAL_EQ, 0, manual_mode() ? SEC / 1000 : SEC / 10,
                            NULL) == 0)
            break;
        if (manual_mode())
            xtq_progress(S.ctx);
        if (i > (manual_mode() ? 60000 : 600))
            XTQ_FAIL("rank %d: %lld checked tasks still missing after 60 s", S.rank,
                     (long long)xtq_signal_load(S.pending));
    }
    CHECK_EQ(atomic_load(&S.bad), 0);
    CHECK_EQ(atomic_load(&S.ok), n);
}

static size_t cmd_check(uint8_t *cmd, uint64_t tag, uint64_t len)
{
    size_t cmd_len;
    CHECK_OK(xtq_cmd_function(cmd, 64, FN_CHECK, QUEUE_INDEX, tag, len, &cmd_len));
    return cmd_len;
}

/* ---- putv ------------------------------------------------------------------ */

/* Pieces, total bytes: up to the largest put, more pieces than any
 * provider gathers (tcp and shm take 4), zero-length pieces among them. */
static const struct {
    unsigned pieces;
    size_t len;
} shapes[] = {{1, 100},    {2, 5000},     {3, 70000}, {4, 4097},
              {5, 300000}, {17, 1 << 20}, {64, 9000}, {200, 2000}};
#define NSHAPES (sizeof(shapes) / sizeof(shapes[0]))

/* Split [0, len) into `pieces` separately allocated pieces of uneven
 * sizes (every third one empty), filled with the pattern of `tag`. */
static struct iovec *make_pieces(unsigned pieces, size_t len, uint64_t tag)
{
    struct iovec *iov = calloc(pieces, sizeof(*iov));
    CHECK(iov);
    size_t at = 0;
    for (unsigned k = 0; k < pieces; k++) {
        size_t left = len - at, n;
        if (k == pieces - 1)
            n = left;
        else if (k % 3 == 2)
            n = 0;
        else
            n = left / 2 < 1 ? left : (left * (k % 5 + 1)) / 11;
        uint8_t *b = n ? malloc(n) : NULL;
        CHECK(!n || b);
        for (size_t i = 0; i < n; i++)
            b[i] = pattern(tag, at + i);
        iov[k].iov_base = b;
        iov[k].iov_len = n;
        at += n;
    }
    CHECK_EQ(at, len);
    return iov;
}

static void free_pieces(struct iovec *iov, unsigned pieces)
{
    for (unsigned k = 0; k < pieces; k++)
        free(iov[k].iov_base);
    free(iov);
}

/* Every shape to every target, each with remote completion: the target
 * checks every byte in order. */
XTQ_TEST(putv_pieces)
{
    setup();
    start((int64_t)NSHAPES * (S.size > 1 ? S.size - 1 : 1));
    for (int k = 0; k < ntargets(); k++) {
        int t = target_k(k);
        for (unsigned c = 0; c < NSHAPES; c++) {
            uint64_t tag = (uint64_t)S.rank * 100 + c;
            struct iovec *iov = make_pieces(shapes[c].pieces, shapes[c].len, tag);
            uint8_t cmd[64];
            size_t cmd_len = cmd_check(cmd, tag, shapes[c].len);
            xtq_completion_t comp;
            xtq_put_param_t p = {.field_mask =
                                     XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COMPLETION,
                                 .flags = XTQ_PUT_REMOTE_COMPLETION,
                                 .comp = &comp};
            CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, iov, shapes[c].pieces, &p));
            CHECK_EQ(xtq_completion_wait(S.ctx, &comp, 60 * SEC), 0);
            CHECK_EQ(xtq_completion_state(&comp),
                     XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE);
            free_pieces(iov, shapes[c].pieces);
        }
    }
    expect_checked((uint64_t)NSHAPES * (uint64_t)(S.size > 1 ? S.size - 1 : 1));
    printf("rank %d on %s: %zu putv shapes (up to %u pieces, %d bytes) arrived intact\n", S.rank,
           xtq_provider_name(S.ctx), NSHAPES, 200u, 1 << 20);
    teardown();
}

/* Argument checks that never reach the wire (alone). */
XTQ_TEST(putv_args)
{
    setup();
    start(1);
    uint8_t cmd[64], buf[16] = {0};
    size_t cmd_len = cmd_check(cmd, 0, 0);
    xtq_completion_t comp;
    xtq_counter_t *cnt;
    CHECK_OK(xtq_counter_create(S.ctx, &cnt));
    struct iovec iov[2] = {{buf, 8}, {NULL, 8}};
    xtq_put_param_t p = {0};

    /* A NULL base with a length; lengths past the largest put, and two
     * whose sum wraps (issue 10, bug 5: checked without overflow). */
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, iov, 2, NULL), -XTQ_EINVAL);
    iov[1] = (struct iovec){buf, xtq_put_max_size(S.ctx)};
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, iov, 2, NULL), -XTQ_EMSGSIZE);
    iov[0] = (struct iovec){buf, SIZE_MAX / 2 + 8};
    iov[1] = (struct iovec){buf, SIZE_MAX / 2 + 8};
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, iov, 2, NULL), -XTQ_EMSGSIZE);
    CHECK_ERR(xtq_put(S.ctx, 0, cmd, cmd_len, buf, SIZE_MAX - 10, 0, &comp), -XTQ_EMSGSIZE);
    CHECK_ERR(xtq_put(S.ctx, 0, cmd, cmd_len, buf, SIZE_MAX - 10, 0, NULL), -XTQ_EMSGSIZE);
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 1, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_putv(NULL, 0, cmd, cmd_len, NULL, 0, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_putv(S.ctx, 1, cmd, cmd_len, NULL, 0, NULL), -XTQ_ESRCRANK);

    /* Fields: unknown bits, a named counter that is NULL, remote
     * completion with nothing to report it to. */
    p.field_mask = 1u << 30;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    p.field_mask = XTQ_PUT_PARAM_FIELD_COUNTER;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    p.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS;
    p.flags = XTQ_PUT_REMOTE_COMPLETION;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    p.flags = 1u << 7;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    CHECK_ERR(xtq_flush(S.ctx, 1, SEC), -XTQ_ESRCRANK);
    CHECK_ERR(xtq_flush(S.ctx, -2, SEC), -XTQ_ESRCRANK);
    CHECK_ERR(xtq_flush(S.ctx, 0, -1), -XTQ_EINVAL);
    CHECK_ERR(xtq_flush(NULL, 0, 0), -XTQ_EINVAL);

    /* Remote completion reported to a counter alone; nothing refused
     * above reached the counter or the target. */
    p.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COUNTER;
    p.flags = XTQ_PUT_REMOTE_COMPLETION;
    p.counter = cnt;
    CHECK_OK(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p));
    CHECK_OK(xtq_counter_wait(S.ctx, cnt, 1, 60 * SEC));
    CHECK_EQ(xtq_counter_read(cnt), 1);
    CHECK_EQ(xtq_counter_read_err(cnt), 0);
    /* Remote: the task ran before the count. */
    CHECK_EQ(atomic_load(&S.ok), 1);
    /* NULL param: flags 0, no completion (the call waits for LOCAL). */
    xtq_signal_store(S.pending, 1);
    CHECK_OK(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, NULL));
    CHECK_OK(xtq_flush(S.ctx, XTQ_TARGET_ALL, 60 * SEC));
    expect_checked(2);
    CHECK_OK(xtq_counter_destroy(cnt));
    teardown();
}

/* ---- counters -------------------------------------------------------------- */

/* Thousands of puts counted by one counter, no completion objects: every
 * 50th names a function the targets never registered and is counted as
 * an error with the target's code. */
XTQ_TEST(counter_many)
{
    int n = nputs();
    setup();
    int64_t here = 0;
    for (int src = 0; src < S.size; src++)
        for (int i = 0; i < n; i++)
            here += target_of(src, i) == S.rank && i % 50 != 49;
    start(here);

    static uint8_t payload[512];
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = pattern((uint64_t)S.rank, i);
    xtq_counter_t *cnt;
    CHECK_OK(xtq_counter_create(S.ctx, &cnt));
    uint64_t bad = 0;
    for (int i = 0; i < n; i++) {
        int t = target_of(S.rank, i);
        size_t len = (size_t)(i * 7) % (sizeof(payload) + 1), cmd_len;
        uint8_t cmd[64];
        if (i % 50 == 49) {
            CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_MISSING, QUEUE_INDEX, 0, 0, &cmd_len));
            bad++;
        } else {
            cmd_len = cmd_check(cmd, (uint64_t)S.rank, len);
        }
        struct iovec iov = {payload, len};
        xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COUNTER,
                             .flags = i % 2 ? XTQ_PUT_REMOTE_COMPLETION : 0,
                             .counter = cnt};
        CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, &iov, len ? 1 : 0, &p));
    }
    CHECK_OK(xtq_counter_wait(S.ctx, cnt, (uint64_t)n, 120 * SEC));
    CHECK_EQ(xtq_counter_read(cnt), (uint64_t)n - bad);
    CHECK_EQ(xtq_counter_read_err(cnt), bad);
    CHECK_EQ(xtq_counter_error(cnt), -XTQ_ENOFUNC);
    /* DONE means nothing is pending on it any more. */
    CHECK_OK(xtq_counter_destroy(cnt));
    expect_checked((uint64_t)here);
    printf("rank %d on %s: %d puts counted (%llu errors), %lld tasks checked here\n", S.rank,
           xtq_provider_name(S.ctx), n, (unsigned long long)bad, (long long)here);
    teardown();
}

/* ---- flush ----------------------------------------------------------------- */

/* Every rank issues puts to every target without waiting for them, each
 * target's puts counted by its own counter, while the others do the same
 * to it; flush(ALL) returns with every one of them DONE; then a second
 * round flushed target by target. */
XTQ_TEST(flush_load)
{
    int n = nputs();
    setup();
    int nt = ntargets();
    /* Each rank sends n puts per round to each of its targets. */
    start(2ll * n * (S.size > 1 ? S.size - 1 : 1));
    static uint8_t payload[2048];
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = pattern((uint64_t)S.rank, i);
    xtq_counter_t **cnt = calloc((size_t)nt, sizeof(*cnt));
    CHECK(cnt);
    for (int k = 0; k < nt; k++)
        CHECK_OK(xtq_counter_create(S.ctx, &cnt[k]));
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < n; i++)
            for (int k = 0; k < nt; k++) {
                size_t len = (size_t)(i * 13 + k) % (sizeof(payload) + 1);
                uint8_t cmd[64];
                size_t cmd_len = cmd_check(cmd, (uint64_t)S.rank, len);
                struct iovec iov[2] = {{payload, len / 2}, {payload + len / 2, len - len / 2}};
                xtq_put_param_t p = {.field_mask =
                                         XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COUNTER,
                                     .flags = i % 3 ? XTQ_PUT_REMOTE_COMPLETION : 0,
                                     .counter = cnt[k]};
                CHECK_OK(xtq_putv(S.ctx, target_k(k), cmd, cmd_len, iov, 2, &p));
            }
        if (round == 0) {
            CHECK_OK(xtq_flush(S.ctx, XTQ_TARGET_ALL, 120 * SEC));
            for (int k = 0; k < nt; k++)
                CHECK_EQ(xtq_counter_read(cnt[k]) + xtq_counter_read_err(cnt[k]), (uint64_t)n);
        } else {
            for (int k = 0; k < nt; k++) {
                CHECK_OK(xtq_flush(S.ctx, target_k(k), 120 * SEC));
                CHECK_EQ(xtq_counter_read(cnt[k]), 2ull * (uint64_t)n);
            }
        }
    }
    for (int k = 0; k < nt; k++) {
        CHECK_EQ(xtq_counter_read_err(cnt[k]), 0);
        CHECK_OK(xtq_counter_destroy(cnt[k]));
    }
    free(cnt);
    /* Nothing left: an immediate flush succeeds without waiting. */
    CHECK_OK(xtq_flush(S.ctx, XTQ_TARGET_ALL, 0));
    expect_checked(2ull * (uint64_t)n * (uint64_t)(S.size > 1 ? S.size - 1 : 1));
    printf("rank %d on %s: 2 x %d puts per target flushed (%s progress)\n", S.rank,
           xtq_provider_name(S.ctx), n, manual_mode() ? "manual" : "thread");
    teardown();
}

/* A put whose task blocks on the target: flush times out (and says so)
 * until the task is released, then returns 0. Rank 0 to rank 1, or to
 * itself when alone. */
XTQ_TEST(flush_timeout)
{
    setup();
    start(0);
    int target = S.size > 1 ? 1 : 0;
    if (S.rank == 0) {
        xtq_counter_t *cnt;
        uint8_t cmd[64];
        size_t cmd_len;
        CHECK_OK(xtq_counter_create(S.ctx, &cnt));
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_BLOCK, QUEUE_INDEX, 0, 0, &cmd_len));
        xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COUNTER,
                             .flags = XTQ_PUT_REMOTE_COMPLETION,
                             .counter = cnt};
        CHECK_OK(xtq_putv(S.ctx, target, cmd, cmd_len, NULL, 0, &p));
        CHECK_ERR(xtq_flush(S.ctx, target, SEC / 5), -XTQ_ETIMEDOUT);
        CHECK_ERR(xtq_flush(S.ctx, XTQ_TARGET_ALL, 0), -XTQ_ETIMEDOUT);
        CHECK_EQ(xtq_counter_read(cnt), 0);
        CHECK_ERR(xtq_counter_destroy(cnt), -XTQ_EBUSY);
        /* Other targets have nothing pending. */
        if (S.size > 2)
            CHECK_OK(xtq_flush(S.ctx, 2, 0));
        if (target == 0)
            xtq_signal_store(S.release, 1);
        CHECK_OK(xtq_barrier(S.ctx));
        CHECK_OK(xtq_flush(S.ctx, target, 60 * SEC));
        CHECK_EQ(xtq_counter_read(cnt), 1);
        CHECK_OK(xtq_counter_destroy(cnt));
        printf("rank 0 on %s: flush timed out while the task blocked, then returned\n",
               xtq_provider_name(S.ctx));
    } else {
        CHECK_OK(xtq_barrier(S.ctx));
        if (S.rank == target)
            xtq_signal_store(S.release, 1);
    }
    teardown();
}

/* ---- tasks name their objects ---------------------------------------------- */

/* A task in flight keeps its kernel and completion signal alive: after
 * unregistration, destroy answers -XTQ_EBUSY until the task retired
 * (issue 10, bug 2). Every rank to itself. */
XTQ_TEST(destroy_in_flight)
{
    setup();
    start(0);
    xtq_kernel_t *k;
    xtq_signal_t *done;
    CHECK_OK(xtq_kernel_create_cpu(S.cpu, slow_kernel, 16, NULL, &k));
    CHECK_OK(xtq_signal_create(1, &done));
    CHECK_OK(xtq_register_kernel(S.ctx, KERNEL_SLOW, k, NULL, done));
    uint8_t cmd[128];
    size_t cmd_len;
    CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_SLOW, QUEUE_INDEX, NULL, NULL, 16, &cmd_len));
    xtq_completion_t c;
    CHECK_OK(xtq_put(S.ctx, S.rank, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c));
    for (int i = 0; atomic_load(&S.started) == 0; i++) {
        if (manual_mode())
            xtq_progress(S.ctx);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        if (i > 600000)
            XTQ_FAIL("the slow kernel never started");
    }
    CHECK_OK(xtq_unregister_kernel(S.ctx, KERNEL_SLOW));
    CHECK_ERR(xtq_kernel_destroy(k), -XTQ_EBUSY);
    CHECK_ERR(xtq_signal_destroy(done), -XTQ_EBUSY);
    /* Refused, not half-done: still alive and usable. */
    CHECK_EQ(xtq_signal_load(done), 1);
    xtq_signal_store(S.release, 1);
    CHECK_EQ(xtq_completion_wait(S.ctx, &c, 60 * SEC), 0);
    CHECK_EQ(xtq_signal_load(done), 0);
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_signal_destroy(done));
    teardown();
}

/* ---- fetched results -------------------------------------------------------- */

static const size_t result_sizes[] = {0, 1, 8, 100, 3968, 3969, 65536, 1u << 18, 1u << 20};
#define NRESULTS (sizeof(result_sizes) / sizeof(result_sizes[0]))
#define GUARD    64

/* Check a result landed whole, and nothing past it. */
static void check_result(const uint8_t *buf, size_t len, uint64_t tag)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern(tag, i))
            XTQ_FAIL("rank %d: result byte %zu of %zu (tag %llu) is %u, want %u", S.rank, i, len,
                     (unsigned long long)tag, buf[i], pattern(tag, i));
    for (size_t i = len; i < len + GUARD; i++)
        if (buf[i] != 0xee)
            XTQ_FAIL("rank %d: byte %zu past a %zu-byte result was written", S.rank, i, len);
}

/* Fetching puts of every size 0..1 MiB to every target (functions, and a
 * kernel whose 4 work-groups share one buffer); a task that fails sends
 * no result; then many small fetching puts on one counter, flushed. */
XTQ_TEST(results)
{
    setup();
    start(0);
    uint8_t *buf = malloc((1u << 20) + GUARD);
    CHECK(buf);
    for (int k = 0; k < ntargets(); k++) {
        int t = target_k(k);
        for (unsigned c = 0; c < NRESULTS; c++) {
            size_t len = result_sizes[c];
            uint64_t tag = (uint64_t)S.rank * 1000 + c;
            uint8_t cmd[128];
            size_t cmd_len;
            xtq_completion_t comp;
            xtq_put_param_t p = {.field_mask =
                                     XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_RESULT,
                                 .comp = &comp,
                                 .result = buf,
                                 .result_len = len};
            /* Function. */
            memset(buf, 0xee, len + GUARD);
            CHECK_OK(
                xtq_cmd_function(cmd, sizeof(cmd), FN_RESULT, QUEUE_INDEX, tag, len, &cmd_len));
            CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, NULL, 0, &p));
            CHECK_EQ(xtq_completion_wait(S.ctx, &comp, 60 * SEC), 0);
            CHECK_EQ(xtq_completion_state(&comp),
                     XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE);
            check_result(buf, len, tag);
            /* Kernel: one buffer for all its work-groups. */
            memset(buf, 0xee, len + GUARD);
            uint64_t karg[4] = {0, 0, tag + 500, 0};
            xtq_dispatch_geometry_t g = {1, {4, 1, 1}, {1, 1, 1}};
            CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_RESULT, QUEUE_INDEX, &g, karg,
                                    sizeof(karg), &cmd_len));
            CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, NULL, 0, &p));
            CHECK_EQ(xtq_completion_wait(S.ctx, &comp, 60 * SEC), 0);
            check_result(buf, len, tag + 500);
        }
        /* A task that fails itself: its status, and no result. */
        xtq_completion_t comp;
        uint8_t cmd[64];
        size_t cmd_len;
        memset(buf, 0xee, 100 + GUARD);
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_RESULT, QUEUE_INDEX, 7 | RESULT_FAIL, 100,
                                  &cmd_len));
        xtq_put_param_t p = {.field_mask =
                                 XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_RESULT,
                             .comp = &comp,
                             .result = buf,
                             .result_len = 100};
        CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, NULL, 0, &p));
        CHECK_ERR(xtq_completion_wait(S.ctx, &comp, 60 * SEC), -XTQ_ERANGE);
        for (size_t i = 0; i < 100 + GUARD; i++)
            CHECK_EQ(buf[i], 0xee);
    }

    /* Many small fetching puts at once, each into its own 24 bytes of one
     * array, counted by one counter and flushed. */
    enum { MANY = 1000, EACH = 24 };
    uint8_t *many = malloc((size_t)MANY * EACH + GUARD);
    CHECK(many);
    memset(many, 0xee, (size_t)MANY * EACH + GUARD);
    xtq_counter_t *cnt;
    CHECK_OK(xtq_counter_create(S.ctx, &cnt));
    for (int i = 0; i < MANY; i++) {
        uint8_t cmd[64];
        size_t cmd_len;
        CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_RESULT, QUEUE_INDEX, 77 + (uint64_t)i, EACH,
                                  &cmd_len));
        xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_COUNTER | XTQ_PUT_PARAM_FIELD_RESULT,
                             .counter = cnt,
                             .result = many + (size_t)i * EACH,
                             .result_len = EACH};
        CHECK_OK(xtq_putv(S.ctx, target_k(i % ntargets()), cmd, cmd_len, NULL, 0, &p));
    }
    CHECK_OK(xtq_flush(S.ctx, XTQ_TARGET_ALL, 120 * SEC));
    CHECK_EQ(xtq_counter_read(cnt), MANY);
    for (int i = 0; i < MANY; i++)
        for (size_t b = 0; b < EACH; b++)
            CHECK_EQ(many[(size_t)i * EACH + b], pattern(77 + (uint64_t)i, b));
    for (size_t b = 0; b < GUARD; b++)
        CHECK_EQ(many[(size_t)MANY * EACH + b], 0xee);
    CHECK_OK(xtq_counter_destroy(cnt));
    CHECK_EQ(atomic_load(&S.bad), 0);
    printf("rank %d on %s: fetched results of 0..%u bytes intact, %d small ones counted\n", S.rank,
           xtq_provider_name(S.ctx), 1u << 20, MANY);
    free(many);
    free(buf);
    teardown();
}

/* Argument checks of fetching puts (alone). */
XTQ_TEST(results_args)
{
    setup();
    start(0);
    uint8_t cmd[64], res[16];
    size_t cmd_len;
    xtq_completion_t comp;
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_RESULT, QUEUE_INDEX, 1, 16, &cmd_len));
    xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_RESULT | XTQ_PUT_PARAM_FIELD_COMPLETION,
                         .comp = &comp,
                         .result = NULL,
                         .result_len = 16};
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    p.result = res;
    p.result_len = xtq_put_max_size(S.ctx) + 1;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EMSGSIZE);
    /* Nothing to report the result's arrival to. */
    p.field_mask = XTQ_PUT_PARAM_FIELD_RESULT;
    p.result_len = 16;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    /* A fetching put is a remote-completion put, flags or not. */
    p.field_mask = XTQ_PUT_PARAM_FIELD_RESULT | XTQ_PUT_PARAM_FIELD_COMPLETION;
    CHECK_OK(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p));
    CHECK_OK(xtq_completion_wait(S.ctx, &comp, 60 * SEC));
    CHECK(xtq_completion_state(&comp) & XTQ_COMPLETION_REMOTE);
    for (size_t i = 0; i < 16; i++)
        CHECK_EQ(res[i], pattern(1, i));
    teardown();
}

/* ---- the task's payload ------------------------------------------------------- */

#define FN_ECHO 3

/* Sends back, as its result, the payload it sees through
 * xtq_task_payload(), whose length must be arg[2]. */
static void echo_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    size_t rlen, plen = 7;
    uint8_t *r = xtq_task_result(&rlen);
    const uint8_t *pl = xtq_task_payload(&plen);
    if (plen != arg[2] || (pl != NULL) != (plen != 0) || (plen && pl != (const void *)arg[1])) {
        xtq_task_fail(-XTQ_EPROTO);
        return;
    }
    if (r && pl)
        memcpy(r, pl, plen < rlen ? plen : rlen);
}

/* A CPU task finds its payload and its length (xtq_task_payload), for
 * payloads from none to many pieces, small (eager) to large. */
XTQ_TEST(payload_echo)
{
    setup();
    xtq_function_t *echo;
    CHECK_OK(xtq_function_create_cpu(S.cpu, echo_fn, NULL, &echo));
    CHECK_OK(xtq_register_function(S.ctx, FN_ECHO, echo, NULL));
    start(0);
    static const size_t sizes[] = {0, 1, 100, 4096, 60000};
    size_t max = xtq_put_max_size(S.ctx);
    uint8_t *src = malloc(60000), *res = malloc(60000 + GUARD);
    CHECK(src && res);
    for (int k = 0; k < ntargets(); k++) {
        int t = target_k(k);
        for (unsigned c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
            size_t len = sizes[c];
            if (len + 64 > max)
                continue;
            for (size_t i = 0; i < len; i++)
                src[i] = pattern((uint64_t)S.rank * 10 + c, i);
            /* Three pieces: the payload arrives as one. */
            struct iovec iov[3] = {{src, len / 3}, {src + len / 3, len / 3},
                                   {src + 2 * (len / 3), len - 2 * (len / 3)}};
            uint8_t cmd[64];
            size_t cmd_len;
            xtq_completion_t comp;
            CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_ECHO, QUEUE_INDEX, len, 0, &cmd_len));
            memset(res, 0xee, len + GUARD);
            xtq_put_param_t p = {.field_mask =
                                     XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_RESULT,
                                 .comp = &comp,
                                 .result = res,
                                 .result_len = len ? len : 1};
            CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, iov, 3, &p));
            CHECK_OK(xtq_completion_wait(S.ctx, &comp, 60 * SEC));
            CHECK(memcmp(res, src, len) == 0);
            CHECK_EQ(res[len ? len : 1], 0xee);
        }
    }
    free(src);
    free(res);
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_ECHO));
    CHECK_OK(xtq_function_destroy(echo));
    teardown();
}

/* ---- triggered puts ----------------------------------------------------------- */

#define KERNEL_HOP 8
#define HOP_MAGIC  0x484f50ull

struct hop_args {
    void *target;
    const uint64_t *payload;
    uint64_t hop;
    uint64_t magic;
};

static struct {
    int hops;           /* H: visits 1..H are made by puts */
    uint64_t *hopbuf;   /* [k]: written by this rank's k-th visit */
    _Atomic int visits; /* kernels run here */
    xtq_signal_t *t;    /* counts this rank's visits down */
} C;

static uint64_t hop_value(uint64_t m)
{
    return m * 1000 + 7;
}

/* Visit m (m = hop, here at rank m % size, its k-th visit): the payload
 * is what the previous visit's kernel wrote, read when its put fired. */
static void hop_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    const struct hop_args *a = kernarg;
    uint64_t m = a->hop;
    if (a->magic != HOP_MAGIC || !a->payload || *a->payload != hop_value(m - 1) ||
        (int)(m % (uint64_t)S.size) != S.rank) {
        if (atomic_fetch_add(&S.bad, 1) < 3)
            fprintf(stderr, "rank %d: hop %llu carried %llu, want %llu\n", S.rank,
                    (unsigned long long)m, a->payload ? (unsigned long long)*a->payload : 0ull,
                    (unsigned long long)hop_value(m - 1));
    }
    /* Before the kernel completes (and the agent decrements C.t, which
     * fires the next put): the next put's payload. */
    C.hopbuf[m / (uint64_t)S.size] = hop_value(m);
    atomic_fetch_add(&C.visits, 1);
}

/* A chain A -> B -> C ...: every rank arms, up front, one triggered put
 * per visit it will get; each visit's task decrements the signal that
 * fires the next put (its kernel's completion signal: no application
 * thread in between). Rank 0 starts it with a host-side decrement. */
XTQ_TEST(triggers_chain)
{
    setup();
    start(0);
    C.hops = 3 * S.size + (S.size == 1 ? 6 : 0);
    int mine = 0; /* visits of this rank, m = 0..H with m % size == rank */
    for (int m = 0; m <= C.hops; m++)
        mine += m % S.size == S.rank;
    C.hopbuf = calloc((size_t)mine, sizeof(uint64_t));
    CHECK(C.hopbuf);
    xtq_kernel_t *k;
    CHECK_OK(xtq_signal_create(mine, &C.t));
    CHECK_OK(xtq_kernel_create_cpu(S.cpu, hop_kernel, sizeof(struct hop_args), NULL, &k));
    CHECK_OK(xtq_register_kernel(S.ctx, KERNEL_HOP, k, NULL, C.t));

    /* Arm: after this rank's k-th visit (visit m), put m + 1. */
    xtq_completion_t *comp = calloc((size_t)mine, sizeof(*comp));
    int armed = 0;
    for (int m = S.rank, kth = 0; m <= C.hops; m += S.size, kth++) {
        if (m + 1 > C.hops)
            break;
        struct hop_args a = {NULL, NULL, (uint64_t)m + 1, HOP_MAGIC};
        uint8_t cmd[128];
        size_t cmd_len;
        CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_HOP, QUEUE_INDEX, NULL, &a, sizeof(a),
                                &cmd_len));
        struct iovec iov = {&C.hopbuf[kth], sizeof(uint64_t)};
        xtq_put_param_t p = {.field_mask =
                                 XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_TRIGGER,
                             .comp = &comp[kth],
                             .trigger = C.t,
                             .trigger_cond = XTQ_SIGNAL_LT,
                             .trigger_value = mine - kth};
        CHECK_OK(xtq_putv(S.ctx, (m + 1) % S.size, cmd, cmd_len, &iov, 1, &p));
        CHECK(!xtq_completion_test(&comp[kth]));
        armed++;
    }
    /* A watched signal cannot be destroyed. */
    CHECK_ERR(xtq_signal_destroy(C.t), -XTQ_EBUSY);
    CHECK_OK(xtq_barrier(S.ctx));
    if (S.rank == 0) {
        C.hopbuf[0] = hop_value(0);
        xtq_signal_add(C.t, -1); /* visit 0 */
    }
    /* Every visit here has run, and every put armed here has fired. */
    for (int i = 0;; i++) {
        if (xtq_signal_wait(C.t, XTQ_SIGNAL_EQ, 0, manual_mode() ? SEC / 1000 : SEC / 10, NULL) ==
            0)
            break;
        if (manual_mode())
            xtq_progress(S.ctx);
        if (i > (manual_mode() ? 60000 : 600))
            XTQ_FAIL("rank %d: the chain stalled with %lld visits to go", S.rank,
                     (long long)xtq_signal_load(C.t));
    }
    CHECK_OK(xtq_flush(S.ctx, XTQ_TARGET_ALL, 60 * SEC));
    for (int i = 0; i < armed; i++) {
        CHECK(xtq_completion_test(&comp[i]));
        CHECK_EQ(comp[i].status, 0);
    }
    CHECK_EQ(atomic_load(&C.visits), mine - (S.rank == 0 ? 1 : 0));
    CHECK_EQ(atomic_load(&S.bad), 0);
    printf("rank %d on %s (%s progress): chain of %d hops, %d visits here, %d puts fired here\n",
           S.rank, xtq_provider_name(S.ctx), manual_mode() ? "manual" : "thread", C.hops,
           atomic_load(&C.visits), armed);
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_OK(xtq_unregister_kernel(S.ctx, KERNEL_HOP));
    /* The last visit here decremented C.t before its task retired (and
     * its put was acknowledged at enqueue): the kernel is refused until
     * then (-XTQ_EBUSY), never freed under the task. */
    int rc;
    for (int i = 0; (rc = xtq_kernel_destroy(k)) == -XTQ_EBUSY && i < 60000; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    CHECK_OK(rc);
    CHECK_OK(xtq_signal_destroy(C.t));
    free(comp);
    free(C.hopbuf);
    teardown();
}

/* A trigger that never fires holds its put: flush times out, its signal
 * cannot be destroyed, and finalize cancels it (-XTQ_ECANCELED). Puts
 * issued after it still complete. Rank 0 to its first target. */
XTQ_TEST(trigger_never_fires)
{
    setup();
    int target = S.size > 1 ? 1 : 0;
    start(S.rank == target ? 1 : 0);
    xtq_signal_t *never;
    xtq_completion_t armed, plain;
    xtq_counter_t *cnt;
    CHECK_OK(xtq_signal_create(5, &never));
    CHECK_OK(xtq_counter_create(S.ctx, &cnt));
    if (S.rank == 0) {
        uint8_t cmd[64];
        size_t cmd_len = cmd_check(cmd, 0, 0);
        xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_COMPLETION |
                                           XTQ_PUT_PARAM_FIELD_COUNTER |
                                           XTQ_PUT_PARAM_FIELD_TRIGGER,
                             .comp = &armed,
                             .counter = cnt,
                             .trigger = never,
                             .trigger_cond = XTQ_SIGNAL_EQ,
                             .trigger_value = 0};
        CHECK_OK(xtq_putv(S.ctx, target, cmd, cmd_len, NULL, 0, &p));
        CHECK_OK(xtq_put(S.ctx, target, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &plain));
        CHECK_OK(xtq_completion_wait(S.ctx, &plain, 60 * SEC));
        CHECK_ERR(xtq_flush(S.ctx, target, SEC / 5), -XTQ_ETIMEDOUT);
        CHECK_ERR(xtq_flush(S.ctx, XTQ_TARGET_ALL, 0), -XTQ_ETIMEDOUT);
        CHECK_ERR(xtq_signal_destroy(never), -XTQ_EBUSY);
        CHECK_ERR(xtq_counter_destroy(cnt), -XTQ_EBUSY);
        CHECK_EQ(xtq_completion_state(&armed), 0);
        /* A change that does not meet the condition fires nothing. */
        xtq_signal_store(never, 3);
        CHECK_ERR(xtq_flush(S.ctx, target, SEC / 10), -XTQ_ETIMEDOUT);
    }
    /* The target's one checked task: the plain put. */
    if (S.rank == target)
        expect_checked(1);
    teardown();
    if (S.rank == 0) {
        CHECK_EQ(xtq_completion_state(&armed), XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_DONE);
        CHECK_EQ(armed.status, -XTQ_ECANCELED);
        CHECK_EQ(xtq_counter_read_err(cnt), 1);
        printf("rank 0: a trigger that never fired held flush back and was cancelled at "
               "finalize\n");
    }
    CHECK_OK(xtq_signal_destroy(never));
    CHECK_OK(xtq_counter_destroy(cnt));
}

static void *store_later(void *arg)
{
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    xtq_signal_store(arg, 0);
    return NULL;
}

/* A condition that holds at the call fires at once; a host thread's store
 * fires another; a triggered putv of more pieces than the provider takes,
 * with a fetched result; argument checks. */
/*
 * Cancelling triggered puts that have not fired (xtq_put_cancel, and
 * every put on one signal: xtq_put_cancel_trigger): DONE with
 * -XTQ_ECANCELED at once, their signal free to destroy, nothing sent;
 * a put that fired, or an ordinary one, is -XTQ_EALREADY. Then cancel
 * races with firing: exactly one of the two wins each time.
 */
XTQ_TEST(trigger_cancel)
{
    setup();
    int target = S.size > 1 ? 1 : 0;
    /* Two checked tasks arrive: the plain put and the one that fired. */
    start(S.rank == target ? 2 : 0);
    if (S.rank == 0) {
        xtq_signal_t *sig, *team;
        xtq_completion_t a, b, plain;
        xtq_counter_t *cnt;
        uint8_t cmd[64];
        size_t cmd_len = cmd_check(cmd, 0, 0), n = 99;
        CHECK_OK(xtq_signal_create(5, &sig));
        CHECK_OK(xtq_signal_create(5, &team));
        CHECK_OK(xtq_counter_create(S.ctx, &cnt));
        xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_COMPLETION |
                                           XTQ_PUT_PARAM_FIELD_TRIGGER,
                             .comp = &a,
                             .trigger = sig,
                             .trigger_cond = XTQ_SIGNAL_EQ,
                             .trigger_value = 0};
        CHECK_OK(xtq_putv(S.ctx, target, cmd, cmd_len, NULL, 0, &p));
        p.comp = &b;
        CHECK_OK(xtq_putv(S.ctx, target, cmd, cmd_len, NULL, 0, &p));
        CHECK_ERR(xtq_put_cancel(NULL, &a), -XTQ_EINVAL);
        CHECK_ERR(xtq_put_cancel(S.ctx, NULL), -XTQ_EINVAL);
        CHECK_OK(xtq_put_cancel(S.ctx, &a));
        CHECK_EQ(xtq_completion_state(&a), XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_DONE);
        CHECK_EQ(a.status, -XTQ_ECANCELED);
        CHECK_ERR(xtq_completion_wait(S.ctx, &a, 0), -XTQ_ECANCELED);
        CHECK_ERR(xtq_put_cancel(S.ctx, &a), -XTQ_EALREADY);
        /* The other one still fires, and then cannot be cancelled. */
        xtq_signal_store(sig, 0);
        CHECK_OK(xtq_completion_wait(S.ctx, &b, 60 * SEC));
        CHECK_ERR(xtq_put_cancel(S.ctx, &b), -XTQ_EALREADY);
        /* An ordinary put is not withdrawn. */
        CHECK_OK(xtq_put(S.ctx, target, cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &plain));
        CHECK_ERR(xtq_put_cancel(S.ctx, &plain), -XTQ_EALREADY);
        CHECK_OK(xtq_completion_wait(S.ctx, &plain, 60 * SEC));

        /* A team's schedule: puts on its signal, counted only. */
        xtq_put_param_t q = {.field_mask = XTQ_PUT_PARAM_FIELD_COUNTER |
                                           XTQ_PUT_PARAM_FIELD_TRIGGER,
                             .counter = cnt,
                             .trigger = team,
                             .trigger_cond = XTQ_SIGNAL_LT,
                             .trigger_value = 0};
        for (int i = 0; i < 3; i++)
            CHECK_OK(xtq_putv(S.ctx, target, cmd, cmd_len, NULL, 0, &q));
        CHECK_ERR(xtq_signal_destroy(team), -XTQ_EBUSY);
        CHECK_ERR(xtq_put_cancel_trigger(S.ctx, NULL, &n), -XTQ_EINVAL);
        CHECK_OK(xtq_put_cancel_trigger(S.ctx, sig, &n));
        CHECK_EQ(n, 0);
        CHECK_OK(xtq_put_cancel_trigger(S.ctx, team, &n));
        CHECK_EQ(n, 3);
        CHECK_EQ(xtq_counter_read_err(cnt), 3);
        CHECK_EQ(xtq_counter_read(cnt), 0);
        CHECK_OK(xtq_signal_destroy(team));
        CHECK_OK(xtq_flush(S.ctx, XTQ_TARGET_ALL, 60 * SEC));

        /* Cancel against the engine firing: one wins, the put is DONE
         * either way (FN_RESULT with no result: not a checked task). */
        size_t rcmd_len;
        uint8_t rcmd[64];
        CHECK_OK(xtq_cmd_function(rcmd, sizeof(rcmd), FN_RESULT, QUEUE_INDEX, 0, 0, &rcmd_len));
        int cancelled = 0, fired = 0;
        for (int i = 0; i < 200; i++) {
            xtq_signal_store(sig, 1);
            p.comp = &a;
            CHECK_OK(xtq_putv(S.ctx, target, rcmd, rcmd_len, NULL, 0, &p));
            xtq_signal_store(sig, 0);
            if (i % 2)
                sched_yield();
            int rc = xtq_put_cancel(S.ctx, &a);
            if (rc == 0) {
                CHECK_ERR(xtq_completion_wait(S.ctx, &a, 0), -XTQ_ECANCELED);
                cancelled++;
            } else {
                CHECK_ERR(rc, -XTQ_EALREADY);
                CHECK_OK(xtq_completion_wait(S.ctx, &a, 60 * SEC));
                fired++;
            }
        }
        CHECK_OK(xtq_flush(S.ctx, XTQ_TARGET_ALL, 60 * SEC));
        printf("rank 0: cancel against firing: %d cancelled, %d fired\n", cancelled, fired);
        CHECK_OK(xtq_signal_destroy(sig));
        CHECK_OK(xtq_counter_destroy(cnt));
    }
    if (S.rank == target)
        expect_checked(2);
    teardown();
}

XTQ_TEST(triggers_misc)
{
    setup();
    start(3ll * (S.size > 1 ? S.size - 1 : 1));
    xtq_signal_t *go;
    CHECK_OK(xtq_signal_create(1, &go));
    for (int k = 0; k < ntargets(); k++) {
        int t = target_k(k);
        uint64_t tag = 900 + (uint64_t)S.rank;
        uint8_t cmd[64];
        size_t cmd_len = cmd_check(cmd, tag, 40);
        struct iovec *iov = make_pieces(10, 40, tag);
        xtq_completion_t c;
        xtq_put_param_t p = {.field_mask =
                                 XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_TRIGGER,
                             .comp = &c,
                             .trigger = go,
                             .trigger_cond = XTQ_SIGNAL_GTE,
                             .trigger_value = 1};
        /* Holds already (1 >= 1). */
        CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, iov, 10, &p));
        CHECK_OK(xtq_completion_wait(S.ctx, &c, 60 * SEC));
        /* Fired by another thread's store. */
        p.trigger_cond = XTQ_SIGNAL_EQ;
        p.trigger_value = 0;
        CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, iov, 10, &p));
        pthread_t th;
        CHECK(pthread_create(&th, NULL, store_later, go) == 0);
        CHECK_OK(xtq_completion_wait(S.ctx, &c, 60 * SEC));
        pthread_join(th, NULL);
        free_pieces(iov, 10);
        /* A fetching triggered putv of 10 pieces, fired by a CAS. */
        uint8_t res[32];
        memset(res, 0, sizeof(res));
        CHECK_OK(
            xtq_cmd_function(cmd, sizeof(cmd), FN_RESULT, QUEUE_INDEX, tag, sizeof(res), &cmd_len));
        iov = make_pieces(10, 5000, tag);
        p.field_mask |= XTQ_PUT_PARAM_FIELD_RESULT;
        p.result = res;
        p.result_len = sizeof(res);
        p.trigger_value = 42;
        CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, iov, 10, &p));
        CHECK_EQ(xtq_signal_cas(go, 0, 42), 0);
        CHECK_OK(xtq_completion_wait(S.ctx, &c, 60 * SEC));
        for (size_t i = 0; i < sizeof(res); i++)
            CHECK_EQ(res[i], pattern(tag, i));
        free_pieces(iov, 10);
        /* The check function saw the putv payloads; this one too. */
        cmd_len = cmd_check(cmd, tag, 5000);
        iov = make_pieces(10, 5000, tag);
        p.field_mask &= ~(uint64_t)XTQ_PUT_PARAM_FIELD_RESULT;
        CHECK_OK(xtq_putv(S.ctx, t, cmd, cmd_len, iov, 10, &p));
        CHECK_OK(xtq_completion_wait(S.ctx, &c, 60 * SEC));
        free_pieces(iov, 10);
        xtq_signal_store(go, 1);
    }
    /* Arguments: no signal, a condition HSA does not have, nothing to
     * report to. */
    uint8_t cmd[64];
    size_t cmd_len = cmd_check(cmd, 0, 0);
    xtq_completion_t c;
    xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_TRIGGER,
                         .comp = &c,
                         .trigger = NULL};
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    p.trigger = go;
    p.trigger_cond = (enum xtq_signal_condition)7;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    p.trigger_cond = XTQ_SIGNAL_EQ;
    p.field_mask = XTQ_PUT_PARAM_FIELD_TRIGGER;
    CHECK_ERR(xtq_putv(S.ctx, 0, cmd, cmd_len, NULL, 0, &p), -XTQ_EINVAL);
    expect_checked(3ull * (uint64_t)(S.size > 1 ? S.size - 1 : 1));
    CHECK_OK(xtq_signal_destroy(go));
    teardown();
}
