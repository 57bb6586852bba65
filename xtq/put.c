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

/* The fields this version knows; another bit is a caller from the future. */
#define PUT_PARAM_KNOWN                                                                            \
    (XTQ_PUT_PARAM_FIELD_FLAGS | XTQ_PUT_PARAM_FIELD_COMPLETION | XTQ_PUT_PARAM_FIELD_COUNTER |    \
     XTQ_PUT_PARAM_FIELD_RESULT | XTQ_PUT_PARAM_FIELD_TRIGGER)

int xtq_putv(xtq_ctx_t *ctx, int target, const void *cmd, size_t cmd_len,
             const struct iovec *payload_iov, size_t iovcnt, const xtq_put_param_t *param)
{
    struct xtq__put_req req = {0};

    if (!ctx)
        return -XTQ_EINVAL;
    if (param) {
        uint64_t m = param->field_mask;
        if (m & ~(uint64_t)PUT_PARAM_KNOWN)
            return -XTQ_EINVAL;
        if (m & XTQ_PUT_PARAM_FIELD_FLAGS)
            req.flags = param->flags;
        if (m & XTQ_PUT_PARAM_FIELD_COMPLETION)
            req.comp = param->comp;
        if (m & XTQ_PUT_PARAM_FIELD_COUNTER) {
            if (!param->counter)
                return -XTQ_EINVAL;
            req.counter = param->counter;
        }
        if (m & XTQ_PUT_PARAM_FIELD_RESULT) {
            req.result = param->result;
            req.result_len = param->result_len;
        }
        if (m & XTQ_PUT_PARAM_FIELD_TRIGGER) {
            if (!param->trigger)
                return -XTQ_EINVAL;
            /* The engine watches the signal; it never changes it. */
            req.trigger = (struct xtq_signal *)param->trigger;
            req.trigger_cond = param->trigger_cond;
            req.trigger_value = param->trigger_value;
        }
    }
    return xtq__engine_putv(ctx->engine, target, cmd, cmd_len, payload_iov, iovcnt, &req);
}

int xtq_flush(xtq_ctx_t *ctx, int target, int64_t timeout_ns)
{
    if (!ctx)
        return -XTQ_EINVAL;
    return xtq__engine_flush(ctx->engine, target, timeout_ns);
}

int xtq_put_cancel(xtq_ctx_t *ctx, xtq_completion_t *comp)
{
    if (!ctx || !comp)
        return -XTQ_EINVAL;
    return xtq__engine_put_cancel(ctx->engine, comp);
}

int xtq_put_cancel_trigger(xtq_ctx_t *ctx, const xtq_signal_t *trigger, size_t *count)
{
    if (!ctx || !trigger)
        return -XTQ_EINVAL;
    size_t n = xtq__engine_put_cancel_trigger(ctx->engine, trigger);
    if (count)
        *count = n;
    return 0;
}

size_t xtq_put_max_size(const xtq_ctx_t *ctx)
{
    return ctx ? xtq__engine_max_put(ctx->engine) : 0;
}

/* The completion's state; a put not DONE whose target's completion word
 * (XTQ_DIRECT_COMPLETION) may say more is looked up there first. The
 * object is the caller's, not const: the library owns its fields. */
static uint32_t comp_state_now(const xtq_completion_t *comp)
{
    _Atomic uint32_t *w = (_Atomic uint32_t *)&comp->state;
    uint32_t st = atomic_load_explicit(w, memory_order_acquire);
    if ((st & (XTQ__COMPLETION_NOTIFY | XTQ_COMPLETION_DONE)) == XTQ__COMPLETION_NOTIFY &&
        xtq__engine_notify_poll((xtq_completion_t *)comp))
        st = atomic_load_explicit(w, memory_order_acquire);
    return st;
}

uint32_t xtq_completion_state(const xtq_completion_t *comp)
{
    if (!comp)
        return 0;
    uint32_t st = comp_state_now(comp);
    /* The sleeper bit and any later library bits are not the caller's. */
    return st & (XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE);
}

int xtq_completion_test(const xtq_completion_t *comp)
{
    if (!comp)
        return 0;
    return (comp_state_now(comp) & XTQ_COMPLETION_DONE) ? 1 : 0;
}

int xtq_completion_wait(xtq_ctx_t *ctx, xtq_completion_t *comp, int64_t timeout_ns)
{
    if (!ctx || !comp)
        return -XTQ_EINVAL;
    return xtq__engine_wait(ctx->engine, comp, XTQ_COMPLETION_DONE, timeout_ns);
}

int xtq_completion_wait_state(xtq_ctx_t *ctx, xtq_completion_t *comp, uint32_t bits,
                              int64_t timeout_ns)
{
    const uint32_t all = XTQ_COMPLETION_LOCAL | XTQ_COMPLETION_REMOTE | XTQ_COMPLETION_DONE;
    if (!ctx || !comp || !bits || (bits & ~all))
        return -XTQ_EINVAL;
    return xtq__engine_wait(ctx->engine, comp, bits, timeout_ns);
}
