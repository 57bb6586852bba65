/*
 * Lookup tables, the XTQ rewrite and the command builders, white-box.
 * Agents, queues, kernels and functions are plain structs (internal.h):
 * the rewrite reads only what registration copied plus queue->agent->kind.
 */
#include "internal.h"

#include "registry/registry.h"
#include "wire.h"
#include "xtq_test.h"

#define TABLE  8
#define KQ_CPU 3 /* queue indices */
#define KQ_GPU 5
#define K_CPU  2 /* kernel indices */
#define K_GPU  4
#define F_CPU  6 /* function index */
#define F_GPU  1

static struct xtq_agent cpu_agent = {.kind = XTQ_AGENT_CPU};
static struct xtq_agent gpu_agent = {.kind = XTQ_AGENT_CUDA};
static struct xtq_queue q_cpu = {.agent = &cpu_agent};
static struct xtq_queue q_gpu = {.agent = &gpu_agent};
static struct xtq_kernel k_cpu = {
    .agent = &cpu_agent, .object = 0x1111222233334444ull, .kernarg_size = 32};
static struct xtq_kernel k_gpu = {
    .agent = &gpu_agent, .object = 0x5555666677778888ull, .kernarg_size = 24};
static struct xtq_function f_cpu = {.agent = &cpu_agent, .object = 0x9999aaaabbbbccccull};
static struct xtq_function f_gpu = {.agent = &gpu_agent, .object = 0xddddeeeeffff0000ull};
static struct xtq_signal sig;
static char tbuf_k[128], tbuf_f[128];

static struct xtq__registry *make_registry(void)
{
    struct xtq__registry *reg = NULL;
    atomic_store(&q_cpu.registrations, 0);
    atomic_store(&q_gpu.registrations, 0);
    CHECK_OK(xtq__registry_create(TABLE, &reg));
    CHECK_OK(xtq__registry_set_queue(reg, KQ_CPU, &q_cpu));
    CHECK_OK(xtq__registry_set_queue(reg, KQ_GPU, &q_gpu));
    CHECK_OK(xtq__registry_set_kernel(reg, K_CPU, &k_cpu, tbuf_k, &sig));
    CHECK_OK(xtq__registry_set_kernel(reg, K_GPU, &k_gpu, NULL, NULL));
    CHECK_OK(xtq__registry_set_function(reg, F_CPU, &f_cpu, tbuf_f));
    CHECK_OK(xtq__registry_set_function(reg, F_GPU, &f_gpu, NULL));
    return reg;
}

/* A receive region: packet at 64, kernel arguments right after it. */
struct rx {
    _Alignas(64) unsigned char buf[1024];
};

static void fill_pattern(unsigned char *p, size_t n, unsigned char seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 7);
}

static xtq_aql_packet_t kernel_packet(uint64_t kindex, uint64_t qindex)
{
    xtq_aql_packet_t p;
    memset(&p, 0, sizeof(p));
    p.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                     XTQ_FENCE_SCOPE_SYSTEM);
    p.kernel.setup = 1;
    p.kernel.grid_size_x = p.kernel.grid_size_y = p.kernel.grid_size_z = 1;
    p.kernel.workgroup_size_x = p.kernel.workgroup_size_y = p.kernel.workgroup_size_z = 1;
    p.kernel.kernel_object = kindex;
    p.kernel.reserved2 = qindex;
    return p;
}

static xtq_aql_packet_t function_packet(uint16_t findex, uint64_t qindex)
{
    xtq_aql_packet_t p;
    memset(&p, 0, sizeof(p));
    p.agent.header = xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                    XTQ_FENCE_SCOPE_SYSTEM);
    p.agent.type = findex;
    p.agent.reserved2 = qindex;
    return p;
}

/* A rejected packet leaves the packet, the kernel arguments and *queue as they were. */
static void expect_reject(const struct xtq__registry *reg, xtq_aql_packet_t pkt, uint32_t klen,
                          int err)
{
    unsigned char kernarg[256], kcopy[256];
    xtq_aql_packet_t copy = pkt;
    xtq_queue_t *q = (xtq_queue_t *)(uintptr_t)0x1234;

    fill_pattern(kernarg, sizeof(kernarg), 3);
    memcpy(kcopy, kernarg, sizeof(kernarg));
    CHECK_ERR(xtq__rewrite(reg, &pkt, klen ? kernarg : NULL, klen, kernarg + 128, 8, &q), err);
    CHECK(memcmp(&pkt, &copy, sizeof(pkt)) == 0);
    CHECK(memcmp(kernarg, kcopy, sizeof(kernarg)) == 0);
    CHECK(q == (xtq_queue_t *)(uintptr_t)0x1234);
}

/* ---- kernel dispatch: every field ---------------------------------------- */

