/*
 * Lookup tables and the XTQ rewrite (paper Fig. 5, Section III-C).
 * Pure code: no I/O, no threads of its own. Readers (the engine) hold the
 * read lock from lookup to enqueue; registration takes the write lock.
 */
#ifndef XTQ_REGISTRY_INT_H
#define XTQ_REGISTRY_INT_H

#include "internal.h"

/* The function index travels in the 16-bit `type` field of an agent
 * dispatch packet, so no table can usefully be larger (XTQ_TABLE_SIZE). */
#define XTQ__REGISTRY_MAX_SIZE 65536u

struct xtq__kernel_entry {
    xtq_kernel_t *kernel; /* NULL: free */
    uint64_t kernel_object;
    uint32_t kernarg_size;
    uint32_t flags; /* XTQ_REGISTER_* */
    enum xtq_agent_kind kind;
    void *target_buffer;
    size_t target_size;
    uint64_t max_work_items; /* grid bound, work-items */
    xtq_signal_t *completion_signal;
};

struct xtq__function_entry {
    xtq_function_t *function; /* NULL: free */
    uint64_t function_object;
    enum xtq_agent_kind kind;
    uint32_t flags; /* XTQ_REGISTER_* */
    void *target_buffer;
    size_t target_size;
};

struct xtq__queue_entry {
    xtq_queue_t *queue; /* NULL: free */
};

struct xtq__registry {
    uint32_t size;
    pthread_rwlock_t lock;
    struct xtq__kernel_entry *kernels;
    struct xtq__function_entry *functions;
    struct xtq__queue_entry *queues;
};

int xtq__registry_create(uint32_t size, struct xtq__registry **reg);
void xtq__registry_destroy(struct xtq__registry *reg);

/* A kernel's grid bound when the registration names none (2^32 work-items). */
#define XTQ__MAX_WORK_ITEMS_DEFAULT (1ull << 32)

/*
 * Table edits (the public xtq_register_* / xtq_unregister_* wrap these).
 * The _attr forms check and normalise an xtq_register_attr_t (NULL: no
 * buffer, no signal, default bounds); the short forms are the attr forms
 * with a buffer (size unknown: 0) and, for kernels, a signal.
 */
int xtq__registry_set_kernel_attr(struct xtq__registry *reg, uint32_t index,
                                  xtq_kernel_t *kernel, const xtq_register_attr_t *attr);
int xtq__registry_set_function_attr(struct xtq__registry *reg, uint32_t index,
                                    xtq_function_t *function, const xtq_register_attr_t *attr);
int xtq__registry_set_kernel(struct xtq__registry *reg, uint32_t index, xtq_kernel_t *kernel,
                             void *target_buffer, xtq_signal_t *signal);
int xtq__registry_set_function(struct xtq__registry *reg, uint32_t index,
                               xtq_function_t *function, void *target_buffer);
int xtq__registry_set_queue(struct xtq__registry *reg, uint32_t index, xtq_queue_t *queue);
int xtq__registry_clear_kernel(struct xtq__registry *reg, uint32_t index);
int xtq__registry_clear_function(struct xtq__registry *reg, uint32_t index);
int xtq__registry_clear_queue(struct xtq__registry *reg, uint32_t index);

/*
 * The rewrite. `packet` is the engine's private copy of the arrived AQL
 * packet (64 bytes); `kernarg` points at the kernel arguments where they
 * landed in the receive region (kernarg_len bytes, may be 0 for function
 * packets), `payload` at the payload (payload_len bytes, NULL if 0).
 * On success the packet is ready to be written to *queue (caller holds the
 * read lock across rewrite and enqueue). On failure nothing is modified
 * that anybody else can see and the result is one of -XTQ_EPACKET,
 * -XTQ_ENOQUEUE, -XTQ_ENOKERNEL, -XTQ_ENOFUNC, -XTQ_EKERNARG, -XTQ_EAGENTKIND,
 * -XTQ_ERANGE (a grid outside HSA's rules or the registration's
 * max_work_items; a BOUNDED registration's offset + extent outside the
 * target buffer). ERANGE is checked last: a packet it rejects passed every
 * other check.
 */
int xtq__rewrite(const struct xtq__registry *reg, xtq_aql_packet_t *packet, void *kernarg,
                 uint32_t kernarg_len, void *payload, uint64_t payload_len, xtq_queue_t **queue);

/*
 * What a task the engine enqueued holds until it retires, so that its
 * kernel, function and completion signal cannot be destroyed under it
 * (xtq_*_destroy returns -XTQ_EBUSY meanwhile; issue 10, bug 2).
 * The engine calls task_begin under the registry's read lock, after
 * xtq__rewrite() accepted the packet and before it is published, with the
 * packet as it arrived (the indices, not the rewritten pointers); and
 * task_end when the agent retires the task (any status), before freeing
 * it. A task rejected before task_begin needs neither.
 */
struct xtq__task_refs {
    xtq_kernel_t *kernel;
    xtq_function_t *function;
    xtq_signal_t *signal;
    uint32_t flags; /* the registration's XTQ_REGISTER_* */
};

void xtq__registry_task_begin(const struct xtq__registry *reg, const xtq_aql_packet_t *arrived,
                              struct xtq__task_refs *refs);
void xtq__registry_task_end(struct xtq__task_refs *refs);

#endif /* XTQ_REGISTRY_INT_H */
