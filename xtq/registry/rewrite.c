/*
 * The XTQ rewrite (paper Fig. 5): turn the coordinated indices of an
 * arrived AQL packet into target pointers, and an offset into a bounded
 * target buffer into a checked pointer. Pure code: the packet and the
 * registry are all it reads, the packet and the first 16 bytes of the
 * kernel arguments are all it writes, and it writes only after every check
 * has passed. Everything a peer could use as a pointer is either
 * overwritten here or the packet is rejected.
 */
#include "internal.h"

#include "registry/registry.h"

#define SCOPE_MASK     0x3u
#define SCOPE_RESERVED 0x3u

/* Header checks common to both accepted packet types. */
static int check_header(uint16_t header)
{
    unsigned acq = (header >> XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & SCOPE_MASK;
    unsigned rel = (header >> XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & SCOPE_MASK;

    if (acq == SCOPE_RESERVED || rel == SCOPE_RESERVED)
        return -XTQ_EPACKET;
    return 0;
}

static int lookup_queue(const struct xtq__registry *reg, uint64_t index, xtq_queue_t **queue)
{
    xtq_queue_t *q;

    if (index >= reg->size)
        return -XTQ_ENOQUEUE;
    q = reg->queues[index].queue;
    if (!q)
        return -XTQ_ENOQUEUE;
    *queue = q;
    return 0;
}

/*
 * The grid a peer asks for (HSA's rules, then the registration's bound):
 * each used dimension's grid and work-group sizes are non-zero with the
 * work-group no larger than the grid; unused dimensions are 1; the product
 * of the grid sizes (work-items) is at most `max_items`, computed without
 * wrapping. Agents loop over this grid: no peer may make one loop for ever.
 */
static int check_geometry(const xtq_kernel_dispatch_packet_t *pkt, unsigned dims,
                          uint64_t max_items)
{
    const uint32_t grid[3] = {pkt->grid_size_x, pkt->grid_size_y, pkt->grid_size_z};
    const uint32_t wg[3] = {pkt->workgroup_size_x, pkt->workgroup_size_y, pkt->workgroup_size_z};
    uint64_t items = 1;

    for (unsigned d = 0; d < 3; d++) {
        if (d >= dims) {
            if (grid[d] != 1 || wg[d] != 1)
                return -XTQ_ERANGE;
            continue;
        }
        if (grid[d] == 0 || wg[d] == 0 || wg[d] > grid[d])
            return -XTQ_ERANGE;
        if (items > max_items / grid[d])
            return -XTQ_ERANGE;
        items *= grid[d];
    }
    return 0;
}

/* A bounded registration: `offset` + `extent` inside the target buffer,
 * without wrapping. */
static int check_bounds(size_t size, uint64_t offset, uint64_t extent)
{
    if (offset > size || extent > size - offset)
        return -XTQ_ERANGE;
    return 0;
}

static int rewrite_kernel(const struct xtq__registry *reg, xtq_kernel_dispatch_packet_t *pkt,
                          void *kernarg, uint32_t kernarg_len, void *payload, uint64_t payload_len,
                          xtq_queue_t **queue)
{
    const struct xtq__kernel_entry *e;
    unsigned dims = (pkt->setup >> XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) &
                    ((1u << XTQ_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS) - 1);
    uint64_t args[2];
    xtq_queue_t *q;
    int rc;

    if (dims < 1 || dims > 3)
        return -XTQ_EPACKET;
    rc = lookup_queue(reg, pkt->reserved2, &q);
    if (rc)
        return rc;
    if (pkt->kernel_object >= reg->size)
        return -XTQ_ENOKERNEL;
    e = &reg->kernels[pkt->kernel_object];
    if (!e->kernel)
        return -XTQ_ENOKERNEL;
    /* Registration guarantees kernarg_size >= 16, so arguments 0 and 1 fit. */
    if (kernarg_len != e->kernarg_size || !kernarg)
        return -XTQ_EKERNARG;
    if (e->kind != q->agent->kind)
        return -XTQ_EAGENTKIND;
    rc = check_geometry(pkt, dims, e->max_work_items);
    if (rc)
        return rc;

    /* The arguments sit right after the packet in the receive region:
     * usually 64-byte aligned, but nothing guarantees it. */
    args[0] = (uint64_t)(uintptr_t)e->target_buffer;
    if (e->flags & XTQ_REGISTER_BOUNDED) {
        /* Registration guarantees kernarg_size >= 24: argument 2 is there. */
        uint64_t offset, extent;
        memcpy(&offset, kernarg, sizeof(offset));
        memcpy(&extent, (const uint8_t *)kernarg + 16, sizeof(extent));
        rc = check_bounds(e->target_size, offset, extent);
        if (rc)
            return rc;
        args[0] += offset;
    }
    args[1] = payload_len ? (uint64_t)(uintptr_t)payload : 0;
    memcpy(kernarg, args, sizeof(args));

    pkt->kernel_object = e->kernel_object;
    pkt->kernarg_address = kernarg;
    pkt->reserved0 = 0; /* reserved by HSA; agents may take hints here */
    /* A signal's packet handle is its address (xtq_signal_handle()). */
    pkt->completion_signal.handle = (uint64_t)(uintptr_t)e->completion_signal;
    pkt->reserved2 = 0;
    *queue = q;
    return 0;
}

static int rewrite_function(const struct xtq__registry *reg, xtq_agent_dispatch_packet_t *pkt,
                            uint32_t kernarg_len, void *payload, uint64_t payload_len,
                            xtq_queue_t **queue)
{
    const struct xtq__function_entry *e;
    xtq_queue_t *q;
    int rc;

    rc = lookup_queue(reg, pkt->reserved2, &q);
    if (rc)
        return rc;
    if (pkt->type >= reg->size)
        return -XTQ_ENOFUNC;
    e = &reg->functions[pkt->type];
    if (!e->function)
        return -XTQ_ENOFUNC;
    /* A function's four arguments travel in the packet itself. */
    if (kernarg_len != 0)
        return -XTQ_EKERNARG;
    if (e->kind != q->agent->kind)
        return -XTQ_EAGENTKIND;
    uint64_t offset = 0;
    if (e->flags & XTQ_REGISTER_BOUNDED) {
        rc = check_bounds(e->target_size, pkt->arg[0], pkt->arg[2]);
        if (rc)
            return rc;
        offset = pkt->arg[0];
    }

    pkt->arg[0] = (uint64_t)(uintptr_t)e->target_buffer + offset;
    pkt->arg[1] = payload_len ? (uint64_t)(uintptr_t)payload : 0;
    pkt->return_address = NULL;
    pkt->completion_signal.handle = 0;
    /* `type` keeps the index; the agent reads the object from reserved2. */
    pkt->reserved2 = e->function_object;
    *queue = q;
    return 0;
}

int xtq__rewrite(const struct xtq__registry *reg, xtq_aql_packet_t *packet, void *kernarg,
                 uint32_t kernarg_len, void *payload, uint64_t payload_len, xtq_queue_t **queue)
{
    int rc;

    rc = check_header(packet->header);
    if (rc)
        return rc;
    switch (xtq_aql_header_type(packet->header)) {
    case XTQ_PACKET_TYPE_KERNEL_DISPATCH:
        return rewrite_kernel(reg, &packet->kernel, kernarg, kernarg_len, payload, payload_len,
                              queue);
    case XTQ_PACKET_TYPE_AGENT_DISPATCH:
        return rewrite_function(reg, &packet->agent, kernarg_len, payload, payload_len, queue);
    default:
        /* Barriers carry dependency signals that would be peer pointers;
         * vendor-specific and invalid packets mean nothing here. */
        return -XTQ_EPACKET;
    }
}
