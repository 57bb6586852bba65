/*
 * CUDA agent: the GPU packet processor runs dispatches with the packet's
 * grid, work-group sizes and kernel arguments, completes signals host
 * waiters see, honours barrier packets, passes 100k packets through a
 * small queue exactly once, retires each cookie once and shuts down
 * cleanly. Cases SKIP with the reason where there is no CUDA device.
 */
#include "internal.h"
#include "queue_int.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include <xtq/coll_cuda_task.h>
#include <xtq/cuda_abi.h>
#include <xtq/reduce.h>

#include "cuda_tasks.h"
#include "xtq_test.h"

#define WAIT_NS 20000000000ll /* generous: a failure, not a timing */

static char skip_reason[192];

static xtq_agent_t *open_agent(void)
{
    unsigned n = 0;
    xtq_agent_t *agent = NULL;
    if (xtq__cuda_agent_provider.probe(skip_reason, sizeof(skip_reason), &n) != 0)
        XTQ_SKIP("%s", skip_reason);
    CHECK(n >= 1);
    CHECK_OK(xtq__cuda_agent_provider.open(NULL, 0, &agent));
    CHECK(agent->kind == XTQ_AGENT_CUDA);
    CHECK_OK(cuda_tasks_attach(agent));
    return agent;
}

static void *host_alloc(xtq_agent_t *agent, size_t len)
{
    void *p = aligned_alloc(4096, XTQ_ALIGN_UP(len, (size_t)4096));
    CHECK(p != NULL);
    memset(p, 0, len);
    CHECK_OK(xtq_cuda_mem_register(agent, p, XTQ_ALIGN_UP(len, (size_t)4096)));
    return p;
}

static void host_free(xtq_agent_t *agent, void *p, size_t len)
{
    CHECK_OK(xtq_cuda_mem_deregister(agent, p, XTQ_ALIGN_UP(len, (size_t)4096)));
    free(p);
}

/* Producer protocol of queue_int.h, with a cookie. */
static uint64_t submit(xtq_queue_t *q, const xtq_aql_packet_t *pkt, void *cookie)
{
    uint64_t i;
    uint32_t first;
    while (xtq_queue_reserve(q, 1, &i) != 0)
        xtq__cpu_relax();
    xtq_aql_packet_t *slot = xtq_queue_slot(q, i);
    memcpy(slot->bytes + 4, pkt->bytes + 4, XTQ_AQL_PACKET_SIZE - 4);
    q->cookies[i & q->mask] = cookie;
    memcpy(&first, pkt->bytes, sizeof(first));
    xtq_queue_publish(q, i, (uint16_t)(first & 0xffff), (uint16_t)(first >> 16));
    xtq_queue_ring_doorbell(q, i);
    return i;
}

static void kernel_packet(xtq_aql_packet_t *p, const xtq_kernel_t *k, void *kernarg, int dims,
                          const uint32_t grid[3], const uint16_t wg[3], xtq_signal_t *sig)
{
    memset(p, 0, sizeof(*p));
    p->kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM);
    p->kernel.setup = (uint16_t)dims;
    p->kernel.workgroup_size_x = wg[0];
    p->kernel.workgroup_size_y = wg[1];
    p->kernel.workgroup_size_z = wg[2];
    p->kernel.grid_size_x = grid[0];
    p->kernel.grid_size_y = grid[1];
    p->kernel.grid_size_z = grid[2];
    p->kernel.kernel_object = k->object;
    p->kernel.kernarg_address = kernarg;
    if (sig)
        p->kernel.completion_signal = xtq_signal_handle(sig);
}

static xtq_kernel_t *make_kernel(xtq_agent_t *agent, int which, uint32_t kernarg_size)
{
    xtq_kernel_t *k = NULL;
    uint64_t fn = cuda_task_address(which);
    CHECK(fn != 0);
    CHECK_OK(xtq_kernel_create_cuda(agent, fn, kernarg_size, &k));
    return k;
}

/* Retire bookkeeping: cookies are 1-based indices into `retired`. */
static _Atomic uint32_t *retired;
static _Atomic int last_status;
/* The status first: a test that sees the count goes on to read it (the
 * other order failed enqueue_op_short_and_long_kernargs under ctest -j4,
 * the retire thread preempted between the two). */
static void count_retire(void *cookie, int status)
{
    if (status)
        atomic_store(&last_status, status);
    atomic_fetch_add(&retired[(uintptr_t)cookie - 1], 1);
}

/* One packet of `k` (arguments `ka`, `ka_len` bytes) through the agent's
 * enqueue, retired by count_retire with `cookie` (retired[] holds room for
 * it): waits for its completion and its retirement, returns its status. */
static int enqueue_retired(xtq_queue_t *q, xtq_kernel_t *k, void *ka, size_t ka_len, int dims,
                           const uint32_t grid[3], const uint16_t wg[3], xtq_signal_t *sig,
                           uint32_t cookie)
{
    atomic_store(&last_status, 0);
    xtq_signal_store(sig, 1);
    xtq_aql_packet_t p;
    kernel_packet(&p, k, ka, dims, grid, wg, sig);
    struct xtq__enqueue d = {.packet = &p,
                             .kernarg = ka,
                             .kernarg_len = ka_len,
                             .retire = count_retire,
                             .cookie = (void *)(uintptr_t)cookie};
    CHECK_OK(xtq__cuda_enqueue(q, &d, NULL));
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (int t = 0; atomic_load(&retired[cookie - 1]) == 0 && t < 20000; t++)
        usleep(1000);
    CHECK_EQ(atomic_load(&retired[cookie - 1]), 1);
    return atomic_load(&last_status);
}

XTQ_TEST(probe_reports_reason)
{
    char reason[192] = "";
    unsigned n = 0;
    int rc = xtq__cuda_agent_provider.probe(reason, sizeof(reason), &n);
    if (rc == 0) {
        CHECK(n >= 1);
        return;
    }
    CHECK_ERR(rc, -XTQ_ENOAGENT);
    CHECK(strstr(reason, "CUDA") != NULL);
    printf("no CUDA agent here: %s\n", reason);
}

static void noop(void *arg)
{
    (void)arg;
}

XTQ_TEST(api_rejects_other_kinds)
{
    struct xtq_agent cpu = {.kind = XTQ_AGENT_CPU};
    xtq_kernel_t *k;
    xtq_signal_t *s;
    CHECK_ERR(xtq_kernel_create_cuda(&cpu, 0x1000, 16, &k), -XTQ_EAGENTKIND);
    CHECK_ERR(xtq_cuda_signal_create(&cpu, 1, &s), -XTQ_EAGENTKIND);
    CHECK_ERR(xtq_kernel_create_cuda(&cpu, 0, 16, &k), -XTQ_EINVAL);
    CHECK_ERR(xtq_cuda_quiesce(&cpu, noop, NULL), -XTQ_EAGENTKIND);
    CHECK_ERR(xtq_cuda_quiesce(NULL, noop, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_cuda_quiesce(&cpu, NULL, NULL), -XTQ_EINVAL);
}

/* The geometry of a grid-stride dispatch (xtq_cuda_stride_geometry) and
 * the stride of its task (element first + k * grid): every element is
 * visited exactly once, by at most `max_groups` groups, none of them
 * empty, each work-item with at least `per_item` elements where there
 * are enough. No GPU needed: the arithmetic libxtq_coll's dispatch and
 * task rely on. */
XTQ_TEST(stride_geometry_covers_every_element_once)
{
    const uint64_t counts[] = {1,    2,    255,  256,   257,    1000,   2047,
                               2048, 2049, 4096, 65536, 262144, 300000, 1000003};
    const uint32_t maxes[] = {0, 1, 2, 3, 8, 132};
    const uint32_t per[] = {0, 1, 8};
    uint8_t *seen = calloc(1000003, 1);
    CHECK(seen != NULL);
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++)
            for (size_t p = 0; p < sizeof(per) / sizeof(per[0]); p++) {
                const uint64_t n = counts[c];
                const uint32_t max = maxes[m] ? maxes[m] : 1, pi = per[p] ? per[p] : 1;
                uint32_t grid = 0, wg = 0;
                xtq_cuda_stride_geometry(n, 256, per[p], maxes[m], &grid, &wg);
                const uint32_t groups = (grid + wg - 1) / wg;
                CHECK(wg >= 1 && wg <= 256);
                CHECK(grid >= wg);
                CHECK(groups >= 1 && groups <= max);
                CHECK(grid <= n); /* no work-item without an element */
                /* Capped or not, never more groups than the elements ask. */
                CHECK(groups == xtq_cuda_stride_groups(n, 256, per[p], maxes[m]));
                if (groups < max && n > 256)
                    CHECK((uint64_t)(groups - 1) * 256 * pi < n); /* the last group is needed */
                memset(seen, 0, n);
                for (uint32_t first = 0; first < grid; first++)
                    for (uint64_t i = first; i < n; i += grid)
                        seen[i]++;
                for (uint64_t i = 0; i < n; i++)
                    if (seen[i] != 1)
                        XTQ_FAIL("count %llu, max %u, per %u: element %llu seen %u times",
                                 (unsigned long long)n, max, pi, (unsigned long long)i, seen[i]);
            }
    /* One group per processor block for a large piece; one small group
     * for a small one. */
    uint32_t grid, wg;
    xtq_cuda_stride_geometry(262144, 256, 8, 2, &grid, &wg);
    CHECK_EQ(grid, 512);
    CHECK_EQ(wg, 256);
    xtq_cuda_stride_geometry(100, 256, 8, 2, &grid, &wg);
    CHECK_EQ(grid, 100);
    CHECK_EQ(wg, 100);
    free(seen);
}

/* A small integer v (|v| < 2048) as IEEE binary16 bits. */
static uint16_t half_bits(int v)
{
    uint32_t m = (uint32_t)(v < 0 ? -v : v), e = 0;
    if (m == 0)
        return 0;
    while ((m >> (e + 1)) != 0)
        e++;
    return (uint16_t)((v < 0 ? 0x8000u : 0) | ((e + 15) << 10) | ((m << (10 - e)) & 0x3ffu));
}

/* Element i of `type` from small integers (ties and signs included), so
 * every reduction is exact and the CPU and the task agree bit for bit. */
static void set_elem(void *buf, int type, size_t i, int v, int idx)
{
    const size_t es = xtq_datatype_size(type);
    uint8_t *p = (uint8_t *)buf + i * es;
    float f = (float)v;
    double dv = (double)v;
    uint32_t fb;
    memset(p, 0, es);
    switch (type) {
    case XTQ_DT_INT8:
    case XTQ_DT_UINT8:
    case XTQ_DT_BYTE:
        *(int8_t *)p = (int8_t)v;
        break;
    case XTQ_DT_BOOL:
        *(uint8_t *)p = (uint8_t)(v & 1);
        break;
    case XTQ_DT_INT16:
    case XTQ_DT_UINT16:
        *(int16_t *)p = (int16_t)v;
        break;
    case XTQ_DT_INT32:
    case XTQ_DT_UINT32:
        *(int32_t *)p = v;
        break;
    case XTQ_DT_INT64:
    case XTQ_DT_UINT64:
        *(int64_t *)p = v;
        break;
    case XTQ_DT_FLOAT16:
        *(uint16_t *)p = half_bits(v);
        break;
    case XTQ_DT_BFLOAT16:
        memcpy(&fb, &f, 4);
        *(uint16_t *)p = (uint16_t)(fb >> 16);
        break;
    case XTQ_DT_FLOAT:
        memcpy(p, &f, 4);
        break;
    case XTQ_DT_DOUBLE:
        memcpy(p, &dv, 8);
        break;
    case XTQ_DT_C_FLOAT_COMPLEX: {
        float c[2] = {f, (float)(idx % 5 - 2)};
        memcpy(p, c, 8);
        break;
    }
    case XTQ_DT_C_DOUBLE_COMPLEX: {
        double c[2] = {dv, (double)(idx % 5 - 2)};
        memcpy(p, c, 16);
        break;
    }
    case XTQ_DT_FLOAT_INT: {
        struct {
            float v;
            int i;
        } e = {f, idx};
        memcpy(p, &e, sizeof(e));
        break;
    }
    case XTQ_DT_DOUBLE_INT: {
        struct {
            double v;
            int i;
        } e;
        memset(&e, 0, sizeof(e)); /* padding: zero, as the buffer's */
        e.v = dv;
        e.i = idx;
        memcpy(p, &e, sizeof(e));
        break;
    }
    case XTQ_DT_LONG_INT: {
        struct {
            long v;
            int i;
        } e;
        memset(&e, 0, sizeof(e)); /* padding: zero, as the buffer's */
        e.v = v;
        e.i = idx;
        memcpy(p, &e, sizeof(e));
        break;
    }
    case XTQ_DT_2INT: {
        struct {
            int v;
            int i;
        } e = {v, idx};
        memcpy(p, &e, sizeof(e));
        break;
    }
    case XTQ_DT_SHORT_INT: {
        struct {
            short v;
            int i;
        } e;
        memset(&e, 0, sizeof(e)); /* padding: zero, as the buffer's */
        e.v = (short)v;
        e.i = idx;
        memcpy(p, &e, sizeof(e));
        break;
    }
    default:
        break;
    }
}

