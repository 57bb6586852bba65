/*
 * The three lookup tables (kernel, function, queue) at coordinated indices.
 * Everything the rewrite needs is copied into the entry at registration
 * time so the data path reads one entry and never the object behind it.
 */
#include "internal.h"

#include "registry/registry.h"
#include "wire.h"

/* Kernel arguments 0 and 1 are rewritten as pointers. */
#define KERNARG_MIN 16u

int xtq__registry_create(uint32_t size, struct xtq__registry **reg)
{
    struct xtq__registry *r = NULL;
    int rc;

    if (!reg || size == 0 || size > XTQ__REGISTRY_MAX_SIZE) {
        xtq_err(REGISTRY, "table size %u out of range 1..%u", size, XTQ__REGISTRY_MAX_SIZE);
        rc = -XTQ_EINVAL;
        goto fail;
    }
    r = calloc(1, sizeof(*r));
    if (!r) {
        rc = -XTQ_ENOMEM;
        goto fail;
    }
    r->size = size;
    r->kernels = calloc(size, sizeof(*r->kernels));
    r->functions = calloc(size, sizeof(*r->functions));
    r->queues = calloc(size, sizeof(*r->queues));
    if (!r->kernels || !r->functions || !r->queues) {
        rc = -XTQ_ENOMEM;
        goto fail_tables;
    }
    if (pthread_rwlock_init(&r->lock, NULL) != 0) {
        rc = -XTQ_ENOMEM;
        goto fail_tables;
    }
    *reg = r;
    return 0;

fail_tables:
    free(r->queues);
    free(r->functions);
    free(r->kernels);
    free(r);
fail:
    return rc;
}

/* Drop an entry's references (caller holds the write lock). */
static void kernel_entry_clear(struct xtq__kernel_entry *e)
{
    xtq__refs_put(&e->kernel->refs);
    if (e->completion_signal)
        xtq__refs_put(&e->completion_signal->refs);
    memset(e, 0, sizeof(*e));
}

static void function_entry_clear(struct xtq__function_entry *e)
{
    xtq__refs_put(&e->function->refs);
    memset(e, 0, sizeof(*e));
}

void xtq__registry_destroy(struct xtq__registry *reg)
{
    if (!reg)
        return;
    /* Drop the references the tables still hold. */
    for (uint32_t i = 0; i < reg->size; i++) {
        if (reg->queues[i].queue)
            atomic_fetch_sub_explicit(&reg->queues[i].queue->registrations, 1,
                                      memory_order_relaxed);
        if (reg->kernels[i].kernel)
            kernel_entry_clear(&reg->kernels[i]);
        if (reg->functions[i].function)
            function_entry_clear(&reg->functions[i]);
    }
    pthread_rwlock_destroy(&reg->lock);
    free(reg->queues);
    free(reg->functions);
    free(reg->kernels);
    free(reg);
}

#define REGISTER_FIELDS                                                                     \
    (XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_SIGNAL |                      \
     XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS | XTQ_REGISTER_ATTR_FIELD_FLAGS)
#define REGISTER_FLAGS (XTQ_REGISTER_BOUNDED | XTQ_REGISTER_SHORT)

/* Bounded kernels read an offset (argument 0) and an extent (argument 2). */
#define KERNARG_MIN_BOUNDED 24u

/* An xtq_register_attr_t with what it does not name at its defaults. */
struct registration {
    void *buffer;
    size_t size;
    xtq_signal_t *signal;
    uint64_t max_work_items;
    uint32_t flags;
};

static int registration_of(const xtq_register_attr_t *attr, uint32_t index,
                           struct registration *r)
{
    memset(r, 0, sizeof(*r));
    r->max_work_items = XTQ__MAX_WORK_ITEMS_DEFAULT;
    if (!attr)
        return 0;
    if (attr->field_mask & ~(uint64_t)REGISTER_FIELDS) {
        xtq_err(REGISTRY, "index %u: unknown field_mask bits 0x%llx", index,
                (unsigned long long)(attr->field_mask & ~(uint64_t)REGISTER_FIELDS));
        return -XTQ_EINVAL;
    }
    if (attr->field_mask & XTQ_REGISTER_ATTR_FIELD_BUFFER) {
        r->buffer = attr->target_buffer;
        r->size = attr->target_size;
        /* A size needs a buffer, and the buffer must not wrap the address space. */
        if ((!r->buffer && r->size) || (uintptr_t)r->buffer > UINTPTR_MAX - r->size) {
            xtq_err(REGISTRY, "index %u: target buffer %p of %zu bytes is not a buffer", index,
                    r->buffer, r->size);
            return -XTQ_EINVAL;
        }
    }
    if (attr->field_mask & XTQ_REGISTER_ATTR_FIELD_SIGNAL)
        r->signal = attr->completion_signal;
    if (attr->field_mask & XTQ_REGISTER_ATTR_FIELD_MAX_WORK_ITEMS) {
        if (attr->max_work_items == 0) {
            xtq_err(REGISTRY, "index %u: max_work_items 0 would refuse every task", index);
            return -XTQ_EINVAL;
        }
        r->max_work_items = attr->max_work_items;
    }
    if (attr->field_mask & XTQ_REGISTER_ATTR_FIELD_FLAGS) {
        if (attr->flags & ~(uint32_t)REGISTER_FLAGS) {
            xtq_err(REGISTRY, "index %u: unknown flags 0x%x", index,
                    attr->flags & ~(uint32_t)REGISTER_FLAGS);
            return -XTQ_EINVAL;
        }
        r->flags = attr->flags;
    }
    if ((r->flags & XTQ_REGISTER_BOUNDED) && !r->buffer) {
        xtq_err(REGISTRY, "index %u: XTQ_REGISTER_BOUNDED needs a target buffer", index);
        return -XTQ_EINVAL;
    }
    return 0;
}

