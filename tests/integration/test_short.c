/*
 * Short tasks (XTQ_REGISTER_SHORT, XTQ_CPU_INLINE_TASKS) over the public
 * API, alone (puts to itself) or at 2 ranks (each puts to the next):
 * `test_short CASE [manual]`; and `test_short planes` at 3 or more ranks
 * with XTQ_PROGRESS_THREADS above 1 (every rank puts to rank 0).
 *
 * A short task whose queue is empty and idle runs in the thread that
 * received it (the progress thread, or the application thread taking the
 * engine's turn), not on a CPU-agent worker ("xtq-cpu*" threads); its
 * completion signal, result and status still reach the initiator. When the
 * queue holds or runs a packet, short tasks go through it like any other,
 * in order.
 */
#define _GNU_SOURCE /* pthread_getname_np */
#include <xtq/xtq.h>

#include "xtq_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_INDEX  2
#define FN_SHORT     1 /* short: records where it ran; fails when arg2 says so */
#define FN_BLOCK     3 /* not short: holds its worker until released */
#define KERNEL_SHORT 4 /* short kernel with a completion signal */
#define FN_LONG      5 /* the same function as FN_SHORT, not registered short */
#define FN_WHO       6 /* short: records which thread ran it, per source rank */
#define TAG_FAIL     (1ull << 40)
#define NORDER       50
#define SEC          1000000000ll
#define PLANES_PUTS  50 /* puts each source makes in the planes case */
#define MAX_RANKS    64 /* the planes case's sources (S.who) */

static struct {
    int rank, size;
    xtq_ctx_t *ctx;
    xtq_agent_t *cpu;
    xtq_queue_t *queue;
    xtq_function_t *shortfn, *block;
    xtq_kernel_t *kernel;
    xtq_signal_t *ksig;    /* the short kernel's completion signal */
    xtq_signal_t *release; /* FN_BLOCK waits for 1 */
    _Atomic uint32_t here, on_worker, started, early, bad;
    _Atomic uint32_t next; /* order check: the tag expected next */
    xtq_function_t *whofn;
    /* FN_WHO, per source rank (its payload): how many ran, the kernel
     * thread id of the first one's thread, how many ran on another thread,
     * and how many ran on a thread not named "xtq-progress" (the first
     * such name kept, published by `bad_name_set`). */
    struct {
        _Atomic uint32_t count, moved, not_progress, bad_name_set;
        _Atomic long tid;
        char bad_name[16];
    } who[MAX_RANKS];
    _Atomic uint32_t who_bad_payload;
} S;

static bool manual_mode(void)
{
    return xtq_test_argc > 0 && strcmp(xtq_test_argv[0], "manual") == 0;
}

/* Where the task runs: a CPU-agent worker, or the thread that received it. */
static void note_thread(void)
{
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof(name));
    if (strncmp(name, "xtq-cpu", 7) == 0)
        atomic_fetch_add(&S.on_worker, 1);
    else
        atomic_fetch_add(&S.here, 1);
}

/* arg2: tag (TAG_FAIL: fail after writing the result), arg3: order check
 * (1: the tag must be the next one, and FN_BLOCK must have been released). */
static void short_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    size_t len = 0;
    uint8_t *r = xtq_task_result(&len);
    note_thread();
    for (size_t i = 0; r && i < len; i++)
        r[i] = (uint8_t)(arg[2] + i);
    if (arg[3] == 1) {
        if (xtq_signal_load(S.release) != 1)
            atomic_fetch_add(&S.early, 1);
        if (atomic_fetch_add(&S.next, 1) != (uint32_t)arg[2])
            atomic_fetch_add(&S.bad, 1);
    }
    if (arg[2] & TAG_FAIL)
        xtq_task_fail(-XTQ_ERANGE);
}

static void block_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    atomic_fetch_add(&S.started, 1);
    for (int i = 0; i < 600; i++)
        if (xtq_signal_wait(S.release, XTQ_SIGNAL_EQ, 1, SEC / 10, NULL) == 0)
            return;
    fprintf(stderr, "rank %d: the blocking task was never released\n", S.rank);
}

static void short_kernel(const xtq_dispatch_t *d, void *kernarg)
{
    note_thread();
}

/* The planes case: the payload is the source's rank (arg2 says it too);
 * note the thread this task ran on for that source. */