/* libxtq_coll's CUDA task (<xtq/coll_cuda.cuh>, which now strides with
 * several elements per round) against xtq_reduce_local, on the CPU: every
 * type and operation the GPU reduces, every mode, one work-item per
 * element and the capped grid libxtq_coll dispatches, counts around the
 * round size; the device result and the host mirror bit for bit. */
XTQ_TEST(coll_task_matches_reduce_local)
{
    const uint32_t counts[] = {1, 7, 9, 257, 2500};
    const uint32_t nmax = 2500, esmax = 16;
    uint8_t *dst = malloc(nmax * esmax), *in = malloc(nmax * esmax), *av = malloc(nmax * esmax);
    uint8_t *mirror = malloc(nmax * esmax), *want = malloc(nmax * esmax);
    uint8_t *d0 = malloc(nmax * esmax);
    unsigned checked = 0;
    CHECK(dst && in && av && mirror && want && d0);
    for (int type = 0; type < XTQ_DT_COUNT; type++)
        for (int op = 0; op < XTQ_OP_COUNT; op++) {
            if (!coll_task_supported(op, type))
                continue;
            const size_t es = xtq_datatype_size(type);
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (uint32_t mode = 0; mode <= XTQ_COLL_CUDA_COPY; mode++)
                    for (int capped = 0; capped <= 1; capped++) {
                        const uint32_t n = counts[c];
                        for (uint32_t i = 0; i < n; i++) {
                            set_elem(d0, type, i, (int)(i % 11) - 5, (int)(i % 3));
                            set_elem(in, type, i, (int)((i * 7) % 13) - 6, (int)(i % 4));
                            set_elem(av, type, i, (int)((i * 5) % 9) - 4, (int)(i % 2));
                        }
                        memcpy(dst, d0, n * es);
                        memset(mirror, 0xa5, n * es);
                        /* What the task must leave in dst. */
                        const uint8_t *lhs = mode == XTQ_COLL_CUDA_REDUCE        ? d0
                                             : mode == XTQ_COLL_CUDA_REDUCE_IN_A ? in
                                             : mode == XTQ_COLL_CUDA_REDUCE_A_IN ? av
                                                                                 : in;
                        const uint8_t *rhs = mode == XTQ_COLL_CUDA_REDUCE_IN_A ? av : in;
                        memcpy(want, lhs, n * es);
                        if (mode != XTQ_COLL_CUDA_COPY)
                            CHECK_OK(xtq_reduce_local(op, type, want, rhs, n));
                        struct xtq_coll_cuda_args a = {
                            .dst = (uint64_t)(uintptr_t)dst,
                            .in = (uint64_t)(uintptr_t)in,
                            .a = (uint64_t)(uintptr_t)av,
                            .mirror = (uint64_t)(uintptr_t)mirror,
                            .count = n,
                            .mode = mode,
                            .type = (uint32_t)type,
                            .op = (uint32_t)op,
                            .esize = (uint32_t)es,
                        };
                        uint32_t grid = n, wg = n < 256 ? n : 256;
                        if (capped)
                            xtq_cuda_stride_geometry(n, 256, 8, 2, &grid, &wg);
                        coll_task_run_host(&a, grid, wg);
                        if (memcmp(dst, want, n * es) || memcmp(mirror, want, n * es))
                            XTQ_FAIL("%s %s, mode %u, %u elements, grid %u of %u: %s differs",
                                     xtq_datatype_name(type), xtq_op_name(op), mode, n, grid, wg,
                                     memcmp(dst, want, n * es) ? "dst" : "mirror");
                        checked++;
                    }
        }
    printf("%u (type, op, mode, count, grid) cases agree with xtq_reduce_local\n", checked);
    CHECK(checked > 1000);
    free(dst);
    free(in);
    free(av);
    free(mirror);
    free(want);
    free(d0);
}

/* The ready word of peer reads, on the CPU: a copy into the mirror adds
 * the elements it wrote, a reduction whose word holds its value runs, one
 * whose word never does fails its wait (-XTQ_ETIMEDOUT at `fail`) and
 * leaves dst alone. */
XTQ_TEST(coll_task_ready_word_host)
{
    float dst[4] = {1, 2, 3, 4}, in[4] = {10, 20, 30, 40}, mirror[4] = {0};
    uint64_t word = 3;
    int32_t fail = 0;
    struct xtq_coll_cuda_args a = {.dst = (uint64_t)(uintptr_t)mirror,
                                   .in = (uint64_t)(uintptr_t)in,
                                   .mirror = (uint64_t)(uintptr_t)mirror,
                                   .count = 4,
                                   .mode = XTQ_COLL_CUDA_COPY,
                                   .type = XTQ_DT_FLOAT,
                                   .op = XTQ_OP_SUM,
                                   .esize = 4,
                                   .mirror_count = (uint64_t)(uintptr_t)&word};
    coll_task_run_host(&a, 2, 2); /* two work-items, two elements each */
    CHECK_EQ(word, 7);
    CHECK(mirror[3] == 40);
    a = (struct xtq_coll_cuda_args){.dst = (uint64_t)(uintptr_t)dst,
                                    .in = (uint64_t)(uintptr_t)in,
                                    .count = 4,
                                    .mode = XTQ_COLL_CUDA_REDUCE,
                                    .type = XTQ_DT_FLOAT,
                                    .op = XTQ_OP_SUM,
                                    .esize = 4,
                                    .ready = (uint64_t)(uintptr_t)&word,
                                    .ready_val = 7,
                                    .ready_ns = 1000000,
                                    .fail = (uint64_t)(uintptr_t)&fail};
    coll_task_run_host(&a, 4, 4);
    CHECK(dst[0] == 11 && dst[3] == 44);
    CHECK_EQ(fail, 0);
    a.ready_val = 8; /* never reached */
    coll_task_run_host(&a, 4, 4);
    CHECK(dst[0] == 11 && dst[3] == 44);
    CHECK_EQ(fail, -XTQ_ETIMEDOUT);
    /* The host ends the waits (the team failed): at once, -XTQ_ECANCELED. */
    uint32_t cancel = 1;
    fail = 0;
    a.cancel = (uint64_t)(uintptr_t)&cancel;
    coll_task_run_host(&a, 4, 4);
    CHECK(dst[0] == 11 && dst[3] == 44);
    CHECK_EQ(fail, -XTQ_ECANCELED);
    cancel = 0; /* not cancelled: the word decides as before */
    fail = 0;
    a.ready_val = 7;
    coll_task_run_host(&a, 4, 4);
    CHECK(dst[0] == 21 && dst[3] == 84);
    CHECK_EQ(fail, 0);
}

struct ready_later {
    uint64_t *word;
    uint64_t val;
};

static void *ready_later_run(void *arg)
{
    struct ready_later *r = arg;
    usleep(20000);
    __atomic_store_n(r->word, r->val, __ATOMIC_RELEASE);
    return NULL;
}

/* The ready word on the GPU (libxtq_coll's task through the processor): a
 * reduction waits for a word stored later and then reduces; a copy into
 * the mirror adds the elements it wrote (64); a wait that is never
 * satisfied fails its dispatch with -XTQ_ETIMEDOUT after ready_ns, at
 * `fail` and in the packet's status, and the processor runs the next one. */
XTQ_TEST(coll_task_ready_word)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t n = 64;
    struct xtq_coll_cuda_args *ka = host_alloc(agent, sizeof(*ka));
    float *dst = host_alloc(agent, n * sizeof(float)), *in = host_alloc(agent, n * sizeof(float));
    uint64_t *word = host_alloc(agent, 64);
    int32_t *fail = host_alloc(agent, 64);
    retired = calloc(8, sizeof(*retired));
    xtq_kernel_t *k = make_kernel(agent, TASK_COLL, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    struct {
        uint32_t mode;
        uint64_t val, later; /* later: stored by a thread 20 ms after the submit */
        int32_t status;
    } cases[] = {{XTQ_COLL_CUDA_REDUCE, 5, 5, 0},
                 {XTQ_COLL_CUDA_COPY, 0, 0, 0}, /* the word: 5 + 64 */
                 {XTQ_COLL_CUDA_WAIT, 70, 0, -XTQ_ETIMEDOUT},
                 {XTQ_COLL_CUDA_REDUCE, 70, 0, -XTQ_ETIMEDOUT},
                 {XTQ_COLL_CUDA_WAIT, 69, 0, 0}};
    for (uint32_t c = 0; c < ARRAY_SIZE(cases); c++) {
        for (uint32_t i = 0; i < n; i++)
            dst[i] = (float)i, in[i] = -1.0f;
        *fail = 0;
        memset(ka, 0, sizeof(*ka));
        ka->dst = (uint64_t)(uintptr_t)dst;
        ka->in = (uint64_t)(uintptr_t)in;
        ka->count = cases[c].mode == XTQ_COLL_CUDA_WAIT ? 1 : n;
        ka->mode = cases[c].mode;
        ka->type = XTQ_DT_FLOAT;
        ka->op = XTQ_OP_SUM;
        ka->esize = 4;
        if (cases[c].mode == XTQ_COLL_CUDA_COPY) {
            /* dst = in, the mirror too (here: dst itself), counted */
            ka->mirror = ka->dst;
            ka->mirror_count = (uint64_t)(uintptr_t)word;
        } else {
            ka->ready = (uint64_t)(uintptr_t)word;
            ka->ready_val = cases[c].val;
            ka->ready_ns = cases[c].status ? 5000000ull : 10000000000ull;
            ka->fail = (uint64_t)(uintptr_t)fail;
        }
        atomic_store(&last_status, 0);
        xtq_signal_store(sig, 1);
        const uint32_t grid[3] = {ka->count, 1, 1};
        const uint16_t wg[3] = {(uint16_t)ka->count, 1, 1};
        xtq_aql_packet_t p;
        kernel_packet(&p, k, ka, 1, grid, wg, sig);
        struct xtq__enqueue d = {.packet = &p,
                                 .kernarg = ka,
                                 .kernarg_len = sizeof(*ka),
                                 .retire = count_retire,
                                 .cookie = (void *)(uintptr_t)(c + 1)};
        pthread_t th;
        struct ready_later later = {word, cases[c].later};
        if (cases[c].later) {
            /* The piece is written, then the word: the task must read the
             * new piece after it saw the word. */
            for (uint32_t i = 0; i < n; i++)
                in[i] = 100.0f;
        }
        CHECK_OK(xtq__cuda_enqueue(q, &d, NULL));
        if (cases[c].later)
            CHECK(pthread_create(&th, NULL, ready_later_run, &later) == 0);
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        if (cases[c].later)
            CHECK(pthread_join(th, NULL) == 0);
        for (int t = 0; atomic_load(&retired[c]) == 0 && t < 20000; t++)
            usleep(1000);
        CHECK_EQ(atomic_load(&retired[c]), 1);
        CHECK_EQ(atomic_load(&last_status), cases[c].status);
        CHECK_EQ(*fail, cases[c].status);
        for (uint32_t i = 0; i < n; i++) {
            float want = cases[c].mode == XTQ_COLL_CUDA_COPY ? -1.0f
                         : cases[c].mode == XTQ_COLL_CUDA_REDUCE && cases[c].status == 0
                             ? (float)i + 100.0f
                             : (float)i;
            if (dst[i] != want)
                XTQ_FAIL("case %u: dst[%u] = %g, want %g", c, i, (double)dst[i], (double)want);
        }
        if (cases[c].mode == XTQ_COLL_CUDA_COPY)
            CHECK_EQ(__atomic_load_n(word, __ATOMIC_ACQUIRE), 69);
    }
    CHECK_OK(xtq_cuda_signal_destroy(agent, sig));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    host_free(agent, ka, sizeof(*ka));
    host_free(agent, dst, n * sizeof(float));
    host_free(agent, in, n * sizeof(float));
    host_free(agent, word, 64);
    host_free(agent, fail, 64);
    free((void *)retired);
    agent->ops->close(agent);
}

/* Inside xtq_cuda_quiesce the device idles: calls that wait for an idle
 * device return (each would wait for ever beside a running processor:
 * coll.gpu_team hung in cudaFreeHost on the H100), and the processor runs
 * packets again afterwards. */
struct idle_calls {
    void *host, *dev;
    int host_rc, dev_rc, sync_rc;
};

static void idle_calls_run(void *arg)
{
    struct idle_calls *c = arg;
    c->sync_rc = (int)cudaDeviceSynchronize();
    c->host_rc = (int)cudaFreeHost(c->host);
    c->dev_rc = (int)cudaFree(c->dev);
}

