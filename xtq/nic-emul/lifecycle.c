/*
 * The engine's life cycle: create (endpoint, wake-ups, address exchange,
 * windows, receive regions), start (progress.c), stop, destroy, and the
 * drain of tasks that finalize waits for.
 *
 * xtq_init (context.c) creates the engine after the agents, since receive
 * regions are registered with them, and starts it before the first
 * barrier. xtq_finalize drains puts (initiator.c) and tasks (here), stops
 * the engine, closes the agents (a task still running may retire into the
 * engine until its worker is joined), then destroys it.
 */
#include "internal.h"
#include "nic-emul/engine_int.h"
#include "bootstrap.h"

#include <sched.h>
#include <unistd.h>

#define ENGINE_MAX_MSG_LIMIT ((size_t)1 << 40)

/* Free whatever create() got to; also the tail of destroy(). */
static void engine_free(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    if (e->ofi_open)
        xtq__ofi_close(&e->ofi);
    xtq__acks_close(e);
    xtq__ctrl_close(e);
    xtq__regions_close(e);
    for (int r = 0; e->peers && r < ctx->size; r++) {
        for (uint32_t i = 0; e->peers[r].slots && i < e->window; i++)
            free(e->peers[r].slots[i].stage);
        free(e->peers[r].slots);
    }
    free(e->peers);
    xtq__wakeup_close(e);
    xtq__notify_close(e);
    xtq__inbox_close(e);
    pthread_mutex_destroy(&e->put_lock);
    pthread_mutex_destroy(&e->progress_lock);
    pthread_mutex_destroy(&e->ack_lock);
    xtq__live_free(e);
    pthread_mutex_destroy(&e->live_lock);
    pthread_mutex_destroy(&e->rx_lock);
    free(e);
}

void xtq__engine_key(const struct xtq__engine *e, const char *base, char out[XTQ__KEY_MAX])
{
    if (e->plane == 0)
        snprintf(out, XTQ__KEY_MAX, "%s", base);
    else
        snprintf(out, XTQ__KEY_MAX, "%s.%u", base, e->plane);
}

