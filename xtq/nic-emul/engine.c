/*
 * The engine, being split by concern (engine_int.h lists the files). The
 * sections below move one by one into their own files.
 */
#include "nic-emul/engine_int.h"
#include "bootstrap.h"

#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

/* ==== progress ==== */

static int cq_poll(struct xtq__engine *e, bool polite)
{
    struct fi_cq_data_entry ent[16];
    struct fi_cq_err_entry err;
    int n = 0;

    for (;;) {
        ssize_t got = xtq__ofi_cq_read(&e->ofi, ent, ARRAY_SIZE(ent), &err, polite);
        if (got == -FI_EAGAIN)
            break;
        if (got == -FI_EAVAIL) {
            uint32_t kind = err.op_context ? *(uint32_t *)err.op_context : 0;
            char buf[128] = "";
            fi_cq_strerror(e->ofi.cq, err.prov_errno, err.err_data, buf, sizeof(buf));
            if (kind == CTX_PUT) {
                struct put_slot *s = err.op_context;
                /* A connection the peer reset or refused (tcp) is the peer
                 * gone, seen before the liveness timeout: fail its puts the
                 * same way, -XTQ_EHOSTDOWN. */
                if (err.err == FI_ECONNRESET || err.err == FI_ECONNREFUSED ||
                    err.err == FI_ECONNABORTED || err.err == FI_ENOTCONN ||
                    err.err == FI_EHOSTUNREACH) {
                    xtq__peer_down(e, s->target, fi_strerror(err.err));
                } else {
                    XTQ_LOG_ONCE(OFI, ERROR, "a put failed in the transport: %s (%s)",
                                 fi_strerror(err.err), buf);
                }
                xtq__slot_local(e, s, -XTQ_EFABRIC, err.prov_errno);
            } else if (kind == CTX_REGION) {
                struct rx_region *r = err.op_context;
                XTQ_LOG_ONCE(OFI, ERROR, "receive error: %s (%s)", fi_strerror(err.err), buf);
                if (err.flags & FI_MULTI_RECV)
                    xtq__region_put(r);
            }
            n++;
            continue;
        }
        if (got < 0) {
            XTQ_LOG_ONCE(OFI, ERROR, "fi_cq_read: %s", fi_strerror((int)-got));
            return -XTQ_EFABRIC;
        }
        for (ssize_t i = 0; i < got; i++) {
            uint32_t kind = ent[i].op_context ? *(uint32_t *)ent[i].op_context : 0;
            if (kind == CTX_PUT) {
                xtq__slot_local(e, ent[i].op_context, 0, 0);
            } else if (kind == CTX_REGION) {
                struct rx_region *r = ent[i].op_context;
                if ((ent[i].flags & FI_RECV) && ent[i].len)
                    xtq__target_recv(e, r, ent[i].buf, ent[i].len);
                if (ent[i].flags & FI_MULTI_RECV)
                    xtq__region_put(r);
            }
        }
        n += (int)got;
        if ((size_t)got < ARRAY_SIZE(ent))
            break;
    }
    return n;
}

static int progress_locked(struct xtq__engine *e, bool polite)
{
    int n = 0, rc;
    xtq__regions_repost(e);
    n += xtq__acks_flush(e);
    n += xtq__backlog_drain(e);
    xtq__peers_check(e);
    rc = cq_poll(e, polite);
    if (rc < 0)
        return rc;
    n += rc;
    n += xtq__backlog_drain(e);
    return n;
}

/* One turn. `polite`: the progress thread's busy poll, which leaves the
 * endpoint to a thread waiting to send rather than contend for it. */
static int engine_turn(struct xtq__engine *e, bool polite)
{
    int n;
    /* Another thread is progressing: that is progress too. */
    if (pthread_mutex_trylock(&e->progress_lock) != 0)
        return 0;
    n = progress_locked(e, polite);
    pthread_mutex_unlock(&e->progress_lock);
    return n;
}

int xtq__engine_progress(struct xtq__engine *e)
{
    return engine_turn(e, false);
}

void xtq__engine_poll_cb(void *engine)
{
    xtq__engine_progress(engine);
}