XTQ_TEST(quiesce_lets_the_device_idle)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    struct idle_calls c = {NULL, NULL, -1, -1, -1};
    uint32_t *seen = host_alloc(agent, 4096);
    struct count_args *ka = host_alloc(agent, 2 * sizeof(*ka));
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK(cudaHostAlloc(&c.host, 4096, cudaHostAllocMapped) == cudaSuccess);
    CHECK(cudaMalloc(&c.dev, 4096) == cudaSuccess);
    CHECK_OK(xtq_queue_create(agent, 4, &q)); /* the processor runs from here */
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    for (int round = 0; round < 2; round++) {
        xtq_aql_packet_t p;
        ka[round].seen = seen;
        ka[round].seq = (uint64_t)round;
        xtq_signal_store(sig, 1);
        kernel_packet(&p, k, &ka[round], 1, grid, wg, sig);
        submit(q, &p, NULL);
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        CHECK_EQ(seen[round], 1);
        if (round == 0) {
            CHECK_OK(xtq_cuda_quiesce(agent, idle_calls_run, &c));
            CHECK_EQ(c.sync_rc, 0);
            CHECK_EQ(c.host_rc, 0);
            CHECK_EQ(c.dev_rc, 0);
        }
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
}

/* ---- idle exit (XTQ_CUDA_IDLE_EXIT_US, hsa-glue/cuda_idle.h) ------------ */

#define IDLE_EXIT_US "1000"

/* A call that waits for an idle device would hang beside a processor that
 * did not exit: the alarm fails the case with the call's name instead. */
static const char *volatile watched_call;
static void watchdog_fired(int sig)
{
    (void)sig;
    static const char msg[] = "FAIL: watchdog: a call that waits for an idle device hung: ";
    (void)!write(2, msg, sizeof(msg) - 1);
    (void)!write(2, watched_call, strlen(watched_call));
    (void)!write(2, "\n", 1);
    _exit(1);
}

static void watch(const char *call, unsigned seconds)
{
    watched_call = call;
    signal(SIGALRM, watchdog_fired);
    alarm(seconds);
}

/* Wait until the processor reports `want` (5 s at most); returns it. */
static uint32_t idle_state_wait(xtq_agent_t *agent, uint32_t want)
{
    uint32_t state = ~0u;
    uint64_t relaunches;
    for (int t = 0; t < 5000; t++) {
        CHECK_OK(xtq__cuda_idle_stats(agent, &state, &relaunches));
        if (state == want)
            break;
        usleep(1000);
    }
    return state;
}

static uint64_t idle_relaunches(xtq_agent_t *agent)
{
    uint32_t state;
    uint64_t relaunches = 0;
    CHECK_OK(xtq__cuda_idle_stats(agent, &state, &relaunches));
    return relaunches;
}

/* XTQ_CUDA_IDLE_EXIT_US=0: the processor runs while a queue exists (no
 * relaunch cost, and the device never idles: xtq_cuda_quiesce is the way
 * to free). */
XTQ_TEST(idle_exit_zero_never_exits)
{
    setenv("XTQ_CUDA_IDLE_EXIT_US", "0", 1);
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    uint32_t state;
    uint64_t relaunches;
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    usleep(200000); /* far beyond any idle time of the cases below */
    CHECK_OK(xtq__cuda_idle_stats(agent, &state, &relaunches));
    CHECK_EQ(state, XTQ__CUDA_PROC_RUNNING);
    CHECK_EQ(relaunches, 0);
    CHECK_OK(xtq_queue_destroy(q));
    agent->ops->close(agent);
}

/* With the parameter on, the processor exits after a packet and the idle
 * time, the application's synchronising calls return, and the next packet
 * launches it again. */
XTQ_TEST(idle_exit_lets_the_device_idle)
{
    setenv("XTQ_CUDA_IDLE_EXIT_US", IDLE_EXIT_US, 1);
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    void *host = NULL, *dev = NULL;
    uint32_t *seen = host_alloc(agent, 4096);
    struct count_args *ka = host_alloc(agent, 3 * sizeof(*ka));
    uint64_t took_ns[3] = {0, 0, 0};
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK(cudaHostAlloc(&host, 4096, cudaHostAllocMapped) == cudaSuccess);
    CHECK(cudaMalloc(&dev, 4096) == cudaSuccess);
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    for (int round = 0; round < 3; round++) {
        xtq_aql_packet_t p;
        ka[round].seen = seen;
        ka[round].seq = (uint64_t)round;
        xtq_signal_store(sig, 1);
        kernel_packet(&p, k, &ka[round], 1, grid, wg, sig);
        uint64_t t0 = xtq__now_ns();
        submit(q, &p, NULL);
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        took_ns[round] = xtq__now_ns() - t0;
        CHECK_EQ(seen[round], 1);
        if (round > 0)
            continue; /* 1: on a relaunched processor; 2: right after, running */
        /* No packet for the idle time: the processor says it has gone. */
        CHECK_EQ(idle_state_wait(agent, XTQ__CUDA_PROC_STOPPED), XTQ__CUDA_PROC_STOPPED);
        CHECK_EQ(idle_relaunches(agent), 0);
        watch("cudaDeviceSynchronize", 20);
        CHECK_EQ((int)cudaDeviceSynchronize(), 0);
        watch("cudaFreeHost", 20);
        CHECK_EQ((int)cudaFreeHost(host), 0);
        watch("cudaFree", 20);
        CHECK_EQ((int)cudaFree(dev), 0);
        alarm(0);
        /* Nothing to stop: quiesce and deregister leave it gone. */
        struct idle_calls c = {NULL, NULL, -1, -1, -1};
        CHECK(cudaHostAlloc(&c.host, 4096, cudaHostAllocMapped) == cudaSuccess);
        CHECK(cudaMalloc(&c.dev, 4096) == cudaSuccess);
        CHECK_OK(xtq_cuda_quiesce(agent, idle_calls_run, &c));
        CHECK_EQ(c.sync_rc, 0);
        CHECK_EQ(c.host_rc, 0);
        CHECK_EQ(c.dev_rc, 0);
        void *extra = host_alloc(agent, 4096);
        host_free(agent, extra, 4096);
        CHECK_EQ(idle_relaunches(agent), 0);
        CHECK_EQ(idle_state_wait(agent, XTQ__CUDA_PROC_STOPPED), XTQ__CUDA_PROC_STOPPED);
    }
    /* The second packet ran on a relaunched processor, the third on it. */
    CHECK_EQ(idle_relaunches(agent), 1);
    CHECK_EQ(seen[0] + seen[1] + seen[2], 3);
    printf("idle exit: a packet after the exit took %.1f us (relaunch), the next %.1f us\n",
           took_ns[1] / 1e3, took_ns[2] / 1e3);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    unsetenv("XTQ_CUDA_IDLE_EXIT_US");
}

/* Packets with gaps around the idle time (none, shorter, about as long,
 * until the processor has gone, longer), through the ring alone and
 * through the agent's inline enqueue, and one from a producer that rings
 * no doorbell: every packet runs once and retires once. */
XTQ_TEST(idle_exit_gaps_exactly_once)
{
    enum { N = 96 };
    setenv("XTQ_CUDA_IDLE_EXIT_US", IDLE_EXIT_US, 1);
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    uint32_t *seen = host_alloc(agent, N * 4);
    struct count_args *ka = host_alloc(agent, N * sizeof(*ka));
    retired = calloc(N, sizeof(*retired));
    atomic_store(&last_status, 0);
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 8, &q));
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, N, &sig));
    unsigned seed = 12345;
    for (uint32_t i = 0; i < N; i++) {
        xtq_aql_packet_t p;
        ka[i].seen = seen;
        ka[i].seq = i;
        kernel_packet(&p, k, &ka[i], 1, grid, wg, sig);
        void *cookie = (void *)(uintptr_t)(i + 1);
        if (i == N / 2) {
            /* After an exit, no doorbell: the retire thread finds the
             * packet pending and relaunches by itself. */
            CHECK_EQ(idle_state_wait(agent, XTQ__CUDA_PROC_STOPPED), XTQ__CUDA_PROC_STOPPED);
            uint64_t idx;
            while (xtq_queue_reserve(q, 1, &idx) != 0)
                xtq__cpu_relax();
            xtq_aql_packet_t *slot = xtq_queue_slot(q, idx);
            memcpy(slot->bytes + 4, p.bytes + 4, XTQ_AQL_PACKET_SIZE - 4);
            q->cookies[idx & q->mask] = cookie;
            uint32_t first;
            memcpy(&first, p.bytes, sizeof(first));
            xtq_queue_publish(q, idx, (uint16_t)(first & 0xffff), (uint16_t)(first >> 16));
            /* Before any later doorbell could relaunch it instead. */
            for (int t = 0; *(volatile uint32_t *)&seen[i] == 0 && t < 5000; t++)
                usleep(1000);
            CHECK_EQ(*(volatile uint32_t *)&seen[i], 1);
        } else if (i % 2) {
            submit(q, &p, cookie);
        } else {
            struct xtq__enqueue d = {.packet = &p,
                                     .kernarg = &ka[i],
                                     .kernarg_len = sizeof(ka[i]),
                                     .retire = count_retire,
                                     .cookie = cookie};
            while (agent->ops->enqueue(q, &d) == -XTQ_EAGAIN)
                xtq__cpu_relax();
        }
        switch (rand_r(&seed) % 6) {
        case 0:
            break; /* back to back */
        case 1:
            usleep(100 + rand_r(&seed) % 400);
            break;
        case 2:
            usleep(500 + rand_r(&seed) % 4000); /* about the idle time and the polls before it */
            break;
        case 3:
            (void)idle_state_wait(agent, XTQ__CUDA_PROC_STOPPED); /* just after the exit */
            break;
        case 4:
            usleep(5000 + rand_r(&seed) % 20000);
            break;
        default:
            for (uint32_t spin = rand_r(&seed) % 20000; spin; spin--)
                xtq__cpu_relax();
            break;
        }
    }
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (uint32_t i = 0; i < N; i++)
        CHECK_EQ(seen[i], 1);
    for (uint32_t i = 0; i < N; i++) {
        for (int t = 0; atomic_load(&retired[i]) == 0 && t < 20000; t++)
            usleep(1000);
        CHECK_EQ(atomic_load(&retired[i]), 1);
    }
    CHECK_EQ(atomic_load(&last_status), 0);
    CHECK(idle_relaunches(agent) >= 1);
    printf("idle exit: %llu relaunches for %d packets\n",
           (unsigned long long)idle_relaunches(agent), N);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    for (uint32_t i = 0; i < N; i++)
        CHECK(atomic_load(&retired[i]) <= 1);
    free(retired);
    unsetenv("XTQ_CUDA_IDLE_EXIT_US");
}

XTQ_TEST(dispatch_geometry_and_kernargs)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {37, 5, 3};
    const uint16_t wg[3] = {8, 4, 2}; /* partial groups in x, y and z */
    const size_t cells = 37 * 5 * 3, guard = 64;
    uint32_t *out = host_alloc(agent, (cells + guard) * 4);
    uint32_t *payload = host_alloc(agent, 4096);
    struct geom_args *ka = host_alloc(agent, sizeof(*ka));
    payload[0] = 1000000;
    ka->out = out;
    ka->payload = payload;
    ka->tag = 0x5a5a5;
    xtq_kernel_t *k = make_kernel(agent, TASK_GEOM, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 8, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    xtq_aql_packet_t p;
    kernel_packet(&p, k, ka, 3, grid, wg, sig);
    submit(q, &p, NULL);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (uint32_t z = 0; z < 3; z++)
        for (uint32_t y = 0; y < 5; y++)
            for (uint32_t x = 0; x < 37; x++) {
                uint32_t lin = x + y * 37 + z * 37 * 5;
                CHECK_EQ(out[lin], geom_value(x, y, z, 0x5a5a5) + 1000000);
            }
    for (size_t i = cells; i < cells + guard; i++)
        CHECK_EQ(out[i], 0);
    CHECK(xtq_queue_load_read_index(q) == 1);
    CHECK_OK(xtq_cuda_signal_destroy(agent, sig));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    host_free(agent, out, (cells + guard) * 4);
    host_free(agent, payload, 4096);
    host_free(agent, ka, sizeof(*ka));
    agent->ops->close(agent);
}

XTQ_TEST(signal_seen_by_host_waiter)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    uint32_t *seen = host_alloc(agent, 4096);
    struct count_args *ka = host_alloc(agent, 3 * sizeof(*ka));
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 3, &sig));
    for (int i = 0; i < 3; i++) {
        xtq_aql_packet_t p;
        ka[i].seen = seen;
        ka[i].seq = (uint64_t)i;
        kernel_packet(&p, k, &ka[i], 1, grid, wg, sig);
        submit(q, &p, NULL);
    }
    int64_t v = -1;
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, &v));
    CHECK_EQ(v, 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(seen[i], 1);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
}

