/*
 * The context: bootstrap, lookup tables, agents and the engine's planes
 * (XTQ_PROGRESS_THREADS), brought up in that order and torn down in
 * reverse.
 */
#include "internal.h"
#include "bootstrap.h"
#include "nic-emul/engine.h"
#include "registry/registry.h"

#include <limits.h>
#include <strings.h>

/* Every XTQ_INIT_ATTR_FIELD_* this library knows. */
#define INIT_ATTR_FIELDS                                                                    \
    (XTQ_INIT_ATTR_FIELD_PROGRESS | XTQ_INIT_ATTR_FIELD_PROVIDER | XTQ_INIT_ATTR_FIELD_OOB | \
     XTQ_INIT_ATTR_FIELD_JOB_KEY)

static bool has_field(const xtq_init_attr_t *attr, uint64_t field)
{
    return attr && (attr->field_mask & field);
}

static enum xtq_progress_mode progress_mode(const xtq_init_attr_t *attr)
{
    if (has_field(attr, XTQ_INIT_ATTR_FIELD_PROGRESS) && attr->progress != XTQ_PROGRESS_DEFAULT)
        return attr->progress;
    const char *p = xtq__param_string(XTQ__PARAM_XTQ_PROGRESS);
    if (strcasecmp(p, "manual") == 0)
        return XTQ_PROGRESS_MANUAL;
    if (strcasecmp(p, "thread") != 0)
        xtq_warn(CORE, "XTQ_PROGRESS=%s is neither thread nor manual; using thread", p);
    return XTQ_PROGRESS_THREAD;
}

/* Only the fields named in the mask are read; bits this library does not
 * know are refused (a newer caller asking for what we cannot do). */
static int check_attr(const xtq_init_attr_t *attr)
{
    if (!attr)
        return 0;
    if (attr->field_mask & ~(uint64_t)INIT_ATTR_FIELDS) {
        xtq_err(CORE, "xtq_init: unknown field_mask bits 0x%llx",
                (unsigned long long)(attr->field_mask & ~(uint64_t)INIT_ATTR_FIELDS));
        return -XTQ_EINVAL;
    }
    if (has_field(attr, XTQ_INIT_ATTR_FIELD_PROGRESS) &&
        attr->progress != XTQ_PROGRESS_DEFAULT && attr->progress != XTQ_PROGRESS_THREAD &&
        attr->progress != XTQ_PROGRESS_MANUAL)
        return -XTQ_EINVAL;
    return 0;
}

/*
 * XTQ_PROGRESS_THREADS, agreed by every rank: rank i's puts travel on
 * plane i % n at both ends, so a rank that counted differently would send
 * where nobody listens. A rank in manual progress has the planes too,
 * without threads: each of its turns is a turn of every plane
 * (progress.c), and ranks may mix the two modes.
 */
static int planes_count(xtq_ctx_t *ctx, unsigned *out)
{
    int64_t want = xtq__param_int(XTQ__PARAM_XTQ_PROGRESS_THREADS);
    if (want < 1 || want > XTQ__PLANES_MAX) {
        xtq_err(CORE, "XTQ_PROGRESS_THREADS=%lld out of range 1..%d", (long long)want,
                XTQ__PLANES_MAX);
        return -XTQ_EINVAL;
    }
    uint32_t mine = (uint32_t)want, *all = calloc((size_t)ctx->size, sizeof(*all));
    if (!all)
        return -XTQ_ENOMEM;
    int rc = xtq__bootstrap_allgather(ctx->bootstrap, "xtq.planes", &mine, sizeof(mine), all);
    for (int r = 0; rc == 0 && r < ctx->size; r++) {
        if (all[r] != mine) {
            xtq_err(CORE, "rank %d: XTQ_PROGRESS_THREADS differs: %u here, %u at rank %d",
                    ctx->rank, mine, all[r], r);
            rc = -XTQ_EINVAL;
        }
    }
    free(all);
    *out = mine;
    return rc;
}