static void who_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    size_t len = 0;
    const int32_t *src = xtq_task_payload(&len);
    if (!src || len != sizeof(*src) || *src < 0 || *src >= MAX_RANKS ||
        (uint64_t)*src != arg[2]) {
        atomic_fetch_add(&S.who_bad_payload, 1);
        return;
    }
    char name[16] = "";
    pthread_getname_np(pthread_self(), name, sizeof(name));
    long tid = (long)syscall(SYS_gettid), none = 0;
    __typeof__(S.who[0]) *w = &S.who[*src];
    if (!atomic_compare_exchange_strong(&w->tid, &none, tid) && none != tid)
        atomic_fetch_add(&w->moved, 1);
    if (strcmp(name, "xtq-progress") != 0 && atomic_fetch_add(&w->not_progress, 1) == 0) {
        memcpy(w->bad_name, name, sizeof(name));
        atomic_store_explicit(&w->bad_name_set, 1, memory_order_release);
    }
    atomic_fetch_add(&w->count, 1);
}

static void setup(void)
{
    xtq_init_attr_t attr = {.field_mask = XTQ_INIT_ATTR_FIELD_PROGRESS,
                            .progress = manual_mode() ? XTQ_PROGRESS_MANUAL : XTQ_PROGRESS_DEFAULT};
    xtq_register_attr_t ra = {.field_mask = XTQ_REGISTER_ATTR_FIELD_FLAGS,
                              .flags = XTQ_REGISTER_SHORT};

    /* One worker: packets that go through the queue run in its order. */
    setenv("XTQ_CPU_WORKERS", "1", 0);
    CHECK_OK(xtq_init(&attr, &S.ctx));
    S.rank = xtq_rank(S.ctx);
    S.size = xtq_size(S.ctx);
    CHECK_OK(xtq_agent_find(S.ctx, XTQ_AGENT_CPU, &S.cpu));
    CHECK_OK(xtq_queue_create(S.cpu, 256, &S.queue));
    CHECK_OK(xtq_function_create_cpu(S.cpu, short_fn, NULL, &S.shortfn));
    CHECK_OK(xtq_function_create_cpu(S.cpu, block_fn, NULL, &S.block));
    CHECK_OK(xtq_function_create_cpu(S.cpu, who_fn, NULL, &S.whofn));
    CHECK_OK(xtq_kernel_create_cpu(S.cpu, short_kernel, 16, NULL, &S.kernel));
    CHECK_OK(xtq_signal_create(0, &S.ksig));
    CHECK_OK(xtq_signal_create(0, &S.release));
    CHECK_OK(xtq_register_queue(S.ctx, QUEUE_INDEX, S.queue));
    CHECK_OK(xtq_register_function_attr(S.ctx, FN_SHORT, S.shortfn, &ra));
    CHECK_OK(xtq_register_function(S.ctx, FN_LONG, S.shortfn, NULL));
    CHECK_OK(xtq_register_function(S.ctx, FN_BLOCK, S.block, NULL));
    CHECK_OK(xtq_register_function_attr(S.ctx, FN_WHO, S.whofn, &ra));
    ra.field_mask |= XTQ_REGISTER_ATTR_FIELD_SIGNAL;
    ra.completion_signal = S.ksig;
    CHECK_OK(xtq_register_kernel_attr(S.ctx, KERNEL_SHORT, S.kernel, &ra));
}

static void teardown(void)
{
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_SHORT));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_LONG));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_BLOCK));
    CHECK_OK(xtq_unregister_function(S.ctx, FN_WHO));
    CHECK_OK(xtq_unregister_kernel(S.ctx, KERNEL_SHORT));
    CHECK_OK(xtq_unregister_queue(S.ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(S.queue));
    CHECK_OK(xtq_function_destroy(S.shortfn));
    CHECK_OK(xtq_function_destroy(S.block));
    CHECK_OK(xtq_function_destroy(S.whofn));
    CHECK_OK(xtq_kernel_destroy(S.kernel));
    CHECK_OK(xtq_signal_destroy(S.ksig));
    CHECK_OK(xtq_signal_destroy(S.release));
    CHECK_OK(xtq_finalize(S.ctx));
}

/* Each rank puts to the next (to itself when alone), and is put to once. */
static int peer(void)
{
    return (S.rank + 1) % S.size;
}

/* A function put with remote completion (and a result when res_len > 0)
 * and `extra` put flags; returns what its completion says. */
