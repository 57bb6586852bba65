/*
 * Overload: N-1 initiators -> rank 0, a target with a 64-slot queue and a
 * deliberately slow CPU agent (one worker; each task spins
 * XTQ_STRESS_TASK_NS, default 50 us: slower than 4 initiators can send on
 * 2 cores, so the queue stays full).
 * `test_stress overload [TASKS_PER_INITIATOR]` (default 20,000; the README's
 * large run passes 250000 at 5 ranks = 1,000,000 tasks).
 *
 * Every task carries (source, sequence number) and a payload derived from
 * them. The target checks each payload byte, counts every (source, seq) and
 * sums a checksum per source; a final "fin" command from each initiator
 * carries its task count and its own checksum. At the end: every task ran
 * exactly once, checksums agree, every put completed with status 0, and
 * the target's peak RSS (VmHWM) stayed below a bound derived from the
 * receive regions and window x initiators (see bound_bytes()).
 *
 * Environment knobs the flow-control variants use: XTQ_MAX_MSG_SIZE,
 * XTQ_RX_BUFFERS, XTQ_RX_BUFFER_SIZE, XTQ_PUT_WINDOW (tiny regions force
 * receive-space exhaustion: docs/flow-control.md).
 */
#include <xtq/xtq.h>

#include "xtq_test.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#define QUEUE_INDEX 3
#define TASK_FN 11
#define FIN_FN 12
#define QUEUE_SLOTS 64
#define POOL 512
#define MAX_PAYLOAD 1024

struct fin {
    uint64_t ntasks;
    uint64_t checksum;
};

static struct {
    int rank, size;
    uint64_t ntasks; /* per initiator */
    size_t max_payload;
    uint64_t slow_ns; /* each task spins this long (XTQ_STRESS_TASK_NS) */
    _Atomic uint8_t *count; /* [src * ntasks + seq] */
    _Atomic uint64_t *sum;  /* per source */
    struct fin *fin;        /* per source, from its fin command */
    _Atomic uint64_t errors, ran, out_of_order;
    _Atomic uint64_t *next; /* per source: next seq expected (ordering statistic) */
    xtq_signal_t *done;
} S;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static size_t len_of(uint32_t src, uint64_t seq)
{
    return (size_t)(mix(((uint64_t)src << 40) ^ seq) % (S.max_payload + 1));
}

static uint8_t byte_of(uint32_t src, uint64_t seq, size_t i)
{
    return (uint8_t)(seq * 7u + src * 29u + i * 131u + (i >> 7));
}

/* Order-independent: a sum of per-task hashes over the payload bytes. */
static uint64_t task_hash(uint32_t src, uint64_t seq, const uint8_t *p, size_t len)
{
    uint64_t h = 1469598103934665603ull ^ mix(((uint64_t)src << 40) ^ seq);
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return mix(h);
}

static void spin(uint64_t ns)
{
    uint64_t end = now_ns() + ns;
    while (now_ns() < end)
        ;
}

/* arg2 = src << 40 | seq, arg3 = payload length. */
static void task_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    uint32_t src = (uint32_t)(arg[2] >> 40);
    uint64_t seq = arg[2] & ((1ull << 40) - 1);
    const uint8_t *p = (const uint8_t *)(uintptr_t)arg[1];
    size_t len = (size_t)arg[3];
    bool ok = user_data == &S && src > 0 && src < (uint32_t)S.size && seq < S.ntasks &&
              len == len_of(src, seq) && ((len == 0) == (p == NULL));
    for (size_t i = 0; ok && i < len; i++)
        ok = p[i] == byte_of(src, seq, i);
    if (!ok) {
        if (atomic_fetch_add(&S.errors, 1) < 5)
            fprintf(stderr, "target: bad task src=%u seq=%llu len=%zu\n", src,
                    (unsigned long long)seq, len);
    } else {
        atomic_fetch_add_explicit(&S.count[(size_t)src * S.ntasks + seq], 1,
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&S.sum[src], task_hash(src, seq, p, len),
                                  memory_order_relaxed);
        if (atomic_exchange(&S.next[src], seq + 1) != seq)
            atomic_fetch_add(&S.out_of_order, 1);
        atomic_fetch_add(&S.ran, 1);
    }
    spin(S.slow_ns);
    xtq_signal_add(S.done, -1);
}