int xtq__registry_set_kernel_attr(struct xtq__registry *reg, uint32_t index,
                                  xtq_kernel_t *kernel, const xtq_register_attr_t *attr)
{
    struct xtq__kernel_entry *e;
    struct registration r;
    int rc;

    if (!reg || !kernel || !kernel->agent)
        return -XTQ_EINVAL;
    rc = registration_of(attr, index, &r);
    if (rc)
        return rc;
    if (kernel->kernarg_size < KERNARG_MIN || kernel->kernarg_size > XTQ__WIRE_MAX_KERNARG) {
        xtq_err(REGISTRY, "kernel at index %u: kernarg_size %u not in %u..%u", index,
                kernel->kernarg_size, KERNARG_MIN, XTQ__WIRE_MAX_KERNARG);
        return -XTQ_EINVAL;
    }
    if ((r.flags & XTQ_REGISTER_BOUNDED) && kernel->kernarg_size < KERNARG_MIN_BOUNDED) {
        xtq_err(REGISTRY, "kernel at index %u: a bounded kernel takes at least %u bytes of "
                          "arguments (offset, payload, extent), not %u",
                index, KERNARG_MIN_BOUNDED, kernel->kernarg_size);
        return -XTQ_EINVAL;
    }
    if (index >= reg->size)
        return -XTQ_ERANGE;
    /* The CUDA processor decrements the signal through the GPU's mapping
     * of it: an ordinary host signal would fault the whole GPU context. */
    if (r.signal && kernel->agent->kind == XTQ_AGENT_CUDA &&
        !(((struct xtq_signal *)r.signal)->flags & XTQ__SIGNAL_DEVICE)) {
        xtq_err(REGISTRY, "kernel at index %u: a CUDA kernel's completion signal must come from "
                          "xtq_cuda_signal_create()", index);
        return -XTQ_EINVAL;
    }

    pthread_rwlock_wrlock(&reg->lock);
    e = &reg->kernels[index];
    if (e->kernel) {
        rc = -XTQ_EEXIST;
        goto out;
    }
    /* The entry holds the kernel and its signal until it is cleared. */
    rc = xtq__refs_get(&kernel->refs);
    if (rc)
        goto out;
    if (r.signal && (rc = xtq__refs_get(&r.signal->refs)) != 0) {
        xtq__refs_put(&kernel->refs);
        goto out;
    }
    e->kernel = kernel;
    e->kernel_object = kernel->object;
    e->kernarg_size = kernel->kernarg_size;
    e->flags = r.flags;
    e->kind = kernel->agent->kind;
    e->target_buffer = r.buffer;
    e->target_size = r.size;
    e->max_work_items = r.max_work_items;
    e->completion_signal = r.signal;
out:
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

int xtq__registry_set_function_attr(struct xtq__registry *reg, uint32_t index,
                                    xtq_function_t *function, const xtq_register_attr_t *attr)
{
    struct xtq__function_entry *e;
    struct registration r;
    int rc;

    if (!reg || !function || !function->agent)
        return -XTQ_EINVAL;
    rc = registration_of(attr, index, &r);
    if (rc)
        return rc;
    /* Function packets carry no completion signal (registry.h). */
    if (r.signal) {
        xtq_err(REGISTRY, "function at index %u: functions take no completion signal", index);
        return -XTQ_EINVAL;
    }
    if (index >= reg->size)
        return -XTQ_ERANGE;

    pthread_rwlock_wrlock(&reg->lock);
    e = &reg->functions[index];
    if (e->function) {
        rc = -XTQ_EEXIST;
        goto out;
    }
    rc = xtq__refs_get(&function->refs);
    if (rc)
        goto out;
    e->function = function;
    e->function_object = function->object;
    e->kind = function->agent->kind;
    e->flags = r.flags;
    e->target_buffer = r.buffer;
    e->target_size = r.size;
out:
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

int xtq__registry_set_kernel(struct xtq__registry *reg, uint32_t index, xtq_kernel_t *kernel,
                             void *target_buffer, xtq_signal_t *signal)
{
    xtq_register_attr_t attr = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_SIGNAL,
        .target_buffer = target_buffer,
        .completion_signal = signal,
    };
    return xtq__registry_set_kernel_attr(reg, index, kernel, &attr);
}

int xtq__registry_set_function(struct xtq__registry *reg, uint32_t index, xtq_function_t *function,
                               void *target_buffer)
{
    xtq_register_attr_t attr = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER,
        .target_buffer = target_buffer,
    };
    return xtq__registry_set_function_attr(reg, index, function, &attr);
}

