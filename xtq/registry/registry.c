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

void xtq__registry_destroy(struct xtq__registry *reg)
{
    if (!reg)
        return;
    /* Drop the queue references the tables still hold. */
    for (uint32_t i = 0; i < reg->size; i++)
        if (reg->queues[i].queue)
            atomic_fetch_sub_explicit(&reg->queues[i].queue->registrations, 1,
                                      memory_order_relaxed);
    pthread_rwlock_destroy(&reg->lock);
    free(reg->queues);
    free(reg->functions);
    free(reg->kernels);
    free(reg);
}

int xtq__registry_set_kernel(struct xtq__registry *reg, uint32_t index, xtq_kernel_t *kernel,
                             void *target_buffer, xtq_signal_t *signal)
{
    struct xtq__kernel_entry *e;
    int rc = 0;

    if (!reg || !kernel || !kernel->agent)
        return -XTQ_EINVAL;
    if (kernel->kernarg_size < KERNARG_MIN || kernel->kernarg_size > XTQ__WIRE_MAX_KERNARG) {
        xtq_err(REGISTRY, "kernel at index %u: kernarg_size %u not in %u..%u", index,
                kernel->kernarg_size, KERNARG_MIN, XTQ__WIRE_MAX_KERNARG);
        return -XTQ_EINVAL;
    }
    if (index >= reg->size)
        return -XTQ_ERANGE;
    /* The CUDA processor decrements the signal through the GPU's mapping
     * of it: an ordinary host signal would fault the whole GPU context. */
    if (signal && kernel->agent->kind == XTQ_AGENT_CUDA &&
        !(((struct xtq_signal *)signal)->flags & XTQ__SIGNAL_DEVICE)) {
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
    e->kernel = kernel;
    e->kernel_object = kernel->object;
    e->kernarg_size = kernel->kernarg_size;
    e->kind = kernel->agent->kind;
    e->target_buffer = target_buffer;
    e->completion_signal = signal;
out:
    pthread_rwlock_unlock(&reg->lock);
    return rc;
}

int xtq__registry_set_function(struct xtq__registry *reg, uint32_t index, xtq_function_t *function,
                               void *target_buffer)
{
    struct xtq__function_entry *e;
    int rc = 0;

    if (!reg || !function || !function->agent)
        return -XTQ_EINVAL;
    if (index >= reg->size)
        return -XTQ_ERANGE;

    pthread_rwlock_wrlock(&reg->lock);
    e = &reg->functions[index];
    if (e->function) {
        rc = -XTQ_EEXIST;
        goto out;
    }
    e->function = function;
    e->function_object = function->object;
    e->kind = function->agent->kind;
    e->target_buffer = target_buffer;
out:
    pthread_rwlock_unlock(&reg->lock);
    return rc;
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
        memset(&reg->kernels[index], 0, sizeof(reg->kernels[index]));
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
        memset(&reg->functions[index], 0, sizeof(reg->functions[index]));
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