static int put_fn_flags(int fn, uint64_t tag, uint64_t check, uint8_t *res, size_t res_len,
                        uint32_t extra)
{
    uint8_t cmd[64];
    size_t cmd_len;
    xtq_completion_t comp;
    xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_FLAGS |
                                       (res_len ? XTQ_PUT_PARAM_FIELD_RESULT : 0),
                         .flags = XTQ_PUT_REMOTE_COMPLETION | extra,
                         .comp = &comp,
                         .result = res,
                         .result_len = res_len};
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), (uint32_t)fn, QUEUE_INDEX, tag, check, &cmd_len));
    CHECK_OK(xtq_putv(S.ctx, peer(), cmd, cmd_len, NULL, 0, &p));
    int rc = xtq_completion_wait(S.ctx, &comp, 60 * SEC);
    if (rc == 0)
        CHECK(xtq_completion_state(&comp) & XTQ_COMPLETION_REMOTE);
    return rc;
}

static int put_fn(int fn, uint64_t tag, uint64_t check, uint8_t *res, size_t res_len)
{
    return put_fn_flags(fn, tag, check, res, res_len, 0);
}

/* Wait (progressing a manual engine) until `sig` reads `v`. */
static void wait_signal(xtq_signal_t *sig, int64_t v)
{
    for (int i = 0; i < 60000; i++) {
        if (xtq_signal_wait(sig, XTQ_SIGNAL_EQ, v, SEC / 1000, NULL) == 0)
            return;
        if (manual_mode())
            xtq_progress(S.ctx);
    }
    XTQ_FAIL("rank %d: signal still %lld, %lld expected", S.rank, (long long)xtq_signal_load(sig),
             (long long)v);
}

/* ---- cases ----------------------------------------------------------------- */

/*
 * Short tasks on an idle queue run where they arrive: their results, a
 * failing one's status and a kernel's completion signal all arrive. With
 * XTQ_CPU_INLINE_TASKS=0 (argument or environment) they run on workers;
 * so does a function registered without the flag, and a short one put
 * with XTQ_PUT_LONG_TASK.
 */
XTQ_TEST(runs_here)
{
    enum { N = 40 };
    const char *env = getenv("XTQ_CPU_INLINE_TASKS");
    bool off = env && strcmp(env, "0") == 0;
    uint8_t res[32];

    setup();
    xtq_signal_store(S.ksig, N);
    CHECK_OK(xtq_barrier(S.ctx));
    for (int i = 0; i < N; i++) {
        memset(res, 0xee, sizeof(res));
        CHECK_OK(put_fn(FN_SHORT, (uint64_t)i, 0, res, sizeof(res)));
        for (size_t b = 0; b < sizeof(res); b++)
            CHECK_EQ(res[b], (uint8_t)(i + (int)b));
    }
    /* A task that fails itself: its status, and no result. */
    memset(res, 0xee, sizeof(res));
    CHECK_ERR(put_fn(FN_SHORT, 7 | TAG_FAIL, 0, res, sizeof(res)), -XTQ_ERANGE);
    for (size_t b = 0; b < sizeof(res); b++)
        CHECK_EQ(res[b], 0xee);
    /* A short kernel: its completion signal on the target. */
    for (int i = 0; i < N; i++) {
        uint8_t cmd[128];
        size_t cmd_len;
        uint64_t karg[2] = {0, 0};
        xtq_dispatch_geometry_t g = {1, {1, 1, 1}, {1, 1, 1}};
        xtq_completion_t comp;
        CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), KERNEL_SHORT, QUEUE_INDEX, &g, karg, sizeof(karg),
                                &cmd_len));
        CHECK_OK(xtq_put(S.ctx, peer(), cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &comp));
        CHECK_OK(xtq_completion_wait(S.ctx, &comp, 60 * SEC));
    }
    CHECK_OK(xtq_barrier(S.ctx));
    wait_signal(S.ksig, 0);
    uint32_t here = atomic_load(&S.here), worker = atomic_load(&S.on_worker);
    printf("rank %d (%s%s): %u short tasks ran where they arrived, %u on a worker\n", S.rank,
           xtq_provider_name(S.ctx), manual_mode() ? ", manual progress" : "", here, worker);
    CHECK_EQ(here + worker, 2 * N + 1);
    if (off) {
        CHECK_EQ(here, 0);
    } else {
        /* Each waits for the last one's ack: its queue is always idle. */
        CHECK_EQ(worker, 0);
    }
    /* Not registered short: a worker runs it, whatever the setting. */
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_OK(put_fn(FN_LONG, 1, 0, NULL, 0));
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_EQ(atomic_load(&S.on_worker), worker + 1);
    /* Registered short, but its initiator says it runs long
     * (XTQ_PUT_LONG_TASK): a worker runs it, and its result arrives.
     * (After every rank has checked the count above.) */
    CHECK_OK(xtq_barrier(S.ctx));
    memset(res, 0xee, sizeof(res));
    CHECK_OK(put_fn_flags(FN_SHORT, 3, 0, res, sizeof(res), XTQ_PUT_LONG_TASK));
    for (size_t b = 0; b < sizeof(res); b++)
        CHECK_EQ(res[b], (uint8_t)(3 + (int)b));
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_EQ(atomic_load(&S.on_worker), worker + 2);
    CHECK_EQ(atomic_load(&S.here), here);
    teardown();
}

