/*
 * ROCr agent (AMD GPUs through the HSA runtime). Cases that need a GPU SKIP
 * with the probe's reason; absence itself is asserted where there is none.
 */
#include "internal.h"

#include <unistd.h>

#include "hsa-glue/rocr_agent.h"
#include "xtq_test.h"
#include "hsa-glue/rocr_kernels/xtq_kernels.h"

#ifdef XTQ_HAVE_ROCR
#include <hsa/hsa.h>
#include <hsa/amd_hsa_queue.h>
#endif

#define TIMEOUT_NS (10LL * 1000 * 1000 * 1000)

#ifdef XTQ_HAVE_ROCR_AGENT
static bool have_kfd(void)
{
    return access("/dev/kfd", F_OK) == 0;
}

/* Probe, and SKIP with the reason when no AMD GPU can be used here. */
static unsigned require_gpu(void)
{
    char reason[160] = "";
    unsigned n = 0;

    if (xtq__rocr_agent_provider.probe(reason, sizeof(reason), &n) != 0)
        XTQ_SKIP("ROCr agent unavailable: %s", reason);
    return n;
}

static xtq_agent_t *open_gpu0(void)
{
    xtq_agent_t *agent = NULL;

    require_gpu();
    CHECK_OK(xtq__rocr_agent_provider.open(NULL, 0, &agent));
    CHECK(agent != NULL);
    return agent;
}

/* The retire hook: counts retirements on a signal the test waits on. */
static void count_retire(void *cookie, int status)
{
    CHECK_EQ(status, 0);
    xtq_signal_add((xtq_signal_t *)cookie, 1);
}

/* Publish one packet the way the engine does: reserve, body, cookie,
 * publish (runs the prepare hook), doorbell. */
static void submit(xtq_queue_t *q, xtq_aql_packet_t *pkt, void *cookie)
{
    uint64_t index;

    CHECK_OK(xtq_queue_reserve(q, 1, &index));
    xtq_aql_packet_t *slot = xtq_queue_slot(q, index);
    memcpy((char *)slot + 4, (char *)pkt + 4, XTQ_AQL_PACKET_SIZE - 4);
    q->cookies[index & q->mask] = cookie;
    xtq_queue_publish(q, index, pkt->header, ((uint16_t *)pkt)[1]);
    xtq_queue_ring_doorbell(q, index);
}
#endif

XTQ_TEST(probe_reports_absence)
{
#ifndef XTQ_HAVE_ROCR_AGENT
    XTQ_SKIP("libxtq built without the ROCr agent (no hsa/hsa.h)");
#else
    char reason[160] = "";
    unsigned n = 99;

    if (have_kfd())
        XTQ_SKIP("/dev/kfd exists: an AMD GPU driver is present, absence does not apply");
    CHECK_ERR(xtq__rocr_agent_provider.probe(reason, sizeof(reason), &n), -XTQ_ENOAGENT);
    CHECK(reason[0] != '\0');
    CHECK(strstr(reason, "/dev/kfd") != NULL);
    CHECK_EQ(n, 0);
    /* The answer is stable: a second probe says the same. */
    char again[160] = "";
    CHECK_ERR(xtq__rocr_agent_provider.probe(again, sizeof(again), &n), -XTQ_ENOAGENT);
    CHECK(strcmp(reason, again) == 0);
    /* And an agent cannot be opened. */
    xtq_agent_t *agent = NULL;
    CHECK_ERR(xtq__rocr_agent_provider.open(NULL, 0, &agent), -XTQ_ENOAGENT);
    CHECK(agent == NULL);
#endif
}

XTQ_TEST(runtime_symbols_resolve)
{
    char reason[160] = "";

    /* Every hsa_* entry point the agent calls exists in the installed
     * runtime library (no hsa_init: works without a GPU). */
    if (xtq__rocr_load(reason, sizeof(reason)) != 0)
        XTQ_SKIP("%s not loadable: %s", XTQ__ROCR_LIBRARY, reason);
    CHECK(xtq__rocr_symbol_count() >= 30);
}