XTQ_TEST(barrier_and_or)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *dep, *zero, *done_and, *done_or, *done_k;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    uint32_t *flag = host_alloc(agent, 4096);
    uint32_t *out = host_alloc(agent, 4096);
    struct flag_args *ka = host_alloc(agent, sizeof(*ka));
    ka->out = out;
    ka->flag = flag;
    out[0] = 7;
    xtq_kernel_t *k = make_kernel(agent, TASK_READ_FLAG, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 8, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &dep));
    CHECK_OK(xtq_cuda_signal_create(agent, 0, &zero));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &done_or));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &done_and));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &done_k));
    xtq_aql_packet_t p;
    /* OR over {dep (1), zero (0)}: ready at once. */
    memset(&p, 0, sizeof(p));
    p.barrier.header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_OR, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM);
    p.barrier.dep_signal[0] = xtq_signal_handle(dep);
    p.barrier.dep_signal[3] = xtq_signal_handle(zero);
    p.barrier.completion_signal = xtq_signal_handle(done_or);
    submit(q, &p, NULL);
    CHECK_OK(xtq_signal_wait(done_or, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    /* AND over {dep, zero}, then a kernel with the barrier bit that reads
     * the flag: the flag is set before dep reaches 0, so the kernel must
     * see it. */
    memset(&p, 0, sizeof(p));
    p.barrier.header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_AND, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM);
    p.barrier.dep_signal[1] = xtq_signal_handle(dep);
    p.barrier.dep_signal[4] = xtq_signal_handle(zero);
    p.barrier.completion_signal = xtq_signal_handle(done_and);
    submit(q, &p, NULL);
    kernel_packet(&p, k, ka, 1, grid, wg, done_k);
    p.kernel.header |= 1u << XTQ_PACKET_HEADER_BARRIER;
    submit(q, &p, NULL);
    CHECK_EQ(xtq_signal_load(done_and), 1); /* dep is still 1 */
    __atomic_store_n(flag, 42u, __ATOMIC_RELEASE);
    xtq_signal_store(dep, 0);
    CHECK_OK(xtq_signal_wait(done_k, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    CHECK_EQ(xtq_signal_load(done_and), 0);
    CHECK_EQ(out[0], 42);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
}

XTQ_TEST(many_packets_small_queue_exactly_once)
{
    enum { N = 100000 };
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    uint32_t *seen = host_alloc(agent, N * 4);
    struct count_args *ka = host_alloc(agent, N * sizeof(*ka));
    retired = calloc(N, sizeof(*retired));
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 16, &q));
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, N, &sig));
    for (uint32_t i = 0; i < N; i++) {
        xtq_aql_packet_t p;
        ka[i].seen = seen;
        ka[i].seq = i;
        kernel_packet(&p, k, &ka[i], 1, grid, wg, sig);
        /* Every third packet carries no cookie: it must not be retired. */
        submit(q, &p, i % 3 == 2 ? NULL : (void *)(uintptr_t)(i + 1));
    }
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (uint32_t i = 0; i < N; i++)
        CHECK_EQ(seen[i], 1);
    /* Retires arrive through the host thread, after the signal. */
    for (uint32_t i = 0; i < N; i++) {
        uint32_t want = i % 3 == 2 ? 0 : 1;
        for (int tries = 0; atomic_load(&retired[i]) != want && tries < 20000; tries++)
            usleep(1000);
        CHECK_EQ(atomic_load(&retired[i]), want);
    }
    CHECK_EQ(atomic_load(&last_status), 0);
    CHECK(xtq_queue_load_read_index(q) == N);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    /* Nothing retired twice, even after close. */
    for (uint32_t i = 0; i < N; i++)
        CHECK(atomic_load(&retired[i]) <= 1);
    free(retired);
}

/* Who retired: the test's thread (its retire_poll calls) or another. */
static pthread_t poll_thread;
static _Atomic uint32_t by_poller, by_other;
static void thread_retire(void *cookie, int status)
{
    count_retire(cookie, status);
    atomic_fetch_add(pthread_equal(pthread_self(), poll_thread) ? &by_poller : &by_other, 1);
}

/* Until `n` cookies are retired, polling (retire_poll) or not; false
 * after WAIT_NS. */
static bool retired_all(xtq_agent_t *agent, uint32_t n, bool poll)
{
    uint64_t end = xtq__now_ns() + (uint64_t)WAIT_NS;
    while (atomic_load(&by_poller) + atomic_load(&by_other) < n) {
        if (xtq__now_ns() > end)
            return false;
        if (poll)
            (void)agent->ops->retire_poll(agent);
        else
            usleep(100);
    }
    return true;
}

/*
 * XTQ_AGENT_RETIRE=engine (the default): a thread that polls the agent
 * (an engine turn) retires the packets itself while it keeps polling, and
 * the retire thread stays off them; once it releases the claim, or stops
 * polling without a word, the retire thread retires again.
 */
XTQ_TEST(retire_poll_claims_the_retiring)
{
    enum { N = 2000 };
    xtq_agent_t *agent = open_agent();
    CHECK(agent->ops->retire_poll != NULL && agent->ops->retire_release != NULL);
    xtq_queue_t *q;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    uint32_t *seen = host_alloc(agent, 3 * N * 4);
    struct count_args *ka = host_alloc(agent, 3 * N * sizeof(*ka));
    retired = calloc(3 * N, sizeof(*retired));
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 64, &q));
    q->retire = thread_retire;
    poll_thread = pthread_self();
    atomic_store(&by_poller, 0);
    atomic_store(&by_other, 0);
    xtq_aql_packet_t p;
    /* One at a time, polled: a poll that finds the packet pending claims
     * the retiring, so the retire thread takes at most the first ones. */
    for (uint32_t i = 0; i < N; i++) {
        ka[i] = (struct count_args){.seen = seen, .seq = i};
        kernel_packet(&p, k, &ka[i], 1, grid, wg, NULL);
        submit(q, &p, (void *)(uintptr_t)(i + 1));
        CHECK(retired_all(agent, i + 1, true));
    }
    uint32_t polled = atomic_load(&by_poller);
    printf("claimed: %u of %u retired by the polling thread\n", polled, N);
    /* All but the first few, and those of a claim that ran out while this
     * thread was preempted (ctest -j4). */
    CHECK(polled >= N * 9 / 10);
    /* Released: the retire thread retires a batch nobody polls. */
    agent->ops->retire_release(agent);
    for (uint32_t i = N; i < 2 * N; i++) {
        ka[i] = (struct count_args){.seen = seen, .seq = i};
        kernel_packet(&p, k, &ka[i], 1, grid, wg, NULL);
        submit(q, &p, (void *)(uintptr_t)(i + 1));
    }
    CHECK(retired_all(agent, 2 * N, false));
    CHECK_EQ(atomic_load(&by_poller), polled);
    /* Claimed by a poll that found a packet pending, then left without a
     * release (a waiting thread that returned): the claim runs out. */
    for (uint32_t i = 2 * N; i < 3 * N; i++) {
        ka[i] = (struct count_args){.seen = seen, .seq = i};
        kernel_packet(&p, k, &ka[i], 1, grid, wg, NULL);
        submit(q, &p, (void *)(uintptr_t)(i + 1));
        if (i == 2 * N)
            (void)agent->ops->retire_poll(agent);
    }
    CHECK(retired_all(agent, 3 * N, false));
    printf("after the release: %u by the retire thread\n", atomic_load(&by_other));
    for (uint32_t i = 0; i < 3 * N; i++) {
        CHECK_EQ(seen[i], 1);
        CHECK_EQ(atomic_load(&retired[i]), 1);
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    host_free(agent, seen, 3 * N * 4);
    host_free(agent, ka, 3 * N * sizeof(*ka));
    agent->ops->close(agent);
    free(retired);
}

/*
 * Through the engine, to this rank: each task's completion is retired,
 * and its ack sent, by the progress thread's turns (XTQ_AGENT_RETIRE=
 * engine, the default), or by the agent's retire thread (thread; the
 * cuda.engine_turns_retire.thread variant). Every task runs once.
 */
XTQ_TEST(engine_turns_retire)
{
    enum { N = 2000 };
    const char *mode = getenv("XTQ_AGENT_RETIRE");
    const bool engine = mode == NULL || strcmp(mode, "thread") != 0;
    unsigned n = 0;
    if (xtq__cuda_agent_provider.probe(skip_reason, sizeof(skip_reason), &n) != 0)
        XTQ_SKIP("%s", skip_reason);
    xtq_init_attr_t attr = {0};
    xtq_ctx_t *ctx;
    xtq_agent_t *agent;
    xtq_queue_t *q;
    /* Polled throughout (the waiting thread, and the progress thread when
     * it takes over), so that the claim holds where a task outlasts the
     * usual spins (compute-sanitizer): a waiter that sleeps hands the
     * retiring to the retire thread, as it should. */
    setenv("XTQ_PROGRESS_SPIN_US", "10000000", 1);
    setenv("XTQ_WAIT_SPIN_US", "10000000", 1);
    CHECK_OK(xtq_init(&attr, &ctx));
    CHECK_OK(xtq_agent_find(ctx, XTQ_AGENT_CUDA, &agent));
    CHECK_OK(cuda_tasks_attach(agent));
    uint32_t *seen = host_alloc(agent, N * 4);
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(struct count_args));
    CHECK_OK(xtq_queue_create(agent, 64, &q));
    CHECK_OK(xtq_register_kernel(ctx, 0, k, seen, NULL));
    CHECK_OK(xtq_register_queue(ctx, 0, q));
    const xtq_dispatch_geometry_t geom = {1, {1, 1, 1}, {1, 1, 1}};
    for (uint32_t i = 0; i < N; i++) {
        struct count_args ka = {.seq = i};
        uint8_t cmd[XTQ_AQL_PACKET_SIZE + sizeof(ka)];
        size_t len;
        xtq_completion_t c = {0};
        CHECK_OK(xtq_cmd_kernel(cmd, sizeof(cmd), 0, 0, &geom, &ka, sizeof(ka), &len));
        CHECK_OK(xtq_put(ctx, 0, cmd, len, NULL, 0, XTQ_PUT_REMOTE_COMPLETION, &c));
        CHECK_OK(xtq_completion_wait(ctx, &c, WAIT_NS));
        CHECK_OK(c.status);
    }
    for (uint32_t i = 0; i < N; i++)
        CHECK_EQ(seen[i], 1);
    /* A wait may end on the processor's own completion word
     * (XTQ_DIRECT_COMPLETION) before the retire that the counts below
     * report: the last one comes within microseconds. */
    uint64_t by_engine, by_thread;
    for (int t = 0; t < 5000; t++) {
        CHECK_OK(xtq__cuda_retire_stats(agent, &by_engine, &by_thread));
        if (by_engine + by_thread >= N)
            break;
        usleep(1000);
    }
    printf("XTQ_AGENT_RETIRE=%s: retired by engine turns %llu, by the retire thread %llu\n",
           engine ? "engine" : "thread", (unsigned long long)by_engine,
           (unsigned long long)by_thread);
    CHECK_EQ(by_engine + by_thread, N);
    if (engine)
        CHECK(by_engine >= N * 9 / 10); /* a preempted progress thread's claim runs out */
    else
        CHECK_EQ(by_engine, 0);
    CHECK_OK(xtq_unregister_queue(ctx, 0));
    CHECK_OK(xtq_unregister_kernel(ctx, 0));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    host_free(agent, seen, N * 4);
    CHECK_OK(xtq_finalize(ctx));
}

XTQ_TEST(bad_packets_complete_with_error)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    struct xtq_kernel bogus = {.agent = agent, .object = 0x1234, .kernarg_size = 0};
    retired = calloc(4, sizeof(*retired));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, 2, &sig));
    xtq_aql_packet_t p;
    kernel_packet(&p, &bogus, NULL, 1, grid, wg, sig);
    submit(q, &p, (void *)(uintptr_t)1);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 1, WAIT_NS, NULL));
    for (int t = 0; atomic_load(&retired[0]) == 0 && t < 20000; t++)
        usleep(1000);
    CHECK_EQ(atomic_load(&retired[0]), 1);
    CHECK_EQ(atomic_load(&last_status), -XTQ_ENOKERNEL);
    memset(&p, 0, sizeof(p));
    p.agent.header = xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                    XTQ_FENCE_SCOPE_SYSTEM);
    p.agent.completion_signal = xtq_signal_handle(sig);
    submit(q, &p, (void *)(uintptr_t)2);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (int t = 0; atomic_load(&retired[1]) == 0 && t < 20000; t++)
        usleep(1000);
    CHECK_EQ(atomic_load(&last_status), -XTQ_EAGENTKIND);
    /* A kernel that takes arguments, sent without any: refused before the
     * task is called. */
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(struct count_args));
    struct count_args *ka = host_alloc(agent, 64);
    uint32_t *seen = host_alloc(agent, 64);
    ka->seen = seen;
    ka->seq = 0;
    xtq_signal_store(sig, 1);
    kernel_packet(&p, k, NULL, 1, grid, wg, sig);
    submit(q, &p, (void *)(uintptr_t)3);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (int t = 0; atomic_load(&retired[2]) == 0 && t < 20000; t++)
        usleep(1000);
    CHECK_EQ(atomic_load(&last_status), -XTQ_EKERNARG);
    CHECK_EQ(*(volatile uint32_t *)seen, 0u);
    /* HSA's reserved fields are nobody's hints: garbage there (a length
     * far beyond the payload, a wrong argument length) changes nothing. */
    atomic_store(&last_status, 0);
    xtq_signal_store(sig, 1);
    kernel_packet(&p, k, ka, 1, grid, wg, sig);
    p.kernel.reserved0 = 0xffff;
    p.kernel.reserved2 = ~0ull;
    submit(q, &p, (void *)(uintptr_t)4);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (int t = 0; atomic_load(&retired[3]) == 0 && t < 20000; t++)
        usleep(1000);
    CHECK_EQ(atomic_load(&last_status), 0);
    CHECK_EQ(*(volatile uint32_t *)seen, 1u);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    free(retired);
}

