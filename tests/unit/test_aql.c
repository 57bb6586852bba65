/*
 * AQL packet layout: every field offset and size of the four packet types,
 * the header bit positions and widths and the enum values, checked against
 * the HSA runtime's own hsa.h (CI installs libhsa-runtime-dev).
 */
#include <stddef.h>

#include <xtq/xtq.h>

#include "xtq_test.h"

#if defined(__has_include)
#if __has_include(<hsa/hsa.h>)
#include <hsa/hsa.h>
#define HAVE_HSA_H 1
#endif
#endif

/* Without hsa.h every case skips with the reason (same case names). */
#ifdef HAVE_HSA_H
#define NEED_HSA() ((void)0)
#else
#define NEED_HSA() XTQ_SKIP("hsa/hsa.h not installed (apt-get install libhsa-runtime-dev)")
#endif

#define FIELD(xt, ht, f)                                                                    \
    do {                                                                                   \
        CHECK_EQ(offsetof(xt, f), offsetof(ht, f));                                        \
        CHECK_EQ(sizeof(((xt *)0)->f), sizeof(((ht *)0)->f));                              \
    } while (0)

XTQ_TEST(kernel_dispatch_layout)
{
    NEED_HSA();
#ifdef HAVE_HSA_H
    CHECK_EQ(sizeof(xtq_kernel_dispatch_packet_t), sizeof(hsa_kernel_dispatch_packet_t));
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, header);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, setup);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, workgroup_size_x);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, workgroup_size_y);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, workgroup_size_z);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, reserved0);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, grid_size_x);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, grid_size_y);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, grid_size_z);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, private_segment_size);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, group_segment_size);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, kernel_object);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, kernarg_address);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, reserved2);
    FIELD(xtq_kernel_dispatch_packet_t, hsa_kernel_dispatch_packet_t, completion_signal);
    CHECK_EQ(sizeof(xtq_kernel_dispatch_packet_t), XTQ_AQL_PACKET_SIZE);
#endif
}

XTQ_TEST(agent_dispatch_layout)
{
    NEED_HSA();
#ifdef HAVE_HSA_H
    CHECK_EQ(sizeof(xtq_agent_dispatch_packet_t), sizeof(hsa_agent_dispatch_packet_t));
    FIELD(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, header);
    FIELD(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, type);
    FIELD(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, reserved0);
    FIELD(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, return_address);
    FIELD(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, arg);
    FIELD(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, reserved2);
    FIELD(xtq_agent_dispatch_packet_t, hsa_agent_dispatch_packet_t, completion_signal);
    CHECK_EQ(sizeof(xtq_agent_dispatch_packet_t), XTQ_AQL_PACKET_SIZE);
#endif
}

XTQ_TEST(barrier_layout)
{
    NEED_HSA();
#ifdef HAVE_HSA_H
    CHECK_EQ(sizeof(xtq_barrier_and_packet_t), sizeof(hsa_barrier_and_packet_t));
    FIELD(xtq_barrier_and_packet_t, hsa_barrier_and_packet_t, header);
    FIELD(xtq_barrier_and_packet_t, hsa_barrier_and_packet_t, reserved0);
    FIELD(xtq_barrier_and_packet_t, hsa_barrier_and_packet_t, reserved1);
    FIELD(xtq_barrier_and_packet_t, hsa_barrier_and_packet_t, dep_signal);
    FIELD(xtq_barrier_and_packet_t, hsa_barrier_and_packet_t, reserved2);
    FIELD(xtq_barrier_and_packet_t, hsa_barrier_and_packet_t, completion_signal);
    CHECK_EQ(sizeof(xtq_barrier_or_packet_t), sizeof(hsa_barrier_or_packet_t));
    FIELD(xtq_barrier_or_packet_t, hsa_barrier_or_packet_t, header);
    FIELD(xtq_barrier_or_packet_t, hsa_barrier_or_packet_t, reserved0);
    FIELD(xtq_barrier_or_packet_t, hsa_barrier_or_packet_t, reserved1);
    FIELD(xtq_barrier_or_packet_t, hsa_barrier_or_packet_t, dep_signal);
    FIELD(xtq_barrier_or_packet_t, hsa_barrier_or_packet_t, reserved2);
    FIELD(xtq_barrier_or_packet_t, hsa_barrier_or_packet_t, completion_signal);
    CHECK_EQ(sizeof(xtq_barrier_packet_t), XTQ_AQL_PACKET_SIZE);
    CHECK_EQ(sizeof(xtq_aql_packet_t), XTQ_AQL_PACKET_SIZE);
    CHECK_EQ(sizeof(xtq_signal_handle_t), sizeof(hsa_signal_t));
#endif
}