int xtq__registry_set_queue(struct xtq__registry *reg, uint32_t index, xtq_queue_t *queue)
{
    int rc = 0;

    if (!reg || !queue || !queue->agent)
        return -XTQ_EINVAL;
    if (index >= reg->size)
        return -XTQ_ERANGE;

    pthread_rwlock_wrlock(&reg->lock);
    if (reg->queues[index].queue) {
        rc = -XTQ_EEXIST;
        goto out;
    }
    /* Counted so that queue destruction can refuse while a table names it. */
    atomic_fetch_add_explicit(&queue->registrations, 1, memory_order_relaxed);
    reg->queues[index].queue = queue;
out:
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

int xtq__registry_clear_kernel(struct xtq__registry *reg, uint32_t index)
{
    int rc = 0;

    if (!reg)
        return -XTQ_EINVAL;
    if (index >= reg->size)
        return -XTQ_ERANGE;
    pthread_rwlock_wrlock(&reg->lock);
    if (!reg->kernels[index].kernel)
        rc = -XTQ_ENOENT;
    else
        kernel_entry_clear(&reg->kernels[index]);
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

int xtq__registry_clear_function(struct xtq__registry *reg, uint32_t index)
{
    int rc = 0;

    if (!reg)
        return -XTQ_EINVAL;
    if (index >= reg->size)
        return -XTQ_ERANGE;
    pthread_rwlock_wrlock(&reg->lock);
    if (!reg->functions[index].function)
        rc = -XTQ_ENOENT;
    else
        function_entry_clear(&reg->functions[index]);
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

int xtq__registry_clear_queue(struct xtq__registry *reg, uint32_t index)
{
    xtq_queue_t *q;
    int rc = 0;

    if (!reg)
        return -XTQ_EINVAL;
    if (index >= reg->size)
        return -XTQ_ERANGE;
    pthread_rwlock_wrlock(&reg->lock);
    q = reg->queues[index].queue;
    if (!q) {
        rc = -XTQ_ENOENT;
    } else {
        reg->queues[index].queue = NULL;
        atomic_fetch_sub_explicit(&q->registrations, 1, memory_order_relaxed);
    }
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

void xtq__registry_task_begin(const struct xtq__registry *reg, const xtq_aql_packet_t *arrived,
                              struct xtq__task_refs *refs)
{
    memset(refs, 0, sizeof(*refs));
    /* Registered (the entry holds a reference), so none of these is dead:
     * destroy needs the entry cleared, which waits for our read lock. */
    switch (xtq_aql_header_type(arrived->header)) {
    case XTQ_PACKET_TYPE_KERNEL_DISPATCH: {
        const struct xtq__kernel_entry *e = &reg->kernels[arrived->kernel.kernel_object];
        refs->kernel = e->kernel;
        refs->signal = e->completion_signal;
        refs->flags = e->flags;
        atomic_fetch_add_explicit(&refs->kernel->refs, 1, memory_order_relaxed);
        if (refs->signal)
            atomic_fetch_add_explicit(&refs->signal->refs, 1, memory_order_relaxed);
        break;
    }
    case XTQ_PACKET_TYPE_AGENT_DISPATCH:
        refs->function = reg->functions[arrived->agent.type].function;
        refs->flags = reg->functions[arrived->agent.type].flags;
        atomic_fetch_add_explicit(&refs->function->refs, 1, memory_order_relaxed);
        break;
    default:
        break;
    }
}

void xtq__registry_task_end(struct xtq__task_refs *refs)
{
    if (refs->kernel)
        xtq__refs_put(&refs->kernel->refs);
    if (refs->function)
        xtq__refs_put(&refs->function->refs);
    if (refs->signal)
        xtq__refs_put(&refs->signal->refs);
    memset(refs, 0, sizeof(*refs));
}