int xtq__engine_create(xtq_ctx_t *ctx, const char *provider, enum xtq_progress_mode mode,
                       unsigned plane, struct xtq__engine **out)
{
    struct xtq__engine *e = calloc(1, sizeof(*e));
    struct xtq__bootstrap *bs = ctx->bootstrap;
    /* Each rank's blob: [uint32 len][endpoint name][doorbell name]
     * [completion words' name][inbox's name]. */
    const size_t bell_off = sizeof(uint32_t) + XTQ__OFI_ADDR_MAX;
    const size_t notify_off = bell_off + XTQ__BELL_NAME_MAX;
    const size_t inbox_off = notify_off + XTQ__BELL_NAME_MAX;
    const size_t stride = inbox_off + XTQ__BELL_NAME_MAX;
    char *blob = NULL, *all = NULL;
    int rc;

    if (!e)
        return -XTQ_ENOMEM;
    e->ctx = ctx;
    e->plane = plane;
    e->manual = mode == XTQ_PROGRESS_MANUAL;
    e->wake_fd = -1;
    e->progress_cpu = (int)xtq__param_int(XTQ__PARAM_XTQ_PROGRESS_CPU);
    int64_t w = xtq__param_int(XTQ__PARAM_XTQ_PUT_WINDOW);
    e->window = w < 1 ? 1 : (w > 65536 ? 65536 : (uint32_t)w);
    e->max_msg = xtq__param_size(XTQ__PARAM_XTQ_MAX_MSG_SIZE);
    if (e->max_msg < XTQ_AQL_PACKET_SIZE)
        e->max_msg = XTQ_AQL_PACKET_SIZE;
    /* Receive regions hold two of the largest message: sizes past this
     * would wrap where they are scaled (and no host has the memory). */
    if (e->max_msg > ENGINE_MAX_MSG_LIMIT) {
        xtq_err(ENGINE, "XTQ_MAX_MSG_SIZE=%zu is above %zu", e->max_msg,
                (size_t)ENGINE_MAX_MSG_LIMIT);
        free(e);
        return -XTQ_EINVAL;
    }
    e->max_wire = XTQ_ALIGN_UP(e->max_msg + sizeof(struct xtq__wire_hdr) + 128, (size_t)64);
    e->peer_timeout_ns = xtq__param_ns(XTQ__PARAM_XTQ_PEER_TIMEOUT_MS, 1000000);
    unsigned local = (unsigned)ctx->bootstrap->local_size;
    e->wait_spin_ns = xtq__spin_ns(XTQ__PARAM_XTQ_WAIT_SPIN_US, local, 50, 0);
    e->wait_spin_max_ns =
        e->wait_spin_ns ? xtq__spin_ns(XTQ__PARAM_XTQ_WAIT_SPIN_MAX_US, local, 500, 0) : 0;
    e->progress_spin_ns = xtq__spin_ns(XTQ__PARAM_XTQ_PROGRESS_SPIN_US, local, 100, 20);
    e->backoff_ns = xtq__spin_ns(XTQ__PARAM_XTQ_PROGRESS_BACKOFF_US, local, 10, 0);
    /* Contended data-path locks poll as long as a waiter would. */
    xtq__mutex_configure(e->wait_spin_ns);
    xtq__mutex_init(&e->put_lock);
    pthread_mutex_init(&e->progress_lock, NULL); /* only ever tried */
    xtq__mutex_init(&e->ack_lock);
    xtq__mutex_init(&e->live_lock);
    xtq__mutex_init(&e->rx_lock);
    e->owner_only = strcmp(xtq__param_string(XTQ__PARAM_XTQ_ENDPOINT_OWNER), "progress") == 0;
    e->lone_waiter_on = !e->owner_only && xtq__param_int(XTQ__PARAM_XTQ_LONE_WAITER) != 0;
    atomic_init(&e->txq.head, &e->txq.stub);
    atomic_init(&e->txq.stub.next, NULL);
    e->txq.tail = &e->txq.stub;

    if (!provider || !*provider || strcmp(provider, "auto") == 0)
        provider = (bs->same_host) ? "shm" : "tcp";
    rc = xtq__ofi_open(&e->ofi, provider, e->max_wire);
    if (rc)
        goto err_engine;
    e->ofi_open = true;

    e->same_host = bs->same_host;
    rc = xtq__wakeup_open(e, bs->same_host);
    if (rc)
        goto err_engine;
    xtq__notify_open(e);
    xtq__inbox_open(e);

    /* Address exchange. */
    blob = calloc(1, stride);
    all = calloc((size_t)ctx->size, stride);
    if (!blob || !all) {
        rc = -XTQ_ENOMEM;
        goto err_engine;
    }
    size_t alen = XTQ__OFI_ADDR_MAX;
    rc = xtq__ofi_getname(&e->ofi, blob + sizeof(uint32_t), &alen);
    if (rc)
        goto err_engine;
    uint32_t alen32 = (uint32_t)alen;
    memcpy(blob, &alen32, sizeof(alen32));
    xtq__wakeup_name(e, blob + bell_off);
    xtq__notify_name(e, blob + notify_off);
    xtq__inbox_name(e, blob + inbox_off);
    char key[XTQ__KEY_MAX];
    xtq__engine_key(e, "xtq.addr", key);
    rc = xtq__bootstrap_allgather(bs, key, blob, stride, all);
    if (rc)
        goto err_engine;
    rc = xtq__ofi_insert(&e->ofi, all, stride, ctx->size);
    if (rc)
        goto err_engine;
    xtq__notify_connect(e, all + notify_off, stride);
    xtq__inbox_connect(e, all + inbox_off, stride);
    /* On one host this is also the fence after which no segment's name
     * is needed (every rank has mapped what it maps). */
    rc = xtq__wakeup_connect(e, all + bell_off, stride);
    xtq__notify_unlink(e);
    xtq__inbox_unlink(e);
    if (rc)
        goto err_engine;

    e->peers = calloc((size_t)ctx->size, sizeof(*e->peers));
    if (!e->peers) {
        rc = -XTQ_ENOMEM;
        goto err_engine;
    }
    /* Put windows are made at a peer's first put (initiator.c): a rank
     * that talks to few of many peers, and the planes that only receive,
     * hold none (304 bytes a slot, XTQ_PUT_WINDOW slots a peer). */

    rc = xtq__regions_open(e);
    if (rc)
        goto err_engine;
    rc = xtq__acks_open(e);
    if (rc)
        goto err_engine;
    rc = xtq__ctrl_open(e);
    if (rc)
        goto err_engine;
    free(blob);
    free(all);
    /* Plane 0 keeps the line tools look for ("engine on PROVIDER"). */
    if (e->plane == 0)
        xtq_info(ENGINE,
                 "rank %d: engine on %s, %u regions of %zu bytes, window %u, %s progress, "
                 "endpoint %s",
                 ctx->rank, e->ofi.prov_name, e->nregions, e->regions[0].len, e->window,
                 e->manual ? "manual" : "thread", e->owner_only ? "owned by progress" : "shared");
    else
        xtq_info(ENGINE, "rank %d: engine plane %u: %s, %u regions of %zu bytes", ctx->rank,
                 e->plane, e->ofi.prov_name, e->nregions, e->regions[0].len);
    *out = e;
    return 0;

err_engine:
    free(blob);
    free(all);
    engine_free(e);
    return rc;
}