/* The engine's path: the task goes through the agent's enqueue, which
 * copies the packet, the arguments and a small payload into the slot's
 * inline area; or (`local`) the same through xtq_queue_submit_args.
 * Returns the payload address the task saw. */
static uint64_t enqueue_sum_via(xtq_queue_t *q, xtq_kernel_t *k, struct sum_args *ka,
                                unsigned long long *dresult, const void *payload, uint32_t len,
                                uint32_t groups, xtq_signal_t *sig, unsigned long long want,
                                bool local)
{
    const uint32_t grid[3] = {groups * 256, 1, 1};
    const uint16_t wg[3] = {256, 1, 1};
    unsigned long long res[2] = {0, 0};
    xtq_aql_packet_t p;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(cudaMemsetAsync(dresult, 0, sizeof(res), s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    ka->result = dresult;
    ka->payload = payload;
    ka->len = len;
    xtq_signal_store(sig, 1);
    kernel_packet(&p, k, ka, 1, grid, wg, sig);
    struct xtq__enqueue d = {.packet = &p,
                             .kernarg = ka,
                             .kernarg_len = sizeof(*ka),
                             .payload = payload,
                             .payload_len = len};
    if (local)
        CHECK_OK(xtq_queue_submit_args(q, &p, sizeof(*ka), len, XTQ_TIMEOUT_INFINITE));
    else
        while (xtq__cuda_enqueue(q, &d, NULL) == -XTQ_EAGAIN)
            xtq__cpu_relax();
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    CHECK(cudaMemcpyAsync(res, dresult, sizeof(res), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
    if (res[0] != want)
        fprintf(stderr,
                "enqueue_sum: %u bytes, %u groups: sum %llu (want %llu), payload seen %#llx\n", len,
                groups, res[0], want, res[1]);
    CHECK_EQ(res[0], want);
    return res[1];
}

static uint64_t enqueue_sum(xtq_queue_t *q, xtq_kernel_t *k, struct sum_args *ka,
                            unsigned long long *dresult, const void *payload, uint32_t len,
                            uint32_t groups, xtq_signal_t *sig, unsigned long long want)
{
    return enqueue_sum_via(q, k, ka, dresult, payload, len, groups, sig, want, false);
}

/* A 16-group sum through the agent's enqueue (the engine's path; the
 * payload is too long to travel inline). */
static uint64_t run_sum(xtq_queue_t *q, xtq_kernel_t *k, struct sum_args *ka,
                        unsigned long long *dresult, const void *payload, uint32_t len,
                        xtq_signal_t *sig, unsigned long long want)
{
    return enqueue_sum(q, k, ka, dresult, payload, len, 16, sig, want);
}

XTQ_TEST(payload_in_place_and_in_device_memory)
{
    setenv("XTQ_CUDA_COPY_MIN", "0", 1); /* never staged */
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t len = 1 << 20;
    uint8_t *host = host_alloc(agent, len);
    struct sum_args *ka = host_alloc(agent, sizeof(*ka));
    unsigned long long want = 0, *dresult = NULL;
    void *dev = NULL;
    srand(7);
    for (uint32_t i = 0; i < len; i++) {
        host[i] = (uint8_t)rand();
        want += host[i];
    }
    CHECK(cudaMalloc(&dev, len) == cudaSuccess);
    CHECK(cudaMalloc((void **)&dresult, 16) == cudaSuccess);
    CHECK(cudaMemcpy(dev, host, len, cudaMemcpyHostToDevice) == cudaSuccess);
    xtq_kernel_t *k = make_kernel(agent, TASK_SUM, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    CHECK_EQ(run_sum(q, k, ka, dresult, host, len, sig, want), (uint64_t)(uintptr_t)host);
    CHECK_EQ(run_sum(q, k, ka, dresult, dev, len, sig, want), (uint64_t)(uintptr_t)dev);
    /* The payload changes between packets at the same address: no stale copy. */
    host[0] ^= 0xff;
    want = want - (uint8_t)(host[0] ^ 0xff) + host[0];
    CHECK_EQ(run_sum(q, k, ka, dresult, host, len, sig, want), (uint64_t)(uintptr_t)host);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    CHECK(cudaFree(dev) == cudaSuccess);
    CHECK(cudaFree(dresult) == cudaSuccess);
    unsetenv("XTQ_CUDA_COPY_MIN");
}

/* XTQ_CUDA_COPY_MIN: payloads from that size are copied into device
 * memory by the processor before the task runs (argument 1 points there);
 * smaller ones are read in place. Same sums either way. */
XTQ_TEST(payload_staged_from_copy_min)
{
    setenv("XTQ_CUDA_COPY_MIN", "4096", 1);
    /* In the processor's blocks: a launched grid reads in place. */
    setenv("XTQ_CUDA_GRID_MIN", "0", 1);
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t len = (1 << 20) + 3; /* and an unaligned tail */
    uint8_t *host = host_alloc(agent, len);
    struct sum_args *ka = host_alloc(agent, sizeof(*ka));
    unsigned long long *dresult = NULL, want_small = 0, want = 0;
    srand(11);
    for (uint32_t i = 0; i < len; i++) {
        host[i] = (uint8_t)rand();
        want += host[i];
        if (i < 1024)
            want_small += host[i];
    }
    CHECK(cudaMalloc((void **)&dresult, 16) == cudaSuccess);
    xtq_kernel_t *k = make_kernel(agent, TASK_SUM, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    /* Longer than an inline payload, shorter than the threshold: in place. */
    CHECK_EQ(run_sum(q, k, ka, dresult, host, 1024, sig, want_small), (uint64_t)(uintptr_t)host);
    uint64_t seen = run_sum(q, k, ka, dresult, host, len, sig, want);
    CHECK(seen != (uint64_t)(uintptr_t)host);
    struct cudaPointerAttributes at;
    CHECK(cudaPointerGetAttributes(&at, (void *)(uintptr_t)seen) == cudaSuccess);
    CHECK_EQ((int)at.type, (int)cudaMemoryTypeDevice);
    /* New contents at the same host address reach the stage too. */
    host[len - 1] ^= 0x5a;
    want = want - (uint8_t)(host[len - 1] ^ 0x5a) + host[len - 1];
    CHECK_EQ(run_sum(q, k, ka, dresult, host, len, sig, want), seen);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    CHECK(cudaFree(dresult) == cudaSuccess);
    unsetenv("XTQ_CUDA_COPY_MIN");
    unsetenv("XTQ_CUDA_GRID_MIN");
}

/* Whether the attached module can launch grids (built with -rdc). */
static bool module_grids(xtq_agent_t *agent)
{
    return (xtq__cuda_caps(agent) & XTQ__CUDA_CAP_GRID) != 0;
}

static enum cudaMemoryType mem_type(uint64_t addr)
{
    struct cudaPointerAttributes at;
    CHECK(cudaPointerGetAttributes(&at, (void *)(uintptr_t)addr) == cudaSuccess);
    return at.type;
}

/* Payload placement through the agent's enqueue: up to XTQ_CUDA_INLINE_MAX
 * bytes the payload travels inline (a one-group task reads the
 * processor's shared-memory copy, a larger one a device-memory copy);
 * beyond it, in place. Every byte arrives: unaligned lengths, a changed
 * payload at the same address, and a full queue lapping its slots. */
XTQ_TEST(inline_payload_placement)
{
    setenv("XTQ_CUDA_INLINE_MAX", "1024", 1);
    setenv("XTQ_CUDA_GRID_MIN", "0", 1); /* every group in the processor */
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t len = 4096;
    uint8_t *host = host_alloc(agent, len);
    struct sum_args *ka = host_alloc(agent, sizeof(*ka));
    unsigned long long *dresult = NULL;
    srand(5);
    for (uint32_t i = 0; i < len; i++)
        host[i] = (uint8_t)rand();
    CHECK(cudaMalloc((void **)&dresult, 16) == cudaSuccess);
    xtq_kernel_t *k = make_kernel(agent, TASK_SUM, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    static const uint32_t lens[] = {1, 7, 64, 333, 1000, 1024, 1025, 4096};
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
            unsigned long long want = 0;
            for (uint32_t b = 0; b < lens[i]; b++)
                want += host[b];
            uint64_t seen1 = enqueue_sum(q, k, ka, dresult, host, lens[i], 1, sig, want);
            uint64_t seen16 = enqueue_sum(q, k, ka, dresult, host, lens[i], 16, sig, want);
            if (lens[i] <= 1024) {
                CHECK(seen1 != (uint64_t)(uintptr_t)host);  /* shared memory */
                CHECK_EQ((int)mem_type(seen16), (int)cudaMemoryTypeDevice);
            } else {
                CHECK_EQ(seen1, (uint64_t)(uintptr_t)host); /* in place */
                CHECK_EQ(seen16, (uint64_t)(uintptr_t)host);
            }
        }
        /* New contents at the same address: the inline copy is fresh. */
        host[0] ^= 0x81;
        host[1023] ^= 0x3c;
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    CHECK(cudaFree(dresult) == cudaSuccess);
    unsetenv("XTQ_CUDA_INLINE_MAX");
    unsetenv("XTQ_CUDA_GRID_MIN");
}

/* xtq_queue_submit_args, a local submission: arguments and a payload of
 * up to XTQ_CUDA_INLINE_MAX bytes travel in the slot as the engine's do
 * (the task sees the processor's copy), larger ones are read in place;
 * the sums are right either way, and fresh when the bytes change. */
XTQ_TEST(submit_args_inline)
{
    setenv("XTQ_CUDA_INLINE_MAX", "256", 1);
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t len = 4096;
    uint8_t *host = host_alloc(agent, len);
    struct sum_args *ka = host_alloc(agent, sizeof(*ka));
    unsigned long long *dresult = NULL;
    srand(9);
    for (uint32_t i = 0; i < len; i++)
        host[i] = (uint8_t)rand();
    CHECK(cudaMalloc((void **)&dresult, 16) == cudaSuccess);
    xtq_kernel_t *k = make_kernel(agent, TASK_SUM, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    static const uint32_t lens[] = {8, 256, 257, 4096};
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < ARRAY_SIZE(lens); i++) {
            unsigned long long want = 0;
            for (uint32_t b = 0; b < lens[i]; b++)
                want += host[b];
            uint64_t seen = enqueue_sum_via(q, k, ka, dresult, host, lens[i], 1, sig, want, true);
            if (lens[i] <= 256)
                CHECK(seen != (uint64_t)(uintptr_t)host);
            else
                CHECK_EQ(seen, (uint64_t)(uintptr_t)host);
        }
        host[0] ^= 0x5a;
        host[255] ^= 0x11;
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    CHECK(cudaFree(dresult) == cudaSuccess);
    unsetenv("XTQ_CUDA_INLINE_MAX");
}

/* A one-group task reading its payload in place, at the same host
 * address with new contents every time: each run sees this run's bytes
 * (the processor's acquire of the packet invalidates the SM's L1; the
 * release completion alone does not: 1109 of 1110 sums were stale on the
 * H100 before), in both completion orderings. */
XTQ_TEST(in_place_payload_fresh_every_time)
{
    setenv("XTQ_CUDA_INLINE_MAX", "0", 1); /* never inline */
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t len = 4096;
    uint8_t *host = host_alloc(agent, len);
    struct sum_args *ka = host_alloc(agent, sizeof(*ka));
    unsigned long long *dresult = NULL, want = 0;
    srand(9);
    for (uint32_t i = 0; i < len; i++) {
        host[i] = (uint8_t)rand();
        want += host[i];
    }
    CHECK(cudaMalloc((void **)&dresult, 16) == cudaSuccess);
    xtq_kernel_t *k = make_kernel(agent, TASK_SUM, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 8, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    for (int mode = 0; mode < 2; mode++) {
        CHECK_OK(xtq__cuda_tune(agent, XTQ__CUDA_KNOB_COMPLETE,
                                mode ? XTQ__CUDA_COMPLETE_FENCE : XTQ__CUDA_COMPLETE_RELEASE));
        for (int it = 0; it < 200; it++) {
            want -= host[it % len];
            host[it % len] = (uint8_t)(host[it % len] + 1 + it);
            want += host[it % len];
            CHECK_EQ(enqueue_sum(q, k, ka, dresult, host, len, 1, sig, want),
                     (uint64_t)(uintptr_t)host);
        }
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    CHECK(cudaFree(dresult) == cudaSuccess);
    unsetenv("XTQ_CUDA_INLINE_MAX");
}

/* Inline packets through a small queue, from two producer threads, with
 * cookies: each runs once, each cookie retires once, in both completion
 * orderings (release store and fence). */
struct inline_producer {
    xtq_queue_t *q;
    xtq_kernel_t *k;
    xtq_signal_t *sig;
    struct count_args *ka;
    uint32_t first, count;
};

static void *inline_produce(void *arg)
{
    struct inline_producer *pr = arg;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    for (uint32_t i = pr->first; i < pr->first + pr->count; i++) {
        xtq_aql_packet_t p;
        kernel_packet(&p, pr->k, &pr->ka[i], 1, grid, wg, pr->sig);
        struct xtq__enqueue d = {.packet = &p,
                                 .kernarg = &pr->ka[i],
                                 .kernarg_len = sizeof(pr->ka[i]),
                                 .retire = count_retire,
                                 .cookie = i % 3 == 2 ? NULL : (void *)(uintptr_t)(i + 1)};
        while (xtq__cuda_enqueue(pr->q, &d, NULL) == -XTQ_EAGAIN)
            xtq__cpu_relax();
    }
    return NULL;
}

XTQ_TEST(inline_many_packets_exactly_once)
{
    enum { N = 60000 };
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    uint32_t *seen = host_alloc(agent, N * 4);
    struct count_args *ka = host_alloc(agent, N * sizeof(*ka));
    retired = calloc(N, sizeof(*retired));
    atomic_store(&last_status, 0);
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 16, &q));
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, N, &sig));
    for (uint32_t i = 0; i < N; i++) {
        ka[i].seen = seen;
        ka[i].seq = i;
    }
    for (uint32_t mode = 0; mode < 2; mode++) {
        const uint32_t half = N / 2, base = mode * half;
        /* Second half: completions ordered by a fence, not a release. */
        CHECK_OK(xtq__cuda_tune(agent, XTQ__CUDA_KNOB_COMPLETE,
                                mode ? XTQ__CUDA_COMPLETE_FENCE : XTQ__CUDA_COMPLETE_RELEASE));
        struct inline_producer pr[2] = {{q, k, sig, ka, base, half / 2},
                                        {q, k, sig, ka, base + half / 2, half - half / 2}};
        pthread_t th;
        CHECK(pthread_create(&th, NULL, inline_produce, &pr[1]) == 0);
        inline_produce(&pr[0]);
        CHECK(pthread_join(th, NULL) == 0);
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, (int64_t)(N - base - half), WAIT_NS, NULL));
    }
    for (uint32_t i = 0; i < N; i++)
        CHECK_EQ(seen[i], 1);
    for (uint32_t i = 0; i < N; i++) {
        uint32_t want = i % 3 == 2 ? 0 : 1;
        for (int tries = 0; atomic_load(&retired[i]) != want && tries < 20000; tries++)
            usleep(1000);
        CHECK_EQ(atomic_load(&retired[i]), want);
    }
    CHECK_EQ(atomic_load(&last_status), 0);
    CHECK(xtq_queue_load_read_index(q) == N);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    free(retired);
}

/* Two small queues, one fed through the agent's enqueue (inline), one
 * with plain packets, interleaved and kept full: the processor serves
 * both in turn, and never takes a slot's previous packet (whose header
 * the host has not freed yet) for a new one. */
XTQ_TEST(two_queues_inline_and_plain)
{
    enum { N = 20000 };
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q[2];
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    uint32_t *seen = host_alloc(agent, N * 4);
    struct count_args *ka = host_alloc(agent, N * sizeof(*ka));
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q[0]));
    CHECK_OK(xtq_queue_create(agent, 4, &q[1]));
    CHECK_OK(xtq_cuda_signal_create(agent, N, &sig));
    for (uint32_t i = 0; i < N; i++) {
        xtq_aql_packet_t p;
        ka[i].seen = seen;
        ka[i].seq = i;
        kernel_packet(&p, k, &ka[i], 1, grid, wg, sig);
        if (i & 1) {
            submit(q[1], &p, NULL);
        } else {
            struct xtq__enqueue d = {.packet = &p, .kernarg = &ka[i], .kernarg_len = sizeof(ka[i])};
            while (xtq__cuda_enqueue(q[0], &d, NULL) == -XTQ_EAGAIN)
                xtq__cpu_relax();
        }
    }
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (uint32_t i = 0; i < N; i++)
        CHECK_EQ(seen[i], 1);
    CHECK(xtq_queue_load_read_index(q[0]) == N / 2);
    CHECK(xtq_queue_load_read_index(q[1]) == N / 2);
    CHECK_OK(xtq_queue_destroy(q[0]));
    CHECK_OK(xtq_queue_destroy(q[1]));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
}