XTQ_TEST(aql_layout_matches_hsa_h)
{
#ifndef XTQ_HAVE_ROCR
    XTQ_SKIP("hsa/hsa.h not found at build time");
#else
#define SAME(xt, ht, f) CHECK_EQ(offsetof(xt, f), offsetof(ht, f))
    CHECK_EQ(sizeof(xtq_kernel_dispatch_packet_t), sizeof(hsa_kernel_dispatch_packet_t));
    CHECK_EQ(sizeof(xtq_agent_dispatch_packet_t), sizeof(hsa_agent_dispatch_packet_t));
    CHECK_EQ(sizeof(xtq_barrier_packet_t), sizeof(hsa_barrier_and_packet_t));
    CHECK_EQ(sizeof(xtq_barrier_packet_t), sizeof(hsa_barrier_or_packet_t));
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, setup);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, workgroup_size_x);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, grid_size_x);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, private_segment_size);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, group_segment_size);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, kernel_object);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, kernarg_address);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, reserved2);
    SAME(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, completion_signal);
    SAME(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, type);
    SAME(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, return_address);
    SAME(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, arg);
    SAME(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, completion_signal);
    SAME(xtq_barrier_packet_t, hsa_barrier_and_packet_t, dep_signal);
    SAME(xtq_barrier_packet_t, hsa_barrier_and_packet_t, completion_signal);
    CHECK_EQ(XTQ_PACKET_HEADER_BARRIER, HSA_PACKET_HEADER_BARRIER);
    CHECK_EQ(XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE, HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE);
    CHECK_EQ(XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE, HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
    CHECK_EQ(XTQ_PACKET_TYPE_KERNEL_DISPATCH, HSA_PACKET_TYPE_KERNEL_DISPATCH);
    CHECK_EQ(XTQ_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_BARRIER_AND);
    CHECK_EQ(XTQ_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
    /* The ROCr queue hands the generic code these two words as indices. */
    CHECK_EQ(offsetof(amd_queue_t, hsa_queue), 0);
    CHECK_EQ(offsetof(amd_queue_t, write_dispatch_id) % 8, 0);
    CHECK_EQ(offsetof(amd_queue_t, read_dispatch_id) % 8, 0);
    /* The kernels' argument block: two pointers, then the count. */
    CHECK_EQ(sizeof(struct xtq_kernel_args), 24);
    CHECK_EQ(offsetof(struct xtq_kernel_args, payload), 8);
#undef SAME
#endif
}

XTQ_TEST(agent_info)
{
#ifndef XTQ_HAVE_ROCR_AGENT
    XTQ_SKIP("libxtq built without the ROCr agent (no hsa/hsa.h)");
#else
    xtq_agent_t *agent = open_gpu0();
    xtq_agent_info_t info;
    char isa[64];

    CHECK_OK(xtq_agent_get_info(agent, &info));
    CHECK_EQ(info.kind, XTQ_AGENT_ROCR);
    CHECK(info.name[0] != '\0');
    CHECK(info.max_queue_size >= 64);
    CHECK_OK(xtq__rocr_agent_isa(agent, isa, sizeof(isa)));
    CHECK(strncmp(isa, "gfx", 3) == 0);
    agent->ops->close(agent);
#endif
}

XTQ_TEST(barrier_completes_signal_and_retires)
{
#ifndef XTQ_HAVE_ROCR_AGENT
    XTQ_SKIP("libxtq built without the ROCr agent (no hsa/hsa.h)");
#else
    xtq_agent_t *agent = open_gpu0();
    xtq_signal_t *done, *retired;
    xtq_queue_t *q;
    xtq_aql_packet_t pkt;
    const int n = 100; /* more than the initial signal pool */

    CHECK_OK(xtq_queue_create(agent, 64, &q));
    CHECK(q->prepare != NULL);
    CHECK_OK(xtq_signal_create(n, &done));
    CHECK_OK(xtq_signal_create(0, &retired));
    q->retire = count_retire;
    for (int i = 0; i < n; i++) {
        memset(&pkt, 0, sizeof(pkt));
        pkt.header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_AND, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                    XTQ_FENCE_SCOPE_SYSTEM);
        pkt.barrier.completion_signal = xtq_signal_handle(done);
        CHECK_OK(xtq_queue_submit(q, &pkt, TIMEOUT_NS, NULL));
    }
    /* The command processor decremented HSA signals; the async handlers
     * mirrored that into the XTQ signal. */
    CHECK_OK(xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, TIMEOUT_NS, NULL));
    /* Now with retire cookies, as the engine submits. */
    for (int i = 0; i < n; i++) {
        memset(&pkt, 0, sizeof(pkt));
        pkt.header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_AND, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                    XTQ_FENCE_SCOPE_SYSTEM);
        while (xtq_queue_load_write_index(q) - xtq_queue_load_read_index(q) >= q->size)
            CHECK_OK(xtq_signal_wait(retired, XTQ_SIGNAL_GTE, i - (int)q->size + 1, TIMEOUT_NS,
                                     NULL));
        submit(q, &pkt, retired);
    }
    CHECK_OK(xtq_signal_wait(retired, XTQ_SIGNAL_EQ, n, TIMEOUT_NS, NULL));
    CHECK_EQ(xtq_signal_load(done), 0);
    CHECK_OK(xtq_queue_destroy(q));
    xtq_signal_destroy(done);
    xtq_signal_destroy(retired);
    agent->ops->close(agent);