static void fin_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    (void)user_data;
    uint32_t src = (uint32_t)arg[2];
    if (src == 0 || src >= (uint32_t)S.size || arg[3] != sizeof(struct fin) || !arg[1])
        atomic_fetch_add(&S.errors, 1);
    else
        memcpy(&S.fin[src], (const void *)(uintptr_t)arg[1], sizeof(struct fin));
    xtq_signal_add(S.done, -1);
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 0) : dflt;
}

/* VmHWM (peak resident set) of this process, in bytes. */
static uint64_t vm_hwm(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %llu kB", (unsigned long long *)&kb) == 1)
            break;
    fclose(f);
    return kb * 1024;
}

/*
 * What the target may add to its RSS once traffic starts:
 *   - the receive regions, touched as messages land: nregions x rlen
 *     (rlen = max(XTQ_RX_BUFFER_SIZE, 2 x largest wire message));
 *   - one task record (< 512 B) and one queued ack (< 128 B) per message in
 *     flight; the window caps those at initiators x XTQ_PUT_WINDOW;
 *   - the test's own tables (count bytes, sums);
 *   - 32 MiB for the provider's bounce buffers (tcp;ofi_rxm grows its
 *     receive and send pools per connection) and the allocator's arenas
 *     (agent worker and progress threads);
 *   - the regions and the 32 MiB once per engine plane
 *     (XTQ_PROGRESS_THREADS): each has its endpoint, connections, regions
 *     and progress thread.
 * Messages themselves are never copied out of the regions, so a backlog of
 * any length costs task records only, and those are bounded by the window.
 */
static uint64_t bound_bytes(uint64_t base)
{
    uint64_t max_msg = env_u64("XTQ_MAX_MSG_SIZE", 1114112);
    uint64_t max_wire = (max_msg + 64 + 128 + 63) & ~63ull;
    uint64_t rlen = env_u64("XTQ_RX_BUFFER_SIZE", 4194304);
    if (rlen < 2 * max_wire)
        rlen = 2 * max_wire;
    rlen = (rlen + 4095) & ~4095ull;
    uint64_t nreg = env_u64("XTQ_RX_BUFFERS", 8);
    uint64_t window = env_u64("XTQ_PUT_WINDOW", 256);
    uint64_t inflight = (uint64_t)(S.size - 1) * window * (512 + 128);
    uint64_t tables = (uint64_t)S.size * S.ntasks;
    uint64_t planes = env_u64("XTQ_PROGRESS_THREADS", 1);
    return base + planes * (nreg * rlen + (32ull << 20)) + inflight + tables;
}

static int asan_build(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 1;
#endif
#endif
    return 0;
}