/*
 * A queue that is not idle keeps its order: while a long task holds the
 * only worker, short tasks that arrive wait in the queue behind it and run
 * on the worker, in order, after it; once the queue is idle again, a short
 * task runs where it arrives.
 */
XTQ_TEST(order_kept)
{
    setup();
    CHECK_OK(xtq_barrier(S.ctx));
    uint8_t cmd[64];
    size_t cmd_len;
    xtq_completion_t blk, comp[NORDER];
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_BLOCK, QUEUE_INDEX, 0, 0, &cmd_len));
    CHECK_OK(xtq_put(S.ctx, peer(), cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &blk));
    for (int i = 0; i < NORDER; i++) {
        CHECK_OK(
            xtq_cmd_function(cmd, sizeof(cmd), FN_SHORT, QUEUE_INDEX, (uint64_t)i, 1, &cmd_len));
        CHECK_OK(
            xtq_put(S.ctx, peer(), cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &comp[i]));
    }
    /* Release the block only once every short task has reached this
     * rank's queue behind it (the one worker holds the block, so they
     * stay there): else a late one would find the queue idle. */
    for (int i = 0; i < 60000; i++) {
        if (atomic_load(&S.started) == 1 &&
            xtq_queue_load_write_index(S.queue) - xtq_queue_load_read_index(S.queue) == NORDER)
            break;
        if (manual_mode())
            xtq_progress(S.ctx);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ(atomic_load(&S.started), 1);
    CHECK_EQ(xtq_queue_load_write_index(S.queue) - xtq_queue_load_read_index(S.queue), NORDER);
    CHECK_OK(xtq_barrier(S.ctx));
    xtq_signal_store(S.release, 1);
    CHECK_OK(xtq_completion_wait(S.ctx, &blk, 60 * SEC));
    for (int i = 0; i < NORDER; i++)
        CHECK_OK(xtq_completion_wait(S.ctx, &comp[i], 60 * SEC));
    CHECK_OK(xtq_barrier(S.ctx));
    printf("rank %d (%s): %u short tasks behind a long one: %u early, %u out of order, %u ran "
           "where they arrived\n",
           S.rank, xtq_provider_name(S.ctx), NORDER, atomic_load(&S.early), atomic_load(&S.bad),
           atomic_load(&S.here));
    CHECK_EQ(atomic_load(&S.next), NORDER);
    CHECK_EQ(atomic_load(&S.early), 0);
    CHECK_EQ(atomic_load(&S.bad), 0);
    /* Anything that arrived while the worker held the queue waited in it. */
    CHECK_EQ(atomic_load(&S.here), 0);
    CHECK_EQ(atomic_load(&S.on_worker), NORDER);
    CHECK_OK(xtq_barrier(S.ctx)); /* every rank has counted before new puts come */
    /* Idle again: the next one runs where it arrives (a few tries: the
     * worker may retire the last task, whose ack lets us go on, a moment
     * before it counts it finished). */
    const char *env = getenv("XTQ_CPU_INLINE_TASKS");
    bool off = env && strcmp(env, "0") == 0;
    for (int i = 0; i < 5; i++) {
        CHECK_OK(put_fn(FN_SHORT, 1000, 0, NULL, 0));
        CHECK_OK(xtq_barrier(S.ctx));
        if (atomic_load(&S.here) > 0)
            break;
    }
    if (off)
        CHECK_EQ(atomic_load(&S.here), 0);
    else
        CHECK(atomic_load(&S.here) > 0);
    teardown();
}

/* Threads of this process named `name` (/proc/self/task/TID/comm). */
static int threads_named(const char *name)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *de;
    int n = 0;
    CHECK(d);
    while ((de = readdir(d))) {
        char path[300], comm[32] = "";
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue; /* the thread has exited since */
        if (fgets(comm, sizeof(comm), f)) {
            comm[strcspn(comm, "\n")] = '\0';
            n += strcmp(comm, name) == 0;
        }
        fclose(f);
    }
    closedir(d);
    return n;
}