/* A task fails its dispatch: the status reaches the retire callback, the
 * signal is still decremented, every work-item still ran; in one group
 * (block 0), across the processor's blocks and on a launched grid. */
XTQ_TEST(task_fail_status_reaches_retire)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t groups_max = 64, items = groups_max * 32;
    uint32_t *seen = host_alloc(agent, items * 4);
    struct fail_args *ka = host_alloc(agent, sizeof(*ka));
    retired = calloc(8, sizeof(*retired));
    xtq_kernel_t *k = make_kernel(agent, TASK_FAIL, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    struct {
        uint32_t groups, grid_min, fail_group;
        int32_t status;
    } cases[] = {{1, 0, 0, -XTQ_ERANGE},
                 {8, 0, 5, -XTQ_EKERNARG},
                 {groups_max, 4, 63, -XTQ_ERANGE},
                 {groups_max, 4, ~0u, 0}};
    for (uint32_t c = 0; c < ARRAY_SIZE(cases); c++) {
        const uint32_t grid[3] = {cases[c].groups * 32, 1, 1};
        const uint16_t wg[3] = {32, 1, 1};
        CHECK_OK(xtq__cuda_tune(agent, XTQ__CUDA_KNOB_GRID_MIN, cases[c].grid_min));
        memset(seen, 0, items * 4);
        ka->seen = seen;
        ka->status = cases[c].status;
        ka->fail_group = cases[c].fail_group;
        CHECK_EQ(enqueue_retired(q, k, ka, sizeof(*ka), 1, grid, wg, sig, c + 1), cases[c].status);
        for (uint32_t i = 0; i < cases[c].groups * 32; i++)
            CHECK_EQ(seen[i], 1);
    }
    uint64_t gs[2];
    CHECK_OK(xtq__cuda_grid_stats(agent, gs));
    /* The two 64-group dispatches ran on a grid, where the module can
     * launch one (built with -rdc); in the processor's blocks otherwise. */
    CHECK_EQ(gs[0], module_grids(agent) ? 2 : 0);
    CHECK_EQ(gs[1], 0);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    free(retired);
}

/*
 * The initiator's completion word on one host (struct xtq__enqueue.notify):
 * the processor stores (status << 32) | notify_tag there for a dispatch of
 * one work-group, of several in its blocks, and on a grid of its own, with
 * the dispatch's status; a packet without one leaves every word alone.
 */
XTQ_TEST(notify_word_stored_by_the_processor)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t groups_max = 64, items = groups_max * 32;
    uint32_t *seen = host_alloc(agent, items * 4);
    struct fail_args *ka = host_alloc(agent, sizeof(*ka));
    _Atomic uint64_t *words = host_alloc(agent, 4096);
    retired = calloc(8, sizeof(*retired));
    xtq_kernel_t *k = make_kernel(agent, TASK_FAIL, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    struct {
        uint32_t groups, grid_min, fail_group;
        int32_t status;
        bool notify;
    } cases[] = {{1, 0, ~0u, 0, true},           {1, 0, 0, -XTQ_ERANGE, true},
                 {8, 0, 5, -XTQ_EKERNARG, true},  {8, 0, ~0u, 0, true},
                 {groups_max, 4, ~0u, 0, true},   {groups_max, 4, 63, -XTQ_ERANGE, true},
                 {1, 0, ~0u, 0, false}};
    for (uint32_t c = 0; c < ARRAY_SIZE(cases); c++) {
        const uint32_t grid[3] = {cases[c].groups * 32, 1, 1};
        const uint16_t wg[3] = {32, 1, 1};
        const uint32_t tag = 0xabc00000u + c;
        CHECK_OK(xtq__cuda_tune(agent, XTQ__CUDA_KNOB_GRID_MIN, cases[c].grid_min));
        memset(seen, 0, items * 4);
        memset((void *)words, 0, 4096);
        ka->seen = seen;
        ka->status = cases[c].status;
        ka->fail_group = cases[c].fail_group;
        atomic_store(&last_status, 0);
        xtq_signal_store(sig, 1);
        xtq_aql_packet_t p;
        kernel_packet(&p, k, ka, 1, grid, wg, sig);
        struct xtq__enqueue d = {.packet = &p,
                                 .kernarg = ka,
                                 .kernarg_len = sizeof(*ka),
                                 .retire = count_retire,
                                 .cookie = (void *)(uintptr_t)(c + 1),
                                 .notify = cases[c].notify ? &words[c] : NULL,
                                 .notify_tag = tag};
        CHECK_OK(xtq__cuda_enqueue(q, &d, NULL));
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        for (int t = 0; atomic_load(&retired[c]) == 0 && t < 20000; t++)
            usleep(1000);
        CHECK_EQ(atomic_load(&retired[c]), 1);
        CHECK_EQ(atomic_load(&last_status), cases[c].status);
        for (uint32_t i = 0; i < 4096 / 8; i++) {
            uint64_t want = cases[c].notify && i == c
                                ? ((uint64_t)(uint32_t)cases[c].status << 32) | tag
                                : 0;
            CHECK_EQ(atomic_load(&words[i]), want);
        }
        for (uint32_t i = 0; i < cases[c].groups * 32; i++)
            CHECK_EQ(seen[i], 1);
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    free(retired);
}

/* A plain packet of `k` (xtq_queue_submit: no enqueue descriptor) on a
 * 64-item grid, `info` set to 0xff first; waits for it. */
static void plain_packet(xtq_queue_t *q, xtq_kernel_t *k, void *ka, uint32_t *info,
                         xtq_signal_t *sig)
{
    const uint32_t grid1[3] = {64, 1, 1};
    const uint16_t wg1[3] = {64, 1, 1};
    xtq_aql_packet_t p;
    memset(info, 0xff, 64);
    xtq_signal_store(sig, 1);
    kernel_packet(&p, k, ka, 1, grid1, wg1, sig);
    submit(q, &p, NULL);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
}

/* A fetching put's reply buffer reaches the task (d->result, result_len)
 * and what it writes there is in host memory when the packet completes. */
XTQ_TEST(result_buffer_reaches_task)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t rlen = 1000; /* 250 words, from work-items of 4 groups */
    uint32_t *result = host_alloc(agent, 4096);
    uint32_t *info = host_alloc(agent, 64);
    struct result_args *ka = host_alloc(agent, sizeof(*ka));
    xtq_kernel_t *k = make_kernel(agent, TASK_RESULT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    ka->info = info;
    for (uint32_t groups = 1; groups <= 4; groups += 3) {
        const uint32_t grid[3] = {groups * 64, 1, 1};
        const uint16_t wg[3] = {64, 1, 1};
        memset(result, 0, 4096);
        memset(info, 0, 64);
        xtq_signal_store(sig, 1);
        xtq_aql_packet_t p;
        kernel_packet(&p, k, ka, 1, grid, wg, sig);
        struct xtq__enqueue d = {.packet = &p,
                                 .kernarg = ka,
                                 .kernarg_len = sizeof(*ka),
                                 .result = result,
                                 .result_len = rlen};
        CHECK_OK(xtq__cuda_enqueue(q, &d, NULL));
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        CHECK_EQ(info[0], rlen);
        CHECK_EQ(info[1], 1);
        const uint32_t words = groups == 1 ? 64 : rlen / 4;
        for (uint32_t i = 0; i < words; i++)
            CHECK_EQ(result[i], RESULT_WORD(i));
        for (uint32_t i = words; i < 1024; i++)
            CHECK_EQ(result[i], 0);
    }
    /* Without one: NULL and 0. */
    plain_packet(q, k, ka, info, sig);
    CHECK_EQ(info[0], 0);
    CHECK_EQ(info[1], 0);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
}

/* payload_len reaches the task wherever the payload went: inline with the
 * packet (64 B), read in place (4 KiB), staged in device memory (from
 * XTQ_CUDA_COPY_MIN, 64 KiB), for one work-group, several in the
 * processor's blocks and (modules built with -rdc) a launched grid; the
 * task reads the payload's last byte at that length through argument 1. A
 * plain packet (xtq_queue_submit) says 0. */
XTQ_TEST(payload_len_reaches_task)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint64_t lens[] = {64, 4096, 65536};
    const uint32_t groups[] = {1, 4, 16};
    uint8_t *payload = host_alloc(agent, 65536);
    uint32_t *info = host_alloc(agent, 64);
    struct result_args *ka = host_alloc(agent, sizeof(*ka));
    xtq_kernel_t *k = make_kernel(agent, TASK_RESULT, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    ka->info = info;
    ka->payload = payload;
    for (uint32_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        for (uint32_t g = 0; g < sizeof(groups) / sizeof(groups[0]); g++) {
            const uint32_t grid[3] = {groups[g] * 64, 1, 1};
            const uint16_t wg[3] = {64, 1, 1};
            const uint8_t first = (uint8_t)(17 + i * 3 + g), last = (uint8_t)(101 + i * 3 + g);
            memset(payload, 0, 65536);
            payload[0] = first;
            payload[lens[i] - 1] = last;
            memset(info, 0xff, 64);
            xtq_signal_store(sig, 1);
            xtq_aql_packet_t p;
            kernel_packet(&p, k, ka, 1, grid, wg, sig);
            struct xtq__enqueue d = {.packet = &p,
                                     .kernarg = ka,
                                     .kernarg_len = sizeof(*ka),
                                     .payload = payload,
                                     .payload_len = lens[i]};
            CHECK_OK(xtq__cuda_enqueue(q, &d, NULL));
            CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
            CHECK_EQ(info[2], (uint32_t)lens[i]);
            CHECK_EQ(info[3], 0);
            CHECK_EQ(info[4], first | (uint32_t)last << 8);
            CHECK_EQ(info[1], 0); /* no result buffer */
        }
    }
    /* A plain packet gives no length. */
    plain_packet(q, k, ka, info, sig);
    CHECK_EQ(info[2], 0);
    CHECK_EQ(info[3], 0);
    CHECK_EQ(info[4], 0);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
}

/* Through the agent's enqueue operation, arguments short enough to travel
 * inline and too long for the inline area (the header gives their length,
 * the processor fetches them while it checks the kernel) reach the task
 * whole; a length that disagrees with the kernel's fails the packet with
 * -XTQ_EKERNARG instead of running it on a partial copy. */
XTQ_TEST(enqueue_op_short_and_long_kernargs)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    /* Words: inline, just too long for the default inline area, the most. */
    const uint32_t lens[] = {24, 100, KARG_WORDS_MAX};
    const uint32_t ncases = 2 * (uint32_t)(sizeof(lens) / sizeof(lens[0]));
    uint32_t *out = host_alloc(agent, 4096);
    struct karg_args *ka = host_alloc(agent, sizeof(*ka));
    const uint32_t grid[3] = {256, 1, 1};
    const uint16_t wg[3] = {256, 1, 1};
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    retired = calloc(ncases, sizeof(*retired));
    ka->out = out;
    for (uint32_t c = 0; c < ncases; c++) {
        const uint32_t n = lens[c / 2];
        const bool wrong = c & 1; /* the enqueue says 16 bytes fewer */
        const uint32_t size = (uint32_t)offsetof(struct karg_args, words) + 4 * n;
        xtq_kernel_t *k = make_kernel(agent, TASK_KARG, size);
        ka->n = n;
        for (uint32_t i = 0; i < n; i++)
            ka->words[i] = RESULT_WORD(i + 1000 * c);
        memset(out, 0, 4096);
        atomic_store(&last_status, 0);
        xtq_signal_store(sig, 1);
        xtq_aql_packet_t p;
        kernel_packet(&p, k, ka, 1, grid, wg, sig);
        struct xtq__enqueue d = {.packet = &p,
                                 .kernarg = ka,
                                 .kernarg_len = wrong ? size - 16 : size,
                                 .retire = count_retire,
                                 .cookie = (void *)(uintptr_t)(c + 1)};
        CHECK_OK(agent->ops->enqueue(q, &d));
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        for (int t = 0; atomic_load(&retired[c]) == 0 && t < 20000; t++)
            usleep(1000);
        CHECK_EQ(atomic_load(&retired[c]), 1);
        CHECK_EQ(atomic_load(&last_status), wrong ? -XTQ_EKERNARG : 0);
        for (uint32_t i = 0; i < n; i++)
            CHECK_EQ(out[i], wrong ? 0 : RESULT_WORD(i + 1000 * c));
        CHECK_OK(xtq_kernel_destroy(k));
    }
    CHECK_OK(xtq_cuda_signal_destroy(agent, sig));
    CHECK_OK(xtq_queue_destroy(q));
    host_free(agent, out, 4096);
    host_free(agent, ka, sizeof(*ka));
    agent->ops->close(agent);
    free(retired);
}