#endif
}

XTQ_TEST(kernel_sum_f32)
{
#ifndef XTQ_HAVE_ROCR_AGENT
    XTQ_SKIP("libxtq built without the ROCr agent (no hsa/hsa.h)");
#else
    xtq_agent_t *agent = open_gpu0();
    const char *path = getenv("XTQ_ROCR_HSACO");
    char isa[64], file[512];
    xtq_kernel_t *kernel;
    xtq_queue_t *q;
    xtq_signal_t *done;
    xtq_aql_packet_t pkt;
    struct xtq_kernel_args *args;
    const uint32_t count = 1000;
    const size_t bytes = 4096;
    float *target, *payload;

    CHECK_OK(xtq__rocr_agent_isa(agent, isa, sizeof(isa)));
    if (path == NULL) {
        if (XTQ_KERNELS_HSACO_DIR[0] == '\0')
            XTQ_SKIP("no AMD code object: hipcc was not found at build time "
                     "(set XTQ_ROCR_HSACO=path/to/xtq_kernels-%s.hsaco)", isa);
        snprintf(file, sizeof(file), "%s/xtq_kernels-%s.hsaco", XTQ_KERNELS_HSACO_DIR, isa);
        path = file;
    }
    if (access(path, R_OK) != 0)
        XTQ_SKIP("%s missing (add %s to XTQ_HIP_ARCHS and rebuild)", path, isa);
    CHECK_OK(xtq_kernel_create_rocr(agent, path, XTQ_KERNEL_SUM_F32, &kernel));
    CHECK(xtq_kernel_object(kernel) != 0);
    CHECK(xtq_kernel_kernarg_size(kernel) >= sizeof(*args));

    target = aligned_alloc(4096, bytes);
    payload = aligned_alloc(4096, bytes);
    CHECK(target != NULL && payload != NULL);
    for (uint32_t i = 0; i < count; i++) {
        target[i] = (float)i;
        payload[i] = 0.5f * (float)i;
    }
    CHECK_OK(xtq_rocr_mem_register(agent, target, bytes));
    CHECK_OK(xtq_rocr_mem_register(agent, payload, bytes));
    CHECK_OK(xtq_rocr_kernarg_alloc(agent, xtq_kernel_kernarg_size(kernel), (void **)&args));
    memset(args, 0, xtq_kernel_kernarg_size(kernel));
    args->target = target;
    args->payload = payload;
    args->count = count;

    CHECK_OK(xtq_queue_create(agent, 64, &q));
    CHECK_OK(xtq_signal_create(1, &done));
    memset(&pkt, 0, sizeof(pkt));
    pkt.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                XTQ_FENCE_SCOPE_SYSTEM);
    pkt.kernel.setup = 1;
    pkt.kernel.workgroup_size_x = 64;
    pkt.kernel.workgroup_size_y = pkt.kernel.workgroup_size_z = 1;
    pkt.kernel.grid_size_x = 1024;
    pkt.kernel.grid_size_y = pkt.kernel.grid_size_z = 1;
    pkt.kernel.kernel_object = xtq_kernel_object(kernel);
    pkt.kernel.kernarg_address = args;
    pkt.kernel.completion_signal = xtq_signal_handle(done);
    CHECK_OK(xtq_queue_submit(q, &pkt, TIMEOUT_NS, NULL));
    CHECK_OK(xtq_signal_wait(done, XTQ_SIGNAL_EQ, 0, TIMEOUT_NS, NULL));
    for (uint32_t i = 0; i < count; i++)
        if (target[i] != 1.5f * (float)i)
            XTQ_FAIL("target[%u] = %g, expected %g", i, (double)target[i], 1.5 * i);

    CHECK_OK(xtq_queue_destroy(q));
    CHECK_OK(xtq_rocr_kernarg_free(agent, args));
    CHECK_OK(xtq_rocr_mem_deregister(agent, target, bytes));
    CHECK_OK(xtq_rocr_mem_deregister(agent, payload, bytes));
    CHECK_OK(xtq_kernel_destroy(kernel));
    xtq_signal_destroy(done);
    free(target);
    free(payload);
    agent->ops->close(agent);