static void place_thread(struct xtq__engine *e)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo))
        return;
    /* The x86 backend binds to every PU to run cpuid: seconds on a busy
     * 2-core machine. The Linux backend knows enough to place a thread. */
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
    if (hwloc_topology_load(topo)) {
        hwloc_topology_destroy(topo);
        XTQ_LOG_ONCE(ENGINE, WARN, "hwloc topology unavailable; progress thread not pinned");
        return;
    }
    int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    hwloc_obj_type_t type = ncores > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    int n = hwloc_get_nbobjs_by_type(topo, type);
    int want = e->progress_cpu;
    if (n > 0) {
        if (want < 0) {
            /* Last core, then backwards for further ranks on the host. */
            int lr = e->ctx->bootstrap ? e->ctx->bootstrap->local_rank : 0;
            want = n - 1 - (lr % n);
        }
        hwloc_obj_t obj = hwloc_get_obj_by_type(topo, type, (unsigned)(want % n));
        if (obj && hwloc_set_cpubind(topo, obj->cpuset, HWLOC_CPUBIND_THREAD) != 0)
            XTQ_LOG_ONCE(ENGINE, WARN, "could not bind the progress thread to core %d", want);
        xtq_dbg(ENGINE, "progress thread on %s %d", hwloc_obj_type_string(type), want % n);
    }
    hwloc_topology_destroy(topo);
}

static void *progress_main(void *arg)
{
    struct xtq__engine *e = arg;
    uint64_t spin_ns = e->progress_spin_ns;
    uint64_t last = xtq__now_ns();

    place_thread(e);
    while (!atomic_load_explicit(&e->stop, memory_order_acquire)) {
        int n = engine_turn(e, true);
        uint64_t now = xtq__now_ns();
        if (n > 0) {
            last = now;
            continue;
        }
        if (now - last < spin_ns) {
            /* Leave the transport lock free a moment between empty polls:
             * the application and agent workers send on the same endpoint. */
            for (int i = 0; i < 4; i++)
                xtq__cpu_relax();
            continue;
        }
        xtq__progress_block(e);
        last = xtq__now_ns() - spin_ns / 2; /* a short spin after each wake */
    }
    return NULL;
}

int xtq__engine_start(struct xtq__engine *e)
{
    if (e->manual)
        return 0;
    int rc = pthread_create(&e->thread, NULL, progress_main, e);
    if (rc) {
        xtq_err(ENGINE, "cannot start the progress thread: %s", strerror(rc));
        return -XTQ_ENOMEM;
    }
    e->thread_started = true;
    return 0;
}

/* ==== lifecycle ==== */

/* Free whatever create() got to; also the tail of destroy(). */
static void engine_free(struct xtq__engine *e)
{
    xtq_ctx_t *ctx = e->ctx;
    if (e->ofi_open)
        xtq__ofi_close(&e->ofi);
    xtq__regions_close(e);
    for (int r = 0; e->peers && r < ctx->size; r++) {
        for (uint32_t i = 0; e->peers[r].slots && i < e->window; i++)
            free(e->peers[r].slots[i].stage);
        free(e->peers[r].slots);
    }
    free(e->peers);
    xtq__wakeup_close(e);
    pthread_mutex_destroy(&e->put_lock);
    pthread_mutex_destroy(&e->progress_lock);
    pthread_mutex_destroy(&e->ack_lock);
    xtq__live_free(e);
    pthread_mutex_destroy(&e->live_lock);
    free(e);
}

int xtq__engine_create(xtq_ctx_t *ctx, const char *provider, enum xtq_progress_mode mode,
                       struct xtq__engine **out)
{
    struct xtq__engine *e = calloc(1, sizeof(*e));
    struct xtq__bootstrap *bs = ctx->bootstrap;
    const size_t stride = XTQ__OFI_ADDR_MAX + sizeof(uint32_t);
    char *blob = NULL, *all = NULL;
    int rc;

