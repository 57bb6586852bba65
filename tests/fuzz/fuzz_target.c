/*
 * libFuzzer harness for the target's decode path: the input is one arrived
 * message. It is validated (xtq__wire_validate) and, when it passes, its
 * packet is rewritten (xtq__rewrite) against a registry with a few kernels,
 * functions and queues at known indices (fuzz_fixture.h). Invariants:
 *  - every result is 0 or a documented error;
 *  - validation's pointers stay inside the message;
 *  - a rejected packet changes nothing (packet, kernel arguments, queue);
 *  - a rewritten packet points only at registered objects or inside the
 *    message, carries exactly the registered values, and every field the
 *    rewrite does not own is as sent;
 *  - an accepted kernel's grid follows HSA and holds at most its
 *    registration's max_work_items (counted in 128 bits here); a bounded
 *    registration's offset + extent lies inside its buffer and argument 0
 *    points at buffer + offset;
 *  - -XTQ_ERANGE is returned only for such a violation (no false refusal).
 * The message is copied into an exactly-sized heap block so ASan sees any
 * read past its end.
 */
#include "internal.h"

#include "registry/registry.h"
#include "wire.h"

#include "fuzz_fixture.h"

#define FAIL_IF(cond)                                                                              \
    do {                                                                                           \
        if (cond) {                                                                                \
            fprintf(stderr, "invariant broken at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static struct xtq__registry *reg;
static int verbose; /* XTQ_FUZZ_VERBOSE=1: print each input's outcome (triage) */
static struct xtq_agent agents[2] = {{.kind = XTQ_AGENT_CPU}, {.kind = XTQ_AGENT_CUDA}};
static struct xtq_queue queues[ARRAY_SIZE(fuzz_queues)];
static struct xtq_kernel kernels[ARRAY_SIZE(fuzz_kernels)];
static struct xtq_function functions[ARRAY_SIZE(fuzz_functions)];
static struct xtq_signal signals[ARRAY_SIZE(fuzz_kernels)];
static char buffers[12][FUZZ_BUFFER];

/* Expected table contents, independent of the registry's own layout. */
struct expect_kernel {
    int used;
    uint64_t object;
    uint32_t kernarg_size;
    enum xtq_agent_kind kind;
    void *buffer;
    xtq_signal_t *signal;
    int bounded;
    uint64_t size;
    uint64_t max_items;
};
struct expect_function {
    int used;
    uint64_t object;
    enum xtq_agent_kind kind;
    void *buffer;
    int bounded;
    uint64_t size;
};
static struct expect_kernel ek[FUZZ_TABLE];
static struct expect_function ef[FUZZ_TABLE];
static xtq_queue_t *eq[FUZZ_TABLE];

static void setup(void)
{
    unsigned nb = 0;

    if (xtq__registry_create(FUZZ_TABLE, &reg) != 0)
        abort();
    for (size_t i = 0; i < ARRAY_SIZE(fuzz_queues); i++) {
        queues[i].agent = &agents[fuzz_queues[i].agent];
        FAIL_IF(xtq__registry_set_queue(reg, fuzz_queues[i].index, &queues[i]) != 0);
        eq[fuzz_queues[i].index] = &queues[i];
    }
    for (size_t i = 0; i < ARRAY_SIZE(fuzz_kernels); i++) {
        const struct fuzz_kernel_slot *s = &fuzz_kernels[i];
        struct expect_kernel *e = &ek[s->index];
        kernels[i].agent = &agents[s->agent];
        /* Objects look like pointers nobody may follow. */
        kernels[i].object = 0xc0de000000000000ull | (i << 8);
        kernels[i].kernarg_size = s->kernarg_size;
        e->used = 1;
        e->object = kernels[i].object;
        e->kernarg_size = s->kernarg_size;
        e->kind = agents[s->agent].kind;
        e->buffer = s->has_buffer ? buffers[nb++] : NULL;
        e->signal = s->has_signal ? &signals[i] : NULL;
        e->bounded = s->bounded;
        e->size = s->buffer_size;
        e->max_items = s->max_items ? s->max_items : 1ull << 32;
        /* A CUDA kernel's signal must be one the GPU can reach. */
        if (e->signal && e->kind == XTQ_AGENT_CUDA)
            signals[i].flags = XTQ__SIGNAL_DEVICE;
        xtq_register_attr_t a = {
            .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_SIGNAL |
                          XTQ_REGISTER_ATTR_FIELD_FLAGS,
            .target_buffer = e->buffer,
            .target_size = s->buffer_size,
            .completion_signal = e->signal,
            .flags = s->bounded ? XTQ_REGISTER_BOUNDED : 0,
        };
        if (s->max_items) {
            a.field_mask |= XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS;
            a.max_work_items = s->max_items;
        }
        FAIL_IF(xtq__registry_set_kernel_attr(reg, s->index, &kernels[i], &a) != 0);
    }
    for (size_t i = 0; i < ARRAY_SIZE(fuzz_functions); i++) {
        const struct fuzz_function_slot *s = &fuzz_functions[i];
        struct expect_function *e = &ef[s->index];
        functions[i].agent = &agents[s->agent];
        functions[i].object = 0xf00d000000000000ull | (i << 8);
        e->used = 1;
        e->object = functions[i].object;
        e->kind = agents[s->agent].kind;
        e->buffer = s->has_buffer ? buffers[nb++] : NULL;
        e->bounded = s->bounded;
        e->size = s->buffer_size;
        xtq_register_attr_t a = {
            .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_FLAGS,
            .target_buffer = e->buffer,
            .target_size = s->buffer_size,
            .flags = s->bounded ? XTQ_REGISTER_BOUNDED : 0,
        };
        FAIL_IF(xtq__registry_set_function_attr(reg, s->index, &functions[i], &a) != 0);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *v = getenv("XTQ_FUZZ_VERBOSE");
    verbose = v && *v && *v != '0';
    setup();
    return 0;
}

static int is_wire_error(int rc)
{
    return rc == -XTQ_EBADMSG || rc == -XTQ_EVERSION || rc == -XTQ_EJOBKEY || rc == -XTQ_ESRCRANK ||
           rc == -XTQ_EMSGSIZE || rc == -XTQ_EPROTO;
}

static int is_rewrite_error(int rc)
{
    return rc == -XTQ_EPACKET || rc == -XTQ_ENOQUEUE || rc == -XTQ_ENOKERNEL ||
           rc == -XTQ_ENOFUNC || rc == -XTQ_EKERNARG || rc == -XTQ_EAGENTKIND ||
           rc == -XTQ_ERANGE;
}

/* HSA's grid rules and the bound, counted in 128 bits: an independent
 * statement of what the rewrite must accept. */
static int geometry_ok(const xtq_kernel_dispatch_packet_t *p, uint64_t max_items)
{
    unsigned dims = p->setup & 3;
    uint32_t grid[3] = {p->grid_size_x, p->grid_size_y, p->grid_size_z};
    uint32_t wg[3] = {p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z};
    unsigned __int128 items = 1;
    for (unsigned d = 0; d < 3; d++) {
        if (d >= dims) {
            if (grid[d] != 1 || wg[d] != 1)
                return 0;
            continue;
        }
        if (!grid[d] || !wg[d] || wg[d] > grid[d])
            return 0;
        items *= grid[d];
    }
    return items <= max_items;
}

static int bounds_ok(uint64_t size, uint64_t offset, uint64_t extent)
{
    return (unsigned __int128)offset + extent <= size;
}

static int inside(const void *p, size_t n, const unsigned char *buf, size_t len)
{
    const unsigned char *c = p;
    return c >= buf && c <= buf + len && n <= (size_t)(buf + len - c);
}

static void check_kernel(const xtq_kernel_dispatch_packet_t *in,
                         const xtq_kernel_dispatch_packet_t *out, const unsigned char *kin,
                         const unsigned char *kout, uint32_t klen, const void *payload,
                         uint64_t payload_len, xtq_queue_t *q, const unsigned char *buf, size_t len)
{
    const struct expect_kernel *e;
    uint64_t a0, a1;

    FAIL_IF(in->kernel_object >= FUZZ_TABLE || in->reserved2 >= FUZZ_TABLE);
    e = &ek[in->kernel_object];
    FAIL_IF(!e->used || q != eq[in->reserved2] || q->agent->kind != e->kind);
    FAIL_IF(klen != e->kernarg_size || klen < 16);
    FAIL_IF(out->kernel_object != e->object);
    FAIL_IF((const unsigned char *)out->kernarg_address != kout);
    FAIL_IF(!inside(out->kernarg_address, klen, buf, len));
    FAIL_IF(out->completion_signal.handle != (uint64_t)(uintptr_t)e->signal);
    FAIL_IF(out->reserved2 != 0);
    memcpy(&a0, kout, 8);
    memcpy(&a1, kout + 8, 8);
    FAIL_IF(!geometry_ok(in, e->max_items));
    if (e->bounded) {
        uint64_t off, ext;
        memcpy(&off, kin, 8);
        memcpy(&ext, kin + 16, 8);
        FAIL_IF(klen < 24 || !bounds_ok(e->size, off, ext));
        FAIL_IF(a0 != (uint64_t)(uintptr_t)e->buffer + off);
    } else {
        FAIL_IF(a0 != (uint64_t)(uintptr_t)e->buffer);
    }
    if (payload_len) {
        FAIL_IF(a1 != (uint64_t)(uintptr_t)payload);
        FAIL_IF(!inside(payload, payload_len, buf, len));
    } else {
        FAIL_IF(a1 != 0);
    }
    FAIL_IF(memcmp(kin + 16, kout + 16, klen - 16) != 0);
    /* Pass-through: header .. group_segment_size (bytes 0..31), but for
     * reserved0, which the rewrite clears. */
    FAIL_IF(out->reserved0 != 0);
    FAIL_IF(memcmp(in, out, offsetof(xtq_kernel_dispatch_packet_t, reserved0)) != 0);
    FAIL_IF(memcmp((const char *)in + offsetof(xtq_kernel_dispatch_packet_t, grid_size_x),
                   (const char *)out + offsetof(xtq_kernel_dispatch_packet_t, grid_size_x),
                   offsetof(xtq_kernel_dispatch_packet_t, kernel_object) -
                       offsetof(xtq_kernel_dispatch_packet_t, grid_size_x)) != 0);
    FAIL_IF(((in->setup & 3) < 1));
}

static void check_function(const xtq_agent_dispatch_packet_t *in,
                           const xtq_agent_dispatch_packet_t *out, const void *payload,
                           uint64_t payload_len, xtq_queue_t *q, const unsigned char *buf,
                           size_t len)
{
    const struct expect_function *e;

    FAIL_IF(in->type >= FUZZ_TABLE || in->reserved2 >= FUZZ_TABLE);
    e = &ef[in->type];
    FAIL_IF(!e->used || q != eq[in->reserved2] || q->agent->kind != e->kind);
    if (e->bounded) {
        FAIL_IF(!bounds_ok(e->size, in->arg[0], in->arg[2]));
        FAIL_IF(out->arg[0] != (uint64_t)(uintptr_t)e->buffer + in->arg[0]);
    } else {
        FAIL_IF(out->arg[0] != (uint64_t)(uintptr_t)e->buffer);
    }
    if (payload_len) {
        FAIL_IF(out->arg[1] != (uint64_t)(uintptr_t)payload);
        FAIL_IF(!inside(payload, payload_len, buf, len));
    } else {
        FAIL_IF(out->arg[1] != 0);
    }
    FAIL_IF(out->arg[2] != in->arg[2] || out->arg[3] != in->arg[3]);
    FAIL_IF(out->return_address != NULL);
    FAIL_IF(out->completion_signal.handle != 0);
    FAIL_IF(out->reserved2 != e->object);
    FAIL_IF(out->header != in->header || out->type != in->type || out->reserved0 != in->reserved0);
}

/* -XTQ_ERANGE comes last: the packet passed every other check, and its
 * grid or its bounded offset + extent really is out of range. */
static void check_range_refusal(const xtq_aql_packet_t *in, const unsigned char *kin,
                                uint32_t klen)
{
    switch (xtq_aql_header_type(in->header)) {
    case XTQ_PACKET_TYPE_KERNEL_DISPATCH: {
        const struct expect_kernel *e;
        FAIL_IF(in->kernel.kernel_object >= FUZZ_TABLE);
        e = &ek[in->kernel.kernel_object];
        FAIL_IF(!e->used || klen != e->kernarg_size);
        int in_bounds = 1;
        if (e->bounded) {
            uint64_t off, ext;
            memcpy(&off, kin, 8);
            memcpy(&ext, kin + 16, 8);
            in_bounds = bounds_ok(e->size, off, ext);
        }
        FAIL_IF(geometry_ok(&in->kernel, e->max_items) && in_bounds);
        break;
    }
    case XTQ_PACKET_TYPE_AGENT_DISPATCH: {
        const struct expect_function *e;
        FAIL_IF(in->agent.type >= FUZZ_TABLE);
        e = &ef[in->agent.type];
        FAIL_IF(!e->used || !e->bounded);
        FAIL_IF(bounds_ok(e->size, in->agent.arg[0], in->agent.arg[2]));
        break;
    }
    default:
        FAIL_IF(1 && "-XTQ_ERANGE for a packet type the rewrite does not accept");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const struct xtq__wire_hdr *hp = NULL;
    const void *cmd = NULL, *payload_c = NULL;
    struct xtq__wire_hdr h;
    xtq_aql_packet_t pkt, orig;
    unsigned char *buf, *kernarg, *ksnap = NULL;
    xtq_queue_t *q, *const q_sentinel = (xtq_queue_t *)(uintptr_t)0x7;
    uint32_t klen;
    int rc;

    /* malloc(0) may return NULL; a zero-length message is still checked. */
    buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);

    rc = xtq__wire_validate(buf, size, FUZZ_JOB_KEY, FUZZ_NRANKS, FUZZ_MAX_MSG, &hp, &cmd,
                            &payload_c);
    if (verbose)
        fprintf(stderr, "wire: %s\n", xtq_errname(rc));
    if (rc) {
        FAIL_IF(!is_wire_error(rc));
        goto out;
    }
    FAIL_IF(size < sizeof(h) || hp != (const void *)buf);
    memcpy(&h, buf, sizeof(h));
    FAIL_IF(h.magic != XTQ_WIRE_MAGIC || h.version != XTQ_WIRE_VERSION);
    FAIL_IF(h.job_key != FUZZ_JOB_KEY || h.src_rank >= FUZZ_NRANKS);
    /* Only defined flag bits, nothing in the reserved fields. */
    FAIL_IF(h.flags & ~XTQ__WIRE_FLAGS_OF(h.type));
    FAIL_IF(h.reserved1[0] || h.reserved1[1] || (h.type != XTQ__MSG_ACK && h.status));
    if (h.type == XTQ__MSG_ACK) {
        FAIL_IF(cmd);
        FAIL_IF(h.result_len > FUZZ_MAX_MSG);
        FAIL_IF((payload_c != NULL) != (h.result_len != 0));
        FAIL_IF(payload_c && (payload_c != buf + sizeof(h) ||
                              !inside(payload_c, h.result_len, buf, size)));
        goto out;
    }
    if (h.type == XTQ__MSG_ASK) {
        FAIL_IF(cmd || payload_c || h.result_len);
        goto out;
    }
    FAIL_IF(h.type != XTQ__MSG_PUT);
    FAIL_IF(h.cmd_len < 64 || h.cmd_len - 64 > XTQ__WIRE_MAX_KERNARG);
    FAIL_IF(xtq__wire_put_len(h.cmd_len, h.payload_len) > size);
    FAIL_IF(h.cmd_len + h.payload_len > FUZZ_MAX_MSG);
    FAIL_IF(cmd != buf + sizeof(h) || !inside(cmd, h.cmd_len, buf, size));
    if (h.payload_len) {
        FAIL_IF(payload_c != buf + xtq__wire_payload_offset(h.cmd_len));
        FAIL_IF(!inside(payload_c, h.payload_len, buf, size));
    } else {
        FAIL_IF(payload_c != NULL);
    }

    /* The engine's private copy of the packet; arguments stay in place. */
    memcpy(&pkt, cmd, sizeof(pkt));
    orig = pkt;
    klen = h.cmd_len - 64;
    kernarg = klen ? buf + sizeof(h) + 64 : NULL;
    if (klen) {
        ksnap = malloc(klen);
        if (!ksnap)
            goto out;
        memcpy(ksnap, kernarg, klen);
    }
    q = q_sentinel;
    rc = xtq__rewrite(reg, &pkt, kernarg, klen, (void *)payload_c, h.payload_len, &q);
    if (verbose)
        fprintf(stderr, "rewrite: %s\n", xtq_errname(rc));
    if (rc) {
        FAIL_IF(!is_rewrite_error(rc));
        if (rc == -XTQ_ERANGE)
            check_range_refusal(&orig, ksnap, klen);
        FAIL_IF(memcmp(&pkt, &orig, sizeof(pkt)) != 0);
        FAIL_IF(klen && memcmp(ksnap, kernarg, klen) != 0);
        FAIL_IF(q != q_sentinel);
        goto out;
    }
    FAIL_IF(q == q_sentinel || q == NULL);
    /* Header bits the rewrite promises to have checked. */
    FAIL_IF(((orig.header >> XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3) == 3);
    FAIL_IF(((orig.header >> XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3) == 3);
    switch (xtq_aql_header_type(orig.header)) {
    case XTQ_PACKET_TYPE_KERNEL_DISPATCH:
        check_kernel(&orig.kernel, &pkt.kernel, ksnap, kernarg, klen, payload_c, h.payload_len, q,
                     buf, size);
        break;
    case XTQ_PACKET_TYPE_AGENT_DISPATCH:
        FAIL_IF(klen != 0);
        check_function(&orig.agent, &pkt.agent, payload_c, h.payload_len, q, buf, size);
        break;
    default:
        FAIL_IF(1 && "accepted a packet type other than kernel/agent dispatch");
    }
out:
    free(ksnap);
    free(buf);
    return 0;
}
