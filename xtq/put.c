/* XtqPut and its completions: the public face of the engine's put path. */
#include "internal.h"
#include "nic-emul/engine.h"

int xtq_put(xtq_ctx_t *ctx, int target, const void *cmd, size_t cmd_len, const void *payload,
            size_t payload_len, uint32_t flags, xtq_completion_t *comp)
{
    if (!ctx)
        return -XTQ_EINVAL;
    return xtq__engine_put(ctx->engine, target, cmd, cmd_len, payload, payload_len, flags, comp);
}

size_t xtq_put_max_size(const xtq_ctx_t *ctx)
{
    return ctx ? xtq__engine_max_put(ctx->engine) : 0;
}

uint32_t xtq_completion_state(const xtq_completion_t *comp)
{
    if (!comp)
        return 0;
    uint32_t st = atomic_load_explicit((_Atomic uint32_t *)&comp->state, memory_order_acquire);
    /* The sleeper bit and any later library bits are not the caller's. */
    return st & (XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE);
}

int xtq_completion_test(const xtq_completion_t *comp)
{
    if (!comp)
        return 0;
    uint32_t st = atomic_load_explicit((_Atomic uint32_t *)&comp->state, memory_order_acquire);
    return (st & XTQ_COMPLETION_DONE) ? 1 : 0;
}

int xtq_completion_wait(xtq_ctx_t *ctx, xtq_completion_t *comp, int64_t timeout_ns)
{
    if (!ctx || !comp)
        return -XTQ_EINVAL;
    return xtq__engine_wait(ctx->engine, comp, timeout_ns);
}
