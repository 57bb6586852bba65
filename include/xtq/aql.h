/*
 * AQL packets, bit-compatible with HSA 1.x (hsa.h): kernel dispatch, agent
 * dispatch, barrier-AND and barrier-OR, 64 bytes each.
 *
 * XTQ coordinated indices travel in fields the initiator cannot fill with
 * target addresses:
 *  - kernel dispatch: kernel_object holds the kernel index;
 *  - agent dispatch:  type holds the function index;
 *  - every packet:    reserved2 holds the queue index.
 * The target engine rewrites them (see xtq/registry.h).
 */
#ifndef XTQ_AQL_H
#define XTQ_AQL_H

#include <xtq/common.h>

XTQ_EXTERN_C_BEGIN

/** Packet types (hsa_packet_type_t). */
enum xtq_packet_type {
    XTQ_PACKET_TYPE_VENDOR_SPECIFIC = 0,
    XTQ_PACKET_TYPE_INVALID = 1,
    XTQ_PACKET_TYPE_KERNEL_DISPATCH = 2,
    XTQ_PACKET_TYPE_BARRIER_AND = 3,
    XTQ_PACKET_TYPE_AGENT_DISPATCH = 4,
    XTQ_PACKET_TYPE_BARRIER_OR = 5,
};

/** Fence scopes (hsa_fence_scope_t). */
enum xtq_fence_scope {
    XTQ_FENCE_SCOPE_NONE = 0,
    XTQ_FENCE_SCOPE_AGENT = 1,
    XTQ_FENCE_SCOPE_SYSTEM = 2,
};

/** Header bit offsets and widths (hsa_packet_header_t / _width_t). */
enum xtq_packet_header {
    XTQ_PACKET_HEADER_TYPE = 0,
    XTQ_PACKET_HEADER_BARRIER = 8,
    XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE = 9,
    XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE = 11,
};
enum xtq_packet_header_width {
    XTQ_PACKET_HEADER_WIDTH_TYPE = 8,
    XTQ_PACKET_HEADER_WIDTH_BARRIER = 1,
    XTQ_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE = 2,
    XTQ_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE = 2,
};

/** Kernel-dispatch setup field: number of grid dimensions (1..3). */
#define XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS 0
#define XTQ_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS 2

/** A signal handle as stored in packets (hsa_signal_t). 0 means none. */
typedef struct xtq_signal_handle {
    uint64_t handle;
} xtq_signal_handle_t;

/** hsa_kernel_dispatch_packet_t. */
typedef struct xtq_kernel_dispatch_packet {
    uint16_t header;
    uint16_t setup;
    uint16_t workgroup_size_x;
    uint16_t workgroup_size_y;
    uint16_t workgroup_size_z;
    uint16_t reserved0;
    uint32_t grid_size_x;
    uint32_t grid_size_y;
    uint32_t grid_size_z;
    uint32_t private_segment_size;
    uint32_t group_segment_size;
    uint64_t kernel_object;
    void *kernarg_address;
    uint64_t reserved2;
    xtq_signal_handle_t completion_signal;
} xtq_kernel_dispatch_packet_t;

/** hsa_agent_dispatch_packet_t. */
typedef struct xtq_agent_dispatch_packet {
    uint16_t header;
    uint16_t type;
    uint32_t reserved0;
    void *return_address;
    uint64_t arg[4];
    uint64_t reserved2;
    xtq_signal_handle_t completion_signal;
} xtq_agent_dispatch_packet_t;

/** hsa_barrier_and_packet_t and hsa_barrier_or_packet_t. */
typedef struct xtq_barrier_packet {
    uint16_t header;
    uint16_t reserved0;
    uint32_t reserved1;
    xtq_signal_handle_t dep_signal[5];
    uint64_t reserved2;
    xtq_signal_handle_t completion_signal;
} xtq_barrier_packet_t;
typedef xtq_barrier_packet_t xtq_barrier_and_packet_t;
typedef xtq_barrier_packet_t xtq_barrier_or_packet_t;

/** Any AQL packet: 64 bytes, 64-byte aligned in a queue. */
typedef union xtq_aql_packet {
    uint16_t header;
    xtq_kernel_dispatch_packet_t kernel;
    xtq_agent_dispatch_packet_t agent;
    xtq_barrier_packet_t barrier;
    uint8_t bytes[64];
} xtq_aql_packet_t;

#define XTQ_AQL_PACKET_SIZE 64

/** Build a header word from its fields. */
static inline uint16_t xtq_aql_header(enum xtq_packet_type type, int barrier,
                                      enum xtq_fence_scope acquire, enum xtq_fence_scope release)
{
    return (uint16_t)(((unsigned)type << XTQ_PACKET_HEADER_TYPE) |
                      ((unsigned)(barrier ? 1 : 0) << XTQ_PACKET_HEADER_BARRIER) |
                      ((unsigned)acquire << XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                      ((unsigned)release << XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
}

/** Packet type of a header word. */
static inline enum xtq_packet_type xtq_aql_header_type(uint16_t header)
{
    return (enum xtq_packet_type)(header & 0xffu);
}

/** Barrier bit of a header word. */
static inline int xtq_aql_header_barrier(uint16_t header)
{
    return (header >> XTQ_PACKET_HEADER_BARRIER) & 1;
}

XTQ_EXTERN_C_END

#endif /* XTQ_AQL_H */