    if (!e)
        return -XTQ_ENOMEM;
    e->ctx = ctx;
    e->manual = mode == XTQ_PROGRESS_MANUAL;
    e->wake_fd = -1;
    e->progress_cpu = (int)xtq__param_int(XTQ__PARAM_XTQ_PROGRESS_CPU);
    int64_t w = xtq__param_int(XTQ__PARAM_XTQ_PUT_WINDOW);
    e->window = w < 1 ? 1 : (w > 65536 ? 65536 : (uint32_t)w);
    e->max_msg = xtq__param_size(XTQ__PARAM_XTQ_MAX_MSG_SIZE);
    if (e->max_msg < XTQ_AQL_PACKET_SIZE)
        e->max_msg = XTQ_AQL_PACKET_SIZE;
    e->max_wire = XTQ_ALIGN_UP(e->max_msg + sizeof(struct xtq__wire_hdr) + 128, (size_t)64);
    int64_t pt = xtq__param_int(XTQ__PARAM_XTQ_PEER_TIMEOUT_MS);
    e->peer_timeout_ns = pt > 0 ? (uint64_t)pt * 1000000ull : 0;
    unsigned local = (unsigned)ctx->bootstrap->local_size;
    e->wait_spin_ns = xtq__spin_ns(XTQ__PARAM_XTQ_WAIT_SPIN_US, local, 50, 0);
    e->progress_spin_ns = xtq__spin_ns(XTQ__PARAM_XTQ_PROGRESS_SPIN_US, local, 100, 20);
    /* Contended data-path locks poll as long as a waiter would. */
    atomic_store(&xtq__lock_spin_ns, e->wait_spin_ns);
    pthread_mutex_init(&e->put_lock, NULL);
    pthread_mutex_init(&e->progress_lock, NULL);
    pthread_mutex_init(&e->ack_lock, NULL);
    pthread_mutex_init(&e->live_lock, NULL);

    if (!provider || !*provider || strcmp(provider, "auto") == 0)
        provider = (bs->same_host) ? "shm" : "tcp";
    rc = xtq__ofi_open(&e->ofi, provider, e->max_wire);
    if (rc)
        goto err_engine;
    e->ofi_open = true;

    rc = xtq__wakeup_open(e, bs->same_host);
    if (rc)
        goto err_engine;

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
    rc = xtq__bootstrap_allgather(bs, "xtq.addr", blob, stride, all);
    if (rc)
        goto err_engine;
    rc = xtq__ofi_insert(&e->ofi, all, stride, ctx->size);
    if (rc)
        goto err_engine;
    xtq__wakeup_connect(e);

    e->peers = calloc((size_t)ctx->size, sizeof(*e->peers));
    if (!e->peers) {
        rc = -XTQ_ENOMEM;
        goto err_engine;
    }
    for (int r = 0; r < ctx->size; r++) {
        e->peers[r].slots = calloc(e->window, sizeof(struct put_slot));
        if (!e->peers[r].slots) {
            rc = -XTQ_ENOMEM;
            goto err_engine;
        }
    }

    rc = xtq__regions_open(e);
    if (rc)
        goto err_engine;
    free(blob);
    free(all);
    xtq_info(ENGINE, "rank %d: engine on %s, %u regions of %zu bytes, window %u, %s progress",
             ctx->rank, e->ofi.prov_name, e->nregions, e->regions[0].len, e->window,
             e->manual ? "manual" : "thread");
    *out = e;
    return 0;

err_engine:
    free(blob);
    free(all);
    engine_free(e);
    return rc;
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
        pthread_join(e->thread, NULL);
    }
    /* Fail what never completed. */
    xtq__puts_fail_all(e, -XTQ_EFINALIZED);
    /* Backlogged commands never ran. */
    xtq__backlog_drop(e);
    xtq__acks_drop(e);
}

int xtq__engine_drain_tasks(struct xtq__engine *e, uint64_t deadline)
{
    while (atomic_load(&e->tasks_inflight) || atomic_load(&e->backlog_len) ||
           atomic_load(&e->acks_pending)) {
        if (xtq__now_ns() >= deadline)
            return -XTQ_ETIMEDOUT;
        if (e->manual || !e->thread_started) {
            if (xtq__engine_progress(e) == 0)
                sched_yield();
        } else {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
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