static void check_kernel_rewrite(size_t kernarg_offset)
{
    struct xtq__registry *reg = make_registry();
    struct rx rx;
    xtq_dispatch_geometry_t g = {3, {10, 20, 30}, {2, 4, 6}};
    unsigned char args[32], before[32];
    xtq_aql_packet_t pkt, orig;
    xtq_queue_t *q = NULL;
    size_t len;
    unsigned char *kernarg = rx.buf + kernarg_offset;
    unsigned char *payload = rx.buf + 512;
    uint64_t a0, a1;

    fill_pattern(args, sizeof(args), 0x40);
    CHECK_OK(xtq_cmd_kernel(rx.buf, sizeof(rx.buf), K_CPU, KQ_CPU, &g, args, sizeof(args), &len));
    CHECK_EQ(len, 64 + 32);
    memcpy(&pkt, rx.buf, 64);
    memmove(kernarg, rx.buf + 64, 32); /* where the arguments "landed" */
    memcpy(before, kernarg, 32);
    /* Fields the initiator fills that must pass through, and garbage in
     * fields that must be overwritten. */
    pkt.kernel.header = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 1, XTQ_FENCE_SCOPE_AGENT,
                                       XTQ_FENCE_SCOPE_NONE);
    pkt.kernel.private_segment_size = 4096;
    pkt.kernel.group_segment_size = 8192;
    pkt.kernel.reserved0 = 0x77;
    pkt.kernel.kernarg_address = (void *)(uintptr_t)0xdeadbeef;
    pkt.kernel.completion_signal.handle = 0xbadc0ffee;
    orig = pkt;

    CHECK_OK(xtq__rewrite(reg, &pkt, kernarg, 32, payload, 100, &q));
    CHECK(q == &q_cpu);
    /* Rewritten. */
    CHECK_EQ(pkt.kernel.kernel_object, k_cpu.object);
    CHECK(pkt.kernel.kernarg_address == kernarg);
    CHECK_EQ(pkt.kernel.completion_signal.handle, (uint64_t)(uintptr_t)&sig);
    CHECK_EQ(pkt.kernel.reserved2, 0);
    /* Reserved by HSA: a peer's value must not reach an agent or hardware. */
    CHECK_EQ(pkt.kernel.reserved0, 0);
    memcpy(&a0, kernarg, 8);
    memcpy(&a1, kernarg + 8, 8);
    CHECK_EQ(a0, (uint64_t)(uintptr_t)tbuf_k);
    CHECK_EQ(a1, (uint64_t)(uintptr_t)payload);
    /* Passed through. */
    CHECK_EQ(pkt.kernel.header, orig.kernel.header);
    CHECK_EQ(pkt.kernel.setup, 3);
    CHECK_EQ(pkt.kernel.workgroup_size_x, 2);
    CHECK_EQ(pkt.kernel.workgroup_size_y, 4);
    CHECK_EQ(pkt.kernel.workgroup_size_z, 6);
    CHECK_EQ(pkt.kernel.grid_size_x, 10);
    CHECK_EQ(pkt.kernel.grid_size_y, 20);
    CHECK_EQ(pkt.kernel.grid_size_z, 30);
    CHECK_EQ(pkt.kernel.private_segment_size, 4096);
    CHECK_EQ(pkt.kernel.group_segment_size, 8192);
    /* Kernel arguments beyond the first 16 bytes untouched. */
    CHECK(memcmp(kernarg + 16, before + 16, 16) == 0);
    xtq__registry_destroy(reg);
}

XTQ_TEST(kernel_rewrite_fields)
{
    check_kernel_rewrite(64);
}

/* Arguments need not be 8-byte aligned in the receive region. */
XTQ_TEST(kernel_rewrite_unaligned_kernarg)
{
    check_kernel_rewrite(64 + 3);
}

/* No target buffer, no signal, empty payload: NULLs and a zero handle. */
XTQ_TEST(kernel_rewrite_empty_registration)
{
    struct xtq__registry *reg = make_registry();
    unsigned char kernarg[24];
    xtq_aql_packet_t pkt = kernel_packet(K_GPU, KQ_GPU);
    xtq_queue_t *q = NULL;
    uint64_t a[3];

    fill_pattern(kernarg, sizeof(kernarg), 9);
    pkt.kernel.completion_signal.handle = 42;
    /* A non-NULL payload pointer with zero length still yields NULL. */
    CHECK_OK(xtq__rewrite(reg, &pkt, kernarg, 24, kernarg, 0, &q));
    CHECK(q == &q_gpu);
    memcpy(a, kernarg, sizeof(a));
    CHECK_EQ(a[0], 0);
    CHECK_EQ(a[1], 0);
    CHECK_EQ(pkt.kernel.completion_signal.handle, 0);
    CHECK_EQ(pkt.kernel.kernel_object, k_gpu.object);
    xtq__registry_destroy(reg);
}

/* ---- agent dispatch: every field ------------------------------------------ */

XTQ_TEST(function_rewrite_fields)
{
    struct xtq__registry *reg = make_registry();
    xtq_aql_packet_t pkt, orig;
    xtq_queue_t *q = NULL;
    char payload[16];
    size_t len;

    CHECK_OK(xtq_cmd_function(&pkt, sizeof(pkt), F_CPU, KQ_CPU, 0x2222, 0x3333, &len));
    CHECK_EQ(len, 64);
    pkt.agent.header = xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, 1, XTQ_FENCE_SCOPE_NONE,
                                      XTQ_FENCE_SCOPE_AGENT);
    pkt.agent.reserved0 = 0xabcdef;
    pkt.agent.return_address = (void *)(uintptr_t)0xfeedface;
    pkt.agent.arg[0] = 0x1010;
    pkt.agent.arg[1] = 0x2020;
    pkt.agent.completion_signal.handle = 0x5151;
    orig = pkt;

    CHECK_OK(xtq__rewrite(reg, &pkt, NULL, 0, payload, sizeof(payload), &q));
    CHECK(q == &q_cpu);
    CHECK_EQ(pkt.agent.arg[0], (uint64_t)(uintptr_t)tbuf_f);
    CHECK_EQ(pkt.agent.arg[1], (uint64_t)(uintptr_t)payload);
    CHECK_EQ(pkt.agent.arg[2], 0x2222);
    CHECK_EQ(pkt.agent.arg[3], 0x3333);
    CHECK(pkt.agent.return_address == NULL);
    CHECK_EQ(pkt.agent.completion_signal.handle, 0);
    CHECK_EQ(pkt.agent.reserved2, f_cpu.object);
    CHECK_EQ(pkt.agent.type, F_CPU);
    CHECK_EQ(pkt.agent.header, orig.agent.header);
    CHECK_EQ(pkt.agent.reserved0, 0xabcdef);
    xtq__registry_destroy(reg);
}

XTQ_TEST(function_rewrite_empty_registration)
{
    struct xtq__registry *reg = make_registry();
    xtq_aql_packet_t pkt = function_packet(F_GPU, KQ_GPU);
    xtq_queue_t *q = NULL;

    pkt.agent.arg[0] = pkt.agent.arg[1] = 0x77;
    CHECK_OK(xtq__rewrite(reg, &pkt, NULL, 0, &pkt, 0, &q));
    CHECK(q == &q_gpu);
    CHECK_EQ(pkt.agent.arg[0], 0);
    CHECK_EQ(pkt.agent.arg[1], 0);
    CHECK_EQ(pkt.agent.reserved2, f_gpu.object);
    xtq__registry_destroy(reg);
}

/* ---- rejections ------------------------------------------------------------ */