/* Wait (progressing a manual engine) until this rank's queue holds `n`
 * packets not yet taken. */
static void wait_queued(uint64_t n)
{
    for (int i = 0; i < 60000; i++) {
        if (xtq_queue_load_write_index(S.queue) - xtq_queue_load_read_index(S.queue) == n)
            return;
        if (manual_mode())
            xtq_progress(S.ctx);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    XTQ_FAIL("rank %d: %llu packets queued, %llu expected", S.rank,
             (unsigned long long)(xtq_queue_load_write_index(S.queue) -
                                  xtq_queue_load_read_index(S.queue)),
             (unsigned long long)n);
}

/* Wait (progressing a manual engine) until `*n` reads `v`. */
static void wait_count(_Atomic uint32_t *n, uint32_t v)
{
    for (int i = 0; i < 60000 && atomic_load(n) != v; i++) {
        if (manual_mode())
            xtq_progress(S.ctx);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ(atomic_load(n), v);
}

/*
 * XTQ_CPU_INLINE_TASKS=2: a short task runs where it arrives while a
 * packet of its queue is running, as a second worker would start it (its
 * barrier bit is clear): its ack comes back while the long task still
 * holds the only worker. One whose barrier bit is set still waits in the
 * queue behind the running packet, and runs on the worker after it. (With
 * 1, the default, the first one waits too: order_kept.)
 */
XTQ_TEST(beside)
{
    setenv("XTQ_CPU_INLINE_TASKS", "2", 1);
    setup();
    CHECK_OK(xtq_barrier(S.ctx));
    uint8_t cmd[64];
    size_t cmd_len;
    xtq_completion_t blk, held;
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_BLOCK, QUEUE_INDEX, 0, 0, &cmd_len));
    CHECK_OK(xtq_put(S.ctx, peer(), cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &blk));
    wait_count(&S.started, 1);
    CHECK_OK(xtq_barrier(S.ctx));

    /* Beside the running block: done before it is released. */
    uint8_t res[8] = {0};
    CHECK_OK(put_fn(FN_SHORT, 7, 0, res, sizeof(res)));
    CHECK_EQ(res[0], 7);
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_EQ(atomic_load(&S.here), 1);
    CHECK_EQ(atomic_load(&S.on_worker), 0);
    CHECK_EQ(xtq_signal_load(S.release), 0);

    /* The barrier bit set: into the queue, behind the block. */
    CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_SHORT, QUEUE_INDEX, 8, 0, &cmd_len));
    uint16_t header;
    memcpy(&header, cmd, sizeof(header));
    header = (uint16_t)(header | (1u << XTQ_PACKET_HEADER_BARRIER));
    memcpy(cmd, &header, sizeof(header));
    CHECK_OK(xtq_put(S.ctx, peer(), cmd, cmd_len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &held));
    wait_queued(1);
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_EQ(atomic_load(&S.here), 1);
    xtq_signal_store(S.release, 1);
    CHECK_OK(xtq_completion_wait(S.ctx, &blk, 60 * SEC));
    CHECK_OK(xtq_completion_wait(S.ctx, &held, 60 * SEC));
    CHECK_OK(xtq_barrier(S.ctx));
    CHECK_EQ(atomic_load(&S.here), 1);
    CHECK_EQ(atomic_load(&S.on_worker), 1);
    printf("rank %d (%s): a short task ran beside a running one; with its barrier bit set, "
           "after it on the worker\n",
           S.rank, xtq_provider_name(S.ctx));
    teardown();
    unsetenv("XTQ_CPU_INLINE_TASKS");
}

/*
 * XTQ_PROGRESS_THREADS=N planes: rank i's puts travel on plane i % N at
 * both ends, and each plane has its own progress thread, so puts from
 * initiators on different planes are received, and short tasks on an idle
 * queue run, by different threads of the target.
 *
 * Rank 0 is the target. Every other rank in turn (a barrier between, so
 * rank 0's queue is empty and idle and each task runs inline in the thread
 * that received it) puts PLANES_PUTS short tasks to it, waiting for each
 * one's remote completion; the task records, per source, which thread ran
 * it. Rank 0 then checks that every task from one source ran on one thread
 * named "xtq-progress" (not a worker, not the application thread), and that
 * two sources share that thread exactly when they share a plane. With one
 * progress thread (no planes) every source would run on the same thread,
 * which is what this case exists to catch. Every rank also counts N threads
 * named "xtq-progress" in itself.
 */