uint64_t xtq__ctx_tasks_inflight(xtq_ctx_t *ctx)
{
    uint64_t n = 0;
    for (unsigned j = 0; j < ctx->nplanes; j++)
        if (ctx->planes[j])
            n += atomic_load_explicit(&ctx->planes[j]->tasks_inflight, memory_order_acquire);
    return n;
}

void xtq__engine_destroy(struct xtq__engine *e)
{
    if (!e)
        return;
    xtq__engine_stop(e);
    engine_free(e);
}

void xtq__engine_stop(struct xtq__engine *e)
{
    if (!e || e->stopped)
        return;
    e->stopped = true;
    atomic_store(&e->stop, true);
    if (e->thread_started) {
        xtq__wakeup_interrupt(e);
        xtq__futex_wake(&e->lone_waiter, -1); /* parked beside a waiter */
        pthread_join(e->thread, NULL);
    }
    /* Fail what never completed, and forget the sends still queued;
     * signals stop kicking us. */
    xtq__puts_fail_all(e, -XTQ_EFINALIZED);
    xtq__txq_drop(e);
    xtq__triggers_stop(e);
    /* Backlogged commands never ran. */
    xtq__backlog_drop(e);
    xtq__acks_drop(e);
}

void xtq__engine_wait_step(struct xtq__engine *e)
{
    if (e->manual || !e->thread_started) {
        if (xtq__engine_progress(e) == 0)
            sched_yield();
    } else {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

int xtq__engine_drain_tasks(struct xtq__engine *e, uint64_t deadline)
{
    while (atomic_load(&e->tasks_inflight) || atomic_load(&e->backlog_len) ||
           atomic_load(&e->acks_pending) || atomic_load(&e->acks_retrying)) {
        if (xtq__now_ns() >= deadline)
            return -XTQ_ETIMEDOUT;
        xtq__engine_wait_step(e);
    }
    return 0;
}

const char *xtq__engine_provider(const struct xtq__engine *e)
{
    return e->ofi.prov_name;
}

size_t xtq__engine_max_put(const struct xtq__engine *e)
{
    return e->max_msg;
}

bool xtq__engine_manual(const struct xtq__engine *e)
{
    return e->manual;
}

int xtq__engine_getname(struct xtq__engine *e, void *addr, size_t *len)
{
    return xtq__ofi_getname(&e->ofi, addr, len);
}

int xtq__engine_retarget(struct xtq__engine *e, int rank, const void *addr)
{
    return xtq__ofi_retarget(&e->ofi, rank, addr);
}