/* One geometry packet through the agent's enqueue; checks every cell of
 * the grid and that none beyond it was written. Returns the status. */
static int run_geom(xtq_queue_t *q, xtq_kernel_t *k, struct geom_args *ka, uint32_t *out, int dims,
                    const uint32_t grid[3], const uint16_t wg[3], xtq_signal_t *sig,
                    uint32_t cookie)
{
    const uint32_t cells = grid[0] * grid[1] * grid[2], guard = 256;
    memset(out, 0, (cells + guard) * 4);
    int status = enqueue_retired(q, k, ka, sizeof(*ka), dims, grid, wg, sig, cookie);
    for (uint32_t z = 0; z < grid[2]; z++)
        for (uint32_t y = 0; y < grid[1]; y++)
            for (uint32_t x = 0; x < grid[0]; x++) {
                uint32_t lin = x + y * grid[0] + z * grid[0] * grid[1];
                CHECK_EQ(out[lin], status ? 0 : geom_value(x, y, z, ka->tag) + 7);
            }
    for (uint32_t i = cells; i < cells + guard; i++)
        CHECK_EQ(out[i], 0);
    return status;
}

/* The processor skips the geometry check for a packet of the same kernel
 * and shape as its queue's last one: a new shape of the same kernel, the
 * same shape of another kernel, and a kernel destroyed (and its slot
 * reused by another task) after its shape was cached are each checked
 * and run for what they are. */
XTQ_TEST(repeated_shapes_checked_for_what_they_are)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t ga[3] = {37, 5, 3}, gb[3] = {64, 1, 1}, gc[3] = {64, 2, 1};
    const uint16_t wa[3] = {8, 4, 2}, wb[3] = {16, 1, 1};
    const size_t out_len = (37 * 5 * 3 + 256) * 4;
    uint32_t *out = host_alloc(agent, out_len);
    uint32_t *payload = host_alloc(agent, 64);
    struct geom_args *ka = host_alloc(agent, sizeof(*ka));
    payload[0] = 7;
    ka->out = out;
    ka->payload = payload;
    ka->tag = 0x3c3c3;
    /* Every buffer the tasks use exists before the processor starts (the
     * first queue): compute-sanitizer's memcheck checks a kernel's
     * accesses against the allocations made before its launch. */
    struct result_args *kr = host_alloc(agent, sizeof(*kr));
    uint32_t *info = host_alloc(agent, 64), *result = host_alloc(agent, 64);
    retired = calloc(16, sizeof(*retired));
    xtq_kernel_t *k1 = make_kernel(agent, TASK_GEOM, sizeof(*ka));
    xtq_kernel_t *k2 = make_kernel(agent, TASK_GEOM, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    uint32_t c = 0;
    CHECK_EQ(run_geom(q, k1, ka, out, 3, ga, wa, sig, ++c), 0);
    CHECK_EQ(run_geom(q, k1, ka, out, 3, ga, wa, sig, ++c), 0); /* cached */
    CHECK_EQ(run_geom(q, k1, ka, out, 1, gb, wb, sig, ++c), 0); /* new shape */
    CHECK_EQ(run_geom(q, k1, ka, out, 1, gb, wb, sig, ++c), 0);
    CHECK_EQ(run_geom(q, k1, ka, out, 2, gc, wb, sig, ++c), 0); /* 2-D, same sizes */
    CHECK_EQ(run_geom(q, k2, ka, out, 2, gc, wb, sig, ++c), 0); /* another kernel */
    CHECK_EQ(run_geom(q, k2, ka, out, 2, gc, wb, sig, ++c), 0);
    /* Destroyed after its shape was cached: refused, nothing written. */
    uint64_t obj2 = k2->object;
    CHECK_OK(xtq_kernel_destroy(k2));
    struct xtq_kernel gone = {.agent = agent, .object = obj2, .kernarg_size = sizeof(*ka)};
    CHECK_EQ(run_geom(q, &gone, ka, out, 2, gc, wb, sig, ++c), -XTQ_ENOKERNEL);
    /* Its slot, reused, names the new task (other function, other
     * argument length), even in the cached shape: the new task runs. */
    xtq_kernel_t *k3 = make_kernel(agent, TASK_RESULT, sizeof(struct result_args));
    if (k3->object != obj2)
        fprintf(stderr, "note: the new kernel took another descriptor slot\n");
    kr->info = info;
    for (int round = 0; round < 2; round++) {
        memset(info, 0, 64);
        memset(result, 0, 64);
        atomic_store(&last_status, 0);
        xtq_signal_store(sig, 1);
        xtq_aql_packet_t p;
        kernel_packet(&p, k3, kr, 2, gc, wb, sig);
        struct xtq__enqueue d = {.packet = &p,
                                 .kernarg = kr,
                                 .kernarg_len = sizeof(*kr),
                                 .result = result,
                                 .result_len = 64,
                                 .retire = count_retire,
                                 .cookie = (void *)(uintptr_t)++c};
        CHECK_OK(xtq__cuda_enqueue(q, &d, NULL));
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        for (int t = 0; atomic_load(&retired[c - 1]) == 0 && t < 20000; t++)
            usleep(1000);
        CHECK_EQ(atomic_load(&last_status), 0);
        CHECK_EQ(info[0], 64);
        CHECK_EQ(info[1], 1);
        for (uint32_t i = 0; i < 16; i++)
            CHECK_EQ(result[i], RESULT_WORD(i));
    }
    CHECK_OK(xtq_cuda_signal_destroy(agent, sig));
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k1));
    CHECK_OK(xtq_kernel_destroy(k3));
    host_free(agent, out, out_len);
    host_free(agent, payload, 64);
    host_free(agent, ka, sizeof(*ka));
    host_free(agent, kr, sizeof(*kr));
    host_free(agent, info, 64);
    host_free(agent, result, 64);
    agent->ops->close(agent);
    free(retired);
}

/* Large dispatches on a grid of their own: the same task, the same
 * coordinates and sums as in the processor's blocks (XTQ_CUDA_GRID_MIN). */
