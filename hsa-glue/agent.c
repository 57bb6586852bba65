/*
 * Agent enumeration: one provider per kind, indexed by kind (libfabric's
 * hmem pattern). Every kind is probed; an unusable kind records why and
 * the context carries on with the others. A kind whose back-end was not
 * compiled in has a provider that says so. What the rest of libxtq does to
 * all agents at once (map host memory for them) goes through here; what it
 * does to one queue goes through that agent's operations table.
 */
#include "internal.h"

#include <string.h>

XTQ_UNUSED static int missing_probe(const char *why, char *reason, size_t reason_len,
                         unsigned *device_count)
{
    *device_count = 0;
    if (reason != NULL && reason_len > 0)
        snprintf(reason, reason_len, "%s", why);
    return -XTQ_ENOAGENT;
}

XTQ_UNUSED static int missing_open(xtq_ctx_t *ctx, unsigned device_index, xtq_agent_t **agent)
{
    return -XTQ_ENOAGENT;
}

#ifndef XTQ_HAVE_CUDA_AGENT
static int cuda_missing_probe(char *reason, size_t reason_len, unsigned *device_count)
{
    return missing_probe("libxtq was built without the CUDA agent", reason, reason_len,
                         device_count);
}
static const struct xtq__agent_provider cuda_missing_provider = {
    .kind = XTQ_AGENT_CUDA,
    .name = "cuda",
    .probe = cuda_missing_probe,
    .open = missing_open,
};
#define CUDA_PROVIDER (&cuda_missing_provider)
#else
#define CUDA_PROVIDER (&xtq__cuda_agent_provider)
#endif

#ifndef XTQ_HAVE_ROCR_AGENT
static int rocr_missing_probe(char *reason, size_t reason_len, unsigned *device_count)
{
    return missing_probe("libxtq was built without the ROCr agent", reason, reason_len,
                         device_count);
}
static const struct xtq__agent_provider rocr_missing_provider = {
    .kind = XTQ_AGENT_ROCR,
    .name = "rocr",
    .probe = rocr_missing_probe,
    .open = missing_open,
};
#define ROCR_PROVIDER (&rocr_missing_provider)
#else
#define ROCR_PROVIDER (&xtq__rocr_agent_provider)
#endif

static const struct xtq__agent_provider *const providers[XTQ_AGENT_KIND_COUNT] = {
    [XTQ_AGENT_CPU] = &xtq__cpu_agent_provider,
    [XTQ_AGENT_CUDA] = CUDA_PROVIDER,
    [XTQ_AGENT_ROCR] = ROCR_PROVIDER,
};

static const char *const kind_names[XTQ_AGENT_KIND_COUNT] = {
    [XTQ_AGENT_CPU] = "cpu",
    [XTQ_AGENT_CUDA] = "cuda",
    [XTQ_AGENT_ROCR] = "rocr",
};

int xtq__agents_open(xtq_ctx_t *ctx)
{
    int rc = 0;
    const char *retire = xtq__param_string(XTQ__PARAM_XTQ_AGENT_RETIRE);
    const bool engine_retires = strcmp(retire, "thread") != 0;
    if (engine_retires && strcmp(retire, "engine") != 0)
        xtq_warn(AGENT, "XTQ_AGENT_RETIRE=%s: expected engine or thread; using engine", retire);

    ctx->nagents = 0;
    ctx->nretire_agents = 0;
    for (unsigned k = 0; k < XTQ_AGENT_KIND_COUNT; k++) {
        const struct xtq__agent_provider *p = providers[k];
        char *reason = ctx->kind_reason[k];
        size_t reason_len = sizeof(ctx->kind_reason[k]);
        unsigned count = 0, opened = 0;
        int err = 0;

        reason[0] = '\0';
        ctx->kind_status[k] = p->probe(reason, reason_len, &count);
        if (ctx->kind_status[k] != 0) {
            if (reason[0] == '\0')
                snprintf(reason, reason_len, "%s", xtq_strerror(ctx->kind_status[k]));
            xtq_info(AGENT, "%s agents unavailable: %s", p->name, reason);
            continue;
        }
        for (unsigned d = 0; d < count; d++) {
            xtq_agent_t *agent;

            if (ctx->nagents == XTQ__MAX_AGENTS) {
                xtq_warn(AGENT, "more than %d agents; ignoring the rest", XTQ__MAX_AGENTS);
                break;
            }
            err = p->open(ctx, d, &agent);
            if (err != 0) {
                xtq_warn(AGENT, "cannot open %s agent %u: %s", p->name, d, xtq_strerror(err));
                continue;
            }
            ctx->agents[ctx->nagents++] = agent;
            opened++;
            if (engine_retires && agent->ops->retire_poll(agent) != -XTQ_ENOSYS)
                ctx->retire_agents[ctx->nretire_agents++] = agent;
        }
        if (opened == 0) {
            ctx->kind_status[k] = -XTQ_ENOAGENT;
            snprintf(reason, reason_len, "%s agent failed to open: %s", p->name,
                     count == 0 ? "no device" : xtq_strerror(err));
            /* The CPU agent is the one every context relies on. */
            if (k == XTQ_AGENT_CPU) {
                xtq_err(AGENT, "%s", reason);
                rc = err != 0 ? err : -XTQ_ENOAGENT;
                goto err;
            }
        }
    }
    return 0;

err:
    xtq__agents_close(ctx);
    return rc;
}