XTQ_TEST(planes)
{
    const char *env = getenv("XTQ_PROGRESS_THREADS");
    const char *inl = getenv("XTQ_CPU_INLINE_TASKS");
    long n = env ? strtol(env, NULL, 0) : 1;
    if (n < 2)
        XTQ_SKIP("needs XTQ_PROGRESS_THREADS of 2 or more in the environment (%s): with one "
                 "plane every put arrives on one progress thread",
                 env ? env : "unset");
    if (manual_mode())
        XTQ_SKIP("manual progress keeps one plane");
    if (inl && strcmp(inl, "0") == 0)
        XTQ_SKIP("XTQ_CPU_INLINE_TASKS=0: short tasks run on workers, not where they arrive");

    setup();
    if (S.size < 3 || S.size > MAX_RANKS) {
        int size = S.size;
        teardown();
        XTQ_SKIP("needs 3 to %d ranks (here %d): two initiators besides the target", MAX_RANKS,
                 size);
    }
    CHECK_OK(xtq_barrier(S.ctx));
    for (int s = 1; s < S.size; s++) {
        if (S.rank == s) {
            int32_t me = S.rank;
            struct iovec iov = {&me, sizeof(me)};
            uint8_t cmd[64];
            size_t cmd_len;
            for (int i = 0; i < PLANES_PUTS; i++) {
                xtq_completion_t comp;
                xtq_put_param_t p = {.field_mask = XTQ_PUT_PARAM_FIELD_COMPLETION |
                                                   XTQ_PUT_PARAM_FIELD_FLAGS,
                                     .flags = XTQ_PUT_REMOTE_COMPLETION,
                                     .comp = &comp};
                CHECK_OK(xtq_cmd_function(cmd, sizeof(cmd), FN_WHO, QUEUE_INDEX, (uint64_t)me,
                                          0, &cmd_len));
                CHECK_OK(xtq_putv(S.ctx, 0, cmd, cmd_len, &iov, 1, &p));
                CHECK_OK(xtq_completion_wait(S.ctx, &comp, 60 * SEC));
                CHECK(xtq_completion_state(&comp) & XTQ_COMPLETION_REMOTE);
            }
        }
        /* The next source starts once this one's tasks are all done. */
        CHECK_OK(xtq_barrier(S.ctx));
    }
    if (S.rank == 0) {
        long app = (long)syscall(SYS_gettid);
        CHECK_EQ(atomic_load(&S.who_bad_payload), 0);
        for (int s = 1; s < S.size; s++) {
            __typeof__(S.who[0]) *w = &S.who[s];
            printf("rank 0 (%s, %ld planes): %u tasks from rank %d (plane %ld) ran on thread "
                   "%ld\n",
                   xtq_provider_name(S.ctx), n, atomic_load(&w->count), s, s % n,
                   atomic_load(&w->tid));
            CHECK_EQ(atomic_load(&w->count), PLANES_PUTS);
            if (atomic_load_explicit(&w->bad_name_set, memory_order_acquire))
                XTQ_FAIL("rank 0: %u tasks from rank %d ran on a thread named \"%s\", not "
                         "\"xtq-progress\"",
                         atomic_load(&w->not_progress), s, w->bad_name);
            CHECK_EQ(atomic_load(&w->not_progress), 0);
            /* One plane, one thread: a source's tasks never move. */
            CHECK_EQ(atomic_load(&w->moved), 0);
            CHECK(atomic_load(&w->tid) != app);
        }
        for (int a = 1; a < S.size; a++) {
            for (int b = a + 1; b < S.size; b++) {
                long ta = atomic_load(&S.who[a].tid), tb = atomic_load(&S.who[b].tid);
                if (a % n != b % n && ta == tb)
                    XTQ_FAIL("rank 0: puts from ranks %d and %d (planes %ld and %ld of %ld) ran "
                             "on the same thread %ld: received by one progress thread",
                             a, b, a % n, b % n, n, ta);
                if (a % n == b % n && ta != tb)
                    XTQ_FAIL("rank 0: puts from ranks %d and %d (both plane %ld of %ld) ran on "
                             "threads %ld and %ld: one plane has one progress thread",
                             a, b, a % n, n, ta, tb);
            }
        }
    }
    /* And every rank has one progress thread per plane. */
    CHECK_EQ(threads_named("xtq-progress"), n);
    teardown();
}