XTQ_TEST(reject_packet_types)
{
    struct xtq__registry *reg = make_registry();
    static const unsigned types[] = {XTQ_PACKET_TYPE_VENDOR_SPECIFIC,
                                     XTQ_PACKET_TYPE_INVALID,
                                     XTQ_PACKET_TYPE_BARRIER_AND,
                                     XTQ_PACKET_TYPE_BARRIER_OR,
                                     6,
                                     0x7f,
                                     0xff};
    for (size_t i = 0; i < ARRAY_SIZE(types); i++) {
        xtq_aql_packet_t pkt = kernel_packet(K_CPU, KQ_CPU);
        pkt.header = (uint16_t)((pkt.header & ~0xffu) | types[i]);
        expect_reject(reg, pkt, 32, -XTQ_EPACKET);
    }
    xtq__registry_destroy(reg);
}

XTQ_TEST(reject_reserved_fence_scope)
{
    struct xtq__registry *reg = make_registry();
    for (int which = 0; which < 2; which++) {
        unsigned shift = which ? XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE
                               : XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE;
        xtq_aql_packet_t k = kernel_packet(K_CPU, KQ_CPU);
        xtq_aql_packet_t f = function_packet(F_CPU, KQ_CPU);
        k.header = (uint16_t)(k.header | (3u << shift));
        f.header = (uint16_t)(f.header | (3u << shift));
        expect_reject(reg, k, 32, -XTQ_EPACKET);
        expect_reject(reg, f, 0, -XTQ_EPACKET);
    }
    xtq__registry_destroy(reg);
}

XTQ_TEST(reject_dimensions)
{
    struct xtq__registry *reg = make_registry();
    xtq_aql_packet_t pkt = kernel_packet(K_CPU, KQ_CPU);
    pkt.kernel.setup = 0;
    expect_reject(reg, pkt, 32, -XTQ_EPACKET);
    pkt.kernel.setup = 4; /* dimensions bits are 0 */
    expect_reject(reg, pkt, 32, -XTQ_EPACKET);
    xtq__registry_destroy(reg);
}

XTQ_TEST(reject_queue_index)
{
    struct xtq__registry *reg = make_registry();
    static const uint64_t bad[] = {0, 1, TABLE, TABLE + 1, 1ull << 32, UINT64_MAX};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        expect_reject(reg, kernel_packet(K_CPU, bad[i]), 32, -XTQ_ENOQUEUE);
        expect_reject(reg, function_packet(F_CPU, bad[i]), 0, -XTQ_ENOQUEUE);
    }
    xtq__registry_destroy(reg);
}

XTQ_TEST(reject_kernel_index)
{
    struct xtq__registry *reg = make_registry();
    static const uint64_t bad[] = {0, 1, 7, TABLE, 1ull << 40, UINT64_MAX};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        expect_reject(reg, kernel_packet(bad[i], KQ_CPU), 32, -XTQ_ENOKERNEL);
    xtq__registry_destroy(reg);
}

XTQ_TEST(reject_function_index)
{
    struct xtq__registry *reg = make_registry();
    static const uint16_t bad[] = {0, 2, 7, TABLE, 0xffff};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
        expect_reject(reg, function_packet(bad[i], KQ_CPU), 0, -XTQ_ENOFUNC);
    xtq__registry_destroy(reg);
}

XTQ_TEST(reject_kernarg_size)
{
    struct xtq__registry *reg = make_registry();
    expect_reject(reg, kernel_packet(K_CPU, KQ_CPU), 31, -XTQ_EKERNARG);
    expect_reject(reg, kernel_packet(K_CPU, KQ_CPU), 33, -XTQ_EKERNARG);
    expect_reject(reg, kernel_packet(K_CPU, KQ_CPU), 0, -XTQ_EKERNARG);
    expect_reject(reg, kernel_packet(K_GPU, KQ_GPU), 32, -XTQ_EKERNARG);
    /* Functions carry their arguments in the packet: no kernel arguments. */
    expect_reject(reg, function_packet(F_CPU, KQ_CPU), 8, -XTQ_EKERNARG);
    expect_reject(reg, function_packet(F_CPU, KQ_CPU), 64, -XTQ_EKERNARG);
    xtq__registry_destroy(reg);
}

XTQ_TEST(reject_agent_kind)
{
    struct xtq__registry *reg = make_registry();
    expect_reject(reg, kernel_packet(K_CPU, KQ_GPU), 32, -XTQ_EAGENTKIND);
    expect_reject(reg, kernel_packet(K_GPU, KQ_CPU), 24, -XTQ_EAGENTKIND);
    expect_reject(reg, function_packet(F_CPU, KQ_GPU), 0, -XTQ_EAGENTKIND);
    expect_reject(reg, function_packet(F_GPU, KQ_CPU), 0, -XTQ_EAGENTKIND);
    xtq__registry_destroy(reg);
}

/* ---- registration ----------------------------------------------------------- */

XTQ_TEST(registry_create_bounds)
{
    struct xtq__registry *reg = NULL;
    CHECK_ERR(xtq__registry_create(0, &reg), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_create(65537, &reg), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_create(8, NULL), -XTQ_EINVAL);
    CHECK_OK(xtq__registry_create(65536, &reg));
    CHECK_EQ(reg->size, 65536);
    xtq__registry_destroy(reg);
    xtq__registry_destroy(NULL);
}

