/*
 * Seed corpus for the rewrite fuzzer: valid messages of each kind against
 * the fuzz fixture's registrations, and one of each malformed case.
 * Usage: xtq_fuzz_gen_corpus DIR
 */
#include "internal.h"

#include <errno.h>
#include <sys/stat.h>

#include "wire.h"

#include "fuzz_fixture.h"

static const char *dir;
static unsigned count;
static _Alignas(64) unsigned char msg[16384];

static void emit(const char *name, size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fwrite(msg, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    count++;
}

static struct xtq__wire_hdr *hdr(void)
{
    return (struct xtq__wire_hdr *)msg;
}

static xtq_aql_packet_t *packet(void)
{
    return (xtq_aql_packet_t *)(msg + 64);
}

/* A kernel PUT; returns its wire length. */
static size_t kernel_put(uint32_t kindex, uint32_t qindex, uint32_t kernarg, uint64_t payload)
{
    xtq_dispatch_geometry_t g = {2, {64, 8, 1}, {16, 2, 1}};
    size_t cmd_len = 0;
    struct xtq__wire_hdr h;
    size_t off, len;

    memset(msg, 0, sizeof(msg));
    if (xtq_cmd_kernel(msg + 64, sizeof(msg) - 64, kindex, qindex, &g, NULL, kernarg, &cmd_len))
        exit(1);
    for (uint32_t i = 0; i < kernarg; i++)
        msg[128 + i] = (unsigned char)(0xa0 + i);
    xtq__wire_hdr_init(&h, XTQ__MSG_PUT, FUZZ_JOB_KEY, 1, 42);
    h.cmd_len = (uint32_t)cmd_len;
    h.payload_len = payload;
    memcpy(msg, &h, sizeof(h));
    off = xtq__wire_payload_offset(h.cmd_len);
    len = xtq__wire_put_len(h.cmd_len, payload);
    for (uint64_t i = 0; i < payload; i++)
        msg[off + i] = (unsigned char)i;
    return len;
}

static size_t function_put(uint32_t findex, uint32_t qindex, uint64_t payload)
{
    size_t cmd_len = 0;
    struct xtq__wire_hdr h;
    size_t off, len;

    memset(msg, 0, sizeof(msg));
    if (xtq_cmd_function(msg + 64, 64, findex, qindex, 0x1234, 0x5678, &cmd_len))
        exit(1);
    xtq__wire_hdr_init(&h, XTQ__MSG_PUT, FUZZ_JOB_KEY, 3, 7);
    h.cmd_len = (uint32_t)cmd_len;
    h.payload_len = payload;
    memcpy(msg, &h, sizeof(h));
    off = xtq__wire_payload_offset(h.cmd_len);
    len = xtq__wire_put_len(h.cmd_len, payload);
    memset(msg + off, 0x33, payload);
    return len;
}

/* Kernel argument `i` (8 bytes) of the kernel PUT in msg. */
static void set_kernarg(unsigned i, uint64_t v)
{
    memcpy(msg + 128 + 8 * i, &v, sizeof(v));
}

static uint32_t queue_for(int agent)
{
    for (size_t i = 0; i < ARRAY_SIZE(fuzz_queues); i++)
        if (fuzz_queues[i].agent == agent)
            return fuzz_queues[i].index;
    return 0;
}

int main(int argc, char **argv)
{
    static const uint64_t payloads[] = {0, 1, 100, 4096};
    char name[64];
    size_t len;

    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mkdir %s: %s\n", dir, strerror(errno));
        return 1;
    }

    /* Valid: every kernel and function on a queue of its kind (bounded
     * ones with an offset and extent inside their buffer). */
    for (size_t i = 0; i < ARRAY_SIZE(fuzz_kernels); i++)
        for (size_t p = 0; p < ARRAY_SIZE(payloads); p++) {
            const struct fuzz_kernel_slot *k = &fuzz_kernels[i];
            len = kernel_put(k->index, queue_for(k->agent), k->kernarg_size, payloads[p]);
            if (k->bounded) {
                set_kernarg(0, 8);
                set_kernarg(2, k->buffer_size - 8);
            }
            if (k->max_items && k->max_items < 512) {
                /* 8 x 8 work-items in groups of 4 x 2: within 64. */
                packet()->kernel.grid_size_x = packet()->kernel.grid_size_y = 8;
                packet()->kernel.workgroup_size_x = 4;
            }
            snprintf(name, sizeof(name), "ok-kernel%u-p%llu", k->index,
                     (unsigned long long)payloads[p]);
            emit(name, len);
        }
    for (size_t i = 0; i < ARRAY_SIZE(fuzz_functions); i++)
        for (size_t p = 0; p < ARRAY_SIZE(payloads); p++) {
            const struct fuzz_function_slot *f = &fuzz_functions[i];
            len = function_put(f->index, queue_for(f->agent), payloads[p]);
            if (f->bounded) {
                packet()->agent.arg[0] = 4;
                packet()->agent.arg[2] = f->buffer_size - 4;
            }
            snprintf(name, sizeof(name), "ok-function%u-p%llu", f->index,
                     (unsigned long long)payloads[p]);
            emit(name, len);
        }
    xtq__wire_hdr_init(hdr(), XTQ__MSG_ACK, FUZZ_JOB_KEY, 0, 42);
    hdr()->status = -XTQ_ENOKERNEL;
    emit("ok-ack", 64);
    /* A fetching put's ack: the result after the header. */
    hdr()->status = 0;
    hdr()->result_len = 100;
    memset(msg + 64, 0x5a, 128);
    emit("ok-ack-result", 192);
    emit("bad-ack-result-short", 128);
    xtq__wire_hdr_init(hdr(), XTQ__MSG_ASK, FUZZ_JOB_KEY, 0, 42);
    emit("ok-ask", 64);

    /* Malformed wire headers. */
    len = kernel_put(1, 0, 32, 100);
    emit("bad-truncated", len - 1);
    emit("bad-header-only", 40);
    hdr()->magic = 0xffff;
    emit("bad-magic", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->version = XTQ_WIRE_VERSION + 1;
    emit("bad-version", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->type = 9;
    emit("bad-type", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->job_key ^= 1;
    emit("bad-jobkey", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->src_rank = FUZZ_NRANKS;
    emit("bad-rank", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->cmd_len = 63;
    emit("bad-cmdlen-small", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->cmd_len = 64 + XTQ__WIRE_MAX_KERNARG + 1;
    emit("bad-cmdlen-large", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->payload_len = FUZZ_MAX_MSG;
    emit("bad-oversize", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->payload_len = UINT64_MAX - 100;
    emit("bad-payload-overflow", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->flags = 1u << 7;
    emit("bad-flags", len);
    len = kernel_put(1, 0, 32, 100);
    hdr()->reserved1[1] = 1;
    emit("bad-reserved", len);

    /* Well-formed messages whose packet the rewrite must reject. */
    len = kernel_put(1, 0, 32, 8);
    packet()->header = xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_AND, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM);
    emit("rej-barrier", len);
    len = kernel_put(1, 0, 32, 8);
    packet()->header |= 3u << XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE;
    emit("rej-fence-scope", len);
    len = kernel_put(1, 0, 32, 8);
    packet()->kernel.setup = 0;
    emit("rej-dimensions", len);
    len = kernel_put(5, 0, 32, 8);
    emit("rej-nokernel", len);
    len = kernel_put(1, 3, 32, 8);
    emit("rej-noqueue", len);
    len = kernel_put(1, 0, 40, 8);
    emit("rej-kernarg", len);
    len = kernel_put(1, queue_for(FUZZ_GPU), 32, 8);
    emit("rej-agentkind", len);
    len = function_put(1, 0, 8);
    emit("rej-nofunc", len);
    len = kernel_put(0, 0, 16, 8);
    packet()->header = xtq_aql_header(XTQ_PACKET_TYPE_AGENT_DISPATCH, 0, XTQ_FENCE_SCOPE_SYSTEM,
                                      XTQ_FENCE_SCOPE_SYSTEM);
    packet()->agent.type = 0;
    emit("rej-function-kernarg", len);

    /* Out of range: bounded offset + extent past the buffer (and wrapping
     * 64 bits), grids past a bound or against HSA's rules. */
    len = kernel_put(3, 0, 24, 8);
    set_kernarg(0, 40);
    set_kernarg(2, 9);
    emit("rej-bounded-kernel", len);
    len = kernel_put(3, 0, 24, 8);
    set_kernarg(0, UINT64_MAX - 3);
    set_kernarg(2, 8);
    emit("rej-bounded-kernel-wrap", len);
    len = function_put(5, 0, 8);
    packet()->agent.arg[0] = 41;
    packet()->agent.arg[2] = 0;
    emit("rej-bounded-function", len);
    len = kernel_put(5, 0, 32, 8);
    set_kernarg(0, 0);
    set_kernarg(2, 64);
    packet()->kernel.grid_size_x = 65;
    packet()->kernel.grid_size_y = 1;
    packet()->kernel.workgroup_size_y = 1;
    emit("rej-grid-bound", len);
    len = kernel_put(1, 0, 32, 8);
    packet()->kernel.setup = 3;
    packet()->kernel.grid_size_x = packet()->kernel.grid_size_y = UINT32_MAX;
    packet()->kernel.grid_size_z = UINT32_MAX;
    emit("rej-grid-wrap", len);
    len = kernel_put(1, 0, 32, 8);
    packet()->kernel.workgroup_size_x = 128;
    emit("rej-workgroup-larger", len);
    len = kernel_put(1, 0, 32, 8);
    packet()->kernel.grid_size_z = 2;
    emit("rej-unused-dimension", len);

    printf("wrote %u seeds to %s\n", count, dir);
    return 0;
}
