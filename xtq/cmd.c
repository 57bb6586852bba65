/*
 * Command builders: an AQL packet carrying coordinated indices (aql.h says
 * where each one travels), followed by the kernel arguments.
 */
#include "internal.h"

#include "wire.h"

static uint16_t dispatch_header(enum xtq_packet_type type)
{
    /* System scope both ways: the task reads a payload the NIC wrote and
     * its results are read by the host or the network. */
    return xtq_aql_header(type, 0, XTQ_FENCE_SCOPE_SYSTEM, XTQ_FENCE_SCOPE_SYSTEM);
}

static uint32_t one_if_zero(uint32_t v)
{
    return v ? v : 1;
}

int xtq_cmd_kernel(void *cmd, size_t cmd_cap, uint32_t kernel_index, uint32_t queue_index,
                   const xtq_dispatch_geometry_t *geometry, const void *kernarg,
                   size_t kernarg_size, size_t *cmd_len)
{
    static const xtq_dispatch_geometry_t unit = {1, {1, 1, 1}, {1, 1, 1}};
    const xtq_dispatch_geometry_t *g = geometry ? geometry : &unit;
    xtq_kernel_dispatch_packet_t pkt;
    uint32_t dims;

    if (!cmd || !cmd_len || g->dimensions > 3 || kernarg_size > XTQ__WIRE_MAX_KERNARG)
        return -XTQ_EINVAL;
    if (cmd_cap < xtq_cmd_kernel_size(kernarg_size))
        return -XTQ_ENOSPC;
    dims = one_if_zero(g->dimensions);

    memset(&pkt, 0, sizeof(pkt));
    pkt.header = dispatch_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH);
    pkt.setup = (uint16_t)(dims << XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
    /* HSA: a dimension beyond `dims` has grid and work-group size 1 (the
     * target's rewrite refuses anything else). */
    pkt.workgroup_size_x = (uint16_t)one_if_zero(g->workgroup[0]);
    pkt.workgroup_size_y = dims > 1 ? (uint16_t)one_if_zero(g->workgroup[1]) : 1;
    pkt.workgroup_size_z = dims > 2 ? (uint16_t)one_if_zero(g->workgroup[2]) : 1;
    pkt.grid_size_x = one_if_zero(g->grid[0]);
    pkt.grid_size_y = dims > 1 ? one_if_zero(g->grid[1]) : 1;
    pkt.grid_size_z = dims > 2 ? one_if_zero(g->grid[2]) : 1;
    pkt.kernel_object = kernel_index;
    pkt.reserved2 = queue_index;

    /* The caller's buffer need not be aligned. */
    memcpy(cmd, &pkt, sizeof(pkt));
    if (kernarg_size) {
        if (kernarg)
            memcpy((char *)cmd + sizeof(pkt), kernarg, kernarg_size);
        else
            memset((char *)cmd + sizeof(pkt), 0, kernarg_size);
    }
    *cmd_len = xtq_cmd_kernel_size(kernarg_size);
    return 0;
}

int xtq_cmd_function(void *cmd, size_t cmd_cap, uint32_t function_index, uint32_t queue_index,
                     uint64_t arg2, uint64_t arg3, size_t *cmd_len)
{
    xtq_agent_dispatch_packet_t pkt;

    /* The function index travels in the 16-bit `type` field. */
    if (!cmd || !cmd_len || function_index > UINT16_MAX)
        return -XTQ_EINVAL;
    if (cmd_cap < XTQ_AQL_PACKET_SIZE)
        return -XTQ_ENOSPC;

    memset(&pkt, 0, sizeof(pkt));
    pkt.header = dispatch_header(XTQ_PACKET_TYPE_AGENT_DISPATCH);
    pkt.type = (uint16_t)function_index;
    pkt.arg[2] = arg2;
    pkt.arg[3] = arg3;
    pkt.reserved2 = queue_index;
    memcpy(cmd, &pkt, sizeof(pkt));
    *cmd_len = XTQ_AQL_PACKET_SIZE;
    return 0;
}
