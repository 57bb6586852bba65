/*
 * The public registration API: xtq_register_* / xtq_unregister_* on the
 * context's lookup tables.
 */
#include "internal.h"

#include "registry/registry.h"

static struct xtq__registry *registry_of(xtq_ctx_t *ctx)
{
    return ctx ? ctx->registry : NULL;
}

static int report(int rc, const char *what, uint32_t index)
{
    if (rc)
        xtq_dbg(REGISTRY, "%s at index %u: %s", what, index, xtq_errname(rc));
    else
        xtq_dbg(REGISTRY, "%s at index %u", what, index);
    return rc;
}

int xtq_register_kernel_attr(xtq_ctx_t *ctx, uint32_t index, xtq_kernel_t *kernel,
                             const xtq_register_attr_t *attr)
{
    struct xtq__registry *reg = registry_of(ctx);

    if (!reg)
        return -XTQ_EINVAL;
    return report(xtq__registry_set_kernel_attr(reg, index, kernel, attr), "register kernel",
                  index);
}

int xtq_register_function_attr(xtq_ctx_t *ctx, uint32_t index, xtq_function_t *function,
                               const xtq_register_attr_t *attr)
{
    struct xtq__registry *reg = registry_of(ctx);

    if (!reg)
        return -XTQ_EINVAL;
    return report(xtq__registry_set_function_attr(reg, index, function, attr),
                  "register function", index);
}

int xtq_register_kernel(xtq_ctx_t *ctx, uint32_t index, xtq_kernel_t *kernel, void *target_buffer,
                        xtq_signal_t *completion_signal)
{
    xtq_register_attr_t attr = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER | XTQ_REGISTER_ATTR_FIELD_SIGNAL,
        .target_buffer = target_buffer,
        .completion_signal = completion_signal,
    };
    return xtq_register_kernel_attr(ctx, index, kernel, &attr);
}

int xtq_register_function(xtq_ctx_t *ctx, uint32_t index, xtq_function_t *function,
                          void *target_buffer)
{
    xtq_register_attr_t attr = {
        .field_mask = XTQ_REGISTER_ATTR_FIELD_BUFFER,
        .target_buffer = target_buffer,
    };
    return xtq_register_function_attr(ctx, index, function, &attr);
}

int xtq_register_queue(xtq_ctx_t *ctx, uint32_t index, xtq_queue_t *queue)
{
    struct xtq__registry *reg = registry_of(ctx);

    if (!reg)
        return -XTQ_EINVAL;
    /* registrations is counted inside the table edit, under its lock. */
    return report(xtq__registry_set_queue(reg, index, queue), "register queue", index);
}

int xtq_unregister_kernel(xtq_ctx_t *ctx, uint32_t index)
{
    struct xtq__registry *reg = registry_of(ctx);

    if (!reg)
        return -XTQ_EINVAL;
    return report(xtq__registry_clear_kernel(reg, index), "unregister kernel", index);
}

int xtq_unregister_function(xtq_ctx_t *ctx, uint32_t index)
{
    struct xtq__registry *reg = registry_of(ctx);

    if (!reg)
        return -XTQ_EINVAL;
    return report(xtq__registry_clear_function(reg, index), "unregister function", index);
}

int xtq_unregister_queue(xtq_ctx_t *ctx, uint32_t index)
{
    struct xtq__registry *reg = registry_of(ctx);

    if (!reg)
        return -XTQ_EINVAL;
    return report(xtq__registry_clear_queue(reg, index), "unregister queue", index);
}

uint32_t xtq_table_size(xtq_ctx_t *ctx)
{
    struct xtq__registry *reg = registry_of(ctx);

    return reg ? reg->size : 0;
}