int xtq_init(const xtq_init_attr_t *attr, xtq_ctx_t **out)
{
    struct xtq__bootstrap_attr battr = {0};
    xtq_ctx_t *ctx;
    int rc;

    if (!out)
        return -XTQ_EINVAL;
    xtq__log_init();
    rc = check_attr(attr);
    if (rc)
        return rc;
    if (has_field(attr, XTQ_INIT_ATTR_FIELD_OOB))
        battr.oob = &attr->oob;
    if (has_field(attr, XTQ_INIT_ATTR_FIELD_JOB_KEY)) {
        battr.has_job_key = true;
        battr.job_key = attr->job_key;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return -XTQ_ENOMEM;
    ctx->progress = progress_mode(attr);

    rc = xtq__bootstrap_init(&battr, &ctx->bootstrap);
    if (rc)
        goto err_ctx;
    ctx->rank = ctx->bootstrap->rank;
    ctx->size = ctx->bootstrap->size;
    ctx->local_ranks = (unsigned)ctx->bootstrap->local_size;
    ctx->job_key = ctx->bootstrap->job_key;

    int64_t tsize = xtq__param_int(XTQ__PARAM_XTQ_TABLE_SIZE);
    if (tsize < 1 || tsize > XTQ__REGISTRY_MAX_SIZE) {
        xtq_err(CORE, "XTQ_TABLE_SIZE=%lld out of range 1..%u", (long long)tsize,
                XTQ__REGISTRY_MAX_SIZE);
        rc = -XTQ_EINVAL;
        goto err_bootstrap;
    }
    rc = xtq__registry_create((uint32_t)tsize, &ctx->registry);
    if (rc)
        goto err_bootstrap;
    rc = xtq__agents_open(ctx);
    if (rc)
        goto err_registry;

    const char *prov = has_field(attr, XTQ_INIT_ATTR_FIELD_PROVIDER) && attr->provider
                           ? attr->provider
                           : xtq__param_string(XTQ__PARAM_XTQ_PROVIDER);
    rc = planes_count(ctx, &ctx->nplanes);
    if (rc)
        goto err_agents;
    for (unsigned j = 0; j < ctx->nplanes; j++) {
        rc = xtq__engine_create(ctx, prov, ctx->progress, j, &ctx->planes[j]);
        if (rc)
            goto err_engine;
    }
    ctx->engine = ctx->planes[(unsigned)ctx->rank % ctx->nplanes];
    for (unsigned j = 0; j < ctx->nplanes; j++) {
        rc = xtq__engine_start(ctx->planes[j]);
        if (rc)
            goto err_engine;
    }
    /* Nobody sends before every endpoint is up and every receive posted. */
    rc = xtq_barrier(ctx);
    if (rc)
        goto err_engine;
    *out = ctx;
    return 0;

err_engine:
    for (unsigned j = 0; j < ctx->nplanes; j++)
        xtq__engine_destroy(ctx->planes[j]);
err_agents:
    xtq__agents_close(ctx);
err_registry:
    xtq__registry_destroy(ctx->registry);
err_bootstrap:
    xtq__bootstrap_fini(ctx->bootstrap);
err_ctx:
    free(ctx);
    return rc;
}

int xtq_finalize(xtq_ctx_t *ctx)
{
    int rc = 0, drc;
    if (!ctx)
        return -XTQ_EINVAL;
    uint64_t timeout_ns = xtq__param_ns(XTQ__PARAM_XTQ_FINALIZE_TIMEOUT_MS, 1000000);
    uint64_t deadline = xtq__deadline_ns(timeout_ns);

    /* Puts whose trigger never fired will not: cancelled, not waited for.
     * Then our puts (peers still progress until they pass the barrier),
     * then everyone's, then what still runs here. */
    int ncancel = xtq__engine_triggers_cancel(ctx->engine);
    if (ncancel)
        xtq_info(CORE, "rank %d: %d triggered put(s) never fired; cancelled", ctx->rank, ncancel);
    drc = xtq__engine_drain_puts(ctx->engine, deadline);
    if (drc)
        xtq_warn(CORE, "rank %d: puts still in flight at finalize; failing them", ctx->rank);
    /* A dead peer would hang the launcher's fence: with one declared down,
     * finalize is local only (drain what runs here, then close). */
    unsigned down = 0;
    for (unsigned j = 0; j < ctx->nplanes; j++)
        down += xtq__engine_peers_down(ctx->planes[j]);
    bool degraded = down > 0;
    if (degraded) {
        xtq_warn(CORE, "rank %d: peer(s) down; finalizing without the barriers", ctx->rank);
        rc = -XTQ_EHOSTDOWN;
    } else {
        rc = xtq_barrier(ctx);
    }
    uint64_t tasks_deadline = xtq__deadline_ns(timeout_ns);
    drc = 0;
    for (unsigned j = 0; j < ctx->nplanes; j++)
        if (xtq__engine_drain_tasks(ctx->planes[j], tasks_deadline))
            drc = -XTQ_ETIMEDOUT;
    if (drc)
        xtq_warn(CORE, "rank %d: tasks still running after XTQ_FINALIZE_TIMEOUT_MS", ctx->rank);
    /* A last barrier so no peer closes its endpoint while acks to it are
     * in the transport; without the launcher, the live peers' FINs. */
    if (!degraded) {
        int brc = xtq_barrier(ctx);
        if (!rc)
            rc = brc;
    } else {
        uint64_t fin_deadline = xtq__deadline_ns(timeout_ns);
        bool all = true;
        for (unsigned j = 0; j < ctx->nplanes; j++)
            if (xtq__engine_close_with_peers(ctx->planes[j], fin_deadline))
                all = false;
        if (!all)
            xtq_warn(CORE,
                     "rank %d: not every live peer finalized within XTQ_FINALIZE_TIMEOUT_MS",
                     ctx->rank);
    }
    /* Agents close between stop and destroy: a task still running may
     * retire into the engine until its worker is joined. */
    for (unsigned j = 0; j < ctx->nplanes; j++)
        xtq__engine_stop(ctx->planes[j]);
    /* The tables reference queues that closing the agents frees. */
    xtq__registry_destroy(ctx->registry);
    xtq__agents_close(ctx);
    for (unsigned j = 0; j < ctx->nplanes; j++)
        xtq__engine_destroy(ctx->planes[j]);
    xtq__bootstrap_fini(ctx->bootstrap);
    free(ctx);
    return rc;
}

int xtq_rank(const xtq_ctx_t *ctx)
{
    return ctx ? ctx->rank : -XTQ_EINVAL;
}

int xtq_size(const xtq_ctx_t *ctx)
{
    return ctx ? ctx->size : -XTQ_EINVAL;
}

int xtq_barrier(xtq_ctx_t *ctx)
{
    if (!ctx)
        return -XTQ_EINVAL;
    bool manual = ctx->progress == XTQ_PROGRESS_MANUAL;
    return xtq__bootstrap_barrier(ctx->bootstrap, manual ? xtq__engine_poll_cb : NULL,
                                  ctx->engine);
}

int xtq_progress(xtq_ctx_t *ctx)
{
    if (!ctx)
        return -XTQ_EINVAL;
    /* Manual: a turn of every plane (progress.c). Threads: this rank's own
     * plane, as any wait does; the others' threads serve their peers. */
    return xtq__engine_progress(ctx->engine);
}

const char *xtq_provider_name(const xtq_ctx_t *ctx)
{
    return ctx ? xtq__engine_provider(ctx->engine) : NULL;
}

/* Runtime codes each need a slot of their own below the named ones. */
XTQ_STATIC_ASSERT(XTQ_EFINALIZED < XTQ_ENOKERNEL + XTQ_STATS_REJECT_RANGE,
                  "a runtime error code has no rejected_by_reason slot: extend the slots");

unsigned xtq_stats_reject_slot(int err)
{
    int code = err < 0 ? -err : err;
    if (code >= XTQ_ENOKERNEL && code < XTQ_ENOKERNEL + XTQ_STATS_REJECT_RANGE)
        return (unsigned)(code - XTQ_ENOKERNEL);
    switch (code) {
    case XTQ_ERANGE: return XTQ_STATS_REJECT_RANGE;
    case XTQ_EBADMSG: return XTQ_STATS_REJECT_BADMSG;
    case XTQ_EMSGSIZE: return XTQ_STATS_REJECT_MSGSIZE;
    case XTQ_ENOMEM: return XTQ_STATS_REJECT_NOMEM;
    case XTQ_EPROTO: return XTQ_STATS_REJECT_PROTO;
    case XTQ_EINVAL: return XTQ_STATS_REJECT_INVAL;
    default: return XTQ_STATS_REJECT_OTHER;
    }
}

void xtq__stats_rejected(xtq_ctx_t *ctx, int err)
{
    XTQ__STAT_INC(ctx, msgs_rejected);
    atomic_fetch_add_explicit(&ctx->stats.rejected_by_reason[xtq_stats_reject_slot(err)], 1,
                              memory_order_relaxed);
}

/* The first version's layout is part of the ABI: programs built against
 * it pass buffers of exactly this size to xtq_get_stats(). Later fields
 * start where it ends. */
XTQ_STATIC_ASSERT(XTQ_STATS_SIZE_V1 == offsetof(xtq_stats_t, rejected_by_reason) +
                                           sizeof(((xtq_stats_t *)0)->rejected_by_reason),
                  "XTQ_STATS_SIZE_V1 must end at rejected_by_reason");
XTQ_STATIC_ASSERT(offsetof(xtq_stats_t, payload_bytes_sent) == XTQ_STATS_SIZE_V1,
                  "xtq_stats_t fields are only appended after the first version");
XTQ_STATIC_ASSERT(sizeof(xtq_stats_t) <= INT_MAX, "xtq_query_stats returns the size as an int");

int xtq_query_stats(xtq_ctx_t *ctx, xtq_stats_t *out, size_t size)
{
    if (!ctx || !out || size < XTQ_STATS_SIZE_V1)
        return -XTQ_EINVAL;
    const struct xtq__stats *s = &ctx->stats;
    xtq_stats_t st;
    /* A field appended to the header but not read below reads 0, never
     * this stack's bytes. */
    memset(&st, 0, sizeof(st));
    st.puts_issued = atomic_load_explicit(&s->puts_issued, memory_order_relaxed);
    st.puts_completed = atomic_load_explicit(&s->puts_completed, memory_order_relaxed);
    st.puts_failed = atomic_load_explicit(&s->puts_failed, memory_order_relaxed);
    st.msgs_received = atomic_load_explicit(&s->msgs_received, memory_order_relaxed);
    st.tasks_enqueued = atomic_load_explicit(&s->tasks_enqueued, memory_order_relaxed);
    st.tasks_completed = atomic_load_explicit(&s->tasks_completed, memory_order_relaxed);
    st.msgs_rejected = atomic_load_explicit(&s->msgs_rejected, memory_order_relaxed);
    st.acks_sent = atomic_load_explicit(&s->acks_sent, memory_order_relaxed);
    st.queue_full_events = atomic_load_explicit(&s->queue_full_events, memory_order_relaxed);
    for (size_t i = 0; i < ARRAY_SIZE(st.rejected_by_reason); i++)
        st.rejected_by_reason[i] =
            atomic_load_explicit(&s->rejected_by_reason[i], memory_order_relaxed);
    st.payload_bytes_sent = atomic_load_explicit(&s->payload_bytes_sent, memory_order_relaxed);
    st.payload_bytes_received =
        atomic_load_explicit(&s->payload_bytes_received, memory_order_relaxed);
    st.puts_completed_direct =
        atomic_load_explicit(&s->puts_completed_direct, memory_order_relaxed);
    st.puts_via_inbox = atomic_load_explicit(&s->puts_via_inbox, memory_order_relaxed);
    /* The caller's struct may be older (shorter) or newer (longer) than
     * ours: copy what both know, zero what only the caller knows. */
    size_t n = size < sizeof(st) ? size : sizeof(st);
    memcpy(out, &st, n);
    if (size > n)
        memset((char *)out + n, 0, size - n);
    return (int)n;
}

/* The symbol programs built against the first header call (the header's
 * xtq_get_stats is a macro now: the parentheses keep it out). */
int(xtq_get_stats)(xtq_ctx_t *ctx, xtq_stats_t *st)
{
    /* Exactly the first version's bytes, whatever the caller's header:
     * a program built against it passes a buffer of that size. */
    int rc = xtq_query_stats(ctx, st, XTQ_STATS_SIZE_V1);
    return rc < 0 ? rc : 0;
}