static void target_side(xtq_ctx_t *ctx)
{
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *task, *fin;
    int ninit = S.size - 1;
    int64_t expected = (int64_t)ninit * (int64_t)S.ntasks + ninit;

    S.count = calloc((size_t)S.size * S.ntasks, 1);
    S.sum = calloc((size_t)S.size, sizeof(*S.sum));
    S.next = calloc((size_t)S.size, sizeof(*S.next));
    S.fin = calloc((size_t)S.size, sizeof(*S.fin));
    CHECK(S.count && S.sum && S.next && S.fin);
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, QUEUE_SLOTS, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, task_fn, &S, &task));
    CHECK_OK(xtq_function_create_cpu(cpu, fin_fn, &S, &fin));
    CHECK_OK(xtq_signal_create(expected, &S.done));
    CHECK_OK(xtq_register_queue(ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(ctx, TASK_FN, task, NULL));
    CHECK_OK(xtq_register_function(ctx, FIN_FN, fin, NULL));
    uint64_t base = vm_hwm();
    CHECK_OK(xtq_barrier(ctx));
    uint64_t t0 = now_ns();

    /* No deadlock: everything arrives within a generous bound. */
    int rc;
    uint64_t waited = 0;
    while ((rc = xtq_signal_wait(S.done, XTQ_SIGNAL_EQ, 0, 1000000000, NULL)) == -XTQ_ETIMEDOUT) {
        if (++waited > 600)
            XTQ_FAIL("target: %lld tasks still missing after 600 s",
                     (long long)xtq_signal_load(S.done));
    }
    CHECK_OK(rc);
    double secs = (now_ns() - t0) / 1e9;

    uint64_t lost = 0, dup = 0;
    for (int src = 1; src < S.size; src++) {
        for (uint64_t i = 0; i < S.ntasks; i++) {
            uint8_t c = atomic_load(&S.count[(size_t)src * S.ntasks + i]);
            lost += c == 0;
            dup += c > 1;
        }
        if (S.fin[src].ntasks != S.ntasks || S.fin[src].checksum != atomic_load(&S.sum[src]))
            XTQ_FAIL("target: source %d sent %llu tasks, checksum %016llx; here %016llx", src,
                     (unsigned long long)S.fin[src].ntasks,
                     (unsigned long long)S.fin[src].checksum,
                     (unsigned long long)atomic_load(&S.sum[src]));
    }
    xtq_stats_t st;
    CHECK_OK(xtq_get_stats(ctx, &st));
    uint64_t hwm = vm_hwm(), bound = bound_bytes(base);
    printf("target on %s: %d initiators, %llu tasks in %.2f s (%.0f tasks/s), lost %llu, "
           "duplicated %llu, errors %llu, queue_full_events %llu, out-of-order arrivals %llu, "
           "rejected %llu\n",
           xtq_provider_name(ctx), ninit, (unsigned long long)atomic_load(&S.ran), secs,
           atomic_load(&S.ran) / secs, (unsigned long long)lost, (unsigned long long)dup,
           (unsigned long long)atomic_load(&S.errors), (unsigned long long)st.queue_full_events,
           (unsigned long long)atomic_load(&S.out_of_order),
           (unsigned long long)st.msgs_rejected);
    printf("target: VmHWM %.1f MiB (%.1f MiB before traffic), bound %.1f MiB%s\n",
           hwm / 1048576.0, base / 1048576.0, bound / 1048576.0,
           asan_build() ? " (not enforced under ASan: quarantine)" : "");
    CHECK_EQ(lost, 0);
    CHECK_EQ(dup, 0);
    CHECK_EQ(atomic_load(&S.errors), 0);
    CHECK_EQ(atomic_load(&S.ran), (uint64_t)ninit * S.ntasks);
    CHECK_EQ(st.msgs_rejected, 0);
    if (!asan_build())
        CHECK(hwm <= bound);

    CHECK_OK(xtq_barrier(ctx));
    CHECK_OK(xtq_unregister_function(ctx, TASK_FN));
    CHECK_OK(xtq_unregister_function(ctx, FIN_FN));
    CHECK_OK(xtq_unregister_queue(ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(task));
    CHECK_OK(xtq_function_destroy(fin));
    CHECK_OK(xtq_signal_destroy(S.done));
    free(S.count);
    free(S.sum);
    free(S.next);
    free(S.fin);
}

static void initiator_side(xtq_ctx_t *ctx)
{
    uint8_t(*payload)[MAX_PAYLOAD] = calloc(POOL, MAX_PAYLOAD);
    uint8_t(*cmd)[128] = calloc(POOL, 128);
    xtq_completion_t *comp = calloc(POOL, sizeof(*comp));
    bool *used = calloc(POOL, sizeof(bool));
    uint64_t checksum = 0, failed = 0;
    uint32_t src = (uint32_t)S.rank;
    CHECK(payload && cmd && comp && used);
    CHECK_OK(xtq_barrier(ctx));

    for (uint64_t seq = 0; seq < S.ntasks; seq++) {
        uint32_t p = (uint32_t)(seq % POOL);
        if (used[p]) {
            CHECK_EQ(xtq_completion_wait(ctx, &comp[p], 120ll * 1000000000), 0);
            failed += comp[p].status != 0;
        }
        size_t len = len_of(src, seq), cmd_len = 0;
        for (size_t i = 0; i < len; i++)
            payload[p][i] = byte_of(src, seq, i);
        checksum += task_hash(src, seq, payload[p], len);
        CHECK_OK(xtq_cmd_function(cmd[p], sizeof(cmd[p]), TASK_FN, QUEUE_INDEX,
                                  ((uint64_t)src << 40) | seq, len, &cmd_len));
        /* A third ask for remote completion: acked when the task ran. */
        CHECK_OK(xtq_put(ctx, 0, cmd[p], cmd_len, len ? payload[p] : NULL, len,
                         seq % 3 == 0 ? XTQ_PUT_REMOTE_COMPLETION : 0, &comp[p]));
        used[p] = true;
    }
    for (uint32_t p = 0; p < POOL; p++)
        if (used[p]) {
            CHECK_EQ(xtq_completion_wait(ctx, &comp[p], 120ll * 1000000000), 0);
            failed += comp[p].status != 0;
        }
    CHECK_EQ(failed, 0);

    struct fin f = {S.ntasks, checksum};
    size_t cmd_len;
    xtq_completion_t c = {0};
    CHECK_OK(xtq_cmd_function(cmd[0], sizeof(cmd[0]), FIN_FN, QUEUE_INDEX, src, sizeof(f),
                              &cmd_len));
    CHECK_OK(xtq_put(ctx, 0, cmd[0], cmd_len, &f, sizeof(f), XTQ_PUT_REMOTE_COMPLETION, &c));
    CHECK_EQ(xtq_completion_wait(ctx, &c, 120ll * 1000000000), 0);
    xtq_stats_t st;
    CHECK_OK(xtq_get_stats(ctx, &st));
    CHECK_EQ(st.puts_completed, S.ntasks + 1);
    CHECK_EQ(st.puts_failed, 0);
    printf("initiator %d: %llu puts under overload, all completed with status 0\n", S.rank,
           (unsigned long long)S.ntasks);
    CHECK_OK(xtq_barrier(ctx));
    free(payload);
    free(cmd);
    free(comp);
    free(used);
}

XTQ_TEST(overload)
{
    setenv("XTQ_CPU_WORKERS", "1", 0);
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx = NULL;
    CHECK_OK(xtq_init(&attr, &ctx));
    S.rank = xtq_rank(ctx);
    S.size = xtq_size(ctx);
    if (S.size < 2) {
        xtq_finalize(ctx);
        XTQ_SKIP("overload needs a launcher and at least 2 ranks");
    }
    S.ntasks = xtq_test_argc > 0 ? strtoull(xtq_test_argv[0], NULL, 0) : 20000;
    CHECK(S.ntasks > 0 && S.ntasks < (1ull << 40));
    S.max_payload = MAX_PAYLOAD;
    S.slow_ns = env_u64("XTQ_STRESS_TASK_NS", 50000);
    if (xtq_put_max_size(ctx) < 64 + 16 + S.max_payload)
        S.max_payload = xtq_put_max_size(ctx) - 64 - 16;
    if (S.rank == 0)
        target_side(ctx);
    else
        initiator_side(ctx);
    CHECK_OK(xtq_finalize(ctx));
}

/* ---- several application threads putting at once ------------------------ */

#define NTHREADS 4

static _Atomic uint32_t *mt_count; /* [src][thread][seq] */
static uint64_t mt_n;
static xtq_signal_t *mt_done;
static xtq_ctx_t *mt_ctx;

static void mt_fn(const uint64_t arg[4], void *ret, void *user_data)
{
    (void)ret;
    (void)user_data;
    uint64_t src = arg[2] >> 40, th = (arg[2] >> 32) & 0xff, seq = arg[2] & 0xffffffffu;
    if (src < (uint64_t)S.size && th < NTHREADS && seq < mt_n && arg[3] == seq * 3)
        atomic_fetch_add(&mt_count[(src * NTHREADS + th) * mt_n + seq], 1);
    else
        atomic_fetch_add(&S.errors, 1);
    xtq_signal_add(mt_done, -1);
}

static void *mt_main(void *arg)
{
    uint64_t th = (uint64_t)(uintptr_t)arg;
    int target = (S.rank + 1) % S.size;
    /* A command, like a payload, stays untouched until its put is LOCAL:
     * one per completion (the transport may read it after xtq_put returns). */
    uint8_t cmd[64][64];
    size_t cmd_len;
    xtq_completion_t c[64];
    memset(c, 0, sizeof(c));
    for (uint64_t i = 0; i < mt_n; i++) {
        xtq_completion_t *cc = &c[i % 64];
        if (i >= 64 && xtq_completion_wait(mt_ctx, cc, 60ll * 1000000000) != 0)
            atomic_fetch_add(&S.errors, 1);
        uint64_t a2 = ((uint64_t)S.rank << 40) | (th << 32) | i;
        uint8_t *cm = cmd[i % 64];
        if (xtq_cmd_function(cm, sizeof(cmd[0]), TASK_FN, QUEUE_INDEX, a2, i * 3, &cmd_len) ||
            xtq_put(mt_ctx, target, cm, cmd_len, NULL, 0,
                    i % 2 ? XTQ_PUT_REMOTE_COMPLETION : 0, cc))
            atomic_fetch_add(&S.errors, 1);
    }
    for (uint64_t i = mt_n > 64 ? mt_n - 64 : 0; i < mt_n; i++)
        if (xtq_completion_wait(mt_ctx, &c[i % 64], 60ll * 1000000000) != 0)
            atomic_fetch_add(&S.errors, 1);
    return NULL;
}

/* NTHREADS application threads xtq_put concurrently on one context (to
 * the next rank, or to ourselves when alone); every task runs once. */
XTQ_TEST(threads)
{
    xtq_init_attr_t attr = {0};
    xtq_agent_t *cpu;
    xtq_queue_t *q;
    xtq_function_t *f;
    CHECK_OK(xtq_init(&attr, &mt_ctx));
    S.rank = xtq_rank(mt_ctx);
    S.size = xtq_size(mt_ctx);
    mt_n = xtq_test_argc > 0 ? strtoull(xtq_test_argv[0], NULL, 0) : 5000;
    mt_count = calloc((size_t)S.size * NTHREADS * mt_n, sizeof(*mt_count));
    CHECK(mt_count);
    int src = (S.rank + S.size - 1) % S.size;
    CHECK_OK(xtq_agent_find(mt_ctx, XTQ_AGENT_CPU, &cpu));
    CHECK_OK(xtq_queue_create(cpu, QUEUE_SLOTS, &q));
    CHECK_OK(xtq_function_create_cpu(cpu, mt_fn, NULL, &f));
    CHECK_OK(xtq_signal_create((int64_t)(NTHREADS * mt_n), &mt_done));
    CHECK_OK(xtq_register_queue(mt_ctx, QUEUE_INDEX, q));
    CHECK_OK(xtq_register_function(mt_ctx, TASK_FN, f, NULL));
    CHECK_OK(xtq_barrier(mt_ctx));
    pthread_t th[NTHREADS];
    for (uintptr_t i = 0; i < NTHREADS; i++)
        CHECK_EQ(pthread_create(&th[i], NULL, mt_main, (void *)i), 0);
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    CHECK_OK(xtq_signal_wait(mt_done, XTQ_SIGNAL_EQ, 0, 120ll * 1000000000, NULL));
    CHECK_EQ(atomic_load(&S.errors), 0);
    for (uint64_t t = 0; t < NTHREADS; t++)
        for (uint64_t i = 0; i < mt_n; i++)
            if (atomic_load(&mt_count[((uint64_t)src * NTHREADS + t) * mt_n + i]) != 1)
                XTQ_FAIL("rank %d: task (src %d, thread %llu, seq %llu) ran %u times", S.rank,
                         src, (unsigned long long)t, (unsigned long long)i,
                         atomic_load(&mt_count[((uint64_t)src * NTHREADS + t) * mt_n + i]));
    xtq_stats_t st;
    CHECK_OK(xtq_get_stats(mt_ctx, &st));
    CHECK_EQ(st.puts_completed, NTHREADS * mt_n);
    CHECK_EQ(st.puts_failed, 0);
    printf("rank %d: %d threads x %llu concurrent puts, every task ran once\n", S.rank, NTHREADS,
           (unsigned long long)mt_n);
    CHECK_OK(xtq_barrier(mt_ctx));
    CHECK_OK(xtq_unregister_function(mt_ctx, TASK_FN));
    CHECK_OK(xtq_unregister_queue(mt_ctx, QUEUE_INDEX));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_function_destroy(f));
    CHECK_OK(xtq_signal_destroy(mt_done));
    CHECK_OK(xtq_finalize(mt_ctx));
    free(mt_count);
}