XTQ_TEST(register_errors)
{
    struct xtq__registry *reg = make_registry();
    struct xtq_kernel small = {.agent = &cpu_agent, .object = 1, .kernarg_size = 15};
    struct xtq_kernel huge = {
        .agent = &cpu_agent, .object = 1, .kernarg_size = XTQ__WIRE_MAX_KERNARG + 1};
    struct xtq_kernel orphan = {.agent = NULL, .object = 1, .kernarg_size = 16};
    struct xtq_function forphan = {.agent = NULL, .object = 1};
    struct xtq_queue qorphan = {.agent = NULL};

    /* Occupied. */
    CHECK_ERR(xtq__registry_set_kernel(reg, K_CPU, &k_gpu, NULL, NULL), -XTQ_EEXIST);
    CHECK_ERR(xtq__registry_set_function(reg, F_CPU, &f_cpu, NULL), -XTQ_EEXIST);
    CHECK_ERR(xtq__registry_set_queue(reg, KQ_CPU, &q_gpu), -XTQ_EEXIST);
    CHECK_EQ(atomic_load(&q_gpu.registrations), 1);
    /* Out of range. */
    CHECK_ERR(xtq__registry_set_kernel(reg, TABLE, &k_cpu, NULL, NULL), -XTQ_ERANGE);
    CHECK_ERR(xtq__registry_set_function(reg, TABLE, &f_cpu, NULL), -XTQ_ERANGE);
    CHECK_ERR(xtq__registry_set_queue(reg, UINT32_MAX, &q_cpu), -XTQ_ERANGE);
    CHECK_ERR(xtq__registry_clear_kernel(reg, TABLE), -XTQ_ERANGE);
    CHECK_ERR(xtq__registry_clear_function(reg, TABLE), -XTQ_ERANGE);
    CHECK_ERR(xtq__registry_clear_queue(reg, TABLE), -XTQ_ERANGE);
    /* NULLs and objects the rewrite could not use. */
    CHECK_ERR(xtq__registry_set_kernel(reg, 0, NULL, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_function(reg, 0, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_queue(reg, 0, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_kernel(NULL, 0, &k_cpu, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_kernel(reg, 0, &small, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_kernel(reg, 0, &huge, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_kernel(reg, 0, &orphan, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_function(reg, 0, &forphan, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_queue(reg, 0, &qorphan), -XTQ_EINVAL);
    CHECK_EQ(atomic_load(&qorphan.registrations), 0);
    /* Empty slots. */
    CHECK_ERR(xtq__registry_clear_kernel(reg, 0), -XTQ_ENOENT);
    CHECK_ERR(xtq__registry_clear_function(reg, 0), -XTQ_ENOENT);
    CHECK_ERR(xtq__registry_clear_queue(reg, 0), -XTQ_ENOENT);
    /* Exactly 16 bytes is enough for arguments 0 and 1. */
    small.kernarg_size = 16;
    CHECK_OK(xtq__registry_set_kernel(reg, 0, &small, NULL, NULL));
    xtq__registry_destroy(reg);
}

XTQ_TEST(unregister_then_rewrite)
{
    struct xtq__registry *reg = make_registry();
    unsigned char kernarg[32];
    xtq_aql_packet_t pkt;
    xtq_queue_t *q;

    CHECK_OK(xtq__registry_clear_kernel(reg, K_CPU));
    expect_reject(reg, kernel_packet(K_CPU, KQ_CPU), 32, -XTQ_ENOKERNEL);
    CHECK_ERR(xtq__registry_clear_kernel(reg, K_CPU), -XTQ_ENOENT);

    CHECK_OK(xtq__registry_clear_function(reg, F_CPU));
    expect_reject(reg, function_packet(F_CPU, KQ_CPU), 0, -XTQ_ENOFUNC);

    CHECK_EQ(atomic_load(&q_gpu.registrations), 1);
    CHECK_OK(xtq__registry_clear_queue(reg, KQ_GPU));
    CHECK_EQ(atomic_load(&q_gpu.registrations), 0);
    expect_reject(reg, kernel_packet(K_GPU, KQ_GPU), 24, -XTQ_ENOQUEUE);

    /* The slot is free again; the new registration's values are used. */
    CHECK_OK(xtq__registry_set_kernel(reg, K_CPU, &k_cpu, NULL, NULL));
    pkt = kernel_packet(K_CPU, KQ_CPU);
    CHECK_OK(xtq__rewrite(reg, &pkt, kernarg, 32, NULL, 0, &q));
    CHECK_EQ(pkt.kernel.completion_signal.handle, 0);
    CHECK_OK(xtq__registry_set_queue(reg, KQ_GPU, &q_gpu));
    CHECK_EQ(atomic_load(&q_gpu.registrations), 1);
    xtq__registry_destroy(reg);
}

/* A queue named by several entries counts each; destroy drops them all. */
XTQ_TEST(queue_registration_count)
{
    struct xtq__registry *reg = make_registry();
    CHECK_EQ(atomic_load(&q_cpu.registrations), 1);
    CHECK_OK(xtq__registry_set_queue(reg, 0, &q_cpu));
    CHECK_OK(xtq__registry_set_queue(reg, 7, &q_cpu));
    CHECK_EQ(atomic_load(&q_cpu.registrations), 3);
    CHECK_OK(xtq__registry_clear_queue(reg, 0));
    CHECK_EQ(atomic_load(&q_cpu.registrations), 2);
    xtq__registry_destroy(reg);
    CHECK_EQ(atomic_load(&q_cpu.registrations), 0);
    CHECK_EQ(atomic_load(&q_gpu.registrations), 0);
}

/* Registration copies what the data path needs. */
XTQ_TEST(registration_snapshot)
{
    struct xtq__registry *reg = NULL;
    struct xtq_kernel k = {.agent = &cpu_agent, .object = 77, .kernarg_size = 16};
    unsigned char kernarg[16];
    xtq_aql_packet_t pkt = kernel_packet(1, 0);
    xtq_queue_t *q;

    CHECK_OK(xtq__registry_create(4, &reg));
    CHECK_OK(xtq__registry_set_queue(reg, 0, &q_cpu));
    CHECK_OK(xtq__registry_set_kernel(reg, 1, &k, NULL, NULL));
    CHECK(reg->kernels[1].kernel == &k);
    CHECK_EQ(reg->kernels[1].kernel_object, 77);
    CHECK_EQ(reg->kernels[1].kernarg_size, 16);
    CHECK_EQ(reg->kernels[1].kind, XTQ_AGENT_CPU);
    k.object = 78;
    CHECK_OK(xtq__rewrite(reg, &pkt, kernarg, 16, NULL, 0, &q));
    CHECK_EQ(pkt.kernel.kernel_object, 77);
    xtq__registry_destroy(reg);
}

/* The public API on a context's registry. */
XTQ_TEST(public_register_api)
{
    struct xtq_ctx *ctx = calloc(1, sizeof(*ctx));
    unsigned char kernarg[32];
    xtq_aql_packet_t pkt = kernel_packet(5, 1);
    xtq_queue_t *q = NULL;

    CHECK(ctx);
    CHECK_EQ(xtq_table_size(NULL), 0);
    CHECK_EQ(xtq_table_size(ctx), 0);
    CHECK_ERR(xtq_register_kernel(ctx, 0, &k_cpu, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_register_queue(NULL, 0, &q_cpu), -XTQ_EINVAL);
    CHECK_ERR(xtq_unregister_function(NULL, 0), -XTQ_EINVAL);

    atomic_store(&q_cpu.registrations, 0);
    CHECK_OK(xtq__registry_create(16, &ctx->registry));
    CHECK_EQ(xtq_table_size(ctx), 16);
    CHECK_OK(xtq_register_queue(ctx, 1, &q_cpu));
    CHECK_EQ(atomic_load(&q_cpu.registrations), 1);
    CHECK_OK(xtq_register_kernel(ctx, 5, &k_cpu, tbuf_k, &sig));
    CHECK_OK(xtq_register_function(ctx, 9, &f_cpu, NULL));
    CHECK_ERR(xtq_register_kernel(ctx, 5, &k_cpu, NULL, NULL), -XTQ_EEXIST);
    CHECK_ERR(xtq_register_kernel(ctx, 16, &k_cpu, NULL, NULL), -XTQ_ERANGE);
    CHECK_ERR(xtq_register_function(ctx, 9, &f_cpu, NULL), -XTQ_EEXIST);
    CHECK_ERR(xtq_register_function(ctx, 0, NULL, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_register_queue(ctx, 1, &q_cpu), -XTQ_EEXIST);
    CHECK_ERR(xtq_register_queue(ctx, 99, &q_cpu), -XTQ_ERANGE);

    CHECK_OK(xtq__rewrite(ctx->registry, &pkt, kernarg, 32, NULL, 0, &q));
    CHECK(q == &q_cpu);

    CHECK_OK(xtq_unregister_kernel(ctx, 5));
    CHECK_ERR(xtq_unregister_kernel(ctx, 5), -XTQ_ENOENT);
    CHECK_ERR(xtq_unregister_kernel(ctx, 16), -XTQ_ERANGE);
    CHECK_OK(xtq_unregister_function(ctx, 9));
    CHECK_ERR(xtq_unregister_function(ctx, 9), -XTQ_ENOENT);
    CHECK_OK(xtq_unregister_queue(ctx, 1));
    CHECK_EQ(atomic_load(&q_cpu.registrations), 0);
    CHECK_ERR(xtq_unregister_queue(ctx, 1), -XTQ_ENOENT);
    pkt = kernel_packet(5, 1);
    expect_reject(ctx->registry, pkt, 32, -XTQ_ENOQUEUE);
    xtq__registry_destroy(ctx->registry);
    free(ctx);
}

/* ---- registration attributes ------------------------------------------------ */

XTQ_TEST(register_attr_errors)
{
    struct xtq__registry *reg = NULL;
    struct xtq_kernel k16 = {.agent = &cpu_agent, .object = 1, .kernarg_size = 16};
    struct xtq_kernel k24 = {.agent = &cpu_agent, .object = 2, .kernarg_size = 24};
    xtq_register_attr_t a;

    CHECK_OK(xtq__registry_create(TABLE, &reg));
    /* NULL: no buffer, no signal, default bound. */
    CHECK_OK(xtq__registry_set_kernel_attr(reg, 0, &k16, NULL));
    CHECK(reg->kernels[0].target_buffer == NULL);
    CHECK_EQ(reg->kernels[0].max_work_items, 1ull << 32);
    CHECK_EQ(reg->kernels[0].flags, 0);
    CHECK_OK(xtq__registry_set_function_attr(reg, 0, &f_cpu, NULL));

    memset(&a, 0, sizeof(a));
    a.field_mask = 1u << 9;
    CHECK_ERR(xtq__registry_set_kernel_attr(reg, 1, &k24, &a), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_function_attr(reg, 1, &f_cpu, &a), -XTQ_EINVAL);
    a.field_mask = XTQ_REGISTER_ATTR_FIELD_FLAGS;
    a.flags = 1u << 5;
    CHECK_ERR(xtq__registry_set_kernel_attr(reg, 1, &k24, &a), -XTQ_EINVAL);
    /* BOUNDED needs a buffer... */
    a.flags = XTQ_REGISTER_BOUNDED;
    CHECK_ERR(xtq__registry_set_kernel_attr(reg, 1, &k24, &a), -XTQ_EINVAL);
    CHECK_ERR(xtq__registry_set_function_attr(reg, 1, &f_cpu, &a), -XTQ_EINVAL);
    /* ... and, for a kernel, argument 2 (24 bytes of arguments). */
    a.field_mask |= XTQ_REGISTER_ATTR_FIELD_BUFFER;
    a.target_buffer = tbuf_k;
    a.target_size = sizeof(tbuf_k);
    CHECK_ERR(xtq__registry_set_kernel_attr(reg, 1, &k16, &a), -XTQ_EINVAL);
    /* A size without a buffer; a buffer that wraps the address space. */
    a.flags = 0;
    a.target_buffer = NULL;
    CHECK_ERR(xtq__registry_set_kernel_attr(reg, 1, &k24, &a), -XTQ_EINVAL);
    a.target_buffer = (void *)(UINTPTR_MAX - 8);
    a.target_size = 16;
    CHECK_ERR(xtq__registry_set_function_attr(reg, 1, &f_cpu, &a), -XTQ_EINVAL);
    /* A bound of 0 work-items would refuse every task. */
    memset(&a, 0, sizeof(a));
    a.field_mask = XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS;
    CHECK_ERR(xtq__registry_set_kernel_attr(reg, 1, &k24, &a), -XTQ_EINVAL);
    /* Functions take no signal; they ignore max_work_items. */
    memset(&a, 0, sizeof(a));
    a.field_mask = XTQ_REGISTER_ATTR_FIELD_SIGNAL;
    a.completion_signal = &sig;
    CHECK_ERR(xtq__registry_set_function_attr(reg, 1, &f_cpu, &a), -XTQ_EINVAL);
    a.field_mask = XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS;
    a.max_work_items = 5;
    CHECK_OK(xtq__registry_set_function_attr(reg, 1, &f_cpu, &a));
    /* Nothing was registered by the refusals. */
    CHECK(reg->kernels[1].kernel == NULL);
    /* Fields outside the mask are not read. */
    memset(&a, 0xff, sizeof(a));
    a.field_mask = 0;
    CHECK_OK(xtq__registry_set_kernel_attr(reg, 1, &k24, &a));
    CHECK(reg->kernels[1].target_buffer == NULL);
    CHECK(reg->kernels[1].completion_signal == NULL);
    CHECK_EQ(reg->kernels[1].flags, 0);
    xtq__registry_destroy(reg);
}

/* A bounded kernel: argument 0 (offset) and 2 (extent) as sent. */
static int bounded_kernel_try(struct xtq__registry *reg, uint32_t kindex, uint64_t offset,
                              uint64_t extent, uint64_t *arg0_out)
{
    unsigned char kernarg[32];
    uint64_t args[4] = {offset, 0x9999, extent, 0x4242};
    xtq_aql_packet_t pkt = kernel_packet(kindex, KQ_CPU), copy;
    xtq_queue_t *q = NULL;
    char payload[8];

    memcpy(kernarg, args, sizeof(args));
    copy = pkt;
    int rc = xtq__rewrite(reg, &pkt, kernarg, 32, payload, sizeof(payload), &q);
    memcpy(args, kernarg, sizeof(args));
    if (rc) {
        /* Refused: nothing changed. */
        CHECK(memcmp(&pkt, &copy, sizeof(pkt)) == 0);
        CHECK_EQ(args[0], offset);
        CHECK_EQ(args[1], 0x9999);
        CHECK(q == NULL);
    } else {
        CHECK_EQ(args[1], (uint64_t)(uintptr_t)payload);
        *arg0_out = args[0];
    }
    /* The extent stays for the task to respect, whatever happened. */
    CHECK_EQ(args[2], extent);
    CHECK_EQ(args[3], 0x4242);
    return rc;
}

XTQ_TEST(bounded_kernel_rewrite)
{
    struct xtq__registry *reg = make_registry();
    xtq_register_attr_t a = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_FLAGS,
        .target_buffer = tbuf_k,
        .target_size = 100,
        .flags = XTQ_REGISTER_BOUNDED,
    };
    const uint64_t base = (uint64_t)(uintptr_t)tbuf_k;
    uint64_t a0 = 0;

    CHECK_OK(xtq__registry_clear_kernel(reg, K_CPU));
    CHECK_OK(xtq__registry_set_kernel_attr(reg, K_CPU, &k_cpu, &a));
    CHECK_OK(bounded_kernel_try(reg, K_CPU, 16, 64, &a0));
    CHECK_EQ(a0, base + 16);
    CHECK_OK(bounded_kernel_try(reg, K_CPU, 0, 100, &a0));
    CHECK_EQ(a0, base);
    CHECK_OK(bounded_kernel_try(reg, K_CPU, 100, 0, &a0)); /* empty, at the end */
    CHECK_EQ(a0, base + 100);
    CHECK_OK(bounded_kernel_try(reg, K_CPU, 37, 63, &a0));
    CHECK_EQ(a0, base + 37);
    CHECK_ERR(bounded_kernel_try(reg, K_CPU, 37, 64, &a0), -XTQ_ERANGE);
    CHECK_ERR(bounded_kernel_try(reg, K_CPU, 101, 0, &a0), -XTQ_ERANGE);
    CHECK_ERR(bounded_kernel_try(reg, K_CPU, 0, 101, &a0), -XTQ_ERANGE);
    /* Sums that wrap 64 bits are out of range, not small. */
    CHECK_ERR(bounded_kernel_try(reg, K_CPU, UINT64_MAX, 2, &a0), -XTQ_ERANGE);
    CHECK_ERR(bounded_kernel_try(reg, K_CPU, 8, UINT64_MAX - 4, &a0), -XTQ_ERANGE);
    CHECK_ERR(bounded_kernel_try(reg, K_CPU, UINT64_MAX, UINT64_MAX, &a0), -XTQ_ERANGE);
    xtq__registry_destroy(reg);
}

XTQ_TEST(bounded_function_rewrite)
{
    struct xtq__registry *reg = make_registry();
    xtq_register_attr_t a = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_FLAGS,
        .target_buffer = tbuf_f,
        .target_size = 64,
        .flags = XTQ_REGISTER_BOUNDED,
    };
    static const struct {
        uint64_t offset, extent;
        int rc;
    } cases[] = {
        {0, 64, 0},           {8, 56, 0},           {64, 0, 0},
        {8, 57, -XTQ_ERANGE}, {65, 0, -XTQ_ERANGE}, {UINT64_MAX, 1, -XTQ_ERANGE},
        {1, UINT64_MAX, -XTQ_ERANGE},
    };

    CHECK_OK(xtq__registry_clear_function(reg, F_CPU));
    CHECK_OK(xtq__registry_set_function_attr(reg, F_CPU, &f_cpu, &a));
    for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
        xtq_aql_packet_t pkt = function_packet(F_CPU, KQ_CPU), copy;
        xtq_queue_t *q = NULL;
        char payload[4];
        pkt.agent.arg[0] = cases[i].offset;
        pkt.agent.arg[2] = cases[i].extent;
        pkt.agent.arg[3] = 7;
        copy = pkt;
        CHECK_ERR(xtq__rewrite(reg, &pkt, NULL, 0, payload, sizeof(payload), &q), cases[i].rc);
        if (cases[i].rc) {
            CHECK(memcmp(&pkt, &copy, sizeof(pkt)) == 0);
            continue;
        }
        CHECK_EQ(pkt.agent.arg[0], (uint64_t)(uintptr_t)tbuf_f + cases[i].offset);
        CHECK_EQ(pkt.agent.arg[1], (uint64_t)(uintptr_t)payload);
        CHECK_EQ(pkt.agent.arg[2], cases[i].extent);
        CHECK_EQ(pkt.agent.arg[3], 7);
    }
    /* Unbounded: arg[0] as sent means nothing, the buffer is what counts. */
    xtq_aql_packet_t pkt = function_packet(F_GPU, KQ_GPU);
    xtq_queue_t *q;
    pkt.agent.arg[0] = UINT64_MAX;
    CHECK_OK(xtq__rewrite(reg, &pkt, NULL, 0, NULL, 0, &q));
    CHECK_EQ(pkt.agent.arg[0], 0);
    xtq__registry_destroy(reg);
}

static int geometry_try(struct xtq__registry *reg, unsigned dims, uint32_t gx, uint32_t gy,
                        uint32_t gz, uint16_t wx, uint16_t wy, uint16_t wz)
{
    unsigned char kernarg[32] = {0};
    xtq_aql_packet_t pkt = kernel_packet(K_CPU, KQ_CPU), copy;
    xtq_queue_t *q = NULL;

    pkt.kernel.setup = (uint16_t)dims;
    pkt.kernel.grid_size_x = gx;
    pkt.kernel.grid_size_y = gy;
    pkt.kernel.grid_size_z = gz;
    pkt.kernel.workgroup_size_x = wx;
    pkt.kernel.workgroup_size_y = wy;
    pkt.kernel.workgroup_size_z = wz;
    copy = pkt;
    int rc = xtq__rewrite(reg, &pkt, kernarg, 32, NULL, 0, &q);
    if (rc)
        CHECK(memcmp(&pkt, &copy, sizeof(pkt)) == 0);
    return rc;
}

/* Issue bug 4: the grid is bounded at the rewrite, per registration. */
XTQ_TEST(geometry_bounds)
{
    struct xtq__registry *reg = make_registry();
    const uint32_t big = UINT32_MAX;

    /* Default bound: 2^32 work-items. */
    CHECK_OK(geometry_try(reg, 2, 65536, 65536, 1, 256, 1, 1));
    CHECK_ERR(geometry_try(reg, 3, 65536, 65536, 2, 256, 1, 1), -XTQ_ERANGE);
    CHECK_OK(geometry_try(reg, 1, big, 1, 1, 1024, 1, 1));
    /* A product that would wrap 64 bits (2^96) is refused, not small. */
    CHECK_ERR(geometry_try(reg, 3, big, big, big, 1, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 3, 65536, 65536, 65536, 1, 1, 1), -XTQ_ERANGE);
    /* HSA: sizes > 0, work-group <= grid, unused dimensions 1. */
    CHECK_ERR(geometry_try(reg, 1, 0, 1, 1, 1, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 1, 8, 1, 1, 0, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 1, 8, 1, 1, 16, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 2, 8, 4, 1, 8, 5, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 1, 8, 2, 1, 8, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 2, 8, 2, 0, 8, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 2, 8, 2, 1, 8, 1, 0), -XTQ_ERANGE);
    CHECK_OK(geometry_try(reg, 3, 10, 6, 3, 4, 4, 2)); /* partial groups: fine */
    /* Dimensions 0 and 4+ stay a packet error. */
    CHECK_ERR(geometry_try(reg, 0, 1, 1, 1, 1, 1, 1), -XTQ_EPACKET);

    /* A registration's own bound, exact at the edge. */
    xtq_register_attr_t a = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS | XTQ_REGISTER_ATTR_FIELD_BUFFER,
        .target_buffer = tbuf_k,
        .max_work_items = 100,
    };
    CHECK_OK(xtq__registry_clear_kernel(reg, K_CPU));
    CHECK_OK(xtq__registry_set_kernel_attr(reg, K_CPU, &k_cpu, &a));
    CHECK_OK(geometry_try(reg, 2, 10, 10, 1, 5, 5, 1));
    CHECK_OK(geometry_try(reg, 1, 100, 1, 1, 100, 1, 1));
    CHECK_ERR(geometry_try(reg, 2, 10, 11, 1, 1, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 1, 101, 1, 1, 1, 1, 1), -XTQ_ERANGE);
    /* Everything allowed (2^64 - 1): still no wrap. */
    a.max_work_items = UINT64_MAX;
    CHECK_OK(xtq__registry_clear_kernel(reg, K_CPU));
    CHECK_OK(xtq__registry_set_kernel_attr(reg, K_CPU, &k_cpu, &a));
    CHECK_OK(geometry_try(reg, 2, big, big, 1, 1, 1, 1));
    CHECK_ERR(geometry_try(reg, 3, big, big, 2, 1, 1, 1), -XTQ_ERANGE);
    CHECK_ERR(geometry_try(reg, 3, big, big, big, 1, 1, 1), -XTQ_ERANGE);
    xtq__registry_destroy(reg);
}

/* The public attr calls on a context, and the old calls as their special case. */
XTQ_TEST(public_register_attr_api)
{
    struct xtq_ctx *ctx = calloc(1, sizeof(*ctx));
    xtq_register_attr_t a = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_FLAGS |
                      XTQ_REGISTER_ATTR_FIELD_SIGNAL | XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS,
        .target_buffer = tbuf_k,
        .target_size = 64,
        .completion_signal = &sig,
        .max_work_items = 1000,
        .flags = XTQ_REGISTER_BOUNDED,
    };

    CHECK(ctx);
    CHECK_ERR(xtq_register_kernel_attr(NULL, 0, &k_cpu, &a), -XTQ_EINVAL);
    CHECK_ERR(xtq_register_function_attr(ctx, 0, &f_cpu, NULL), -XTQ_EINVAL); /* no registry */
    CHECK_OK(xtq__registry_create(16, &ctx->registry));
    CHECK_OK(xtq_register_kernel_attr(ctx, 3, &k_cpu, &a));
    CHECK_EQ(ctx->registry->kernels[3].target_size, 64);
    CHECK_EQ(ctx->registry->kernels[3].max_work_items, 1000);
    CHECK_EQ(ctx->registry->kernels[3].flags, XTQ_REGISTER_BOUNDED);
    CHECK(ctx->registry->kernels[3].completion_signal == &sig);
    a.field_mask &= ~(uint64_t)XTQ_REGISTER_ATTR_FIELD_SIGNAL;
    CHECK_OK(xtq_register_function_attr(ctx, 3, &f_cpu, &a));
    CHECK_EQ(ctx->registry->functions[3].target_size, 64);
    CHECK_EQ(ctx->registry->functions[3].flags, XTQ_REGISTER_BOUNDED);
    CHECK_ERR(xtq_register_kernel_attr(ctx, 3, &k_cpu, NULL), -XTQ_EEXIST);
    /* The plain calls: unbounded, default grid bound. */
    CHECK_OK(xtq_register_kernel(ctx, 4, &k_cpu, tbuf_k, NULL));
    CHECK_EQ(ctx->registry->kernels[4].flags, 0);
    CHECK_EQ(ctx->registry->kernels[4].max_work_items, 1ull << 32);
    CHECK(ctx->registry->kernels[4].target_buffer == tbuf_k);
    xtq__registry_destroy(ctx->registry);
    free(ctx);
}

/* ---- command builders -------------------------------------------------------- */

XTQ_TEST(cmd_kernel_fields)
{
    unsigned char buf[64 + 40 + 1];
    unsigned char args[40];
    xtq_dispatch_geometry_t g = {2, {100, 0, 7}, {0, 8, 3}};
    xtq_kernel_dispatch_packet_t p;
    size_t len = 0;

    fill_pattern(args, sizeof(args), 1);
    /* Unaligned destination. */
    CHECK_OK(xtq_cmd_kernel(buf + 1, 104, 7, 3, &g, args, sizeof(args), &len));
    CHECK_EQ(len, 104);
    memcpy(&p, buf + 1, 64);
    CHECK_EQ(xtq_aql_header_type(p.header), XTQ_PACKET_TYPE_KERNEL_DISPATCH);
    CHECK_EQ(xtq_aql_header_barrier(p.header), 0);
    CHECK_EQ(p.header, xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM));
    CHECK_EQ(p.setup, 2);
    CHECK_EQ(p.grid_size_x, 100);
    CHECK_EQ(p.grid_size_y, 1);
    CHECK_EQ(p.workgroup_size_x, 1);
    CHECK_EQ(p.workgroup_size_y, 8);
    /* Beyond `dimensions` (2): 1, whatever was given (HSA). */
    CHECK_EQ(p.grid_size_z, 1);
    CHECK_EQ(p.workgroup_size_z, 1);
    CHECK_EQ(p.kernel_object, 7);
    CHECK_EQ(p.reserved2, 3);
    CHECK(p.kernarg_address == NULL);
    CHECK_EQ(p.completion_signal.handle, 0);
    CHECK_EQ(p.private_segment_size, 0);
    CHECK_EQ(p.group_segment_size, 0);
    CHECK(memcmp(buf + 1 + 64, args, sizeof(args)) == 0);
}

XTQ_TEST(cmd_kernel_defaults_and_errors)
{
    unsigned char buf[64 + 32];
    xtq_dispatch_geometry_t g = {0, {0, 0, 0}, {0, 0, 0}};
    xtq_dispatch_geometry_t g4 = {4, {1, 1, 1}, {1, 1, 1}};
    xtq_kernel_dispatch_packet_t p;
    size_t len = 0;

    memset(buf, 0xee, sizeof(buf));
    CHECK_OK(xtq_cmd_kernel(buf, sizeof(buf), 1, 2, &g, NULL, 32, &len));
    memcpy(&p, buf, 64);
    CHECK_EQ(p.setup, 1);
    CHECK_EQ(p.grid_size_x, 1);
    CHECK_EQ(p.grid_size_y, 1);
    CHECK_EQ(p.grid_size_z, 1);
    CHECK_EQ(p.workgroup_size_x, 1);
    CHECK_EQ(p.workgroup_size_y, 1);
    CHECK_EQ(p.workgroup_size_z, 1);
    for (size_t i = 64; i < sizeof(buf); i++)
        CHECK_EQ(buf[i], 0); /* NULL kernarg means zeros */
    CHECK_OK(xtq_cmd_kernel(buf, sizeof(buf), 1, 2, NULL, NULL, 0, &len));
    CHECK_EQ(len, 64);
    memcpy(&p, buf, 64);
    CHECK_EQ(p.setup, 1);
    CHECK_EQ(p.grid_size_x, 1);

    CHECK_ERR(xtq_cmd_kernel(buf, sizeof(buf), 1, 2, &g4, NULL, 16, &len), -XTQ_EINVAL);
    CHECK_ERR(xtq_cmd_kernel(buf, sizeof(buf) - 1, 1, 2, &g, NULL, 32, &len), -XTQ_ENOSPC);
    CHECK_ERR(xtq_cmd_kernel(buf, 63, 1, 2, &g, NULL, 0, &len), -XTQ_ENOSPC);
    CHECK_ERR(xtq_cmd_kernel(NULL, sizeof(buf), 1, 2, &g, NULL, 16, &len), -XTQ_EINVAL);
    CHECK_ERR(xtq_cmd_kernel(buf, sizeof(buf), 1, 2, &g, NULL, 16, NULL), -XTQ_EINVAL);
    CHECK_ERR(xtq_cmd_kernel(buf, SIZE_MAX, 1, 2, &g, NULL, XTQ__WIRE_MAX_KERNARG + 1, &len),
              -XTQ_EINVAL);
}

XTQ_TEST(cmd_function_fields)
{
    unsigned char buf[65];
    xtq_agent_dispatch_packet_t p;
    size_t len = 0;

    memset(buf, 0xee, sizeof(buf));
    CHECK_OK(xtq_cmd_function(buf + 1, 64, 0xfffe, 9, 0x1234, UINT64_MAX, &len));
    CHECK_EQ(len, 64);
    memcpy(&p, buf + 1, 64);
    CHECK_EQ(p.header, xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM));
    CHECK_EQ(p.type, 0xfffe);
    CHECK_EQ(p.reserved0, 0);
    CHECK(p.return_address == NULL);
    CHECK_EQ(p.arg[0], 0);
    CHECK_EQ(p.arg[1], 0);
    CHECK_EQ(p.arg[2], 0x1234);
    CHECK(p.arg[3] == UINT64_MAX);
    CHECK_EQ(p.reserved2, 9);
    CHECK_EQ(p.completion_signal.handle, 0);
    CHECK_ERR(xtq_cmd_function(buf, 63, 1, 1, 0, 0, &len), -XTQ_ENOSPC);
    CHECK_ERR(xtq_cmd_function(buf, 64, 0x10000, 1, 0, 0, &len), -XTQ_EINVAL);
    CHECK_ERR(xtq_cmd_function(NULL, 64, 1, 1, 0, 0, &len), -XTQ_EINVAL);
    CHECK_ERR(xtq_cmd_function(buf, 64, 1, 1, 0, 0, NULL), -XTQ_EINVAL);
}