#endif
}

XTQ_TEST(wrong_agent_kind_rejected)
{
    /* Another kind's agent is not a ROCr agent: the ROCr entry points say
     * so instead of touching the HSA runtime. */
    struct xtq_agent other = {.ops = NULL, .kind = XTQ_AGENT_CPU};
    xtq_kernel_t *k = NULL;
    int buf;
#ifdef XTQ_HAVE_ROCR_AGENT
    const int want = -XTQ_EAGENTKIND;
#else
    const int want = -XTQ_ENOAGENT;
#endif

    CHECK_ERR(xtq_kernel_create_rocr(&other, "/nonexistent.hsaco", "k", &k), want);
    CHECK_ERR(xtq_rocr_mem_register(&other, &buf, sizeof(buf)), want);
    CHECK_ERR(xtq_rocr_kernarg_alloc(&other, 64, (void **)&k), want);
    CHECK(k == NULL);
}

XTQ_TEST(code_objects_are_plain_elf)
{
    /* What hipcc built must be what hsa_code_object_reader takes: an ELF
     * code object (not a clang offload bundle) naming the kernels. */
    static const char *isas[] = {"gfx908", "gfx90a", "gfx1030", "gfx1100"};
    static const char *kernels[] = {XTQ_KERNEL_SUM_F32, XTQ_KERNEL_SUM_F64, XTQ_KERNEL_COPY_U32,
                                    XTQ_KERNEL_INCREMENT};
    int found = 0;

    if (XTQ_KERNELS_HSACO_DIR[0] == '\0')
        XTQ_SKIP("hipcc was not found at build time: no AMD code objects to check");
    for (size_t i = 0; i < ARRAY_SIZE(isas); i++) {
        char path[512], *buf;
        size_t len;
        FILE *f;

        snprintf(path, sizeof(path), "%s/xtq_kernels-%s.hsaco", XTQ_KERNELS_HSACO_DIR, isas[i]);
        f = fopen(path, "rb");
        if (f == NULL)
            continue; /* not in XTQ_HIP_ARCHS */
        buf = malloc(1 << 20);
        CHECK(buf != NULL);
        len = fread(buf, 1, 1 << 20, f);
        fclose(f);
        CHECK(len > 4 && memcmp(buf, "\x7f" "ELF", 4) == 0);
        for (size_t k = 0; k < ARRAY_SIZE(kernels); k++) {
            char kd[64];

            snprintf(kd, sizeof(kd), "%s.kd", kernels[k]);
            CHECK(memmem(buf, len, kd, strlen(kd) + 1) != NULL);
        }
        free(buf);
        found++;
    }
    CHECK(found > 0);
}