XTQ_TEST(header_bits)
{
    NEED_HSA();
#ifdef HAVE_HSA_H
    CHECK_EQ(XTQ_PACKET_HEADER_TYPE, HSA_PACKET_HEADER_TYPE);
    CHECK_EQ(XTQ_PACKET_HEADER_BARRIER, HSA_PACKET_HEADER_BARRIER);
    CHECK_EQ(XTQ_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE, HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE);
    CHECK_EQ(XTQ_PACKET_HEADER_SCRELEASE_FENCE_SCOPE, HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
    CHECK_EQ(XTQ_PACKET_HEADER_WIDTH_TYPE, HSA_PACKET_HEADER_WIDTH_TYPE);
    CHECK_EQ(XTQ_PACKET_HEADER_WIDTH_BARRIER, HSA_PACKET_HEADER_WIDTH_BARRIER);
    CHECK_EQ(XTQ_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE,
             HSA_PACKET_HEADER_WIDTH_SCACQUIRE_FENCE_SCOPE);
    CHECK_EQ(XTQ_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE,
             HSA_PACKET_HEADER_WIDTH_SCRELEASE_FENCE_SCOPE);
    CHECK_EQ(XTQ_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS,
             HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS);
    CHECK_EQ(XTQ_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS,
             HSA_KERNEL_DISPATCH_PACKET_SETUP_WIDTH_DIMENSIONS);

    /* The builder puts every field where HSA's shifts put it. */
    uint16_t h = xtq_aql_header(XTQ_PACKET_TYPE_KERNEL_DISPATCH, 1, XTQ_FENCE_SCOPE_SYSTEM,
                                XTQ_FENCE_SCOPE_AGENT);
    uint16_t e = (uint16_t)((HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE) |
                            (1 << HSA_PACKET_HEADER_BARRIER) |
                            (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) |
                            (HSA_FENCE_SCOPE_AGENT << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE));
    CHECK_EQ(h, e);
    CHECK_EQ(xtq_aql_header_type(h), XTQ_PACKET_TYPE_KERNEL_DISPATCH);
    CHECK_EQ(xtq_aql_header_barrier(h), 1);
    CHECK_EQ(xtq_aql_header_barrier(xtq_aql_header(XTQ_PACKET_TYPE_BARRIER_OR, 0, 0, 0)), 0);
#endif
}

XTQ_TEST(enum_values)
{
    NEED_HSA();
#ifdef HAVE_HSA_H
    CHECK_EQ(XTQ_PACKET_TYPE_VENDOR_SPECIFIC, HSA_PACKET_TYPE_VENDOR_SPECIFIC);
    CHECK_EQ(XTQ_PACKET_TYPE_INVALID, HSA_PACKET_TYPE_INVALID);
    CHECK_EQ(XTQ_PACKET_TYPE_KERNEL_DISPATCH, HSA_PACKET_TYPE_KERNEL_DISPATCH);
    CHECK_EQ(XTQ_PACKET_TYPE_BARRIER_AND, HSA_PACKET_TYPE_BARRIER_AND);
    CHECK_EQ(XTQ_PACKET_TYPE_AGENT_DISPATCH, HSA_PACKET_TYPE_AGENT_DISPATCH);
    CHECK_EQ(XTQ_PACKET_TYPE_BARRIER_OR, HSA_PACKET_TYPE_BARRIER_OR);
    CHECK_EQ(XTQ_FENCE_SCOPE_NONE, HSA_FENCE_SCOPE_NONE);
    CHECK_EQ(XTQ_FENCE_SCOPE_AGENT, HSA_FENCE_SCOPE_AGENT);
    CHECK_EQ(XTQ_FENCE_SCOPE_SYSTEM, HSA_FENCE_SCOPE_SYSTEM);
    CHECK_EQ(XTQ_SIGNAL_EQ, HSA_SIGNAL_CONDITION_EQ);
    CHECK_EQ(XTQ_SIGNAL_NE, HSA_SIGNAL_CONDITION_NE);
    CHECK_EQ(XTQ_SIGNAL_LT, HSA_SIGNAL_CONDITION_LT);
    CHECK_EQ(XTQ_SIGNAL_GTE, HSA_SIGNAL_CONDITION_GTE);
#endif
}