XTQ_TEST(grid_launch_matches_processor)
{
    setenv("XTQ_CUDA_COPY_MIN", "0", 1); /* both read the payload in place */
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {37, 5, 3};
    const uint16_t wg[3] = {8, 4, 2}; /* 5 x 2 x 2 = 20 groups */
    const size_t cells = 37 * 5 * 3, guard = 64;
    uint32_t *out = host_alloc(agent, (cells + guard) * 4);
    uint32_t *payload = host_alloc(agent, 4096);
    struct geom_args *ka = host_alloc(agent, sizeof(*ka));
    const uint32_t len = 1 << 20;
    uint8_t *big = host_alloc(agent, len);
    struct sum_args *sa = host_alloc(agent, sizeof(*sa));
    unsigned long long *dresult = NULL, want = 0;
    CHECK(cudaMalloc((void **)&dresult, 16) == cudaSuccess);
    srand(3);
    for (uint32_t i = 0; i < len; i++) {
        big[i] = (uint8_t)rand();
        want += big[i];
    }
    payload[0] = 77;
    ka->out = out;
    ka->payload = payload;
    ka->tag = 0x3c3c3;
    xtq_kernel_t *k = make_kernel(agent, TASK_GEOM, sizeof(*ka));
    xtq_kernel_t *ks = make_kernel(agent, TASK_SUM, sizeof(*sa));
    CHECK_OK(xtq_queue_create(agent, 8, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    uint64_t before[2], after[2];
    CHECK_OK(xtq__cuda_grid_stats(agent, before));
    for (uint32_t grid_min = 0; grid_min <= 20; grid_min += 20) {
        CHECK_OK(xtq__cuda_tune(agent, XTQ__CUDA_KNOB_GRID_MIN, grid_min));
        memset(out, 0, (cells + guard) * 4);
        xtq_signal_store(sig, 1);
        xtq_aql_packet_t p;
        kernel_packet(&p, k, ka, 3, grid, wg, sig);
        submit(q, &p, NULL);
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        for (uint32_t z = 0; z < 3; z++)
            for (uint32_t y = 0; y < 5; y++)
                for (uint32_t x = 0; x < 37; x++) {
                    uint32_t lin = x + y * 37 + z * 37 * 5;
                    CHECK_EQ(out[lin], geom_value(x, y, z, 0x3c3c3) + 77);
                }
        for (size_t i = cells; i < cells + guard; i++)
            CHECK_EQ(out[i], 0);
        /* 1 MiB in place over 256 groups, through the engine's path. */
        CHECK_EQ(enqueue_sum(q, ks, sa, dresult, big, len, 256, sig, want),
                 (uint64_t)(uintptr_t)big);
    }
    CHECK_OK(xtq__cuda_grid_stats(agent, after));
    /* geometry and sum with grid_min 20, where the module launches grids */
    CHECK_EQ(after[0] - before[0], module_grids(agent) ? 2 : 0);
    CHECK_EQ(after[1], before[1]);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_kernel_destroy(ks));
    agent->ops->close(agent);
    CHECK(cudaFree(dresult) == cudaSuccess);
    unsetenv("XTQ_CUDA_COPY_MIN");
}

static void nothing_run(void *arg)
{
    (void)arg;
}

/*
 * A launched grid's tag is new after the processor was relaunched: each
 * round runs a grid dispatch, pauses the processor (xtq_cuda_quiesce: it
 * exits and starts again), then a grid dispatch with a small one queued
 * right behind it. With tags restarting at the relaunch, the second grid
 * took the first one's completed tag, block 0 went on to the small packet
 * without waiting, and one of the two never completed or ran the other's
 * arguments (libxtq_coll on 4 H100s hung this way; session 10).
 */
XTQ_TEST(grid_tags_survive_relaunch)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig, *sig2;
    const uint32_t grid[3] = {37, 5, 3};
    const uint16_t wg[3] = {8, 4, 2}; /* 20 groups */
    const uint32_t one[3] = {1, 1, 1};
    const uint16_t wg1[3] = {1, 1, 1};
    const size_t cells = 37 * 5 * 3;
    uint32_t *out = host_alloc(agent, cells * 4);
    uint32_t *payload = host_alloc(agent, 4096);
    uint32_t *seen = host_alloc(agent, 4096);
    struct geom_args *ka = host_alloc(agent, sizeof(*ka));
    struct count_args *kc = host_alloc(agent, 8 * sizeof(*kc));
    xtq_kernel_t *k = make_kernel(agent, TASK_GEOM, sizeof(*ka));
    xtq_kernel_t *kn = make_kernel(agent, TASK_COUNT, sizeof(*kc));
    CHECK_OK(xtq_queue_create(agent, 8, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig2));
    CHECK_OK(xtq__cuda_tune(agent, XTQ__CUDA_KNOB_GRID_MIN, 16));
    payload[0] = 5;
    ka->out = out;
    ka->payload = payload;
    memset(seen, 0, 4096);
    for (uint32_t round = 0; round < 8; round++) {
        xtq_aql_packet_t p, p2;
        /* A grid, then a relaunch. */
        memset(out, 0, cells * 4);
        ka->tag = 0x100 + round;
        xtq_signal_store(sig, 1);
        kernel_packet(&p, k, ka, 3, grid, wg, sig);
        submit(q, &p, NULL);
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        CHECK_OK(xtq_cuda_quiesce(agent, nothing_run, NULL));
        /* A grid with a small packet right behind it. */
        memset(out, 0, cells * 4);
        ka->tag = 0x200 + round;
        xtq_signal_store(sig, 1);
        xtq_signal_store(sig2, 1);
        kernel_packet(&p, k, ka, 3, grid, wg, sig);
        kc[round].seen = seen;
        kc[round].seq = round;
        kernel_packet(&p2, kn, &kc[round], 1, one, wg1, sig2);
        submit(q, &p, NULL);
        submit(q, &p2, NULL);
        CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        CHECK_OK(xtq_signal_wait(sig2, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
        for (uint32_t z = 0; z < 3; z++)
            for (uint32_t y = 0; y < 5; y++)
                for (uint32_t x = 0; x < 37; x++)
                    CHECK_EQ(out[x + y * 37 + z * 37 * 5], geom_value(x, y, z, 0x200 + round) + 5);
        CHECK_EQ(seen[round], 1);
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    CHECK_OK(xtq_kernel_destroy(kn));
    agent->ops->close(agent);
}

/* A task module's processor runs its tasks; one module at a time; a
 * kernel of a detached module completes with -XTQ_ENOKERNEL (never a call
 * into a module whose processor is not running) and works again once the
 * module is back. */
XTQ_TEST(module_attach_rules)
{
    unsigned n = 0;
    xtq_agent_t *agent = NULL;
    xtq_kernel_t *k = NULL;
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    if (xtq__cuda_agent_provider.probe(skip_reason, sizeof(skip_reason), &n) != 0)
        XTQ_SKIP("%s", skip_reason);
    CHECK_OK(xtq__cuda_agent_provider.open(NULL, 0, &agent));
    /* No module yet: no kernel object can name a task. */
    CHECK_ERR(xtq_kernel_create_cuda(agent, cuda_task_address(TASK_COUNT),
                                     sizeof(struct count_args), &k),
              -XTQ_EINVAL);
    /* Host memory first: compute-sanitizer's memcheck only knows memory
     * registered before the kernel that reads it was launched. */
    uint32_t *seen = host_alloc(agent, 4096);
    struct count_args *ka = host_alloc(agent, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q)); /* libxtq's own processor starts */
    CHECK_OK(cuda_tasks_attach(agent));       /* and is replaced */
    CHECK_OK(cuda_tasks_attach(agent));       /* a second reference */
    CHECK_ERR(cuda_tasks_attach_other(agent), -XTQ_EBUSY);
    k = make_kernel(agent, TASK_COUNT, sizeof(struct count_args));
    ka->seen = seen;
    ka->seq = 0;
    retired = calloc(3, sizeof(*retired));
    atomic_store(&last_status, 0);
    q->retire = count_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    xtq_aql_packet_t p;
    kernel_packet(&p, k, ka, 1, grid, wg, sig);
    submit(q, &p, (void *)(uintptr_t)1);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    CHECK_EQ(*(volatile uint32_t *)&seen[0], 1u);
    /* Two references: the first detach keeps the module. */
    CHECK_OK(cuda_tasks_detach(agent));
    CHECK_OK(cuda_tasks_detach(agent));
    CHECK_ERR(cuda_tasks_detach(agent), -XTQ_EINVAL);
    xtq_signal_store(sig, 1);
    submit(q, &p, (void *)(uintptr_t)2);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (int t = 0; atomic_load(&retired[1]) == 0 && t < 20000; t++)
        usleep(1000);
    CHECK_EQ(atomic_load(&last_status), -XTQ_ENOKERNEL);
    CHECK_EQ(*(volatile uint32_t *)&seen[0], 1u); /* not run */
    /* Back: the same kernel object runs again. */
    CHECK_OK(cuda_tasks_attach(agent));
    xtq_signal_store(sig, 1);
    submit(q, &p, (void *)(uintptr_t)3);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    CHECK_EQ(*(volatile uint32_t *)&seen[0], 2u);
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    free(retired);
}

XTQ_TEST(register_heavy_task)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *sig;
    const uint32_t grid[3] = {256, 1, 1};
    const uint16_t wg[3] = {256, 1, 1};
    float *in = host_alloc(agent, HEAVY_N * 4);
    float *out = host_alloc(agent, 256 * 4);
    struct heavy_args *ka = host_alloc(agent, sizeof(*ka));
    for (int i = 0; i < HEAVY_N; i++)
        in[i] = (float)(i % 13) * 0.25f - 1.0f;
    ka->in = in;
    ka->out = out;
    xtq_kernel_t *k = make_kernel(agent, TASK_HEAVY, sizeof(*ka));
    CHECK_OK(xtq_queue_create(agent, 4, &q));
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &sig));
    xtq_aql_packet_t p;
    kernel_packet(&p, k, ka, 1, grid, wg, sig);
    submit(q, &p, NULL);
    CHECK_OK(xtq_signal_wait(sig, XTQ_SIGNAL_EQ, 0, WAIT_NS, NULL));
    for (uint32_t i = 0; i < 256; i++) {
        float ref;
        heavy_reference(in, i, &ref);
        float err = out[i] - ref;
        if (err < 0)
            err = -err;
        CHECK(err <= 1e-3f * (ref < 0 ? -ref : ref) + 1e-3f);
    }
    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
}

/* ---- destroy with packets queued (issue 10, bug 3) ---------------------- */

static _Atomic int cancel_status[8];
static _Atomic uint32_t cancel_hits[8];
static void cancel_retire(void *cookie, int status)
{
    atomic_store(&cancel_status[(uintptr_t)cookie], status);
    atomic_fetch_add(&cancel_hits[(uintptr_t)cookie], 1);
}

static void *release_later(void *arg)
{
    usleep(100000); /* destroy is (most likely) waiting for the processor by then */
    xtq_signal_store(arg, 0);
    return NULL;
}

/*
 * A barrier holds the processor at the head of a queue with four kernel
 * packets behind it; the queue is destroyed meanwhile. Once the barrier
 * completes (the processor then leaves the queue), the four are retired
 * with -XTQ_ECANCELED, each once, and none runs.
 */
XTQ_TEST(queue_destroy_cancels_queued)
{
    xtq_agent_t *agent = open_agent();
    xtq_queue_t *q;
    xtq_signal_t *dep, *sig;
    const uint32_t grid[3] = {1, 1, 1};
    const uint16_t wg[3] = {1, 1, 1};
    uint32_t *seen = host_alloc(agent, 4096);
    struct count_args *ka = host_alloc(agent, 4 * sizeof(*ka));
    xtq_kernel_t *k = make_kernel(agent, TASK_COUNT, sizeof(*ka));
    xtq_aql_packet_t p;
    pthread_t th;

    CHECK_OK(xtq_queue_create(agent, 8, &q));
    q->retire = cancel_retire;
    CHECK_OK(xtq_cuda_signal_create(agent, 1, &dep));
    CHECK_OK(xtq_cuda_signal_create(agent, 4, &sig));
    memset(&p, 0, sizeof(p));
    p.barrier.header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_AND, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM);
    p.barrier.dep_signal[0] = xtq_signal_handle(dep);
    submit(q, &p, (void *)(uintptr_t)1);
    for (uint32_t i = 0; i < 4; i++) {
        ka[i].seen = seen;
        ka[i].seq = i;
        kernel_packet(&p, k, &ka[i], 1, grid, wg, sig);
        submit(q, &p, (void *)(uintptr_t)(i + 2));
    }
    CHECK_EQ(pthread_create(&th, NULL, release_later, dep), 0);
    CHECK_OK(xtq_queue_destroy(q));
    pthread_join(th, NULL);
    CHECK_EQ(atomic_load(&cancel_hits[1]), 1);
    CHECK_EQ(atomic_load(&cancel_status[1]), 0);
    for (int i = 2; i < 6; i++) {
        CHECK_EQ(atomic_load(&cancel_hits[i]), 1);
        CHECK_EQ(atomic_load(&cancel_status[i]), -XTQ_ECANCELED);
        CHECK_EQ(seen[i - 2], 0);
    }
    CHECK_EQ(xtq_signal_load(sig), 4); /* a cancelled task does not signal */
    CHECK_OK(xtq_kernel_destroy(k));
    agent->ops->close(agent);
    for (int i = 1; i < 6; i++)
        CHECK_EQ(atomic_load(&cancel_hits[i]), 1); /* not again at close */
}

XTQ_TEST(shutdown_and_reopen)
{
    for (int round = 0; round < 3; round++) {
        xtq_agent_t *agent = open_agent();
        xtq_queue_t *q;
        CHECK_OK(xtq_queue_create(agent, 2, &q));
        /* Close with a live queue: close frees it. */
        agent->ops->close(agent);
    }
}

/* An application thread that chose its GPU keeps it through every agent
 * call, whichever device the agent drives (with two GPUs, opening the
 * second agent left the thread on device 1, and rank 0's own kernels then
 * read device 1's memory: an illegal access in xtq_allreduce's hsa mode). */
XTQ_TEST(caller_device_kept)
{
    unsigned n = 0;
    xtq_agent_t *agent[2];
    xtq_queue_t *q;
    int dev = -1;
    if (xtq__cuda_agent_provider.probe(skip_reason, sizeof(skip_reason), &n) != 0)
        XTQ_SKIP("%s", skip_reason);
    if (n < 2)
        XTQ_SKIP("one CUDA device: needs two to see a call change the caller's device");
    CHECK(cudaSetDevice(0) == cudaSuccess);
    CHECK_OK(xtq__cuda_agent_provider.open(NULL, 1, &agent[1]));
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);
    CHECK(cudaSetDevice(1) == cudaSuccess);
    CHECK_OK(xtq__cuda_agent_provider.open(NULL, 0, &agent[0]));
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 1);
    CHECK(cudaSetDevice(0) == cudaSuccess);
    CHECK_OK(cuda_tasks_attach(agent[1]));
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);
    CHECK_OK(xtq_queue_create(agent[1], 4, &q));
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);
    void *p = host_alloc(agent[1], 4096);
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);
    host_free(agent[1], p, 4096);
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);
    CHECK_OK(xtq_queue_destroy(q));
    agent[1]->ops->close(agent[1]);
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 0);
    CHECK(cudaSetDevice(1) == cudaSuccess);
    agent[0]->ops->close(agent[0]);
    CHECK(cudaGetDevice(&dev) == cudaSuccess && dev == 1);
}