void xtq__agents_close(xtq_ctx_t *ctx)
{
    /* Reverse order: GPU agents may hold memory the CPU agent's users saw. */
    ctx->nretire_agents = 0;
    while (ctx->nagents > 0) {
        xtq_agent_t *agent = ctx->agents[--ctx->nagents];
        ctx->agents[ctx->nagents] = NULL;
        agent->ops->close(agent);
    }
}

int xtq__agents_mem_register(xtq_ctx_t *ctx, void *addr, size_t len)
{
    unsigned done;
    int rc = 0;

    for (done = 0; done < ctx->nagents; done++) {
        xtq_agent_t *agent = ctx->agents[done];
        rc = agent->ops->mem_register(agent, addr, len);
        if (rc != 0) {
            xtq_err(AGENT, "agent %s cannot map %zu bytes of host memory: %s", agent->info.name,
                    len, xtq_errname(rc));
            goto err;
        }
    }
    return 0;

err:
    while (done-- > 0)
        (void)ctx->agents[done]->ops->mem_deregister(ctx->agents[done], addr, len);
    return rc;
}

void xtq__agents_mem_deregister(xtq_ctx_t *ctx, void *addr, size_t len)
{
    for (unsigned i = ctx->nagents; i-- > 0;)
        (void)ctx->agents[i]->ops->mem_deregister(ctx->agents[i], addr, len);
}

int xtq__agents_retire_poll(xtq_ctx_t *ctx)
{
    int n = 0;
    for (unsigned i = 0; i < ctx->nretire_agents; i++)
        n += ctx->retire_agents[i]->ops->retire_poll(ctx->retire_agents[i]);
    return n;
}

void xtq__agents_retire_release(xtq_ctx_t *ctx)
{
    for (unsigned i = 0; i < ctx->nretire_agents; i++)
        ctx->retire_agents[i]->ops->retire_release(ctx->retire_agents[i]);
}

int xtq__agent_retire_poll_none(xtq_agent_t *agent)
{
    (void)agent;
    return -XTQ_ENOSYS;
}

void xtq__agent_retire_release_none(xtq_agent_t *agent)
{
    (void)agent;
}

unsigned xtq_agent_count(xtq_ctx_t *ctx)
{
    return ctx == NULL ? 0 : ctx->nagents;
}

int xtq_agent_get(xtq_ctx_t *ctx, unsigned index, xtq_agent_t **agent)
{
    if (ctx == NULL || agent == NULL || index >= ctx->nagents)
        return -XTQ_EINVAL;
    *agent = ctx->agents[index];
    return 0;
}

int xtq_agent_find(xtq_ctx_t *ctx, enum xtq_agent_kind kind, xtq_agent_t **agent)
{
    if (ctx == NULL || agent == NULL || (unsigned)kind >= XTQ_AGENT_KIND_COUNT)
        return -XTQ_EINVAL;
    for (unsigned i = 0; i < ctx->nagents; i++)
        if (ctx->agents[i]->kind == kind) {
            *agent = ctx->agents[i];
            return 0;
        }
    return -XTQ_ENOAGENT;
}

int xtq_agent_find_device(xtq_ctx_t *ctx, enum xtq_agent_kind kind, uint32_t device_index,
                          xtq_agent_t **agent)
{
    if (ctx == NULL || agent == NULL || (unsigned)kind >= XTQ_AGENT_KIND_COUNT)
        return -XTQ_EINVAL;
    for (unsigned i = 0; i < ctx->nagents; i++)
        if (ctx->agents[i]->kind == kind && ctx->agents[i]->info.device_index == device_index) {
            *agent = ctx->agents[i];
            return 0;
        }
    return -XTQ_ENOAGENT;
}

int xtq_agent_get_info(const xtq_agent_t *agent, xtq_agent_info_t *info)
{
    if (agent == NULL || info == NULL)
        return -XTQ_EINVAL;
    *info = agent->info;
    return 0;
}

int xtq_agent_kind_status(xtq_ctx_t *ctx, enum xtq_agent_kind kind, char *reason,
                          size_t reason_len)
{
    if (ctx == NULL || (unsigned)kind >= XTQ_AGENT_KIND_COUNT)
        return -XTQ_EINVAL;
    if (reason != NULL && reason_len > 0)
        snprintf(reason, reason_len, "%s", ctx->kind_status[kind] == 0 ? "" : ctx->kind_reason[kind]);
    return ctx->kind_status[kind] == 0 ? 0 : -XTQ_ENOAGENT;
}

const char *xtq_agent_kind_name(enum xtq_agent_kind kind)
{
    return (unsigned)kind < XTQ_AGENT_KIND_COUNT ? kind_names[kind] : "unknown";
}
